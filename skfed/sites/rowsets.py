"""The site's memory of the row sets its answers were computed over (the sum auditor).

A per-request rule cannot stop differencing: two answers over row sets that each
hold many rows, but differ by one, give that row. Nor can a rule on pairs of
sets: ``P + {r}``, ``P + Q`` and ``Q`` are pairwise far apart, yet
``(P + {r}) - (P + Q) + Q = {r}``. What a sequence of sums over row sets can
reveal is exactly what lies in the *span* of the sets' indicator vectors (the
classic auditor for sum queries): a row's value is disclosed when its indicator
is a linear combination of the sets answered.

:class:`RowSetRecord` keeps, per dataset and for every analyst together (a second
certificate does not start afresh), the sets a site's requests selected (a
filter's rows, complete cases, held-out parts, the supports of design columns)
and refuses a request whose new set would put in that span the indicator of a
group of fewer than ``min_rows`` rows that the sets cannot tell apart (an
*atom*: rows that belong to exactly the same sets; a single row's indicator is
in the span only if its atom is that row alone).

The record is compact: rows are grouped into atoms (an integer per row), and
the span is an orthonormal basis over the atoms, weighted by their sizes, so
that a new set costs one refinement of the atoms and one Gram-Schmidt step,
and an atom's *leverage* (the squared norm of its row of the basis) is 1 exactly
when its indicator is in the span. It is written to the site's folder, so a
restart does not reset it.
"""

import hashlib
import json
import os
import threading
from pathlib import Path

import numpy as np

from ..federation.operations import Refused

#: the most distinct row sets recorded per dataset, and the most atoms they may cut
#: the rows into; past either a new set is refused (memory: atoms x sets floats)
MAX_SETS, MAX_ATOMS = 128, 16384
_EXACT = 1.0 - 1e-8


def _digest(mask):
    return hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()


class RowSetRecord:
    """The row sets answered over one dataset's ``n_rows`` rows (see the module).

    Parameters
    ----------
    n_rows : int
        Rows of the dataset (its analysis population, where it declares one).
    min_rows : int
        No atom of 1 to ``min_rows - 1`` rows may become determined.
    path : Path, optional
        Where the record is kept between restarts (``.npz``).
    """

    def __init__(self, n_rows, min_rows, path=None):
        self.n_rows, self.min_rows, self.path = int(n_rows), int(min_rows), path
        self._lock = threading.Lock()
        self.sets, self.digests = [], set()
        self.atoms = np.zeros(self.n_rows, dtype=np.int64)
        self.sizes = np.array([self.n_rows], dtype=np.int64)
        self.basis = np.ones((1, 1))  # the whole dataset is always in the span
        if self.n_rows == 0:
            self.sizes, self.basis = np.zeros(0, dtype=np.int64), np.zeros((0, 1))
        self._load()

    # -- the rule ---------------------------------------------------------------
    def admit(self, masks, *, what="the request's rows"):
        """Record the row sets ``masks`` (boolean arrays over the dataset's rows), or
        raise :class:`Refused` (rule ``row_sets``) and record nothing, if with them
        the sets answered would single out fewer than ``min_rows`` rows."""
        with self._lock:
            new = self._new(masks)
            if not new:
                return
            if len(self.sets) + len(new) > MAX_SETS:
                raise Refused("row_sets", f"{what}: more than {MAX_SETS} distinct row sets")
            atoms, sizes, basis = self.atoms, self.sizes, self.basis
            for mask in new:
                atoms, sizes, basis = _with_set(atoms, sizes, basis, mask)
                if sizes.size > MAX_ATOMS:
                    raise Refused("row_sets", f"{what}: the row sets would cut the rows "
                                              f"into more than {MAX_ATOMS} groups")
            leverage = np.einsum("ij,ij->i", basis, basis)
            small = (sizes > 0) & (sizes < self.min_rows) & (leverage > _EXACT)
            if np.any(small):
                raise Refused("row_sets", f"{what}: with the row sets answered before, "
                                          f"{int(np.count_nonzero(small))} group(s) of "
                                          f"fewer than {self.min_rows} rows would follow by "
                                          "subtraction")
            self.atoms, self.sizes, self.basis = atoms, sizes, basis
            for mask in new:
                self.sets.append(np.packbits(mask))
                self.digests.add(_digest(mask))
            self._save()

    def _new(self, masks):
        new, seen = [], set()
        for mask in masks:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (self.n_rows,):
                raise ValueError("a row set over other rows than the dataset's")
            count = int(mask.sum())
            if count in (0, self.n_rows):  # no row, or all of them: the span has both
                continue
            digest = _digest(mask)
            if digest not in self.digests and digest not in seen:
                seen.add(digest)
                new.append(mask)
        return new

    # -- kept between restarts ----------------------------------------------------
    def _save(self):
        if self.path is None:
            return
        temporary = Path(str(self.path) + ".tmp")
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                  "wb") as out:
            np.savez_compressed(out, n_rows=self.n_rows,
                                sets=np.array(self.sets) if self.sets else np.zeros((0, 0)))
        os.replace(temporary, self.path)

    def _load(self):
        if self.path is None or not Path(self.path).exists():
            return
        with np.load(self.path) as saved:
            if int(saved["n_rows"]) != self.n_rows:  # another table: a record of its own
                return
            masks = [np.unpackbits(s)[:self.n_rows].astype(bool) for s in saved["sets"]]
        for mask in masks:
            self.atoms, self.sizes, self.basis = _with_set(self.atoms, self.sizes,
                                                           self.basis, mask)
            self.sets.append(np.packbits(mask))
            self.digests.add(_digest(mask))

    def memory_bytes(self):
        """The record's memory: atoms per row, the basis and the packed sets."""
        return int(self.atoms.nbytes + self.basis.nbytes + self.sizes.nbytes
                   + sum(s.nbytes for s in self.sets))


def _with_set(atoms, sizes, basis, mask):
    """The atoms cut by one more set, and the basis of the span with its indicator.

    The basis is over atoms with coordinates scaled by the square root of each atom's
    size (so that inner products are those of the rows' indicator vectors): an atom
    split in two keeps its vectors' values, scaled by the parts' shares.
    """
    split = atoms * 2 + mask.astype(np.int64)
    labels, first, new_atoms = np.unique(split, return_index=True, return_inverse=True)
    new_sizes = np.bincount(new_atoms, minlength=labels.size).astype(np.int64)
    parent = labels // 2
    share = np.sqrt(new_sizes / np.maximum(sizes[parent], 1))
    grown = basis[parent] * share[:, None]
    vector = np.sqrt(new_sizes) * mask[first]  # the set's indicator, scaled
    for _ in range(2):  # Gram-Schmidt, twice for its rounding
        vector = vector - grown @ (grown.T @ vector)
    norm = np.linalg.norm(vector)
    if norm > 1e-9 * np.sqrt(mask.sum()):
        grown = np.column_stack([grown, vector / norm])
    return new_atoms, new_sizes, grown


def record_path(folder, dataset):
    """The file of ``dataset``'s record in the site's folder."""
    safe = hashlib.sha256(dataset.encode()).hexdigest()[:16]
    return Path(folder) / f"row-sets-{safe}.npz"


def describe_record(record):
    """What the record holds, for the officer (``skfed site check``): counts only."""
    return json.dumps({"sets": len(record.sets), "atoms": int(record.sizes.size),
                       "bytes": record.memory_bytes()})

"""A boosting fit's node histograms in one pass where every site's rows are here.

Sites simulated in this process (``fit(X, y, clients=...)``, a dataset of arrays)
share its memory, so a round of node histograms need not be one pass per site and
a sum: the same site function, run once on their rows pooled in site order
(:class:`~._site_rows.PooledSite`), gives every cell's sum over all the rows
(issue 37, item 6: one pass where the sites share a process). Each row's bins,
raw prediction, gradient and hessian are the ones its site computes (elementwise,
the same arithmetic), and the rows are the pooled rows of scikit-learn's
reference, in its order.

What differs from the sites' own passes is where a sum rounds: a cell adds the
same terms one after the other across the site boundaries, where the sites' sums
round at each site and the server's sum again. The two are equal wherever the
sums are exact and within round-off elsewhere, where a split's gain tie within
an ulp could go the other way (the tests and ``benchmarks/bench_boosting.py
--per-site`` find the same trees both ways). The train losses a round carries
are summed site by site and added in site order: the sites' numbers bit for bit.
The ledger charges each round what every site would have been sent and would have
replied (each reply has the pooled reply's shape), so ``history_`` reads the same
bytes and rounds.

Masked sums (each site masks its own reply) and rows elsewhere (Dask workers,
site services) keep one pass per site.
"""

from ..federation.session import add_fields, payload_nbytes
from ._model_chain import FitWire
from ._site_rows import PooledSite


class _OneSite:
    """A session of one site, the pooled one: ``sum`` is its reply (as a sum) and the
    reply's bytes."""

    def __init__(self, site):
        self.site = site

    def sum(self, fn, *args, phase):
        reply = fn(self.site, *args)
        return add_fields([reply]), payload_nbytes(reply)


class PooledSites:
    """The sites of a dataset held in this process, as one site for a fit's sums.

    Parameters
    ----------
    parts : list of SiteData
        The sites' rows, in site order.
    wire : FitWire
        The fit's wire to the sites: its messages and ledger stand for the sums.
    """

    def __init__(self, parts, wire):
        self.site, self.fit_wire = PooledSite(parts), wire
        # the pooled site's own fit state, named by its own wire (its context and
        # model travel as references once it holds them, as a site's do)
        self.wire = FitWire(_OneSite(self.site))

    @classmethod
    def of(cls, dataset, privacy, wire):
        """The pooled sites of ``dataset`` behind ``wire``, or None: masked sums and
        rows elsewhere (or a single site) keep one pass per site."""
        parts = dataset.parts_in_this_process()
        if privacy is not None or parts is None or len(parts) < 2:
            return None
        return cls(parts, wire)

    def sum(self, fn, *args, phase):
        """The fit wire's :meth:`~._model_chain.FitWire.sum`, computed here in one pass:
        the numbers of the pooled rows, the wire's messages and ledger."""
        return self.fit_wire.pooled_sum(self, fn, *args, phase=phase)

    def reply(self, fn, *args):
        """``(the sum of fn's replies over the sites, the bytes of one site's reply)``."""
        return self.wire.sum(fn, *args, phase="rounds")

"""Typed messages between an analyst and a site: nothing received is executed.

A message is a tree of plain values (``None``, booleans, integers, floats,
strings, lists, tuples, dicts), numeric or text numpy arrays and scalars, and
instances of an allow-listed set of skfed classes (solvers, datafits,
penalties, layouts: :func:`allowed_classes`). It travels as::

    b"SKF1" | uint32 header length | JSON header | the arrays' raw bytes

The header describes the tree; each array is a node ``{"$a": [offset, dtype,
*shape]}`` naming where its bytes start in the tail, rebuilt with
:func:`numpy.frombuffer` (never with ``pickle``: object arrays are refused both
ways). A numeric array with few non-zero entries travels sparse where that is
smaller, ``{"$sp": [offset, dtype, count, *shape]}``: ``count`` strictly
increasing flat positions (``<u4``, or ``<u8`` past ``2**32`` entries) then
their values, decoded to the same dense array bit for bit (a ``-0.0`` is not a
zero). An array that occurs twice in a message (a step's model and its monitor's)
travels once, both nodes naming its bytes. The dense size a message may announce
is bounded (:data:`MAX_DECODED_BYTES`), its sparse arrays' included.

An allow-listed object travels as its declared state only
(:func:`wire_attributes`): its constructor's parameters and, where its class
declares them in ``_wire_attributes``, the few values the analyst's side
derives for it and the site needs (a solver's step sizes, a fitted
transformer's statistics). It is rebuilt by its own constructor from those
parameters, so the class's own invariants hold, and is then given the
declared values. Any other attribute is refused, naming the class and the
attribute: a message cannot add to an object what its class does not have (a
wrapped ``solver`` on a plain solver, a ``differentially_private`` flag), so
what an object *is* at the site is its class. No ``__reduce__``,
``__setstate__`` or function of the sender's choice runs, and a class outside
the list is refused by name. Compare ``pickle``, which runs whatever callable
the sender names.
"""

import base64
import functools
import inspect
import json
import math
import struct

import numpy as np

from ..federation.operations import operations
from ..federation.wire import (foreign_attributes, qualified_name, wire_classes,
                               wire_functions)

MAGIC = b"SKF1"
#: the most a decoded message may announce (arrays included)
MAX_MESSAGE_BYTES = 1 << 30
#: the most bytes a message's arrays may decode to (a sparse array's dense size counts)
MAX_DECODED_BYTES = 1 << 30
_ARRAY_KINDS = "biufcUS"
#: the kinds and the fewest entries of an array that may travel sparse
_SPARSE_KINDS, _SPARSE_FROM = "biuf", 16
#: the most dimensions an array node may announce
_MAX_DIMS = 32

class MessageError(ValueError):
    """A message that is not a well-formed skfed message (refused, never run)."""


def allowed_classes():
    """``{qualified name: class}`` of the objects a message may carry: the classes
    registered for the wire where they are defined (:mod:`skfed.federation.wire`:
    skfed's solvers, losses, penalties, layouts, estimators and transformers, and the
    scikit-learn parts a fitted transformer holds). A class not registered can never
    be named by a message."""
    return wire_classes()


def allowed_functions():
    """``{qualified name: function}`` a message may name: the functions registered for
    the wire (the per-site summaries of skfed's federated preprocessing and their row
    checks) and the site functions of the declared operations (a masked pass names
    one: the site then checks it is a maskable operation's)."""
    functions = dict(wire_functions())
    functions.update((qualified_name(op.function), op.function)
                     for op in operations().values() if op.function is not None)
    return functions


def _function_names():
    return {f: name for name, f in allowed_functions().items()}


def _class_name(obj):
    cls = type(obj)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if allowed_classes().get(name) is not cls:
        raise MessageError(f"a {cls.__name__} cannot travel in a site message (not one of "
                           "skfed's allow-listed classes).")
    return name


@functools.lru_cache(maxsize=None)
def wire_attributes(cls):
    """``(parameters, derived)``: the attribute names an allow-listed ``cls`` travels with.

    ``parameters`` are its constructor's named parameters (what it is rebuilt
    from); ``derived`` the attributes the analyst's side computes for it that
    the site needs, as the classes of its hierarchy declare them in their own
    ``_wire_attributes`` (each class the ones its own code sets; another library's
    class, where it was registered). Nothing else travels, and a
    message naming anything else is refused.

    Parameters
    ----------
    cls : type

    Returns
    -------
    parameters, derived : tuple of str
    """
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):  # a builtin constructor: no parameters of its own
        parameters = ()
    else:
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        parameters = tuple(p.name for p in list(signature.parameters.values())[1:]
                           if p.kind in named)
    declared = [name for klass in reversed(cls.__mro__)
                for name in vars(klass).get("_wire_attributes", ())]
    declared += foreign_attributes(cls)
    derived = tuple(name for name in dict.fromkeys(declared) if name not in parameters)
    return parameters, derived


def _state(obj):
    """What travels of an allow-listed object: its constructor's parameters, then the
    declared derived attributes it has (an unfitted transformer has none)."""
    parameters, derived = wire_attributes(type(obj))
    state = {}
    for name in parameters:
        try:
            state[name] = getattr(obj, name)
        except AttributeError:  # the constructor keeps it under another name
            raise MessageError(f"a {type(obj).__name__} cannot travel: its constructor's "
                               f"parameter {name!r} is not one of its attributes.") from None
    state.update((name, getattr(obj, name)) for name in derived if hasattr(obj, name))
    return state


def _index_dtype(size):
    return np.dtype("<u4") if size <= 1 << 32 else np.dtype("<u8")


def _sparse_parts(v):
    """``(positions, values)`` of ``v``'s non-zero entries where they are fewer bytes
    than ``v`` itself, else ``None`` (a float's bits decide: ``-0.0`` travels)."""
    if v.dtype.kind not in _SPARSE_KINDS or v.size < _SPARSE_FROM or v.dtype.itemsize > 8:
        return None
    flat = np.ascontiguousarray(v).reshape(-1)
    bits = flat.view(f"u{flat.dtype.itemsize}") if flat.dtype.kind == "f" else flat
    count, index = int(np.count_nonzero(bits)), _index_dtype(flat.size)
    if count * (index.itemsize + flat.dtype.itemsize) >= flat.nbytes:
        return None
    positions = np.flatnonzero(bits).astype(index)
    return positions, flat[positions]


class _Tail:
    """The arrays' bytes of a message being encoded: each distinct array once, sparse
    where that is smaller (see the module docstring)."""

    def __init__(self):
        self.blobs, self.size, self.offsets = [], 0, {}

    def node(self, v):
        parts = _sparse_parts(v)
        if parts is None:
            tag, data, count = "$a", np.ascontiguousarray(v).tobytes(), []
        else:
            tag, data, count = "$sp", parts[0].tobytes() + parts[1].tobytes(), [len(parts[1])]
        offset = self.offsets.get((tag, data))
        if offset is None:  # an equal array already sent is named, not sent again
            offset = self.offsets[tag, data] = self.size
            self.blobs.append(data)
            self.size += len(data)
        return {tag: [offset, v.dtype.str, *count, *(int(d) for d in v.shape)]}


def encode(value):
    """The bytes of ``value`` (see the module docstring)."""
    tail = _Tail()

    def walk(v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (bytes, bytearray)):
            return {"$b": base64.b64encode(bytes(v)).decode()}
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$f": repr(v)}
        if isinstance(v, np.generic):
            if v.dtype.kind not in _ARRAY_KINDS:
                raise MessageError(f"numpy scalars of dtype {v.dtype} cannot travel.")
            return {"$s": walk(np.asarray(v)[None])}
        if isinstance(v, np.ndarray) and v.dtype == object:
            items = v.ravel().tolist()
            if not all(x is None or isinstance(x, (str, int, float, bool)) for x in items):
                raise MessageError("object arrays cannot travel unless they hold plain "
                                   "values (strings, numbers); object arrays would need "
                                   "pickle.")
            return {"$oa": [walk(x) for x in items], "shape": list(v.shape)}
        if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
            dtype = np.dtype(v)  # a transformer's dtype= parameter (object: a descriptor only)
            if dtype.kind not in _ARRAY_KINDS + "O":
                raise MessageError(f"dtype {dtype} cannot travel.")
            return {"$dtype": dtype.str, "type": not isinstance(v, np.dtype)}
        if isinstance(v, type) and v in (float, int, bool, str):
            return {"$dtype": v.__name__, "type": "builtin"}
        if callable(v) and not isinstance(v, (type, np.ndarray)) and v in _function_names():
            return {"$fn": _function_names()[v]}
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in _ARRAY_KINDS or v.dtype.hasobject:
                raise MessageError(f"arrays of dtype {v.dtype} cannot travel (object arrays "
                                   "would need pickle).")
            return tail.node(v)
        if isinstance(v, (list, tuple)):
            items = [walk(x) for x in v]
            return items if isinstance(v, list) else {"$t": items}
        if isinstance(v, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: walk(x) for k, x in v.items()}
            return {"$m": [[walk(k), walk(x)] for k, x in v.items()]}
        if isinstance(v, (set, frozenset)):
            return {"$set": [walk(x) for x in sorted(v, key=repr)]}
        import scipy.sparse as sp

        if sp.issparse(v):
            m = sp.csr_matrix(v)
            return {"$csr": [walk(m.data), walk(m.indices), walk(m.indptr), list(m.shape)]}
        return {"$o": _class_name(v), "state": walk(_state(v))}

    header = json.dumps(walk(value), allow_nan=False, separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *tail.blobs])


def decode(data):
    """The value :func:`encode` wrote; :class:`MessageError` for anything else."""
    tree, tail = _frame(data)
    return _Reader(tail).walk(tree)


def _frame(data):
    """``(header tree, tail of array bytes)`` of a message, its framing checked."""
    data = bytes(data)
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageError("message too large.")
    if data[:4] != MAGIC or len(data) < 8:
        raise MessageError("not a skfed message (bad magic): refused unread.")
    (size,) = struct.unpack("<I", data[4:8])
    if 8 + size > len(data):
        raise MessageError("truncated message header.")
    try:
        tree = json.loads(data[8:8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise MessageError("malformed message header.") from None
    return tree, memoryview(data)[8 + size:]


class _Reader:
    """Rebuilds a message's tree; each tagged node (``{"$a": ...}``) has its reader."""

    def __init__(self, tail):
        self.tail, self.budget = tail, MAX_DECODED_BYTES

    def walk(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.walk(x) for x in node]
        if not isinstance(node, dict):
            raise MessageError("malformed message tree.")
        for tag, read in _TAGS:  # in this order: a node's first tag decides
            if tag in node:
                return read(self, node)
        if any(k.startswith("$") for k in node):
            raise MessageError("unknown message node.")
        return {k: self.walk(x) for k, x in node.items()}

    def layout(self, items, fixed):
        """``(offset, dtype, counts, shape)`` of an array node's list (``fixed``: the
        entries before the shape), every entry checked; the dense size charged."""
        if not isinstance(items, list) or not fixed <= len(items) <= fixed + _MAX_DIMS:
            raise MessageError("malformed array node.")
        numbers = [items[0], *items[2:]]
        if not isinstance(items[1], str) or not all(type(x) is int and x >= 0
                                                    for x in numbers):
            raise MessageError("malformed array node.")
        try:
            dtype = np.dtype(items[1])
        except TypeError:
            raise MessageError("malformed array dtype.") from None
        if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
            raise MessageError(f"arrays of dtype {dtype} are refused.")
        shape = tuple(items[fixed:])
        dense = math.prod(shape) * dtype.itemsize
        if dense > self.budget:
            raise MessageError("the message's arrays announce more bytes than a message "
                               "may decode to.")
        self.budget -= dense
        return items[0], dtype, items[2:fixed], shape

    def span(self, start, length):
        if start + length > len(self.tail):
            raise MessageError("array outside the message.")
        return self.tail[start:start + length]

    def array(self, node):
        start, dtype, _, shape = self.layout(node["$a"], 2)
        data = self.span(start, math.prod(shape) * dtype.itemsize)
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    def sparse_array(self, node):
        """A sparse node's dense array: its positions in range, strictly increasing."""
        start, dtype, (count,), shape = self.layout(node["$sp"], 3)
        size = math.prod(shape)
        index = _index_dtype(size)
        if dtype.kind not in _SPARSE_KINDS or dtype.itemsize > 8 or count > size:
            raise MessageError("malformed sparse array.")
        data = self.span(start, count * (index.itemsize + dtype.itemsize))
        positions = np.frombuffer(data[:count * index.itemsize], dtype=index)
        if count and (positions[-1] >= size or np.any(positions[1:] <= positions[:-1])):
            raise MessageError("sparse array positions out of range or not increasing.")
        out = np.zeros(size, dtype=dtype)
        out[positions] = np.frombuffer(data[count * index.itemsize:], dtype=dtype)
        return out.reshape(shape)

    def raw_bytes(self, node):
        try:
            return base64.b64decode(node["$b"], validate=True)
        except (ValueError, TypeError):
            raise MessageError("malformed bytes.") from None

    def special_float(self, node):
        if node["$f"] not in ("nan", "inf", "-inf"):
            raise MessageError("malformed float.")
        return float(node["$f"])

    def scalar(self, node):
        return self.walk(node["$s"])[0]

    def dtype(self, node):
        if node.get("type") == "builtin":
            builtin = {"float": float, "int": int, "bool": bool, "str": str}
            if node["$dtype"] not in builtin:
                raise MessageError("malformed dtype.")
            return builtin[node["$dtype"]]
        dtype = np.dtype(str(node["$dtype"]))
        if dtype.kind not in _ARRAY_KINDS + "O" or (dtype.hasobject and dtype.kind != "O"):
            raise MessageError("malformed dtype.")
        return dtype.type if node.get("type") else dtype

    def object_array(self, node):
        items = [self.walk(x) for x in node["$oa"]]
        if not all(x is None or isinstance(x, (str, int, float, bool)) for x in items):
            raise MessageError("malformed object array.")
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(tuple(int(d) for d in node["shape"]))

    def function(self, node):
        fn = allowed_functions().get(node["$fn"])
        if fn is None:
            raise MessageError(f"function {str(node['$fn'])[:80]!r} is not one a site "
                               "message may name: refused.")
        return fn

    def tuple_node(self, node):
        return tuple(self.walk(x) for x in node["$t"])

    def set_node(self, node):
        return {_hashable(self.walk(x)) for x in node["$set"]}

    def mapping(self, node):
        return {_hashable(self.walk(k)): self.walk(x) for k, x in node["$m"]}

    def sparse(self, node):
        import scipy.sparse as sp

        d, i, p, shape = node["$csr"]
        return sp.csr_matrix((self.walk(d), self.walk(i), self.walk(p)), shape=tuple(shape))

    def allowed_object(self, node):
        """An allow-listed object, from its declared state only (see the module docstring):
        the names are checked before any value is decoded."""
        cls = allowed_classes().get(node["$o"])
        if cls is None:
            raise MessageError(f"class {str(node['$o'])[:80]!r} is not one a site message "
                               "may carry: refused.")
        raw = node.get("state", {})
        if not isinstance(raw, dict) or any(k.startswith("$") for k in raw):
            raise MessageError("malformed object state.")
        parameters, derived = wire_attributes(cls)
        for key in raw:
            _check_attribute(cls, key, parameters, derived)
        state = {key: self.walk(value) for key, value in raw.items()}
        for key, value in state.items():
            if callable(value) and not isinstance(value, type):
                raise MessageError(f"attribute {key[:40]!r} cannot hold a function.")
        return _rebuild(cls, state, parameters)


_TAGS = (("$a", _Reader.array), ("$sp", _Reader.sparse_array), ("$b", _Reader.raw_bytes),
         ("$f", _Reader.special_float), ("$s", _Reader.scalar), ("$dtype", _Reader.dtype),
         ("$oa", _Reader.object_array),
         ("$fn", _Reader.function), ("$t", _Reader.tuple_node), ("$set", _Reader.set_node),
         ("$m", _Reader.mapping), ("$csr", _Reader.sparse), ("$o", _Reader.allowed_object))


def _check_attribute(cls, key, parameters, derived):
    """An attribute a message may set on a ``cls``: one of its constructor's parameters
    or of the derived attributes it declares; never a dunder, a method or a property
    (a function named in a message could otherwise stand in for a method)."""
    if key.startswith("__"):
        raise MessageError(f"attribute {key[:40]!r} cannot be set by a message.")
    shadowed = getattr(cls, key, None)
    if callable(shadowed) or isinstance(shadowed, property):
        raise MessageError(f"attribute {key[:40]!r} of a {cls.__name__} is a method or a "
                           "property; a message cannot replace it.")
    if key not in parameters and key not in derived:
        raise MessageError(
            f"a {cls.__name__} cannot carry the attribute {key[:40]!r}: it is neither a "
            "parameter of its constructor nor a derived attribute its class declares "
            "(refused, not ignored: the site decides from the object's class what it is).")


def _rebuild(cls, state, parameters):
    """A ``cls`` made by its own constructor from the message's parameters, then given
    the declared derived attributes the message carries."""
    try:
        obj = cls(**{k: v for k, v in state.items() if k in parameters})
    except Exception as exc:  # the class's own checks (a range, a missing parameter)
        raise MessageError(f"a {cls.__name__} cannot be built from the message's parameters "
                           f"({type(exc).__name__}: {str(exc)[:120]}).") from None
    for key, value in state.items():
        if key not in parameters:
            object.__setattr__(obj, key, value)  # a frozen dataclass's too
    return obj


def _hashable(value):
    if isinstance(value, np.ndarray):
        raise MessageError("an array cannot be a dict key.")
    if isinstance(value, list):
        return tuple(value)
    return value

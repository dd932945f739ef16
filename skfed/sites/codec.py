"""Typed messages between an analyst and a site: nothing received is executed.

A message is a tree of plain values (``None``, booleans, integers, floats,
strings, lists, tuples, dicts), numeric or text numpy arrays and scalars, and
instances of an allow-listed set of skfed classes (solvers, datafits,
penalties, layouts: :func:`allowed_classes`). It travels as::

    b"SKF1" | uint32 header length | JSON header | the arrays' raw bytes

The header describes the tree; each array is a ``dtype``, a ``shape`` and a
byte range of the tail, rebuilt with :func:`numpy.frombuffer` (never with
``pickle``: object arrays are refused both ways).

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
_ARRAY_KINDS = "biufcUS"

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


def encode(value):
    """The bytes of ``value`` (see the module docstring)."""
    blobs, offset = [], [0]

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
            data = np.ascontiguousarray(v).tobytes()
            node = {"$a": [offset[0], len(data)], "dtype": v.dtype.str, "shape": list(v.shape)}
            blobs.append(data)
            offset[0] += len(data)
            return node
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
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *blobs])


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
        self.tail = tail

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

    def array(self, node):
        start, length = node["$a"]
        dtype = np.dtype(node["dtype"])
        if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
            raise MessageError(f"arrays of dtype {dtype} are refused.")
        if not (0 <= start and 0 <= length and start + length <= len(self.tail)):
            raise MessageError("array outside the message.")
        shape = tuple(int(s) for s in node["shape"])
        if any(s < 0 for s in shape) or math.prod(shape) * dtype.itemsize != length:
            raise MessageError("array shape does not match its bytes.")
        return np.frombuffer(self.tail[start:start + length], dtype=dtype).reshape(shape).copy()

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


_TAGS = (("$a", _Reader.array), ("$b", _Reader.raw_bytes), ("$f", _Reader.special_float),
         ("$s", _Reader.scalar), ("$dtype", _Reader.dtype), ("$oa", _Reader.object_array),
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

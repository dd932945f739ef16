"""What may travel in a site message: the classes and functions registered for the wire.

The codec (:mod:`skfed.sites.codec`) rebuilds an object only if its class was
registered here, with a *role* (``"solver"``, ``"datafit"``, ``"transformer"``,
...) that a site operation's typed argument can require, and names a function
only if it was registered as one a message may name. Each class registers where
it is defined (a base class registers its subclasses with
:func:`register_subclasses`), so the allow-list is what skfed declares, read
from the installed code; a class nobody registered can never be named.

Like :mod:`skfed.federation.operations`, this module imports nothing of skfed's.
"""

import types

_CLASSES = {}     # qualified name -> class
_ROLES = {}       # class -> role
_ATTRIBUTES = {}  # class -> declared derived attributes of a class that cannot declare them
_FUNCTIONS = {}   # qualified name -> function


def qualified_name(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


def wire_class(cls=None, *, role, attributes=()):
    """Register ``cls`` (a decorator, or a call for another library's class) as one a
    message may carry, with its ``role``; ``attributes``: the fitted attributes a
    class that cannot declare them itself travels with (scikit-learn's)."""
    def register(klass):
        _CLASSES[qualified_name(klass)] = klass
        _ROLES[klass] = role
        if attributes:
            _ATTRIBUTES[klass] = tuple(attributes)
        return klass
    return register if cls is None else register(cls)


def register_subclasses(base, role):
    """Called from ``base.__init_subclass__``: register each subclass skfed defines."""
    def hook(cls):
        if cls.__module__.startswith("skfed."):
            wire_class(cls, role=role)
    return hook


def wire_function(function):
    """Register ``function`` as one a message may name (a decorator)."""
    _FUNCTIONS[qualified_name(function)] = function
    return function


def wire_classes():
    """``{qualified name: class}`` of the registered classes (read-only)."""
    return types.MappingProxyType(_CLASSES)


def wire_functions():
    """``{qualified name: function}`` a message may name (read-only)."""
    return types.MappingProxyType(_FUNCTIONS)


def role_of(value):
    """The registered role of ``value``'s class (``None`` if not registered)."""
    return _ROLES.get(type(value))


def role_of_class(cls):
    """The registered role of a class (``None`` if not registered)."""
    return _ROLES.get(cls)


def foreign_attributes(cls):
    """The fitted attributes registered for a class of another library."""
    return _ATTRIBUTES.get(cls, ())

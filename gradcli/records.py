"""Record classes: what a dataclass gives (repr, equality by fields, ``replace``),
without its cost at import.

Note [Record classes]: a dataclass generates and compiles its methods when its
module is imported (about 0.5 ms a class, 1 ms frozen, at every start-up, with
a bytecode cache or not). The records that ``gradcli run`` needs (the graph's
specs and results, the CLI's options) are instead plain classes with their
``__init__`` written out (as fast as a dataclass's; the per-op ones have
``__slots__``) that subclass ``Record`` for the rest: ``_fields`` lists the
constructor's parameters in order. ``FrozenRecord``: assigning raises, as with
``dataclass(frozen=True)`` (its ``__init__`` sets fields with ``object.__setattr__``).
"""
from __future__ import annotations


class Record:
    __slots__ = ()
    _fields: tuple = ()                  # the constructor's parameters, in order
    _repr_fields: tuple | None = None    # the fields repr shows (default: all)

    def __repr__(self):
        shown = self._fields if self._repr_fields is None else self._repr_fields
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in shown)
        return f"{type(self).__qualname__}({inner})"

    def _values(self):
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None                      # mutable, compared by value (as a dataclass)

    def replace(self, **changes):
        """A copy with ``changes`` applied (as ``dataclasses.replace``)."""
        return type(self)(**{**{f: getattr(self, f) for f in self._fields}, **changes})


class FrozenRecord(Record):
    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field {name!r}")

    def __hash__(self):
        return hash(self._values())

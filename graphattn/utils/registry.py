"""``Registry``: classes by name, for the concepts a user picks by name (attention scores, ...), the shape
of chemprop's ``ClassRegistry``: ``@REGISTRY.register("name")`` on the class, ``REGISTRY.make(name)``."""
from __future__ import annotations

from typing import Callable, Dict, Iterator, Tuple, Type

__all__ = ["Registry"]


class Registry:
    """Classes of one kind (subclasses of ``base``) by name; ``what`` names the kind in errors.

    >>> ANIMALS = Registry("animal", object)
    >>> @ANIMALS.register("cat")
    ... class Cat:
    ...     pass
    >>> ANIMALS.names(), type(ANIMALS.make("cat")).__name__
    (('cat',), 'Cat')
    """

    def __init__(self, what: str, base: type):
        self.what, self.base = what, base
        self._classes: Dict[str, Type] = {}

    def register(self, name: str) -> Callable[[Type], Type]:
        """A class decorator adding the class under ``name`` (its ``name`` attribute is set to it)."""
        def add(cls: Type) -> Type:
            if name in self._classes:
                raise ValueError(f"{self.what} {name!r} is registered already ({self._classes[name].__name__})")
            cls.name = name
            self._classes[name] = cls
            return cls
        return add

    def __getitem__(self, name: str) -> Type:
        return self._classes[name]

    def __delitem__(self, name: str) -> None:
        del self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def names(self) -> Tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._classes)

    def make(self, value, *args, **kwargs):
        """An object from a registered name (the class called with ``args``), or ``value`` itself when it is
        already an instance of ``base``; ``ValueError`` naming the registered names otherwise."""
        if isinstance(value, self.base) and not isinstance(value, str):
            return value
        if not isinstance(value, str) or value not in self._classes:
            raise ValueError(f"{self.what} must be one of {self.names()}, got {value!r}")
        return self._classes[value](*args, **kwargs)

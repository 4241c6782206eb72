"""``InitSignature``: what ``inspect.signature`` (``help()``, IDEs, notebooks) shows for a
class whose metaclass defines ``__call__`` — its ``__init__``'s parameters, not the
metaclass's ``(*args, **kwargs)``."""

from __future__ import annotations

import inspect
from typing import Any


class InitSignature:
    """Class attribute ``__signature__ = InitSignature()``: the signature of the class's
    ``__init__`` without ``self``; instances have none of their own (``AttributeError``),
    so ``inspect.signature`` of an instance is what it was.

    Example:
        >>> class Meta(type):
        ...     def __call__(cls, *args, **kwargs):
        ...         return super().__call__(*args, **kwargs)
        >>> class Point(metaclass=Meta):
        ...     __signature__ = InitSignature()
        ...     def __init__(self, x: int, y: int = 0) -> None:
        ...         self.x, self.y = x, y
        >>> list(inspect.signature(Point).parameters)
        ['x', 'y']
    """

    def __get__(self, instance: Any, owner: type) -> inspect.Signature:
        if instance is not None:
            raise AttributeError("__signature__")
        signature = inspect.signature(owner.__init__)
        return signature.replace(parameters=list(signature.parameters.values())[1:],
                                 return_annotation=inspect.Signature.empty)

"""A host source's spec as a pass asks it: read once a pass (or a group of batches).

:class:`PassSpec` keeps what checking a batch asks of the spec, worked out again only
where the spec is new: the pass's first read, or x64 switched since.
"""

from __future__ import annotations

from typing import Any

from datarax.core.spec import ArrayFields, array_fields, checked_spec, has_text


class PassSpec:
    """The checked spec of ``source``, its plain fields (:func:`array_fields`) and whether
    it declares text (:func:`has_text`), as :meth:`read` last found them.

    Example:
        >>> import jax, numpy as np
        >>> class Source:
        ...     def element_spec(self):
        ...         return {"x": jax.ShapeDtypeStruct((2,), np.float32)}
        >>> answers = PassSpec(Source())
        >>> answers.read() is answers.spec, answers.fields, answers.text
        (True, (('x', (2,), dtype('float32')),), False)
    """

    __slots__ = ("fields", "source", "spec", "text")

    def __init__(self, source: Any) -> None:
        self.source = source
        self.spec: Any = None
        self.fields: ArrayFields | None = None
        self.text = False

    def read(self) -> Any:
        """The source's checked spec now; the answers are worked out again where it is
        new (the first read, or x64 switched)."""
        spec = checked_spec(self.source)
        if spec is not self.spec:
            self.spec, self.fields, self.text = spec, array_fields(spec), has_text(spec)
        return spec

"""``DataraxModule``: the NNX module base shared by sources and operators."""

from __future__ import annotations

from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError
from datarax.core.keys import check_rngs


class DataraxModule(nnx.Module):
    """An NNX module configured by a frozen :class:`StructuralConfig`.

    The config is the required first positional argument and is kept as static
    structure (``nnx.static``); array data lives in ``nnx.data`` / ``nnx.Variable``
    attributes so ``nnx.state(module)`` sees it.

    ``rngs`` (optional) is for modules that need randomness; ``name`` defaults to the
    class name.
    """

    config: StructuralConfig

    def __init__(
        self,
        config: StructuralConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(config, StructuralConfig):
            raise ConfigError(
                f"{type(self).__name__} needs a StructuralConfig instance as its first "
                f"argument, got {type(config).__name__}. Build one, e.g. "
                f"{type(self).__name__}({_config_hint(type(self).__name__)}(), ...)."
            )
        check_rngs(rngs, type(self).__name__)
        self.config = nnx.static(config)
        self.name = nnx.static(name if name is not None else type(self).__name__)


def _config_hint(cls_name: str) -> str:
    for suffix in ("Module", "Source"):
        if cls_name.endswith(suffix):
            return cls_name[: -len(suffix)] + suffix.replace("Module", "") + "Config"
    return cls_name + "Config"


class HostState:
    """Base of a module's Python-only bookkeeping: never NNX state, never structure.

    Every instance compares equal to every other instance of its class, so a module
    holding one does not split NNX graph definitions (equally built modules share
    compiled steps).

    Example:
        >>> class Seen(HostState):
        ...     def __init__(self):
        ...         self.count = 0
        >>> a, b = Seen(), Seen()
        >>> a.count = 3
        >>> a == b, hash(a) == hash(b)
        (True, True)
    """

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

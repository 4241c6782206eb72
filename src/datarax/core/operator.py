"""``OperatorModule``: the base of pipeline stages that transform batches."""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from datarax.core.keys import as_key
from datarax.core.module import DataraxModule

Batch = dict[str, Any]


class OperatorModule(DataraxModule):
    """A pipeline stage: ``apply_batch(data, keys)`` maps a batch dict to a batch dict.

    ``keys`` holds one PRNG key per record for stochastic operators (derived by the
    Pipeline from :attr:`base_key`, the epoch and each record's stable index) and is
    ``None`` for deterministic ones.
    """

    def __init__(self, config: Any, *, rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        super().__init__(config, rngs=rngs, name=name)
        self._key_given = self.stochastic and rngs is not None
        if self._key_given:
            stream = getattr(config, "stream_name", None) or "default"
            key = _draw(rngs, stream, type(self).__name__)
        else:
            key = jax.random.key(0)  # replaced by the Pipeline's key (ensure_key)
        self.base_key = nnx.Variable(key)

    @property
    def stochastic(self) -> bool:
        """Whether the stage draws random numbers (then it gets per-record keys)."""
        return bool(getattr(self.config, "stochastic", False))

    def ensure_key(self, fallback: Any) -> None:
        """Give a stochastic stage built without ``rngs`` the Pipeline-derived key."""
        if self.stochastic and not self._key_given:
            self.base_key.value = as_key(fallback)
            self._key_given = True

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        raise NotImplementedError


def _draw(rngs: nnx.Rngs, stream: str, owner: str) -> Any:
    try:
        return getattr(rngs, stream)()
    except (AttributeError, KeyError, ValueError) as err:
        raise ValueError(
            f"{owner}: rngs has no stream '{stream}' and no 'default' stream; pass "
            f"nnx.Rngs({stream}=seed) or nnx.Rngs(seed)."
        ) from err

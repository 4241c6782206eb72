"""``OperatorModule``: the base of pipeline stages that transform batches."""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import numpy as np
from flax import nnx

from datarax.core.keys import draw, reserve_draw
from datarax.core.module import DataraxModule

Batch = dict[str, Any]


class OperatorModule(DataraxModule):
    """A pipeline stage: ``apply_batch(data, keys)`` maps a batch dict to a batch dict.

    ``keys`` holds one PRNG key per record for stochastic operators (derived by the
    Pipeline from :attr:`base_key`, the epoch and each record's stable index) and is
    ``None`` for deterministic ones.

    ``per_record`` (class attribute) says the operator maps each record on its own
    (e.g. vmapped): the compiled step may then pad a short last batch and cut the
    padding after. Operators reading the batch as a whole (mixup, batch statistics)
    leave it ``False`` and always see exactly the batch's records.
    """

    per_record: ClassVar[bool] = False

    def __init__(self, config: Any, *, rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        super().__init__(config, rngs=rngs, name=name)
        self._key_given = self.stochastic and rngs is not None
        if self._key_given:
            stream = getattr(config, "stream_name", None) or "default"
            key, count = reserve_draw(rngs, stream, type(self).__name__)
        else:
            # Unused placeholder: the Pipeline derives this stage's key from its own.
            key, count = np.zeros((2,), np.uint32), np.asarray(0, np.uint32)
        self.base_key = nnx.Variable(key)
        self.base_count = nnx.Variable(count)

    @property
    def stochastic(self) -> bool:
        """Whether the stage draws random numbers (then it gets per-record keys)."""
        return bool(getattr(self.config, "stochastic", False))

    def stage_key(self, pipeline_key: Any, position: int) -> Any:
        """This stage's base key: its own (from ``rngs``) or ``fold_in(pipeline_key, position)``.

        Traceable; the Pipeline calls it inside its compiled step.
        """
        if self._key_given:
            return draw(self.base_key.get_value(), self.base_count.get_value())
        return jax.random.fold_in(pipeline_key, position)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        raise NotImplementedError


def all_per_record(stages: Any) -> bool:
    """True when every stage maps records independently (``per_record`` operators).

    Plain callables and batch-level operators (mixup, batch statistics) read the batch as
    a whole, so a chain holding one must never see padding records. Composites ask this of
    their children.
    """
    return all(isinstance(s, OperatorModule) and s.per_record for s in stages)

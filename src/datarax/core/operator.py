"""``OperatorModule``: the base of pipeline stages that transform batches."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax
import numpy as np
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.errors import ConfigError, DataraxError
from datarax.core.keys import draw, reserve_draw
from datarax.core.module import DataraxModule
from datarax.typing import Batch


class OperatorModule(DataraxModule):
    """A pipeline stage: ``apply_batch(data, keys)`` maps a batch dict to a batch dict.

    ``keys`` holds one PRNG key per record for stochastic operators (from the base key,
    the epoch and each record's stable index), ``None`` for deterministic ones. Settings
    come as a config, as keywords, or both when they agree (:meth:`build_config`).

    ``per_record`` (class attribute): the operator maps each record on its own, so a
    short last batch may run padded; batch-level operators (mixup) leave it ``False``.
    """

    per_record: ClassVar[bool] = False

    def __init__(
        self,
        config: StructuralConfig | None = None,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        config = self.build_config(config, settings)
        super().__init__(config, rngs=rngs, name=name)
        self._key_given = self.stochastic and rngs is not None
        if self._key_given:
            stream = getattr(config, "stream_name", None) or "default"
            key, count = reserve_draw(rngs, stream, type(self).__name__)
        else:
            # placeholder: the Pipeline derives this stage's key from its own
            key, count = np.zeros((2,), np.uint32), np.asarray(0, np.uint32)
        self.base_key = nnx.Variable(key)
        self.base_count = nnx.Variable(count)

    @property
    def stochastic(self) -> bool:
        """Whether the stage draws random numbers (then it gets per-record keys)."""
        return bool(getattr(self.config, "stochastic", False))

    @property
    def owns_key(self) -> bool:
        """Whether the stage drew its base key from its own ``rngs`` (else the Pipeline's)."""
        return self._key_given

    def stage_key(self, pipeline_key: Any, position: int) -> Any:
        """This stage's base key (traceable): its own (from ``rngs``) or
        ``fold_in(pipeline_key, position)``."""
        if self._key_given:
            return draw(self.base_key.get_value(), self.base_count.get_value())
        return jax.random.fold_in(pipeline_key, position)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        raise NotImplementedError


class RecordFilter(OperatorModule):
    """A stage that decides, one boolean per record, which records an epoch hands out
    (the base of ``datarax.operators.FilterOperator``)."""

    @property
    def on_host(self) -> bool:
        """Whether the decision runs in Python on numpy records, as they are read."""
        return False

    def keep(self, data: Batch) -> Any:
        """One boolean per record of a numeric batch (traceable)."""
        raise NotImplementedError

    def keep_records(self, data: Batch, where: str) -> np.ndarray:
        """One boolean per record, decided in Python record by record."""
        raise NotImplementedError

    def check_output(self, spec: Batch, where: str) -> None:
        """Refuse, before any record is read, a decision that is not one boolean per
        record of a batch with this per-record ``spec``."""
        raise NotImplementedError


def all_per_record(stages: Any) -> bool:
    """True when every stage is a ``per_record`` operator (only then may padding rows run)."""
    return all(isinstance(s, OperatorModule) and s.per_record for s in stages)


_STATEFUL_HINT = (
    "Inside the compiled step a stage's state is not written back after a batch, so it "
    "would run frozen: the same draws and values on every batch. For randomness use "
    "ElementOperator(fn=f, stochastic=True): f(element, key) gets a key per record that "
    "is the same after a resume."
)


def refuse_rng_state(stage: Any, where: str) -> None:
    """Refuse a stage module holding its own ``nnx.Rngs`` / RNG streams, naming ``where``.

    Example:
        >>> from flax import nnx
        >>> class Noisy(nnx.Module):
        ...     def __init__(self):
        ...         self.rngs = nnx.Rngs(0)
        >>> refuse_rng_state(Noisy(), "stage 0")
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: stage 0 (Noisy) holds RNG streams (rngs/default/...
    """
    if not isinstance(stage, nnx.Module):
        return
    paths = [
        "/".join(map(str, path))
        for path, node in nnx.iter_graph(stage)
        if isinstance(node, nnx.RngState)
    ]
    if paths:
        raise ConfigError(
            f"{where} ({type(stage).__name__}) holds RNG streams ({', '.join(paths)}). "
            + _STATEFUL_HINT
        )


def call_stage(stage: Any, call: Callable[[], Batch], where: str) -> Batch:
    """``call()``, refused if it wrote a Variable of ``stage`` (lost in a compiled step);
    an error it raises gets a note naming the stage."""
    if not isinstance(stage, nnx.Module):
        return _noted(stage, call, where)
    before = [
        (path, node, node.get_value())
        for path, node in nnx.iter_graph(stage)
        if isinstance(node, nnx.Variable)
    ]
    out = _noted(stage, call, where)
    written = ["/".join(map(str, p)) for p, node, value in before if node.get_value() is not value]
    if written:
        raise ConfigError(
            f"{where} ({type(stage).__name__}) writes its nnx.Variable(s) {written} while "
            "it runs. " + _STATEFUL_HINT + " Keep values a stage must update outside the "
            "pipeline."
        )
    return out


def _noted(stage: Any, call: Callable[[], Batch], where: str) -> Batch:
    """``call()``; an error raised in it gets a note naming the stage (unless it does)."""
    try:
        return call()
    except Exception as err:
        if isinstance(err, DataraxError) and f"{where} (" in str(err):
            raise
        name = getattr(stage, "name", None)
        label = f"{type(stage).__name__} '{name}'" if name else repr(stage)
        err.add_note(f"raised in {where} ({label})")
        raise


def warn_unseeded(stages: Sequence[Any]) -> None:
    """Warn about stochastic stages without ``rngs`` in a Pipeline built without ``seed``
    or ``rngs``."""
    named = [
        f"{i} ({type(s).__name__} '{s.name}')"
        for i, s in enumerate(stages)
        if isinstance(s, OperatorModule) and s.stochastic and not s.owns_key
    ]
    if named:
        warnings.warn(
            f"Pipeline built without seed or rngs: stochastic stage(s) {', '.join(named)} "
            "draw from the default seed 0, the same in every run. Pass seed=N (or "
            "rngs=nnx.Rngs(N)) to Pipeline to choose the seed.",
            UserWarning,
            stacklevel=_caller_level(),
        )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside datarax and Flax (the user's call)."""
    ours = (Path(__file__).parents[1], Path(nnx.__file__).parents[1])
    frame, level = inspect.currentframe().f_back, 1  # type: ignore[union-attr]
    while frame is not None and any(
        Path(frame.f_code.co_filename).is_relative_to(d) for d in ours
    ):
        frame, level = frame.f_back, level + 1
    return level

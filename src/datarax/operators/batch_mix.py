"""``BatchMixOperator``: mixup and cutmix across the records of one batch.

Each record is paired with the next in a random cyclic order of the batch and draws
``lam ~ Beta(alpha, alpha)`` (cutmix: a box keeping share ``lam``) from its own key, so a
resumed pipeline mixes as the uninterrupted one. Labels become ``lam * onehot(y) +
(1 - lam) * onehot(y')``. A batch of one record passes unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from datarax.core.config import StructuralConfig
from datarax.core.draws import integer, symmetric_beta, words
from datarax.core.errors import ConfigError, DataraxError
from datarax.core.operator import OperatorModule
from datarax.host.counts import check_count
from datarax.operators._records import check_draw_settings, check_keys, require_fields
from datarax.typing import Batch

MODES = ("mixup", "cutmix")
FIELD_KINDS = {
    "mode": "'mixup' or 'cutmix'", "alpha": "a number > 0", "data_field": "a field name",
    "label_field": "a field name", "num_classes": "an int >= 2 or None",
    "stochastic": "True", "stream_name": "a stream name or None",
}


@dataclass(frozen=True)
class BatchMixOperatorConfig(StructuralConfig):
    """Configuration of :class:`BatchMixOperator` (see its arguments)."""

    mode: str = "mixup"
    alpha: float = 1.0
    data_field: str = "image"
    label_field: str = "label"
    num_classes: int | None = None
    stochastic: bool = True
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                raise ConfigError(
                    f"BatchMixOperator got a config object, {type(value).__name__}(...), as "
                    f"its setting {f.name}={value!r}, where {f.name} expects "
                    f"{FIELD_KINDS.get(f.name, 'a plain value')}. Pass a config as the first "
                    "argument, BatchMixOperator(BatchMixOperatorConfig(mode=..., alpha=...)), or the "
                    "settings as keywords, BatchMixOperator(mode='cutmix', alpha=1.0)."
                )
        check_draw_settings(self)
        if self.mode not in MODES:
            raise ConfigError(
                f"BatchMixOperator mode must be one of {list(MODES)}, got {self.mode!r}."
            )
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a < math.inf:
            raise ConfigError(f"BatchMixOperator alpha must be a finite number > 0, got {a!r}.")
        for name in ("data_field", "label_field"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"BatchMixOperator {name} must be a field name (str).")
        if not self.stochastic:
            raise ConfigError("BatchMixOperator is always stochastic; leave stochastic=True.")
        if self.num_classes is not None:
            object.__setattr__(self, "num_classes",
                               check_count(self.num_classes, "BatchMixOperator num_classes", 2))


def partners(batch_key: Any, size: int) -> Any:
    """Each position's partner: the next position in a random cyclic order (never itself)."""
    order = jax.random.permutation(batch_key, size)
    rank = jnp.argsort(order)
    return order[(rank + 1) % size]


def cut_masks(keys: Any, lam: Any, height: int, width: int) -> tuple[Any, Any]:
    """Per record: a (H, W) mask of the pasted box and the kept pixel share."""

    def one(key: Any, lam_i: Any) -> tuple[Any, Any]:
        cut = jnp.sqrt(1.0 - lam_i)
        h = jnp.round(cut * height).astype(jnp.int32)
        w = jnp.round(cut * width).astype(jnp.int32)
        bits = words(key, 2)  # a fold_in's own two words: no further threefry
        cy, cx = integer(bits[0], 0, height), integer(bits[1], 0, width)
        y0, y1 = jnp.clip(cy - h // 2, 0, height), jnp.clip(cy - h // 2 + h, 0, height)
        x0, x1 = jnp.clip(cx - w // 2, 0, width), jnp.clip(cx - w // 2 + w, 0, width)
        # aranges of the box's dtype: a user's strict promotion refuses int64 (x64) vs int32
        ys, xs = jnp.arange(height, dtype=y0.dtype), jnp.arange(width, dtype=x0.dtype)
        rows = (ys >= y0) & (ys < y1)
        cols = (xs >= x0) & (xs < x1)
        mask = rows[:, None] & cols[None, :]
        kept = 1.0 - mask.sum() / (height * width)
        return mask, kept.astype(jnp.float32)

    return jax.vmap(one)(keys, lam)


@functools.partial(jax.jit, static_argnames=("mode", "alpha"))  # one compile when eager
def mix(x: Any, labels: Any, keys: Any, mode: str, alpha: float) -> tuple[Any, Any]:
    """``(mixed data, mixed soft labels)`` of a batch of at least two records (``labels``
    float ``(batch, classes)``; cutmix: ``x`` of shape ``(batch, H, W, C)``)."""
    size = x.shape[0]
    partner = partners(jax.random.fold_in(keys[0], size), size)
    lam = symmetric_beta(jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys), alpha)
    if mode == "mixup":
        l = lam.reshape((size,) + (1,) * (x.ndim - 1))
        mixed = l * x.astype(jnp.float32) + (1.0 - l) * x[partner].astype(jnp.float32)
        mixed = mixed.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else mixed
    else:
        box_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        mask, lam = cut_masks(box_keys, lam, x.shape[1], x.shape[2])
        mixed = jnp.where(mask[..., None], x[partner], x)
    # a NaN (out-of-range) label stays its own record's, so check_finite names that record
    theirs = labels[partner]
    soft = lam[:, None] * labels + (1.0 - lam[:, None]) * jnp.where(jnp.isnan(theirs), 0.0, theirs)
    return mixed, soft


class BatchMixOperator(OperatorModule):
    """Mixup or cutmix of ``data_field`` and ``label_field`` within each batch.

    Settings, as keywords or a :class:`BatchMixOperatorConfig`:
        mode: ``"mixup"`` (blend whole records) or ``"cutmix"`` (paste a box of the
            partner into ``(batch, H, W, C)`` images).
        alpha: the Beta(alpha, alpha) concentration of the mixing weight (> 0).
        data_field, label_field: the fields mixed; float labels ``(batch, classes)`` mix
            as is, integer labels (``(batch,)`` or ``(batch, 1)``) as one-hot of
            ``num_classes`` (required for them); one outside ``[0, num_classes)`` gives
            its record a NaN soft label (``Pipeline(check_finite=True)`` refuses it).

    Mixup turns integer data into float32; cutmix keeps the dtype. Nothing is clipped.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> mix = BatchMixOperator(mode="mixup", alpha=0.4, num_classes=2)
        >>> keys = jax.random.split(jax.random.key(0), 2)
        >>> out = mix.apply_batch({"image": jnp.array([[0.0], [1.0]]),
        ...                        "label": jnp.array([0, 1])}, keys)
        >>> [round(float(v), 4) for v in out["label"].sum(axis=1)]
        [1.0, 1.0]
    """

    config: BatchMixOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]
    config_class = BatchMixOperatorConfig

    def _soft_labels(self, labels: Any) -> Any:
        cfg = self.config
        if jnp.issubdtype(labels.dtype, jnp.integer):
            if cfg.num_classes is None:
                raise DataraxError(
                    f"BatchMixOperator '{self.name}': field '{cfg.label_field}' holds integer "
                    "labels; pass num_classes=... so they can be mixed as one-hot labels."
                )
            if labels.ndim == 2 and labels.shape[1] == 1:
                labels = labels[:, 0]  # (batch, 1) class ids, as read from a column
            if labels.ndim != 1:
                raise DataraxError(
                    f"BatchMixOperator '{self.name}': integer labels in '{cfg.label_field}' "
                    f"must be one class id per record, shape (batch,) or (batch, 1), got "
                    f"shape {tuple(labels.shape)}. Give (batch, classes) soft labels as "
                    "floats (e.g. .astype(jnp.float32) of one-hot rows)."
                )
            known = (labels >= 0) & (labels < cfg.num_classes)  # else NaN, not silent zeros
            one_hot = jax.nn.one_hot(labels, cfg.num_classes, dtype=jnp.float32)
            return jnp.where(known[..., None], one_hot, jnp.nan)
        if labels.ndim != 2:
            raise DataraxError(
                f"BatchMixOperator '{self.name}': float labels in '{cfg.label_field}' must be "
                f"(batch, classes) soft labels, got shape {tuple(labels.shape)}. Class ids "
                "stored as floats: cast them with MapOperator(subtree="
                f"'{cfg.label_field}', fn=lambda a: a.astype(jnp.int32)) first and pass "
                "num_classes=..."
            )
        if cfg.num_classes is not None and labels.shape[1] != cfg.num_classes:
            raise DataraxError(
                f"BatchMixOperator '{self.name}': soft labels in '{cfg.label_field}' have "
                f"{labels.shape[1]} classes but num_classes={cfg.num_classes}; make them agree "
                "(num_classes only one-hots integer labels: it may be left out here)."
            )
        return labels.astype(jnp.float32)

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Mix each record with its partner in this batch (keys: one per record)."""
        cfg = self.config
        require_fields(data, [cfg.data_field, cfg.label_field], f"BatchMixOperator '{self.name}'")
        if keys is None:
            raise DataraxError(
                f"BatchMixOperator '{self.name}' needs one key per record; run it in a "
                "Pipeline or pass keys."
            )
        x, labels = data[cfg.data_field], self._soft_labels(data[cfg.label_field])
        size = x.shape[0]
        check_keys(self, keys, size)
        if size < 2:
            return {**data, cfg.label_field: labels}
        if cfg.mode == "cutmix" and x.ndim != 4:
            raise DataraxError(
                f"BatchMixOperator '{self.name}': cutmix needs (batch, H, W, C) images in "
                f"'{cfg.data_field}', got shape {tuple(x.shape)}."
            )
        mixed, soft = mix(x, labels, keys, cfg.mode, cfg.alpha)
        return {**data, cfg.data_field: mixed, cfg.label_field: soft}

"""The Pipeline state format, in one place: what is saved, and what must match to restore.

A state is a small JSON-able dict::

    {"version": 4, "epoch": e, "position": k, "settings": {...}, "source": {...}}

``epoch``/``position``: the pass and the records of it handed out (``position`` may
equal the epoch's length: taken inside the loop after its last batch, nothing is left
of that pass; a pass that ended stands at ``(epoch + 1, 0)``: docs/reliability.md).
``settings``: what the position means — batch size, drop_remainder, the source's type,
length, shard, its ``order_settings()`` (nested sources' too), and digests of the stages
(:mod:`datarax.pipeline.stage_digest`: version 4 sees their functions' source; version
3 states, still restored, their bytecode, version 2 their names only) and rngs, and, when
a stage is stochastic,
``draw``: the random draw version (:data:`datarax.core.draws.DRAW_VERSION`; a state
without it is of version 1 and is refused by a pipeline that draws). They are compared in a fixed order
(switches such as ``shuffle`` before the ``seed`` they enable; a seed whose switch is
off is not saved), and the first that differs is named. ``source``: the source's own ``get_state()`` for host and stream
sources (bad-record counts, shuffle description) less its ``settings`` (those are
among the pipeline's), absent for indexed ones.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> pipeline = Pipeline(source=src, batch_size=2)
    >>> _ = next(iter(pipeline))  # one batch handed out
    >>> state = pipeline.get_state()
    >>> state["epoch"], state["position"], state["settings"]["batch_size"]
    (0, 2, 2)
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from datarax.core.data_source import length_or_none
from datarax.core.draws import DRAW_VERSION
from datarax.core.errors import StateError
from datarax.core.operator import OperatorModule
from datarax.pipeline.elastic import elastic_restore, own_share_state
from datarax.pipeline.plan import PassContext, filter_position
from datarax.pipeline.stage_digest import (SEES, SEES_V3, STAGES_DIGEST_V2, STAGES_DIGEST_V3,
                                           digest, stages_fingerprint)

STATE_VERSION = 4
# versions restored: 2 and 3 differ only in their stages digest (function names; bytecode)
READ_VERSIONS = (STAGES_DIGEST_V2, STAGES_DIGEST_V3, STATE_VERSION)
_DIGEST_HINTS = {
    "stages": f" ({SEES}; build the same stages)",
    "stages v3": f" ({SEES_V3}; build the same stages)",
    "stages v2": " (a version 2 state's digest of the stages: their classes, names, configs "
    "and function names, in order; build the same stages)",
    "rngs": " (digests of the keys the pipeline and its stages draw from; build it with "
    "the same rngs seed)",
}


def rng_fingerprint(context: PassContext) -> str:
    """Digest of every key the pipeline and its stages draw from."""
    material = list(context.key_pair())
    for stage in context.stages:
        if isinstance(stage, OperatorModule) and stage.stochastic and stage.owns_key:
            material += [stage.base_key.get_value(), stage.base_count.get_value()]
    data = []
    for value in material:
        if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        data.append(np.asarray(value).tobytes())
    return digest(b"".join(data))


def settings(context: PassContext, version: int = STATE_VERSION) -> dict[str, Any]:
    """The settings a saved state (of ``version``) must agree with to be restored here
    (compare order)."""
    source = context.source
    out: dict[str, Any] = {
        "batch_size": context.plan.batch_size,
        "drop_remainder": context.plan.drop_remainder,
        "source": type(source).__name__,
        "num_records": length_or_none(source),
        "shard": [source.shard.index, source.shard.count],
    }
    if source.shard.padded:  # shares rounded up: positions mean other records
        out["padded_shards"] = True
    for name, value in source.order_settings().items():
        out[f"source.{name}"] = value
    out["stages"] = stages_fingerprint(context.stages, version)
    out["rngs"] = rng_fingerprint(context)
    if any(isinstance(stage, OperatorModule) and stage.stochastic for stage in context.stages):
        out["draw"] = DRAW_VERSION  # how its random values are derived
    return out


def get_state(context: PassContext) -> dict[str, Any]:
    """The state of the pipeline of ``context`` where its source stands."""
    source = context.source
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "epoch": source.epoch,
        "position": source.index,
        "settings": settings(context),
    }
    if not context.reading.compiled:
        # its settings are in the pipeline's own (``source.*``), checked before it
        state["source"] = {k: v for k, v in source.get_state().items() if k != "settings"}
    elastic = context.elastic_epoch(source.epoch)
    if elastic is not None:
        state["elastic"] = elastic.describe()
    return state


def restore(context: PassContext, state: Any) -> None:
    """Move the source of ``context`` to where ``state`` was taken: the same position
    (in this process's share, when another process of the same count saved it), or
    after an elastic restore (a state of another process count) this process's
    share of what is left of that epoch (:mod:`datarax.pipeline.elastic`)."""
    source, session = context.source, context.session
    # another process's state, at the same step
    reading = context.reading
    state = own_share_state(source, state, reading,
                            filtered=filter_position(context.stages) is not None)
    elastic = elastic_restore(source, state, reading, lambda plain: check_state(context, plain))
    if elastic is not None:
        _check_elastic_placement(context, elastic.epoch, elastic.size)
    session.elastic = elastic
    if elastic is not None:
        if not elastic.size:  # nothing of that epoch is left for anyone: an empty pass
            session.elastic = None
            source.seek(elastic.epoch, source.epoch_size() or 0)
            return
        if not reading.compiled:  # its reader serves the share
            source.use_share(elastic.epoch, elastic.share)  # type: ignore[attr-defined]
        source.seek(elastic.epoch, 0)
        return
    check_state(context, state)
    if reading.compiled:
        source.seek(state["epoch"], state["position"])
    else:
        source.set_state(state["source"])


def _hint(key: str, version: int) -> str:
    """What a digest in the settings covers, for a refusal naming ``key``."""
    if key == "stages" and version in (STAGES_DIGEST_V2, STAGES_DIGEST_V3):
        key = f"stages v{version}"
    return _DIGEST_HINTS.get(key, "")


def _check_draw(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse a state of a pipeline that draws, saved under another random draw version
    (a state without one is of version 1): the rest of its epoch would get other values."""
    if "draw" not in current:
        return
    version = saved.get("draw", 1)
    if version != current["draw"]:
        raise StateError(
            f"Pipeline state was saved with random draw version {version!r}, but this "
            f"datarax draws with version {current['draw']} (datarax.core.draws): its "
            "stochastic stages would give other random values than the batches already "
            "served, so the rest of the epoch would not continue them. Restore it with the "
            "datarax release that saved it, or start a new pass with this one.",
            field="draw",
        )


def _check_elastic_placement(context: PassContext, epoch: int, size: int) -> None:
    """Refuse an elastic share whose short last batch would not split over this
    process's devices (``sharding=`` without ``drop_remainder``), before it is served."""
    plan = context.plan
    short = size % plan.batch_size
    if plan.placement is None or plan.drop_remainder or not short:
        return
    split = plan.placement.local_split
    if short % split:
        shard = context.source.shard
        raise StateError(
            f"Pipeline state (an elastic restore) gives shard {shard.index} of {shard.count} "
            f"a share of {size} records of epoch {epoch}, whose last batch of {short} does "
            f"not split over this process's {split} device(s) (sharding=); the state's "
            "drop_remainder=False keeps that batch. Restore it on another process count, "
            "or into a pipeline without sharding= to serve the rest of that epoch.",
            field="shard",
        )


def check_state(context: PassContext, state: Any) -> None:
    """Refuse a state from another configuration or a tampered one, naming the field."""
    if not isinstance(state, dict):
        nnx_hint = (" An nnx.state(pipeline) is restored with nnx.update(pipeline, state)."
                    if type(state).__name__ == "State" else "")
        raise StateError(
            f"Pipeline.set_state expects the dict get_state() returned, got "
            f"{type(state).__name__}.{nnx_hint}"
        )
    if "version" not in state and "current_index" in state:
        raise StateError(
            "Pipeline.set_state got a source's state (the dict of source.get_state(): "
            f"keys {sorted(state)}), not the pipeline's. Restore it with "
            "pipeline.source.set_state(state) (the next iter(pipeline) continues from "
            "there), or save pipeline.get_state() to restore a pipeline.",
            field="version",
        )
    parent = "parent" if "parent" in state else "pipeline"  # saved before the nesting: "pipeline"
    wrapper = next((name for name, key in (("take", "take_left"), ("repeat", "epochs_left"))
                    if "version" not in state and key in state and parent in state), None)
    if wrapper is not None:
        raise StateError(
            f"Pipeline.set_state got the state of pipeline.{wrapper}(...) (keys "
            f"{sorted(state)}), not the pipeline's. Restore it with the same call's "
            f"set_state: it = pipeline.{wrapper}(...); it.set_state(state). "
            f"Its '{parent}' entry alone restores only the position, not the "
            f"{'batches' if wrapper == 'take' else 'passes'} left.",
            field="version",
        )
    for key in ("version", "epoch", "position", "settings"):
        if key not in state:
            raise StateError(
                f"Pipeline state is missing '{key}'; pass the dict that get_state() "
                f"returned (got keys {sorted(state)}).",
                field=key,
            )
    if state["version"] not in READ_VERSIONS:
        raise StateError(
            f"Pipeline state version {state['version']!r} is not {STATE_VERSION}, the version "
            f"this datarax writes (it also restores versions {STAGES_DIGEST_V2} and "
            f"{STAGES_DIGEST_V3}); the state comes from another datarax release or was "
            "tampered with. Restore it with the release that saved it.",
            field="version",
        )
    for key in ("epoch", "position"):
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StateError(
                f"Pipeline state '{key}' must be an int >= 0, got {value!r}; the state "
                "was tampered with.",
                field=key,
            )
    saved = state["settings"]
    if not isinstance(saved, dict):
        raise StateError(
            f"Pipeline state 'settings' must be the dict get_state() wrote, got "
            f"{type(saved).__name__}; the state was tampered with.",
            field="settings",
        )
    current = settings(context, state["version"])
    _check_draw(saved, current)
    for key in [*current, *(k for k in saved if k not in current)]:
        if saved.get(key) != current.get(key):
            raise StateError(
                f"Pipeline state was saved with {key}={saved.get(key)!r} but this pipeline "
                f"has {key}={current.get(key)!r}{_hint(key, state['version'])}; restore it "
                "into an identically configured pipeline.",
                field=key,
            )
    size = context.source.epoch_size()
    if size is not None and state["position"] > size:
        raise StateError(
            f"Pipeline state position={state['position']} is past the end of the epoch "
            f"({size} records).",
            field="position",
        )
    if not context.reading.compiled and not isinstance(state.get("source"), dict):
        raise StateError(
            "Pipeline state is missing 'source' (the source's position).", field="source"
        )

"""The Pipeline state format, in one place: what is saved, and what must match to restore.

A state is a small JSON-able dict of one shape for every source and reading mode::

    {"version": 4, "epoch": e, "position": k, "settings": {...}, "source": {...}}

``epoch``/``position``: the pass and the records of it handed out (docs/reliability.md,
"Epoch ends"). ``settings``: what the position means (batch size, the source's type,
length, shard and ``order_settings()``, digests of the stages and rngs, the ``draw``
version of stochastic stages), compared in a fixed order, the first that differs named.
``source``: the source's own ``get_state()`` less its settings. A re-split epoch adds
``"share"`` (:mod:`~datarax.pipeline.elastic`). Other versions are refused.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> pipeline = Pipeline(source=src, batch_size=2)
    >>> _ = next(iter(pipeline))  # one batch handed out
    >>> state = pipeline.get_state()
    >>> state["epoch"], state["position"], state["settings"]["batch_size"], state["source"]
    (0, 2, 2, {'current_index': 2, 'current_epoch': 0})
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

import datarax.pipeline.elastic as elastic
from datarax.core.lengths import length_or_none
from datarax.core.draws import DRAW_VERSION
from datarax.core.errors import StateError
from datarax.core.operator import OperatorModule
from datarax.core.position import saved_count, without_later
from datarax.core.share import Share
from datarax.pipeline.plan import PassContext, check_own_share, filter_position
from datarax.core.stage_digest import SEES, digest, stages_fingerprint
from datarax.host.counts import count_words

STATE_VERSION = 4
_DIGEST_HINTS = {
    "batch_size": " (each process's; to keep the global batch on another process count, "
    "build it with the saved batch_size and join or cut its batches with "
    "datarax.pipeline.Rebatch(pipeline, group=k or split=k))",
    "stages": f" ({SEES}; build the same stages)",
    "rngs": " (digests of the keys the pipeline and its stages draw from; build it with "
    "the same rngs seed)",
    "num_records": " (the records its source holds: the data gained or lost records since "
    "the state was saved, or it is other data, so the position would name other records; "
    "restore over the data the state was saved with, or start a fresh pass)",
    "padded_shards": " (True: built with pad_remainder=True over several processes, each "
    "share rounded up with padding rows; None: without, each share cut down; a position "
    "names other records under each, so build it with the saved pad_remainder)",
    "files": " (a digest of an ArrayRecord source's files' names and record counts, in "
    "order: it reads other files, or the same files in another order, so the position "
    "would name other records; build it over the files the state was saved with: a glob "
    "is sorted, a list kept as given)",
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


def settings(context: PassContext) -> dict[str, Any]:
    """The settings a saved state must agree with to be restored here (compare order)."""
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
    out["stages"] = stages_fingerprint(context.stages)
    out["rngs"] = rng_fingerprint(context)
    if any(isinstance(stage, OperatorModule) and stage.stochastic for stage in context.stages):
        out["draw"] = DRAW_VERSION
    return out


def get_state(context: PassContext) -> dict[str, Any]:
    """The state of the pipeline of ``context`` where its source stands."""
    source = context.source
    check_own_share(context.session.share, source)  # else it would name another's shard
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "epoch": source.epoch,
        "position": source.index,
        "settings": settings(context),
        "source": {k: v for k, v in source.get_state().items() if k != "settings"},
    }
    share = context.resplit(source.epoch)
    if share is not None:
        state["share"] = {"epoch": share.epoch, "history": [list(h) for h in share.history]}
    return state


def restore(context: PassContext, state: Any) -> None:
    """Move the source of ``context`` to where ``state`` was taken (in this process's
    share); another process count's goes through :func:`datarax.pipeline.elastic.restore`."""
    check_own_share(context.session.share, context.source)
    state = readable(state)
    saved = _shard_of(state)
    shard = context.source.shard
    if saved is not None and ("share" in state or saved.count != shard.count):
        elastic.restore(context, state, saved, lambda plain: check_state(context, plain))
        return
    if saved is not None and saved.index != shard.index:
        state = _own_share(context, state, saved)
    check_state(context, state)
    context.session.resplit_share = None
    context.source.set_state(state["source"])


def _shard_of(state: dict[str, Any]) -> Share | None:
    """The share ``state`` was saved in (None: not a valid one; the settings check names it)."""
    shard = state["settings"].get("shard")
    try:
        return Share(*shard) if isinstance(shard, list) and len(shard) == 2 else None
    except ValueError:
        return None


def _own_share(context: PassContext, state: dict[str, Any], saved: Share) -> Any:
    """``state`` of shard ``saved`` as this process's own (the same process count): every
    share stands at the same position after the same steps.

    Raises:
        StateError: where shares' positions can differ (a filter, skipped records) or
            are the share's own (a stream).
    """
    source = context.source
    index, count = source.shard.index, source.shard.count
    where = (f"Pipeline over {type(source).__name__} (shard {index} of {count}) was given "
             f"the state of shard {saved.index} of {count}")
    own = ("Save and restore each process's own state (e.g. a JSON file named by "
           "jax.process_index()).")
    if filter_position(context.stages) is not None:
        raise StateError(
            f"{where}, and it has a FilterOperator: each process's position counts the "
            "records it read to fill its batches, so another process's state does not say "
            f"where this one stands. {own}",
            field="shard",
        )
    elastic.refuse_other_share(context, where, own)
    return dict(state, settings=dict(state["settings"], shard=[index, count]))


def _earlier_versions(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with earlier ``draw`` / stable index versions accepted where the pipeline
    draws nothing, refused where it draws (its epoch would not continue the same values)."""
    draws = "draw" in current
    version = saved.get("draw", 1)
    # no "draw" and other stages: maybe a pipeline that drew nothing; the stages are named
    other_stages = "draw" not in saved and saved.get("stages") != current.get("stages")
    if draws and version != current["draw"] and not other_stages:
        raise StateError(
            f"Pipeline state was saved with random draw version {version!r}, but this "
            f"datarax draws with version {current['draw']} (datarax.core.draws): its "
            "stochastic stages would give other random values than the batches already "
            "served, so the rest of the epoch would not continue them. Restore it with the "
            "datarax release that saved it, or start a new pass with this one.",
            field="draw",
        )
    key = next((k for k in current if k.endswith("stable_index_version") and k not in saved),
               None)
    if key is None:
        return saved
    if not draws:
        return {**saved, key: current[key]}
    raise StateError(
        f"Pipeline state was saved with stable index version 1 ({key} absent), but this "
        f"pipeline's concatenation over a mixture numbers its records by version "
        f"{current[key]}: version 1 gave two records of an epoch one per-record key, so the "
        "rest of the epoch would not continue the batches already served. Restore it with "
        "the datarax release that saved it, or start a new pass with this one.",
        field=key,
    )


def readable(state: Any) -> dict[str, Any]:
    """``state``, refused when it is no pipeline state or of another version."""
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
    wrapper = next((name for name, key in (("take", "take_left"), ("repeat", "epochs_left"))
                    if "version" not in state and key in state and "parent" in state), None)
    if wrapper is not None:
        raise StateError(
            f"Pipeline.set_state got the state of pipeline.{wrapper}(...) (keys "
            f"{sorted(state)}), not the pipeline's. Restore it with the same call's "
            f"set_state: it = pipeline.{wrapper}(...); it.set_state(state). "
            "Its 'parent' entry alone restores only the position, not the "
            f"{'batches' if wrapper == 'take' else 'passes'} left.",
            field="version",
        )
    if "version" not in state and "rebatch" in state and "parent" in state:
        raise StateError(
            f"Pipeline.set_state got the state of a Rebatch (keys {sorted(state)}), not the "
            "pipeline's. Restore it with the Rebatch's set_state: rebatch = "
            "Rebatch(pipeline, group=k or split=k); rebatch.set_state(state). Its 'parent' "
            "entry alone restores only the position, not the parts of the batch handed out.",
            field="version",
        )
    for key in ("version", "epoch", "position", "settings"):
        if key not in state:
            raise StateError(
                f"Pipeline state is missing '{key}'; pass the dict that get_state() "
                f"returned (got keys {sorted(state)}).",
                field=key,
            )
    if state["version"] != STATE_VERSION:
        raise StateError(
            f"Pipeline state version {state['version']!r} is not {STATE_VERSION}, the only "
            "version this datarax restores (2 and 3 are earlier releases' states); restore "
            "it with the datarax release that saved it, or start the epoch again with a "
            "fresh pipeline.",
            field="version",
        )
    if not isinstance(state["settings"], dict):
        raise StateError(
            f"Pipeline state 'settings' must be the dict get_state() wrote, got "
            f"{type(state['settings']).__name__}; the state was tampered with.",
            field="settings",
        )
    return state


def check_state(context: PassContext, state: dict[str, Any]) -> None:
    """Refuse a :func:`readable` state from another configuration or a tampered one,
    naming the field."""
    for key in ("epoch", "position"):
        saved_count(state, key, "Pipeline")
    saved = state["settings"]
    current = settings(context)
    saved = _earlier_versions(saved, current)
    current = without_later(saved, current)
    for key in [*current, *(k for k in saved if k not in current)]:
        if saved.get(key) != current.get(key):
            hint = _DIGEST_HINTS.get(key, _DIGEST_HINTS.get(key.rsplit(".", 1)[-1], ""))
            raise StateError(
                f"Pipeline state was saved with {key}={saved.get(key)!r} but this pipeline "
                f"has {key}={current.get(key)!r}{hint}; restore it "
                "into an identically configured pipeline.",
                field=key,
            )
    size = context.source.epoch_size()
    if size is not None and state["position"] > size:
        raise StateError(
            f"Pipeline state position={state['position']} is past the end of the epoch "
            f"({count_words(size, 'record')}).",
            field="position",
        )
    nested = state.get("source")
    if not isinstance(nested, dict):
        raise StateError(
            "Pipeline state is missing 'source' (the source's position)." if nested is None
            else f"Pipeline state 'source' must be the source's state (a dict), got "
            f"{type(nested).__name__} {nested!r}; the state was tampered with.", field="source"
        )
    for mine, key in (("epoch", "current_epoch"), ("position", "current_index")):
        value = nested.get(key)  # a bad value is the source's own to refuse
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) \
                and 0 <= value != state[mine]:
            raise StateError(
                f"Pipeline state {mine}={state[mine]} but its 'source' says {key}={value}; "
                "the state was tampered with.",
                field=mine,
            )

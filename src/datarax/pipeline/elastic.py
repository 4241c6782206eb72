"""Elastic resume: a state saved by N processes restored on M (N != M) mid-epoch.

A state records this process's position in its share of the epoch and the shard
``[index, count]`` it was taken in. Every process of a run saves at the same step, so
every share stands at the same position: that is enough to know exactly which epoch
positions were served. ``Pipeline.set_state`` with a state from another process count
(for an indexed source) therefore continues the epoch from what is left, split into
equal consecutive shares over the new processes
(:func:`~datarax.sharding.shares.elastic_share`): no record served twice, none lost
(except fewer than M at the very end, the usual tail rule). Such an epoch's share is a
few runs of positions; a batch spanning two runs is gathered by one compiled step
(:func:`pieces_step`). The next epoch uses the plain block layout again. A state taken
during an elastic epoch carries its history (``"elastic"``) so it restores exactly on
any count again.

Random-access host sources (:class:`~datarax.sources.random_access.RandomAccessSource`)
serve such a share through their reader's order (``use_share``). Streams restore only on
the process count that saved them: they read in order, so what is left cannot be re-split.

Example:
    >>> import numpy as np
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> def build(index, count):
    ...     src = MemorySource(MemorySourceConfig(), {"x": np.arange(12, dtype=np.int32)})
    ...     return Pipeline(source=src, batch_size=2, shard_index=index, shard_count=count)
    >>> old = build(0, 2)
    >>> first = next(iter(old))["x"].tolist()  # shard 1 of 2 served [6, 7] at the same step
    >>> new = [build(j, 4) for j in range(4)]
    >>> for p in new:
    ...     p.set_state(old.get_state())
    >>> first, [[b["x"].tolist() for b in p] for p in new]
    ([0, 1], [[[2, 3]], [[4, 5]], [[8, 9]], [[10, 11]]])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from datarax.core.data_source import skipping_setting
from datarax.core.reading import Reading
from datarax.core.errors import StateError
from datarax.core.keys import for_stages, step_key
from datarax.core.stages import apply_stages
from datarax.core.compiled_store import stored_jit
from datarax.core.step_cache import cached
from datarax.sharding.shares import Share, elastic_share, share_size, take
from datarax.typing import Batch


@dataclass(frozen=True)
class ElasticEpoch:
    """The share this process serves of epoch ``epoch`` after an elastic restore."""

    epoch: int
    history: tuple[tuple[int, int], ...]
    share: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        """Positions in this share."""
        return share_size(list(self.share))

    def pieces(self, start: int, count: int) -> Share:
        """Epoch positions of share records ``[start, start + count)``, as runs."""
        return take(list(self.share), start, count)

    def describe(self) -> dict[str, Any]:
        """What a state saves: the epoch and its history (JSON-able)."""
        return {"epoch": self.epoch, "history": [list(h) for h in self.history]}


def _shard_of(state: dict[str, Any]) -> tuple[int, int] | None:
    shard = state.get("settings", {}).get("shard") if isinstance(state.get("settings"), dict) else None
    if isinstance(shard, list) and len(shard) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in shard
    ) and 0 <= shard[0] < shard[1]:
        return shard[0], shard[1]
    return None


def _history(state: dict[str, Any], where: str) -> list[tuple[int, int]]:
    """The earlier runs of the state's epoch (its ``"elastic"`` entry), checked."""
    elastic = state.get("elastic")
    if elastic is None:
        return []
    bad = StateError(
        f"{where}: state 'elastic' must be {{'epoch': int, 'history': [[count, position], "
        f"...]}} as get_state() wrote it, got {elastic!r}; the state was tampered with.",
        field="elastic",
    )
    if not isinstance(elastic, dict) or elastic.get("epoch") != state.get("epoch"):
        raise bad
    history = elastic.get("history")
    if not isinstance(history, list) or not history:
        raise bad
    out = []
    for step in history:
        if not (isinstance(step, list) and len(step) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in step
        ) and step[0] >= 1):
            raise bad
        out.append((step[0], step[1]))
    return out


def own_share_state(source: Any, state: Any, reading: Reading, *, filtered: bool = False) -> Any:
    """``state`` as this process's own when another process of the same count saved it.

    Every process of a run saves at the same step, so every share stands at the same
    position: a state of shard ``j`` of ``count`` says where shard ``i`` stands too (a
    state written by process 0 only, restored by every process). Anything else is
    returned unchanged.

    Raises:
        StateError: shares that stand at different positions after the same steps
            (a ``filtered`` pipeline, a source that skips bad records), or a source
            whose position is its share's own (a stream, a host source without
            ``use_share``).
    """
    saved = _shard_of(state) if isinstance(state, dict) else None
    index, count = source.shard.index, source.shard.count
    if saved is None or saved[1] != count or saved[0] == index or "elastic" in state:
        return state
    where = (f"Pipeline over {type(source).__name__} (shard {index} of {count}) was given "
             f"the state of shard {saved[0]} of {count}")
    if filtered:
        raise StateError(
            f"{where}, and it has a FilterOperator: each process's position counts the "
            "records it read to fill its batches, so another process's state does not say "
            "where this one stands. Save and restore each process's own state (e.g. a "
            "JSON file named by jax.process_index()).",
            field="shard",
        )
    skipping = skipping_setting(source)
    if skipping:
        raise StateError(
            f"{where}; its source skips bad records ({skipping}='skip'), so each "
            "process's position counts the records it skipped and another process's "
            "state does not say where this one stands. Save and restore each process's "
            "own state (e.g. a JSON file named by jax.process_index()).",
            field="shard",
        )
    if not reading.reshares:
        raise StateError(
            f"{where}; a {reading.kind_name} source's position is its own share's, so "
            "restore each process's own state (e.g. a JSON file named by "
            "jax.process_index()). Only indexed and random-access sources take another "
            "process's state.",
            field="shard",
        )
    return dict(state, settings=dict(state["settings"], shard=[index, count]))


def elastic_restore(
    source: Any, state: Any, reading: Reading, check: Callable[[dict[str, Any]], None]
) -> ElasticEpoch | None:
    """The elastic epoch ``state`` restores ``source`` into, or None for a plain restore.

    A state is elastic when it was saved with another process count than this
    source's shard, or during an elastic epoch. Everything else it says must match, as
    for any restore: ``check`` refuses the state with this shard (at position 0).

    Raises:
        StateError: a stream, a tampered history, a position past the saved share, or
            what ``check`` refuses.
    """
    if not isinstance(state, dict):
        return None
    saved = _shard_of(state)
    index, count = source.shard.index, source.shard.count
    if saved is None or ("elastic" not in state and saved[1] == count):
        return None
    where = f"Pipeline over {type(source).__name__}"
    saved_settings = state.get("settings")
    if source.shard.padded or (
        isinstance(saved_settings, dict) and saved_settings.get("padded_shards")
    ):
        raise StateError(
            f"{where}: this state was saved by {saved[1]} process(es) and this pipeline "
            f"runs as shard {index} of {count}, with pad_remainder=True (shares rounded "
            f"up to whole padding slots), which restores only on {saved[1]} processes.",
            field="shard",
        )
    skipping = skipping_setting(source)
    if skipping:
        raise StateError(
            f"{where}: this state was saved by {saved[1]} process(es) and this pipeline "
            f"runs as shard {index} of {count}, over a source that skips bad records "
            f"({skipping}='skip'): each process's position counts the records it "
            "skipped, so the shares stood at different positions and what is left cannot "
            f"be re-split. Restore it on {saved[1]} processes.",
            field="shard",
        )
    if not reading.reshares:
        raise StateError(
            f"{where}: this state was saved by {saved[1]} process(es), this pipeline runs "
            f"as shard {index} of {count}. Only indexed and random-access sources restore "
            f"on another process count (a {reading.kind_name} source reads its records in "
            f"order, so it cannot re-split what is left); restore it on {saved[1]} "
            "processes.",
            field="shard",
        )
    history = _history(state, where)
    plain = {k: v for k, v in state.items() if k != "elastic"}
    plain["settings"] = dict(state["settings"], shard=[index, count])
    plain["position"] = 0  # the position is checked against the saved share below
    check(plain)
    n = len(source)  # type: ignore[arg-type]
    epoch, position = state["epoch"], state["position"]
    try:
        saved_share = (
            elastic_share(n, history, saved[1], saved[0]) if history
            else [(0, n // saved[1])]
        )
    except ValueError as err:
        raise StateError(f"{where}: state 'elastic' {err}", field="elastic") from err
    if position > share_size(saved_share):
        raise StateError(
            f"Pipeline state position={position} is past the end of the share it was "
            f"saved in ({share_size(saved_share)} records).",
            field="position",
        )
    history.append((saved[1], position))
    share = elastic_share(n, history, count, index)
    return ElasticEpoch(epoch, tuple(history), tuple(share))


def pieces_step(graphdef: Any, sizes: tuple[int, ...]) -> Any:
    """Compiled ``(state, inputs, starts, epoch, key) -> batch`` gathering runs of
    ``sizes`` records at global positions ``starts`` into one batch, then every stage
    (the batch of an elastic share that spans two runs)."""

    def build() -> Callable[..., Batch]:
        def step(state: Any, inputs: Any, starts: Any, epoch: Any, key: Any) -> Batch:
            source, stages = nnx.merge(graphdef, state)
            stage_keys, key = for_stages(key), step_key(key)
            parts, indices = [], []
            with source.bind_step_inputs(inputs):
                for i, size in enumerate(sizes):
                    batch_key = jax.random.fold_in(key, starts[i])
                    part, idx = source.get_batch_and_indices_at(starts[i], size, batch_key)
                    parts.append(dict(part))
                    indices.append(idx)
            batch = jax.tree.map(lambda *v: jnp.concatenate(v), *parts)
            return apply_stages(stages, batch, jnp.concatenate(indices), epoch, stage_keys)

        return stored_jit(step)

    return cached(("pieces", graphdef, sizes), build)


"""Elastic resume: a state saved by N processes restored on M (N != M) mid-epoch.

Every process saves at the same step, so every share stands at the same position: a
state of shard ``[index, count]`` tells exactly which positions were served. The rest of
the epoch is split into equal consecutive shares over the new processes (a re-split
:class:`~datarax.core.share.Share`): no record twice, none lost (but a tail of fewer than
M). A state taken in a re-split epoch carries its history (``"share"``). Streams restore
only on the count that saved them.

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
from typing import TYPE_CHECKING, Any

from datarax.core.data_source import skipping_setting
from datarax.core.errors import StateError
from datarax.core.share import Run, Share
from datarax.host.counts import count_words

if TYPE_CHECKING:
    from datarax.pipeline.plan import PassContext


def restore(
    context: PassContext,
    state: dict[str, Any],
    saved: Share,
    check: Callable[[dict[str, Any]], None],
) -> None:
    """Move the source of ``context`` to the start of its share of what is left of the
    epoch of ``state`` (saved in share ``saved``); ``check`` checks the rest of the state.

    Raises:
        StateError: a stream, a padded or skipping source, a tampered history, a
            position past the saved share, a short last batch that does not split over
            this process's devices, or what ``check`` refuses.
    """
    source, reading = context.source, context.reading
    index, count = source.shard.index, source.shard.count
    where = f"Pipeline over {type(source).__name__}"
    saved_on = count_words(saved.count, "process", "processes")
    if state["settings"].get("padded_shards"):
        raise StateError(
            f"{where}: this state was saved by {saved_on} with pad_remainder=True (shares "
            f"rounded up to whole padding slots), which restores only on {saved_on}; this "
            f"pipeline runs as shard {index} of {count}. Restore it on {saved_on} with "
            "pad_remainder=True.",
            field="shard",
        )
    if source.shard.padded:
        raise StateError(
            f"{where}: this state was saved by {saved_on} and this pipeline runs as shard "
            f"{index} of {count} with pad_remainder=True (shares rounded up to whole padding "
            "slots), which takes only a state saved on "
            f"{count_words(count, 'process', 'processes')} with pad_remainder=True. Restore it "
            "without pad_remainder (another process count re-splits the rest of the epoch), "
            f"or on {saved_on}.",
            field="shard",
        )
    refuse_other_share(context, f"{where}: this state was saved by {saved_on} and this "
                       f"pipeline runs as shard {index} of {count}",
                       f"Restore it on {saved_on}.")
    history = _history(state, where)
    nested = state.get("source")
    plain = {k: v for k, v in state.items() if k != "share"}
    plain["settings"] = dict(state["settings"], shard=[index, count])
    plain["position"] = 0  # the position is checked against the saved share below
    plain["source"] = dict(nested, current_index=0) if isinstance(nested, dict) else nested
    check(plain)
    n = len(source)  # type: ignore[arg-type]
    epoch, position = state["epoch"], state["position"]
    saved_size = Share(saved.index, saved.count, epoch=epoch, history=history).size(n)
    if position > saved_size:
        raise StateError(
            f"Pipeline state position={position} is past the end of the share it was "
            f"saved in ({count_words(saved_size, 'record')}).",
            field="position",
        )
    share = Share(index, count, epoch=epoch, history=(*history, (saved.count, position)))
    size = share.size(n)
    _check_placement(context, epoch, size)
    empty = not size
    context.session.resplit_share = None if empty else share
    if not reading.compiled:  # its reader serves the share
        source.use_share(None if empty else share)  # type: ignore[attr-defined]
    source.seek(epoch, (source.epoch_size() or 0) if empty else 0)


def refuse_other_share(context: PassContext, where: str, fix: str) -> None:
    """Refuse a state of another share where the source's position cannot say where this
    share stands (a skipping source, or one that cannot re-share)."""
    source, reading = context.source, context.reading
    skipping = skipping_setting(source)
    if skipping:
        raise StateError(
            f"{where}; its source skips bad records ({skipping}='skip'), so each process's "
            "position counts the records it skipped and another process's state does not "
            f"say where this one stands. {fix}",
            field="shard",
        )
    if not reading.reshares:
        raise StateError(
            f"{where}; a {reading.kind_name} source's position is its own share's (it reads "
            "its records in order): only indexed and random-access sources take another "
            f"process's state. {fix}",
            field="shard",
        )


def _history(state: dict[str, Any], where: str) -> tuple[Run, ...]:
    """The earlier runs of the state's epoch (its ``"share"`` entry), checked."""
    entry = state.get("share")
    if entry is None:
        return ()
    bad = StateError(
        f"{where}: state 'share' must be {{'epoch': int, 'history': [[count, position], "
        f"...]}} as get_state() wrote it, got {entry!r}; the state was tampered with.",
        field="share",
    )
    if not isinstance(entry, dict) or entry.get("epoch") != state.get("epoch"):
        raise bad
    history = entry.get("history")
    if not isinstance(history, list) or not history:
        raise bad
    for step in history:
        if not (isinstance(step, list) and len(step) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in step
        ) and step[0] >= 1):
            raise bad
    return tuple((count, position) for count, position in history)


def _check_placement(context: PassContext, epoch: int, size: int) -> None:
    """Refuse a re-split share whose short last batch would not split over the devices."""
    plan = context.plan
    short = size % plan.batch_size
    if plan.placement is None or plan.drop_remainder or not short:
        return
    split = plan.placement.local_split
    if short % split:
        shard = context.source.shard
        raise StateError(
            f"Pipeline state (an elastic restore) gives shard {shard.index} of {shard.count} "
            f"a share of {count_words(size, 'record')} of epoch {epoch}, whose last batch of "
            f"{count_words(short, 'record')} does not split over this process's {split} "
            "devices (sharding=); the state's drop_remainder=False keeps that batch. Restore "
            "it on another process count, or into a pipeline without sharding= to serve the "
            "rest of that epoch.",
            field="shard",
        )

"""Resume checks of the source conformance table: every restore path continues exactly."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from datarax.host.counts import count_words
from datarax.testing.resume import restore_level, state_of_level, to_host
from datarax.testing.source_row import Level, SourceRow, compare_row, run_epochs
from datarax.typing import Batch


def check_resume(
    row: SourceRow,
    level: Level,
    *,
    num_epochs: int = 2,
    points: Sequence[int] | None = None,
    stages: Callable[[], Sequence[Any]] = tuple,
    nnx_round_trip: Callable[[Any, Any, int], Any] | None = None,
) -> int:
    """Resume from a saved state at each of ``points`` (default: every batch boundary).

    ``level``: ``"iterator"``, ``"pipeline"``, ``"source"`` (``get_state()`` through JSON)
    or ``"nnx"`` (``nnx.state(pipeline)``, through ``nnx_round_trip(state, fresh, point)``
    when given, e.g. Orbax). At an epoch's end the state is taken both inside the ``for``
    and after it (docs/reliability.md, "Epoch ends").

    Returns:
        The number of batches compared (``num_epochs`` epochs and one more).

    Example:
        >>> import numpy as np
        >>> from datarax.pipeline import Pipeline
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> from datarax.testing import SourceRow
        >>> def make(shard_index=0, shard_count=1, stages=()):
        ...     source = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
        ...                           {"id": np.arange(7, dtype=np.int32)})
        ...     return Pipeline(source=source, stages=list(stages), batch_size=3,
        ...                     shard_index=shard_index, shard_count=shard_count)
        >>> row = SourceRow("memory", make, 7, lambda batch: np.asarray(batch["id"]).tolist())
        >>> check_resume(row, "pipeline")  # every boundary of 2 epochs, and one more epoch
        9
    """
    # one more epoch: a state saved at the end of the last one must continue there
    with row.built(stages=stages()) as reference:
        epochs = run_epochs(reference, num_epochs + 1)
    for epoch, batches in enumerate(epochs):
        if not batches:
            raise AssertionError(
                f"{row.name}: for loop {epoch} of the uninterrupted run gave no batch; "
                "every for loop over a pipeline is a full epoch"
            )
    expected = [batch for batches in epochs for batch in batches]
    ends = np.cumsum([len(b) for b in epochs]).tolist()
    total = len(expected)
    last = total - len(epochs[-1])  # the end of epoch num_epochs - 1
    pending = sorted(set(range(last + 1) if points is None else (int(p) for p in points)))
    pending = [p for p in pending if 0 <= p <= last]

    got: list[Batch] = []
    pipeline = row.make(stages=stages())
    iterator: Any = None
    restored: str | None = None  # what the latest restore was
    empty_epoch: int | None = None  # the epoch whose restored loop must be empty

    def save_and_restore(point: int, said: tuple[int, int | None], what: str) -> Any:
        nonlocal pipeline, restored
        state = state_of_level(level, pipeline, iterator)
        _check_said(row, level, state, said, f"the {level} state {what}")
        if level == "nnx" and nnx_round_trip is None:
            state = _copy_tree(state)
        if iterator is not None:
            iterator.close()
        row.close(pipeline)
        pipeline = row.make(stages=stages())
        if level == "nnx" and nnx_round_trip is not None:
            state = nnx_round_trip(state, pipeline, point)
        restored = f"the {level} state {what}"
        fresh = restore_level(level, pipeline, state)
        _check_said(row, "pipeline", pipeline, said, f"the pipeline restored from {restored}")
        return fresh

    try:
        while len(got) < total:
            if iterator is None:
                iterator = iter(pipeline)
                loop_start = len(got)
            if pending and pending[0] == len(got) and empty_epoch is None:
                point = pending.pop(0)
                if point in ends and len(got) > loop_start:  # the open pass's end
                    epoch = ends.index(point)
                    iterator = save_and_restore(
                        point, (epoch, None), f"taken after epoch {epoch}'s last batch"
                    )
                    empty_epoch = epoch
                else:
                    iterator = save_and_restore(point, _epoch_at(ends, point), f"at batch {point}")
                loop_start = len(got)
                continue
            batch = next(iterator, None)
            if batch is None:  # the for loop ended
                if empty_epoch is not None:
                    if len(got) != loop_start:
                        raise AssertionError(
                            f"{row.name}: the loop after restoring {restored} gave "
                            f"{count_words(len(got) - loop_start, 'batch', 'batches')}; a "
                            "state taken inside the "
                            "for after an epoch's last batch restores to an empty pass"
                        )
                    epoch, empty_epoch = empty_epoch + 1, None
                    iterator = save_and_restore(
                        len(got), (epoch, 0), f"taken after epoch {epoch - 1}'s loop ended"
                    )
                    loop_start = len(got)
                    continue
                _check_loop_end(row, len(got), loop_start, set(ends), restored)
                iterator.close()
                iterator = None
                continue
            where = f"batch {len(got)}"
            if restored is not None:
                where += f" (after restoring {restored})"
            if empty_epoch is not None:
                raise AssertionError(
                    f"{row.name}: {where} was served by the loop that must be empty (a "
                    f"state taken after epoch {empty_epoch}'s last batch has nothing left)"
                )
            if len(got) >= total:
                raise AssertionError(f"{row.name}: resumed run hands out more than {total} batches")
            if len(got) in ends and len(got) != loop_start:
                raise AssertionError(
                    f"{row.name}: a for loop went on past the end of an epoch at {where}"
                )
            compare_row(row, where, expected[len(got)], to_host(batch))
            got.append(to_host(batch))
    finally:
        if iterator is not None:
            iterator.close()
        row.close(pipeline)
    return total


def _epoch_at(ends: list[int], point: int) -> tuple[int, int | None]:
    """``(epoch, position or None)`` a state taken at batch ``point`` says."""
    if point == 0:
        return 0, 0
    return sum(1 for end in ends if end <= point), None


def _check_said(
    row: SourceRow, level: str, state: Any, said: tuple[int, int | None], what: str
) -> None:
    """Raise unless ``state`` (a JSON state of ``level``, or a pipeline) says ``said``."""
    if level in ("iterator", "pipeline") and isinstance(state, dict):
        where = state["epoch"], state["position"]
    elif level == "source" and {"current_epoch", "current_index"} <= set(state):
        where = state["current_epoch"], state["current_index"]
    elif level == "pipeline":  # a pipeline object
        where = state.epoch, state.position
    else:
        return  # an nnx state: checked on the pipeline it restores
    epoch, position = said
    if where[0] != epoch or (position is not None and where[1] != position):
        raise AssertionError(
            f"{row.name}: {what} says epoch {where[0]} at position {where[1]}, expected "
            f"epoch {epoch}" + ("" if position is None else f" at position {position}")
        )


def check_restore_live(
    row: SourceRow, level: Level = "source", stages: Callable[[], Sequence[Any]] = tuple
) -> None:
    """Restoring the source under a live iterator (batches read ahead) makes it continue
    from the restored position, losing nothing. ``level``: ``"source"`` or ``"nnx"``."""

    def save(pipeline: Any) -> Any:
        state = state_of_level(level, pipeline, None)
        return _copy_tree(state) if level == "nnx" else state

    with row.built(stages=stages()) as reference:
        expected = run_epochs(reference, 1)[0]
    if len(expected) < 3:
        raise AssertionError(f"{row.name}: the table's epochs need 3 batches, got {len(expected)}")
    with row.built(stages=stages()) as pipeline:
        iterator = iter(pipeline)
        got = [to_host(next(iterator))]
        state = save(pipeline)
        after = [to_host(b) for b in (next(iterator), next(iterator))]
        restore_level(level, pipeline, state)
        for k, (first, again) in enumerate(zip(after, (next(iterator), next(iterator)))):
            compare_row(row, f"batch {1 + k}, again after the {level} restore", first, to_host(again))
        restore_level(level, pipeline, save(pipeline))  # where it stands
        got += after + [to_host(b) for b in iterator]
        iterator.close()
    if len(got) != len(expected):
        raise AssertionError(
            f"{row.name}: the epoch restored in place gave "
            f"{count_words(len(got), 'batch', 'batches')}, the "
            f"uninterrupted one {len(expected)}"
        )
    for k, (want, have) in enumerate(zip(expected, got)):
        compare_row(row, f"batch {k} of the epoch restored in place", want, have)


def check_direct_read_live(row: SourceRow, passes: int = 6) -> None:
    """A direct ``source.get_batch_with_indices`` between two batches of a live iterator
    serves the next records, and the iterator goes on after them (host and stream sources).

    With a read-ahead worker, ``passes`` passes race the worker for the reader."""
    with row.built() as reference:
        if reference.plan.reading.compiled:
            raise ValueError(f"{row.name}: check_direct_read_live is for host and stream sources")
        expected = [i for b in run_epochs(reference, 1)[0] for i in row.record_ids(b)]
    with row.built() as pipeline:
        start = state_of_level("pipeline", pipeline, None)
        races = pipeline.plan.reading.read_ahead and pipeline.plan.prefetch > 0
        for trial in range(passes if races else 1):
            restore_level("pipeline", pipeline, start)
            iterator = iter(pipeline)
            first = list(row.record_ids(to_host(next(iterator))))
            if trial == 0:
                time.sleep(0.05)  # a read-ahead worker reads on meanwhile
            batch, _ = pipeline.source.get_batch_with_indices(pipeline.batch_size + 1)
            direct = list(row.record_ids(to_host(batch)))
            rest = [i for b in iterator for i in row.record_ids(to_host(b))]
            iterator.close()
            if first + direct + rest != expected:
                raise AssertionError(
                    f"{row.name}: with a direct read after the first batch (pass {trial} of "
                    f"{passes}) the epoch served {first} + {direct} (direct) + {rest}; "
                    f"uninterrupted: {expected}"
                )


def key_points(row: SourceRow, batch_size: int) -> list[int]:
    """Boundaries worth a costly check: 0, mid and end of epochs 0 and 1."""
    per_epoch = -(-row.num_records // batch_size)
    return sorted({0, min(2, per_epoch - 1), per_epoch, per_epoch + 1, 2 * per_epoch})


def _check_loop_end(
    row: SourceRow, at: int, loop_start: int, ends: set[int], restored: str | None
) -> None:
    if at == loop_start:
        raise AssertionError(
            f"{row.name}: a for loop after batch {at} gave no batch (an empty pass)"
            + (f"; after restoring {restored}" if restored is not None else "")
            + "; every for loop over a pipeline is a full epoch, or empty right after "
            "restoring a state taken inside the for after an epoch's last batch"
        )
    if at not in ends:
        raise AssertionError(
            f"{row.name}: a for loop ended after batch {at}, inside an epoch (epochs end "
            f"after batches {sorted(ends)})"
            + (f"; after restoring {restored}" if restored is not None else "")
        )


def _copy_tree(state: Any) -> Any:
    """``state`` with every array leaf copied."""
    return jax.tree.map(lambda x: x.copy() if hasattr(x, "copy") else x, state)


def orbax_round_trip(directory: Any) -> Callable[[Any, Any, int], Any]:
    """``nnx_round_trip`` for :func:`check_resume` through an Orbax checkpoint in ``directory``."""
    import orbax.checkpoint as ocp
    from flax import nnx

    saves = iter(range(1 << 30))  # a point's state may be saved twice (an epoch's end)

    def round_trip(state: Any, fresh: Any, point: int) -> Any:
        path = (directory / f"point_{point}_{next(saves)}").absolute()
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(path, state)
            checkpointer.wait_until_finished()
            return checkpointer.restore(path, nnx.state(fresh))

    return round_trip


# --------------------------------------------------------------- nnx state
def check_nnx_state_small(row: SourceRow, batches: int = 2) -> None:
    """``nnx.state(pipeline)`` holds array leaves only, none as large as the dataset
    (unless ``row.data_in_state``)."""
    from flax import nnx

    with row.built() as pipeline:
        iterator = iter(pipeline)
        for step in range(batches):
            if next(iterator, None) is None:
                raise AssertionError(f"{row.name}: the first epoch ended after "
                                     f"{count_words(step, 'batch', 'batches')}")
        state = nnx.state(pipeline)
        for path, leaf in jax.tree_util.tree_leaves_with_path(state):
            name = jax.tree_util.keystr(path)
            if not isinstance(leaf, (np.ndarray, jax.Array)):
                raise AssertionError(
                    f"{row.name}: nnx.state(pipeline) leaf {name} is {type(leaf).__name__} "
                    f"{leaf!r}, not an array; Orbax cannot restore it"
                )
            if np.size(leaf) >= row.num_records and not row.data_in_state:
                raise AssertionError(
                    f"{row.name}: nnx.state(pipeline) leaf {name} holds {np.size(leaf)} "
                    f"values, as many as the dataset ({count_words(row.num_records, 'record')}); "
                    "data is "
                    "not state"
                )
        iterator.close()

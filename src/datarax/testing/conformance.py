"""The source conformance checks: one table of sources, every row through every check.

A source joins the table by describing how to build a pipeline over a small dataset
(a :class:`SourceRow`); each check below is a function of a row that raises
``AssertionError`` naming what broke. The checks follow the sources contract:

* resume exactly at *every* batch boundary (0 .. last, across epochs) from the
  iterator's state, the pipeline's state, the *source's* state (seed 000,
  "Checkpointing") and ``nnx.state(pipeline)``; a state taken at an epoch's end
  continues with the next epoch, never with an empty pass;
* ``nnx.state(pipeline)`` holds array leaves only, none as large as the dataset;
* several ``for batch in pipeline`` loops in a row are epochs serving every record
  exactly once (a new order each epoch when the row shuffles);
* ``shard_count`` shares are disjoint, equally long and within the dataset;
* every batch matches ``element_spec()``;
* closing the iterator and the source gives back every thread they started.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> def make(shard_index=0, shard_count=1, stages=()):
    ...     src = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
    ...                        {"x": np.arange(9, dtype=np.int32)})
    ...     return Pipeline(source=src, stages=list(stages), batch_size=4, rngs=nnx.Rngs(0),
    ...                     shard_index=shard_index, shard_count=shard_count)
    >>> row = SourceRow("memory", make, 9, lambda b: b["x"].tolist(), shuffled=True)
    >>> check_epochs(row, num_epochs=2)
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax
import numpy as np

from datarax.core.spec import TextSpec
from datarax.testing.resume import Batch, compare_fields, json_round_trip, to_host

Level = Literal["iterator", "pipeline", "source", "nnx"]


@dataclass(frozen=True)
class SourceRow:
    """One row of the conformance table.

    Attributes:
        name: the row's test id.
        make: ``make(shard_index=0, shard_count=1, stages=())`` builds a new source and
            a Pipeline over it from scratch (``pipeline.source`` is the source);
            nothing may be shared between calls.
        num_records: records in the dataset.
        record_ids: the identity of each record of a host batch (see
            :func:`~datarax.testing.to_host`), as ints in ``range(num_records)``.
        shuffled: the row shuffles, so consecutive epochs come in different orders.
        kind: the ``SourceKind`` member name the source declares (``"INDEXED"``,
            ``"HOST"`` or ``"STREAM"``); None: not checked.
        data_in_state: the source's author keeps its records in ``nnx.data`` (as seed
            002's CSV example does), so ``nnx.state`` holds them by the author's choice;
            :func:`check_nnx_state_small` then checks only that leaves are arrays.
    """

    name: str
    make: Callable[..., Any]
    num_records: int
    record_ids: Callable[[Batch], Sequence[int]]
    shuffled: bool = False
    kind: str | None = None
    data_in_state: bool = False

    def close(self, pipeline: Any) -> None:
        """Release what ``pipeline``'s source holds."""
        close = getattr(pipeline.source, "close", None)
        if close is not None:
            close()


# ------------------------------------------------------------------ epochs
def run_epochs(pipeline: Any, num_epochs: int) -> list[list[Batch]]:
    """The host batches of ``num_epochs`` ``for batch in pipeline`` loops in a row."""
    return [[to_host(batch) for batch in pipeline] for _ in range(num_epochs)]


def _ids(row: SourceRow, batches: Sequence[Batch]) -> list[int]:
    return [int(i) for batch in batches for i in row.record_ids(batch)]


def check_epochs(row: SourceRow, num_epochs: int = 3) -> None:
    """Each of ``num_epochs`` loops in a row serves every record exactly once."""
    pipeline = row.make()
    try:
        epochs = run_epochs(pipeline, num_epochs)
    finally:
        row.close(pipeline)
    everything = list(range(row.num_records))
    orders = []
    for epoch, batches in enumerate(epochs):
        ids = _ids(row, batches)
        if sorted(ids) != everything:
            missing = sorted(set(everything) - set(ids))
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise AssertionError(
                f"{row.name}: epoch {epoch} served {len(ids)} records, expected each of "
                f"{row.num_records} once (missing {missing}, repeated {repeated})"
            )
        orders.append(ids)
    if row.shuffled:
        for epoch in range(1, num_epochs):
            if orders[epoch] == orders[epoch - 1]:
                raise AssertionError(
                    f"{row.name}: epochs {epoch - 1} and {epoch} came in the same order "
                    f"{orders[epoch]}; a shuffled source reshuffles every epoch"
                )


# ------------------------------------------------------------------ resume
def _compare(row: SourceRow, where: str, expected: Batch, got: Batch) -> None:
    compare_fields(f"{row.name}, {where}", expected, got)


def _take_state(level: Level, pipeline: Any, iterator: Any) -> Any:
    if level == "iterator":
        return json_round_trip(iterator.get_state(), "PipelineIterator.get_state()")
    if level == "pipeline":
        return json_round_trip(pipeline.get_state(), "Pipeline.get_state()")
    if level == "source":
        return json_round_trip(pipeline.source.get_state(), "source.get_state()")
    from flax import nnx

    return nnx.state(pipeline)


def _restore(level: Level, fresh: Any, state: Any) -> Any:
    """Restore ``state`` into ``fresh``; the iterator to continue with (None: iter())."""
    if level == "iterator":
        iterator = iter(fresh)
        iterator.set_state(state)
        return iterator
    if level == "pipeline":
        fresh.set_state(state)
    elif level == "source":
        fresh.source.set_state(state)
    else:
        from flax import nnx

        nnx.update(fresh, state)
    return None


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

    The reference run iterates ``num_epochs`` ``for`` loops. The interrupted run, at
    each point (batches handed out so far, counted across epochs), saves the state of
    ``level``, closes and drops everything, builds a new pipeline with ``row.make``,
    restores and carries on. ``"iterator"``: ``iterator.get_state()`` into
    ``iter(fresh).set_state``; ``"pipeline"``: ``pipeline.get_state()`` (at an epoch's
    end, after the loop ended) into ``fresh.set_state``; ``"source"``:
    ``pipeline.source.get_state()`` into ``fresh.source.set_state``; ``"nnx"``:
    ``nnx.state(pipeline)`` (through ``nnx_round_trip(state, fresh, point)`` when
    given, e.g. Orbax) into ``nnx.update(fresh, ...)``. JSON states go through JSON
    text. After a restore, the next ``iter(pipeline)`` (or the restored iterator) must
    continue exactly: same batches, and every ``for`` loop ends exactly where an
    epoch of the reference ends. A state taken at an epoch's end continues with the
    next epoch.

    Returns:
        The number of batches compared (``num_epochs`` epochs and one more).
    """
    reference = row.make(stages=stages())
    try:  # one more epoch: a state saved at the end of the last one must continue there
        epochs = run_epochs(reference, num_epochs + 1)
    finally:
        row.close(reference)
    for epoch, batches in enumerate(epochs):
        if not batches:
            raise AssertionError(
                f"{row.name}: for loop {epoch} of the uninterrupted run gave no batch; "
                "every for loop over a pipeline is a full epoch"
            )
    expected = [batch for batches in epochs for batch in batches]
    ends = set(np.cumsum([len(b) for b in epochs]).tolist())
    total = len(expected)
    last = total - len(epochs[-1])  # the end of epoch num_epochs - 1
    pending = sorted(set(range(last + 1) if points is None else (int(p) for p in points)))
    pending = [p for p in pending if 0 <= p <= last]

    got: list[Batch] = []
    pipeline = row.make(stages=stages())
    iterator: Any = None
    restored_from: int | None = None  # the point of the latest restore
    try:
        while len(got) < total:
            if iterator is None:
                iterator = iter(pipeline)
                loop_start = len(got)
            if pending and pending[0] == len(got):
                point = pending.pop(0)
                if level == "pipeline" and point in ends and point > 0 and point != loop_start:
                    _expect_loop_end(row, iterator, point, restored_from)
                    iterator = None  # the state is taken between the two epochs
                state = _take_state(level, pipeline, iterator)
                if level == "nnx" and nnx_round_trip is None:
                    state = _copy_tree(state)
                if iterator is not None:
                    iterator.close()
                row.close(pipeline)
                pipeline = row.make(stages=stages())
                if level == "nnx" and nnx_round_trip is not None:
                    state = nnx_round_trip(state, pipeline, point)
                iterator = _restore(level, pipeline, state)
                loop_start = len(got)
                restored_from = point
                continue
            batch = next(iterator, None)
            if batch is None:  # the for loop ended
                _check_loop_end(row, len(got), loop_start, ends, restored_from)
                iterator.close()
                iterator = None
                continue
            where = f"batch {len(got)}"
            if restored_from is not None:
                where += f" (restored at batch {restored_from} from the {level} state)"
            if len(got) >= total:
                raise AssertionError(f"{row.name}: resumed run hands out more than {total} batches")
            if len(got) in ends and len(got) != loop_start:
                raise AssertionError(
                    f"{row.name}: a for loop went on past the end of an epoch at {where}"
                )
            _compare(row, where, expected[len(got)], to_host(batch))
            got.append(to_host(batch))
    finally:
        if iterator is not None:
            iterator.close()
        row.close(pipeline)
    return total


def check_restore_live(
    row: SourceRow, level: Level = "source", stages: Callable[[], Sequence[Any]] = tuple
) -> None:
    """Restoring the source a live iterator is reading (its next batches already read
    or dispatched ahead) makes that iterator continue from the restored position: the
    batches after the state come again, and restoring the position it stands at loses
    nothing — the first epoch is the uninterrupted one. ``level``: ``"source"``
    (``source.get_state`` / ``set_state``) or ``"nnx"`` (``nnx.state`` /
    ``nnx.update`` of the pipeline)."""
    from flax import nnx

    def save(pipeline: Any) -> Any:
        if level == "nnx":
            return _copy_tree(nnx.state(pipeline))
        return json_round_trip(pipeline.source.get_state(), "source.get_state()")

    def restore(pipeline: Any, state: Any) -> None:
        if level == "nnx":
            nnx.update(pipeline, state)
        else:
            pipeline.source.set_state(state)

    reference = row.make(stages=stages())
    try:
        expected = run_epochs(reference, 1)[0]
    finally:
        row.close(reference)
    if len(expected) < 3:
        raise AssertionError(f"{row.name}: the table's epochs need 3 batches, got {len(expected)}")
    pipeline = row.make(stages=stages())
    try:
        iterator = iter(pipeline)
        got = [to_host(next(iterator))]
        state = save(pipeline)
        after = [to_host(b) for b in (next(iterator), next(iterator))]
        restore(pipeline, state)
        for k, (first, again) in enumerate(zip(after, (next(iterator), next(iterator)))):
            _compare(row, f"batch {1 + k}, again after the {level} restore", first, to_host(again))
        restore(pipeline, save(pipeline))  # where it stands
        got += after + [to_host(b) for b in iterator]
        iterator.close()
    finally:
        row.close(pipeline)
    if len(got) != len(expected):
        raise AssertionError(
            f"{row.name}: the epoch restored in place gave {len(got)} batches, the "
            f"uninterrupted one {len(expected)}"
        )
    for k, (want, have) in enumerate(zip(expected, got)):
        _compare(row, f"batch {k} of the epoch restored in place", want, have)


def key_points(row: SourceRow, batch_size: int) -> list[int]:
    """Boundaries worth a costly check: 0, mid-epoch 0, the end of epoch 0, mid-epoch 1,
    the end of epoch 1 (for ``num_epochs=2`` and ``batch_size`` records per batch)."""
    per_epoch = -(-row.num_records // batch_size)
    return sorted({0, min(2, per_epoch - 1), per_epoch, per_epoch + 1, 2 * per_epoch})


def _expect_loop_end(row: SourceRow, iterator: Any, point: int, restored: int | None) -> None:
    if next(iterator, None) is None:
        iterator.close()
        return
    raise AssertionError(
        f"{row.name}: the for loop gave a batch after batch {point}, the end of an epoch"
        + (f" (restored at batch {restored})" if restored is not None else "")
    )


def _check_loop_end(
    row: SourceRow, at: int, loop_start: int, ends: set[int], restored: int | None
) -> None:
    if at == loop_start:
        raise AssertionError(
            f"{row.name}: a for loop after batch {at} gave no batch (an empty pass)"
            + (f"; the state was restored at batch {restored}" if restored is not None else "")
            + "; a state taken at an epoch's end must continue with the next epoch"
        )
    if at not in ends:
        raise AssertionError(
            f"{row.name}: a for loop ended after batch {at}, inside an epoch (epochs end "
            f"after batches {sorted(ends)})"
            + (f"; the state was restored at batch {restored}" if restored is not None else "")
        )


def _copy_tree(state: Any) -> Any:
    """``state`` with every array leaf copied (the saved values cannot change later)."""
    return jax.tree.map(lambda x: x.copy() if hasattr(x, "copy") else x, state)


def orbax_round_trip(directory: Any) -> Callable[[Any, Any, int], Any]:
    """``nnx_round_trip`` for :func:`check_resume`: Orbax StandardSave / StandardRestore
    of ``nnx.state(pipeline)`` in ``directory``, restored against the fresh pipeline."""
    import orbax.checkpoint as ocp
    from flax import nnx

    def round_trip(state: Any, fresh: Any, point: int) -> Any:
        path = (directory / f"point_{point}").absolute()
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

    pipeline = row.make()
    try:
        iterator = iter(pipeline)
        for step in range(batches):
            if next(iterator, None) is None:
                raise AssertionError(f"{row.name}: the first epoch ended after {step} batches")
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
                    f"values, as many as the dataset ({row.num_records} records); data is "
                    "not state"
                )
        iterator.close()
    finally:
        row.close(pipeline)


# ------------------------------------------------------------------- shards
def check_shards(row: SourceRow, count: int = 3) -> None:
    """Shares ``0 .. count-1`` of an epoch: disjoint, equally long (``n // count``
    records, the documented remainder left out), each record at most once."""
    shares = []
    for index in range(count):
        pipeline = row.make(shard_index=index, shard_count=count)
        try:
            shares.append(_ids(row, run_epochs(pipeline, 1)[0]))
        finally:
            row.close(pipeline)
    share = row.num_records // count
    seen: dict[int, int] = {}
    for index, ids in enumerate(shares):
        if len(ids) != share:
            raise AssertionError(
                f"{row.name}: shard {index} of {count} served {len(ids)} records, expected "
                f"{share} (shares {[len(s) for s in shares]})"
            )
        for i in ids:
            if not 0 <= i < row.num_records:
                raise AssertionError(
                    f"{row.name}: shard {index} served record {i}, not in the dataset"
                )
            if i in seen:
                raise AssertionError(
                    f"{row.name}: record {i} served by shard {seen[i]} and shard {index}"
                    if seen[i] != index
                    else f"{row.name}: shard {index} served record {i} twice"
                )
            seen[i] = index


# --------------------------------------------------------------------- spec
def check_spec(row: SourceRow) -> None:
    """Every batch of an epoch has exactly the fields, per-record shapes and dtypes of
    ``source.element_spec()``."""
    pipeline = row.make()
    try:
        spec = pipeline.source.element_spec()
        step = -1
        for step, batch in enumerate(pipeline):
            where = f"{row.name}: batch {step}"
            if sorted(batch) != sorted(spec):
                raise AssertionError(
                    f"{where} has fields {sorted(batch)}, element_spec() {sorted(spec)}"
                )
            _check_fields(where, spec, batch)
        if step < 0:
            raise AssertionError(f"{row.name}: the first epoch gave no batch to check")
    finally:
        row.close(pipeline)


def _check_fields(where: str, spec: Any, batch: Batch, prefix: str = "") -> None:
    """Every field of ``batch`` as ``spec`` declares it, nested fields by path."""
    for key, field in spec.items():
        value, name = batch[key], f"{prefix}{key}"
        if isinstance(field, dict):
            if not isinstance(value, dict) or sorted(value) != sorted(field):
                raise AssertionError(f"{where}, field '{name}': {value!r} is not {field!r}")
            _check_fields(where, field, value, prefix=f"{name}/")
            continue
        if isinstance(field, TextSpec):
            values = list(value)
            if not all(isinstance(v, str) for v in np.ravel(np.asarray(values, object))):
                raise AssertionError(f"{where}, field '{name}': text declared, got {values!r}")
            continue
        array = np.asarray(value)
        if array.shape[1:] != tuple(field.shape) or array.dtype != np.dtype(field.dtype):
            raise AssertionError(
                f"{where}, field '{name}': records are {array.dtype}{array.shape[1:]}, "
                f"element_spec() says {np.dtype(field.dtype)}{tuple(field.shape)}"
            )


def check_kind(row: SourceRow) -> None:
    """The source declares the kind the row expects (``source.kind``)."""
    from datarax.core.data_source import SourceKind

    pipeline = row.make()
    try:
        kind = pipeline.source.kind
        if kind is not SourceKind[row.kind]:
            raise AssertionError(
                f"{row.name}: source.kind is {kind!r}, expected SourceKind.{row.kind}"
            )
    finally:
        row.close(pipeline)


# ------------------------------------------------------------------ threads
def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before]


def _settle(before: set[threading.Thread], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while _new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.01)


def check_close_releases_threads(row: SourceRow) -> None:
    """Breaking out mid-epoch, then closing the iterator and the source, leaves no
    thread behind (a first round lets libraries start the threads they keep)."""

    def one_round() -> None:
        pipeline = row.make()
        iterator = iter(pipeline)
        if next(iterator, None) is None:
            raise AssertionError(f"{row.name}: the first epoch gave no batch")
        iterator.close()
        row.close(pipeline)

    one_round()
    gc.collect()
    before = set(threading.enumerate())
    for _ in range(2):
        one_round()
    gc.collect()
    _settle(before)
    left = _new_threads(before)
    if left:
        names = sorted(t.name for t in left)
        raise AssertionError(
            f"{row.name}: {len(left)} thread(s) still alive after closing the iterator and the "
            f"source (left: {names})"
        )

"""``check_resume_exact``: prove a pipeline resumes exactly after checkpoint/restore.

An interrupted run (state through JSON, everything rebuilt, restored) must hand out the
same batches, bit for bit, as an uninterrupted one.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from datarax.core.batch import batch_length, head_on_host
from datarax.core.data_source import DataSourceModule
from datarax.core.spec import flatten_fields
from datarax.host.counts import count_words
from datarax.typing import Batch

Level = Literal["pipeline", "iterator"]


@dataclass(frozen=True)
class ResumeReport:
    """What :func:`check_resume_exact` compared.

    Attributes:
        num_batches: batches the uninterrupted run handed out over all epochs.
        num_records: records in those batches.
        batches_per_epoch: batches of each epoch in the uninterrupted run.
        interrupts: the interrupt points used (batches handed out before each restore).
        max_state_bytes: size of the largest JSON state saved.
    """

    num_batches: int
    num_records: int
    batches_per_epoch: tuple[int, ...]
    interrupts: tuple[int, ...]
    max_state_bytes: int


def to_host(batch: Batch) -> Batch:
    """A batch with every field on the host (text as lists of ``str``)."""
    return head_on_host(batch, batch_length(batch))


def iterate_epochs(pipeline: Any, num_epochs: int) -> Iterator[tuple[int, Any, Batch]]:
    """Yield ``(epoch, iterator, batch)`` until epoch ``num_epochs - 1`` has ended, one
    ``iter(pipeline)`` per epoch (a restored pipeline first finishes the saved one)."""
    while True:
        iterator = iter(pipeline)
        with iterator:
            if iterator.epoch >= num_epochs:
                return
            for batch in iterator:
                yield iterator.epoch, iterator, batch


def collect(pipeline: Any, num_epochs: int = 1) -> list[tuple[int, Batch]]:
    """Every ``(epoch, batch)`` of ``num_epochs`` epochs, fields as host arrays."""
    return [(epoch, to_host(batch)) for epoch, _, batch in iterate_epochs(pipeline, num_epochs)]


def json_round_trip(state: Any, what: str = "state") -> Any:
    """``state`` written to JSON text and read back; refuses anything JSON cannot hold."""
    try:
        text = json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise AssertionError(f"{what} is not JSON-able ({err}): {state!r}") from err
    restored = json.loads(text)
    if restored != state:
        raise AssertionError(
            f"{what} changes when written to JSON and read back (tuples or non-str dict "
            f"keys?): {state!r} became {restored!r}."
        )
    return restored


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return f"list of {len(value)}"
    return f"{value.dtype}{tuple(value.shape)}"


def compare_batches(expected: list[tuple[int, Batch]], got: list[tuple[int, Batch]]) -> None:
    """Raise ``AssertionError`` at the first batch, epoch or field that differs (nested
    fields named by path, ``meta/id``)."""
    for step, ((e_epoch, e_batch), (g_epoch, g_batch)) in enumerate(zip(expected, got)):
        where = f"batch {step} (epoch {e_epoch})"
        if e_epoch != g_epoch:
            raise AssertionError(f"{where}: resumed run is in epoch {g_epoch}")
        compare_fields(where, e_batch, g_batch)
    if len(expected) != len(got):
        raise AssertionError(
            f"resumed run handed out {count_words(len(got), 'batch', 'batches')}, the "
            "uninterrupted run "
            f"{len(expected)}"
        )


def compare_fields(where: str, e_batch: Batch, g_batch: Batch) -> None:
    """Raise ``AssertionError`` naming ``where`` and the first field that differs."""
    expected, got = flatten_fields(e_batch), flatten_fields(g_batch)
    if sorted(expected) != sorted(got):
        raise AssertionError(f"{where}: fields {sorted(got)}, expected {sorted(expected)}")
    for name, e_value in expected.items():
        g_value = got[name]
        if isinstance(e_value, list) or isinstance(g_value, list):
            same = list(e_value) == list(g_value)
        else:
            same = (
                e_value.shape == g_value.shape
                and e_value.dtype == g_value.dtype
                and np.array_equal(e_value, g_value, equal_nan=e_value.dtype.kind in "fc")
            )
        if not same:
            raise AssertionError(
                f"{where}, field '{name}': resumed run gave {_describe(g_value)} "
                f"{g_value!r}, uninterrupted run {_describe(e_value)} {e_value!r}"
            )


def state_of_level(level: str, pipeline: Any, iterator: Any) -> Any:
    """The state of ``level`` (``"iterator"``, ``"pipeline"``, ``"source"``: through JSON
    text; ``"nnx"``: ``nnx.state(pipeline)``)."""
    if level == "iterator":
        return json_round_trip(iterator.get_state(), "PipelineIterator.get_state()")
    if level == "pipeline":
        return json_round_trip(pipeline.get_state(), "Pipeline.get_state()")
    if level == "source":
        return json_round_trip(pipeline.source.get_state(), "source.get_state()")
    from flax import nnx

    return nnx.state(pipeline)


def restore_level(level: str, fresh: Any, state: Any) -> Any:
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


def _run_with_interrupts(
    make_pipeline: Callable[[], Any],
    num_epochs: int,
    points: list[int],
    level: Level,
    close: Callable[[Any], None] | None,
    expected: list[tuple[int, Batch]],
) -> tuple[list[tuple[int, Batch]], int]:
    """Run ``num_epochs`` epochs, rebuilding from a JSON state at each point; each batch
    is compared with ``expected`` as it comes, so the first difference is named before a
    later error it causes."""
    out: list[tuple[int, Batch]] = []
    largest = 0
    restores: list[int] = []  # the points restored at so far
    pending = list(points)
    pipeline = make_pipeline()
    iterator: Any = None  # the iterator being drained (a restored one at iterator level)

    def due() -> bool:
        return bool(pending) and pending[0] == len(out)

    while True:
        if iterator is None:
            iterator = iter(pipeline)
            if iterator.epoch >= num_epochs:
                iterator.close()
                break
        while not due():
            try:
                batch = next(iterator)
            except StopIteration:
                break
            out.append((iterator.epoch, to_host(batch)))
            _compare_one(len(out) - 1, expected, out[-1], restores)
        if not due():  # the epoch ended
            iterator.close()
            iterator = None
            continue
        while due():  # interrupt: save, discard everything, rebuild, restore
            restores.append(pending.pop(0))
            state = state_of_level(level, pipeline, iterator)
            largest = max(largest, len(json.dumps(state)))
            if iterator is not None:
                iterator.close()
            if close is not None:
                close(pipeline)
            pipeline = make_pipeline()
            iterator = restore_level(level, pipeline, state)
    if close is not None:
        close(pipeline)
    return out, largest


def _compare_one(
    step: int,
    expected: list[tuple[int, Batch]],
    got: tuple[int, Batch],
    restores: list[int],
    unit: str = "batch",
) -> None:
    """Raise unless ``unit`` ``step`` of the resumed run is the uninterrupted run's, saying
    which restore it followed (none: the pipeline is not deterministic)."""
    after = f" (after the restore at {unit} {restores[-1]})" if restores else ""
    if step >= len(expected):
        units = "batches" if unit == "batch" else f"{unit}s"
        raise AssertionError(f"{unit} {step}: resumed run hands out more than the "
                             f"uninterrupted run's {count_words(len(expected), unit, units)}"
                             + after)
    where = f"{unit} {step}" + (f" (epoch {expected[step][0]})" if unit == "batch" else "")
    try:
        if expected[step][0] != got[0]:
            raise AssertionError(f"{where}: resumed run is in epoch {got[0]}")
        compare_fields(where, expected[step][1], got[1])
    except AssertionError as err:
        text = str(err)
        if restores:
            text += f" (after the restore at {unit} {restores[-1]}; restores at {restores})"
        else:
            made = "pipelines make_pipeline()" if unit == "batch" else "sources make_source()"
            text += (f" - before any restore: two {made} built hand out different "
                     f"{unit}s, so it is not deterministic (unseeded randomness such as "
                     "Python's random, or state shared between calls)")
        raise AssertionError(text) from None


class _Fresh:
    """``make()``, refusing an object (or its ``.source``, where that is a source) an
    earlier call returned; a ``.source`` of data (a path, an array) may be shared."""

    def __init__(self, make: Callable[[], Any], name: str) -> None:
        self.make, self.name = make, name
        self.seen: list[Callable[[], Any]] = []  # weakly: the check frees what it drops

    def __call__(self) -> Any:
        built = self.make()
        child = getattr(built, "source", None)
        parts = [built] + ([child] if isinstance(child, DataSourceModule) else [])
        for part in parts:
            if any(part is seen() for seen in self.seen):
                what = (f"the same {type(part).__name__}" if part is built else
                        f"a {type(built).__name__} over the same {type(part).__name__} source")
                raise AssertionError(
                    f"{self.name}() returned {what} as an earlier call: build a new one "
                    "each call, sharing nothing, else the check restores into the object "
                    "it saved"
                )
        self.seen += [_weak(part) for part in parts]
        return built


def _weak(part: Any) -> Callable[[], Any]:
    """A weak reference to ``part`` (a dead one is None: never returned again), or
    ``part`` held where it takes none."""
    try:
        return weakref.ref(part)
    except TypeError:
        return lambda: part


def _interrupts(interrupt_points: Iterable[int]) -> list[int]:
    """The points as sorted ints; a negative one is refused."""
    points = sorted(int(p) for p in interrupt_points)
    if points and points[0] < 0:
        raise ValueError(f"interrupt_points must be >= 0 (numbers handed out before each "
                         f"restore), got {points[0]}")
    return points


def check_resume_exact(
    make_pipeline: Callable[[], Any],
    interrupt_points: Iterable[int],
    *,
    num_epochs: int = 1,
    level: Level = "pipeline",
    close: Callable[[Any], None] | None = None,
    max_state_bytes: int | None = 4096,
) -> ResumeReport:
    """Check that restoring from JSON state at ``interrupt_points`` changes nothing.

    Args:
        make_pipeline: builds a new, identically configured pipeline (new source,
            stages and ``rngs``) each time it is called; nothing may be shared (a
            pipeline or source an earlier call returned is refused).
        interrupt_points: numbers of batches handed out (counted over all epochs)
            after which to save, rebuild and restore; may repeat; ones past the end
            are ignored, negative ones refused (``ValueError``).
        num_epochs: epochs to run (each ``iter(pipeline)`` is one epoch).
        level: ``"pipeline"`` saves ``pipeline.get_state()`` and restores with
            ``pipeline.set_state``; ``"iterator"`` saves ``iterator.get_state()`` and
            restores into ``iter(new_pipeline).set_state``.
        close: called on each discarded pipeline (e.g. to close its source).
        max_state_bytes: fail when a JSON state is larger (``None``: no limit).

    Returns:
        A :class:`ResumeReport` of what was compared.

    Raises:
        AssertionError: naming the first batch, epoch and field that differ and the
            restore it followed (before any restore: the pipeline is not deterministic),
            or a state that is not JSON-able or too large.

    Example:
        >>> import numpy as np
        >>> from flax import nnx
        >>> from datarax.pipeline import Pipeline
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> def make():
        ...     src = MemorySource(MemorySourceConfig(shuffle=True),
        ...                        {"x": np.arange(10, dtype=np.int32)})
        ...     return Pipeline(source=src, stages=[], batch_size=3, rngs=nnx.Rngs(0))
        >>> check_resume_exact(make, [1, 4, 4], num_epochs=2).num_batches
        8
    """
    if level not in ("pipeline", "iterator"):
        raise ValueError(f"level must be 'pipeline' or 'iterator', got {level!r}")
    make_pipeline = _Fresh(make_pipeline, "make_pipeline")
    asked = _interrupts(interrupt_points)
    reference_pipeline = make_pipeline()
    expected = collect(reference_pipeline, num_epochs)
    if close is not None:
        close(reference_pipeline)
    total = len(expected)
    points = [p for p in asked if p <= total]
    got, largest = _run_with_interrupts(make_pipeline, num_epochs, points, level, close,
                                        expected)
    compare_batches(expected, got)
    if max_state_bytes is not None and largest > max_state_bytes:
        raise AssertionError(
            f"largest saved state is {largest} bytes of JSON, over max_state_bytes="
            f"{max_state_bytes}; state must stay O(1) in the dataset size."
        )
    per_epoch = [0] * num_epochs
    for epoch, _ in expected:
        per_epoch[epoch] += 1
    records = sum(batch_length(b) for _, b in expected)
    return ResumeReport(
        num_batches=total,
        num_records=records,
        batches_per_epoch=tuple(per_epoch),
        interrupts=tuple(points),
        max_state_bytes=largest,
    )


def check_source_resume_exact(
    make_source: Callable[[], Any],
    interrupt_points: Iterable[int],
    *,
    close: Callable[[Any], None] | None = None,
    max_records: int = 100_000,
) -> int:
    """:func:`check_resume_exact` for ``for record in source`` (as many passes as the
    source's ``num_epochs``), restoring ``source.get_state()`` through JSON into
    ``make_source()`` after each number of records in ``interrupt_points`` (points at or
    past the last record are ignored).

    Returns:
        The number of records compared.

    Example:
        >>> import numpy as np
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> make = lambda: MemorySource(MemorySourceConfig(shuffle=True, num_epochs=2),
        ...                             {"x": np.arange(5, dtype=np.int32)})
        >>> check_source_resume_exact(make, [2, 5, 5, 7])
        10
    """

    def record_of(item: Any) -> Batch:
        data = getattr(item, "data", item)
        return to_host({k: np.asarray(v)[None] for k, v in data.items()})

    make_source = _Fresh(make_source, "make_source")
    asked = _interrupts(interrupt_points)

    def run(points: list[int], expected: list[tuple[int, Batch]] | None) -> list[tuple[int, Batch]]:
        out: list[tuple[int, Batch]] = []
        restores: list[int] = []
        source = make_source()
        iterator = iter(source)
        while len(out) < max_records:
            while points and points[0] == len(out):
                restores.append(points.pop(0))
                state = json_round_trip(source.get_state(), "source.get_state()")
                if close is not None:
                    close(source)
                source = make_source()
                source.set_state(state)
                iterator = iter(source)
            try:
                item = next(iterator)
            except StopIteration:
                break
            out.append((0, record_of(item)))
            if expected is not None:
                _compare_one(len(out) - 1, expected, out[-1], restores, unit="record")
        if close is not None:
            close(source)
        return out

    expected = run([], None)
    # after the last record is no resume point: a finished source starts over
    got = run([p for p in asked if p < len(expected)], expected)
    if len(got) != len(expected):
        raise AssertionError(f"resumed run handed out {count_words(len(got), 'record')}, the "
                             f"uninterrupted run {len(expected)}")
    return len(expected)

"""The ``datarax.testing`` checks pass a correct custom source and catch subtly wrong
ones: ``check_resume_exact`` names the first batch that differs, the field, both values
and the restore it followed; ``check_close_releases_threads`` names a leaked thread."""

from __future__ import annotations

import random
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.pipeline import Pipeline
from datarax.sources import StreamSource
from datarax.testing import (
    SourceRow, check_close_releases_threads, check_resume_exact, check_source_resume_exact)

N = 10


class Rotating(StreamSource):
    """Records ``0..N-1`` rotated by three per pass; ``restart`` rewinds to the pass."""

    def __init__(self) -> None:
        super().__init__(StructuralConfig())
        self.next_value, self.pass_no = 0, 0

    def restart(self, epoch: int) -> None:
        self.next_value, self.pass_no = 0, epoch

    def get_batch(self, batch_size: int) -> dict[str, np.ndarray] | None:
        if self.next_value >= N:
            return None
        end = min(N, self.next_value + batch_size)
        ids = [(i + 3 * self.pass_no) % N for i in range(self.next_value, end)]
        self.next_value = end
        return {"id": np.asarray(ids, np.int32)}

    def element_spec(self) -> dict[str, jax.ShapeDtypeStruct]:
        return {"id": jax.ShapeDtypeStruct((), jnp.int32)}


class RepeatsAfterRestore(Rotating):
    """Serves the record before the restored position again."""

    repeat_at: int | None = None

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.repeat_at = state.get("current_index") or None

    def get_batch(self, batch_size: int) -> dict[str, np.ndarray] | None:
        if self.repeat_at is not None and self.next_value == self.repeat_at:
            self.repeat_at, self.next_value = None, self.next_value - 1
        return super().get_batch(batch_size)


class Unseeded(Rotating):
    """Adds a field drawn from Python's unseeded ``random``."""

    def get_batch(self, batch_size: int) -> dict[str, np.ndarray] | None:
        batch = super().get_batch(batch_size)
        if batch is not None:
            batch["noise"] = np.asarray([random.random() for _ in batch["id"]], np.float32)
        return batch

    def element_spec(self) -> dict[str, jax.ShapeDtypeStruct]:
        return {**super().element_spec(), "noise": jax.ShapeDtypeStruct((), jnp.float32)}


def maker(cls: type[Rotating]):
    return lambda: Pipeline(source=cls(), stages=[], batch_size=3)


@pytest.mark.parametrize("level", ["pipeline", "iterator"])
def test_correct_stream_passes(level: str) -> None:
    report = check_resume_exact(maker(Rotating), [1, 2, 4, 4, 6], num_epochs=2, level=level)
    assert (report.num_batches, report.batches_per_epoch) == (8, (4, 4))


def test_repeated_record_named_at_the_restore_before_later_errors() -> None:
    # the repeat lengthens the resumed pass; its later states would be refused as
    # "from a different stream": the first differing batch is reported instead
    with pytest.raises(AssertionError) as caught:
        check_resume_exact(maker(RepeatsAfterRestore), [1, 2, 4, 4, 6], num_epochs=2)
    assert str(caught.value) == (
        "batch 1 (epoch 0), field 'id': resumed run gave int32(3,) "
        "array([2, 3, 4], dtype=int32), uninterrupted run int32(3,) "
        "array([3, 4, 5], dtype=int32) (after the restore at batch 1; restores at [1])"
    )


def test_unseeded_randomness_named_before_any_restore() -> None:
    with pytest.raises(AssertionError, match=r"^batch 0 \(epoch 0\), field 'noise': .* before "
                       r"any restore: .* not deterministic \(unseeded randomness"):
        check_resume_exact(maker(Unseeded), [2], num_epochs=1)


class Leaky(Rotating):
    """Starts a thread its close() never stops."""

    def __init__(self) -> None:
        super().__init__()
        self.stop = threading.Event()
        self.worker = threading.Thread(target=self.stop.wait, name="leaky-worker", daemon=True)
        self.worker.start()


def test_leaked_thread_named() -> None:
    built: list[Leaky] = []

    def make(shard_index: int = 0, shard_count: int = 1, stages: tuple = ()) -> Pipeline:
        built.append(Leaky())
        return Pipeline(source=built[-1], stages=list(stages), batch_size=3)

    row = SourceRow("leaky", make, N, lambda batch: batch["id"].tolist())
    try:
        with pytest.raises(AssertionError, match=r"^leaky: 1 thread still alive 0 s after "
                           r"closing .* \(left: \['leaky-worker'\]\); the source's close\(\) "
                           "must stop and join"):
            check_close_releases_threads(row, wait_s=0)  # the thread waits for stop: no race
    finally:
        for source in built:
            source.stop.set()
            source.worker.join()


def test_shared_pipeline_or_source_refused() -> None:
    # restoring into the object that saved the state proves nothing: refused, not a
    # "0 batches" mismatch (or a pass, for check_source_resume_exact)
    pipeline = maker(Rotating)()
    with pytest.raises(AssertionError, match=r"^make_pipeline\(\) returned the same Pipeline "
                       "as an earlier call: build a new one each call"):
        check_resume_exact(lambda: pipeline, [1])
    source = Rotating()
    with pytest.raises(AssertionError, match=r"^make_pipeline\(\) returned a Pipeline over the "
                       "same Rotating source as an earlier call"):
        check_resume_exact(lambda: Pipeline(source=source, stages=[], batch_size=3), [1])
    with pytest.raises(AssertionError, match=r"^make_source\(\) returned the same Rotating"):
        check_source_resume_exact(lambda: source, [1])


class OverArray(Rotating):
    """Reads the ids from an array it names ``source`` (the user's name, not a child)."""

    def __init__(self, data: np.ndarray) -> None:
        super().__init__()
        self.source = data

    def get_batch(self, batch_size: int) -> dict[str, np.ndarray] | None:
        batch = super().get_batch(batch_size)
        return None if batch is None else {"id": self.source[batch["id"]]}


def test_shared_data_under_the_name_source_is_not_a_shared_source() -> None:
    data = np.arange(100, 100 + N, dtype=np.int32)  # one array for every build: fine
    assert check_source_resume_exact(lambda: OverArray(data), [2, 5]) == N
    report = check_resume_exact(lambda: Pipeline(source=OverArray(data), batch_size=3), [1, 2])
    assert report.num_batches == 4


def test_negative_interrupt_point_refused() -> None:
    with pytest.raises(ValueError, match=r"interrupt_points must be >= 0 .* got -1"):
        check_resume_exact(maker(Rotating), [2, -1])


def test_source_check_names_the_record() -> None:
    assert check_source_resume_exact(Rotating, [2, 5, 5]) == N
    with pytest.raises(AssertionError) as caught:
        check_source_resume_exact(RepeatsAfterRestore, [2, 5])
    assert str(caught.value) == (
        "record 2, field 'id': resumed run gave int32(1,) array([1], dtype=int32), "
        "uninterrupted run int32(1,) array([2], dtype=int32) (after the restore at record 2; "
        "restores at [2])"
    )

"""A restored pipeline's next batch: read first and alone, then exactly the rest of the
pass (W4's restore -> next batch: the reader threads' other chunks start once that
batch is read, not beside it)."""

from __future__ import annotations

import threading
import time

import numpy as np

from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

from int_record_files import write_int_parts

N, BATCH, SAVED_AFTER = 1_000, 64, 5


class LoggedDecode:
    """Decodes an int32 record, noting the order records were decoded in."""

    def __init__(self) -> None:
        self.order: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, record: bytes) -> dict[str, np.ndarray]:
        value = int(np.frombuffer(record, np.int32)[0])
        time.sleep(0.0002)  # a decode with some work, so that threads would interleave
        with self._lock:
            self.order.append(value)
        return {"x": np.int32(value)}


def pipeline(paths: list[str], decode: LoggedDecode) -> Pipeline:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=7, shuffle_files=True),
                                     paths, decode=decode, num_threads=2)
    return Pipeline(source=source, batch_size=BATCH)


def ids(batch) -> list[int]:
    return np.asarray(batch["x"]).tolist()


def restored_after_saving(tmp_path):
    """The uninterrupted batches, and a pipeline restored from a state saved after
    SAVED_AFTER batches, its decode order logged from the restore on (the structure,
    learnt from one record, comes first)."""
    paths = write_int_parts(tmp_path, (N // 2, N))
    reference = [ids(b) for b in pipeline(paths, LoggedDecode())]
    saved = pipeline(paths, LoggedDecode())
    it = iter(saved)
    for _ in range(SAVED_AFTER):
        next(it)
    state = saved.get_state()
    saved.source.close()
    decode = LoggedDecode()
    restored = pipeline(paths, decode)
    restored.source.element_spec()
    decode.order.clear()
    restored.set_state(state)
    return reference, restored, decode


def test_the_first_batch_after_a_restore_is_decoded_before_any_record_after_it(
        tmp_path) -> None:
    reference, restored, decode = restored_after_saving(tmp_path)
    it = iter(restored)
    first = ids(next(it))
    assert first == reference[SAVED_AFTER]
    # no other record was decoded until every record of the first batch was
    assert sorted(decode.order[:BATCH]) == sorted(first)
    assert [first, *(ids(b) for b in it)] == reference[SAVED_AFTER:]
    restored.source.close()


def test_a_new_pass_reads_its_first_batch_first_and_serves_every_record_once(
        tmp_path) -> None:
    paths = write_int_parts(tmp_path, (N // 2, N))
    decode = LoggedDecode()
    p = pipeline(paths, decode)
    p.source.element_spec()
    decode.order.clear()
    batches = [ids(b) for b in p]
    assert sorted(decode.order[:BATCH]) == sorted(batches[0])
    assert sorted(v for b in batches for v in b) == list(range(N))
    p.source.close()


def test_the_batches_after_it_wait_for_reads_of_their_own_size_not_whole_chunks(
        tmp_path) -> None:
    """After the restored batch, reads grow from one batch (1, 2, 4... batches): the
    second batch is decoded before anything past the fourth, not with a whole chunk."""
    reference, restored, decode = restored_after_saving(tmp_path)
    batches = [ids(b) for b in restored]
    assert batches == reference[SAVED_AFTER:]
    second = set(batches[1])
    last = max(decode.order.index(x) for x in second)  # when the second batch was complete
    first_four = {x for b in batches[:4] for x in b}
    assert set(decode.order[:last + 1]) <= first_four
    restored.source.close()

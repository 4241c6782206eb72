"""ConcatSource: parts in turn, its kind from its parts, exact resume, refused mismatches.

The conformance table (tests/conformance) runs a host and a stream concatenation
through every contract clause; these tests pin the values.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.data_source import length_or_none
from datarax.core.errors import SourceContractError, SpecMismatchError, StateError
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig, StreamSource


def memory(lo: int, hi: int, *, shuffle: bool = False, seed: int = 7, **extra) -> MemorySource:
    x = np.arange(lo, hi, dtype=np.int32)
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed), {"x": x, **extra})


class Count(StreamSource):
    """``n`` records ``x = offset .. offset + n - 1`` per pass; no length."""

    def __init__(self, n: int, offset: int) -> None:
        super().__init__(MemorySourceConfig())
        self.n, self.offset, self.next_value = n, offset, 0

    def restart(self, epoch: int) -> None:
        self.next_value = 0

    def get_batch(self, batch_size: int):
        if self.next_value >= self.n:
            return None
        stop = min(self.n, self.next_value + batch_size)
        x = np.arange(self.next_value, stop, dtype=np.int32) + self.offset
        self.next_value = stop
        return {"x": x}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), np.int32)}


def xs(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b["x"])]


def test_indexed_parts_make_an_indexed_source_serving_each_part_epoch_in_turn():
    source = ConcatSource([memory(0, 5, shuffle=True), memory(100, 103)])
    assert source.kind.name == "INDEXED" and len(source) == 8
    read = jax.jit(lambda start: source.get_batch_and_indices_at(start, 8))  # traced, as in a step
    epochs = [read(8 * e) for e in range(2)]
    for batch, _ in epochs:  # part 0's records (its own shuffle), then part 1's in order
        x = batch["x"].tolist()
        assert sorted(x[:5]) == [0, 1, 2, 3, 4] and x[5:] == [100, 101, 102]
    assert epochs[0][0]["x"].tolist() != epochs[1][0]["x"].tolist()  # part 0 reshuffles
    # Stable indices: the part's own stable index plus the records before the part; a
    # read across the epoch's end goes on with the next epoch's records.
    batch, stable = read(3)
    part0 = source.parts[0].record_indices_at(3, 2).tolist()
    next0 = source.parts[0].record_indices_at(5, 3).tolist()
    assert stable.tolist() == [*part0, 5, 6, 7, *next0]
    assert batch["x"].tolist()[2:5] == [100, 101, 102]


def test_a_part_with_text_fields_makes_a_host_concatenation_reading_part_by_part():
    text = {"t": np.asarray(["a", "b", "c"])}
    source = ConcatSource([memory(0, 3, **text), memory(10, 13, t=np.asarray(["d", "e", "f"]))])
    assert source.kind.name == "HOST"
    batch, stable = source.get_batch_with_indices(4)
    assert batch["x"].tolist() == [0, 1, 2, 10] and batch["t"] == ["a", "b", "c", "d"]
    assert stable.tolist() == [0, 1, 2, 3]
    state = json.loads(json.dumps(source.get_state()))
    fresh = ConcatSource([memory(0, 3, **text), memory(10, 13, t=np.asarray(["d", "e", "f"]))])
    fresh.set_state(state)
    batch, stable = fresh.get_batch_with_indices(4)
    assert batch["t"] == ["e", "f"] and stable.tolist() == [4, 5]
    assert fresh.get_batch_with_indices(4) == (None, None)  # the epoch's end


def test_a_part_of_unknown_length_makes_a_stream_that_resumes_by_reading_again():
    def build() -> ConcatSource:
        return ConcatSource([memory(0, 3), Count(4, offset=50)])

    source = build()
    assert source.kind.name == "STREAM" and length_or_none(source) is None
    with pytest.raises(TypeError, match=r"parts \[1\] do not know theirs"):
        len(source)
    pipeline = Pipeline(source=source, stages=[], batch_size=2, rngs=nnx.Rngs(0))
    iterator = iter(pipeline)
    first = [next(iterator), next(iterator)]
    state = json.loads(json.dumps(iterator.get_state()))
    rest = list(iterator)
    assert xs(first + rest) == [0, 1, 2, 50, 51, 52, 53]
    fresh = Pipeline(source=build(), stages=[], batch_size=2, rngs=nnx.Rngs(0))
    resumed = iter(fresh)
    resumed.set_state(state)
    assert xs(resumed) == xs(rest)
    assert xs(fresh) == [0, 1, 2, 50, 51, 52, 53]  # the next epoch, whole again


def test_a_state_of_another_concatenation_is_refused_naming_the_setting():
    source = ConcatSource([memory(0, 4, shuffle=True, seed=1), memory(10, 12)])
    source.get_batch_with_indices(3)
    state = source.get_state()
    other_seed = ConcatSource([memory(0, 4, shuffle=True, seed=2), memory(10, 12)])
    with pytest.raises(StateError, match=r"parts\[0\]\.seed=1 but this source has parts\[0\]\.seed=2"):
        other_seed.set_state(state)
    fewer = ConcatSource([memory(0, 4, shuffle=True, seed=1)])
    with pytest.raises(StateError, match="num_parts=2 but this source has num_parts=1"):
        fewer.set_state(state)
    longer = ConcatSource([memory(0, 4, shuffle=True, seed=1), memory(10, 13)])
    with pytest.raises(StateError, match=r"parts\[1\]\.num_records=2"):
        longer.set_state(state)


def test_parts_that_disagree_on_the_spec_are_refused_naming_part_and_field():
    floats = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.float32)})
    with pytest.raises(SpecMismatchError, match=r"field 'x' is int32\(\) in part 0 but float32\(\) in part 1"):
        ConcatSource([memory(0, 3), floats])
    extra = memory(0, 3, y=np.zeros((3, 2), np.float32))
    with pytest.raises(SpecMismatchError, match="field 'y' is in part 2 but not in part 0"):
        ConcatSource([memory(0, 3), memory(3, 6), extra])


def test_parts_that_cannot_be_concatenated_are_refused():
    a = memory(0, 3)
    with pytest.raises(SourceContractError, match="parts 0 and 1 are the same object"):
        ConcatSource([a, a])
    sharded = memory(0, 4)
    sharded.set_shard(0, 2)
    with pytest.raises(SourceContractError, match=r"part 1 is sharded \(share 0 of 2\); shard the "
                       r"concatenation \(the Pipeline does\), not its parts"):
        ConcatSource([memory(0, 3), sharded])
    with pytest.raises(SourceContractError, match="part 0 is list, not a data source"):
        ConcatSource([[1, 2]])  # type: ignore[list-item]
    with pytest.raises(Exception, match="at least one source"):
        ConcatSource([])


def test_shards_of_a_host_concatenation_are_disjoint_blocks_across_parts():
    text = {"t": np.asarray(["r"] * 5)}
    served = []
    for index in range(2):
        source = ConcatSource([memory(0, 5, **text), memory(5, 9, t=np.asarray(["s"] * 4))])
        source.set_shard(index, 2)
        batch, _ = source.get_batch_with_indices(10)
        served.append(batch["x"].tolist())
    assert served == [[0, 1, 2, 3], [4, 5, 6, 7]]  # 9 // 2 each; the last left out


def test_close_closes_every_part_even_when_one_fails_and_raises_that_error():
    closed: list[str] = []

    class Failing(MemorySource):
        def close(self) -> None:
            closed.append("failing")
            raise OSError("disk gone")

    class Counted(MemorySource):
        def close(self) -> None:
            closed.append("counted")

    data = {"x": np.arange(3, dtype=np.int32)}
    concat = ConcatSource([Failing(MemorySourceConfig(), data), Counted(MemorySourceConfig(), data)])
    with pytest.raises(OSError, match="disk gone"):
        concat.close()
    assert closed == ["failing", "counted"]

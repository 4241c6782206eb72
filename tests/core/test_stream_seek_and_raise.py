"""A user's generator-backed stream: a seek past the pass's end is worded as a seek, and
an error its generator raises mid-pass is named and resumable."""

import re

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import SourceContractError, SpecMismatchError, StateError
from datarax.core.spec import array_to_spec_strip_leading
from datarax.core.stream import StreamSource, StructuralConfig
from datarax.pipeline import Pipeline
from datarax.sources import ConcatSource, MemorySource, MemorySourceConfig, ShuffleBufferSource
from datarax.sources.skip_ledger import SkipCounts


class Gen(StreamSource):
    """Records 0 .. n-1 from a generator re-created by restart; raises once at ``fail_at``."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        super().__init__(StructuralConfig())
        self.n, self.fail_at = n, fail_at
        self.restart(0)

    def restart(self, epoch):
        def records():
            for i in range(self.n):
                if i == self.fail_at:
                    self.fail_at = None
                    raise OSError("disk hiccup")
                yield i
        self.records = records()

    def get_batch(self, batch_size):
        values = []
        for value in self.records:
            values.append(value)
            if len(values) == batch_size:
                break
        return {"x": np.asarray(values, np.int32)} if values else None

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(np.zeros(1, np.int32))}


def read_all(source, size=4):
    out = []
    while (batch := source.get_batch_with_indices(size)[0]) is not None:
        out += batch["x"].tolist()
    return out


def test_seek_past_the_end_says_seek_and_the_pass_size():
    source = Gen(5)
    source.seek(0, 9)
    with pytest.raises(StateError, match=r"^Gen\.seek\(0, 9\) is past the end of pass 0: "
                       r"it holds 5 records, the last is record 4 \(seek\(0, 5\)"):
        source.get_batch_with_indices(2)


def test_seek_past_a_shards_end_counts_its_whole_rounds():
    source = Gen(11)  # shard 1 of 2 holds 1, 3, 5, 7, 9 (the partial last round left out)
    source.set_shard(1, 2)
    source.seek(0, 7)
    with pytest.raises(StateError, match=r"Gen\.seek\(0, 7\) .* it holds 5 records"):
        source.get_batch_with_indices(2)


def test_restored_state_past_the_end_keeps_its_wording():
    source = Gen(5)
    source.set_state({"current_index": 9, "current_epoch": 0})
    with pytest.raises(StateError, match="the restored position says 9 records of pass 0 "
                       "were handed out, but the pass ends before that; the state comes "
                       "from a different stream"):
        source.get_batch_with_indices(2)


RESTORED = "the restored position says 9 records of pass 0 were handed out"


def test_a_position_restored_with_nnx_update_and_sought_in_place_keeps_the_restored_wording():
    sought = Gen(5)
    sought.seek(0, 9)
    fresh = Gen(5)
    nnx.update(fresh, nnx.state(sought))
    fresh.seek(fresh.epoch, fresh.index)  # as a pipeline does: readers restart there
    with pytest.raises(StateError, match=RESTORED):
        fresh.get_batch_with_indices(2)


def test_a_wrappers_position_past_its_child_streams_end_is_worded_as_restored():
    # the wrapper, not the user, seeks the child: no seek of the child is named
    wrapper = ShuffleBufferSource(Gen(5), buffer_size=3)
    wrapper.seek(0, 9)
    with pytest.raises(StateError, match=RESTORED):
        wrapper.get_batch_with_indices(2)


class CountingGen(Gen, SkipCounts):
    """A stream that says it holds 8 records (it yields ``n``) and whose skip state
    carries more than its total, as a source built from others does."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self._init_skips()

    def length_or_reason(self):
        return 8

    def skip_state(self):
        return {"skipped": self._skips(), "detail": 0}


def test_a_concatenation_restored_past_its_stream_parts_end_keeps_the_restored_wording():
    def concat():
        first = MemorySource(MemorySourceConfig(), {"x": np.arange(2, dtype=np.int32)})
        return ConcatSource([first, CountingGen(5)])

    saved = concat()
    assert saved.get_batch_with_indices(4)[0]["x"].tolist() == [0, 1, 0, 1]
    state = saved.get_state()
    assert state["part_skips"] == {"skipped": 0, "detail": 0}  # the part is sought on restore
    restored = concat()
    restored.set_state({**state, "current_index": 9})  # part 1 at 7: its stream holds 5
    with pytest.raises(StateError, match=r"^CountingGen: the restored position says 7 records "
                                         r"of pass 0 were handed out"):
        restored.get_batch_with_indices(2)


def test_a_seek_back_inside_the_pass_after_one_past_its_end_reads_from_there():
    source = Gen(5)
    source.seek(0, 9)
    source.seek(0, 3)
    assert read_all(source) == [3, 4]


def test_a_raising_generator_is_named_and_the_pass_resumes_after():
    source = Gen(10, fail_at=6)
    assert source.get_batch_with_indices(4)[0]["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(OSError, match="disk hiccup") as raised:
        source.get_batch_with_indices(4)
    assert raised.value.__notes__ == [
        "Gen.get_batch raised in pass 0 after 4 records were handed out; the next read "
        "calls restart(0) and continues at record 4 of the pass."]
    assert read_all(source) == [4, 5, 6, 7, 8, 9]  # nothing dropped, nothing repeated


def test_counts_of_one_are_worded_in_the_singular():
    sought = Gen(1)
    sought.seek(0, 3)
    with pytest.raises(StateError, match=r"^Gen\.seek\(0, 3\) is past the end of pass 0: "
                       r"it holds 1 record, the last is record 0 \(seek\(0, 1\)"):
        sought.get_batch_with_indices(2)
    restored = Gen(0)
    restored.set_state({"current_index": 1, "current_epoch": 0})
    with pytest.raises(StateError, match="the restored position says 1 record of pass 0 "
                       "was handed out, but the pass ends before that"):
        restored.get_batch_with_indices(2)
    raising = Gen(5, fail_at=1)
    assert raising.get_batch_with_indices(1)[0]["x"].tolist() == [0]
    with pytest.raises(OSError, match="disk hiccup") as raised:
        raising.get_batch_with_indices(4)
    assert raised.value.__notes__[0].startswith(
        "Gen.get_batch raised in pass 0 after 1 record was handed out; ")


class NoRestart(StreamSource):
    """Records 0 .. n-1 from one generator, never re-created (no ``restart``); record
    ``nan`` holds NaN; ``get_batch`` call ``fail_call`` raises before taking any."""

    def __init__(self, n: int, nan: int = -1, fail_call: int = 0) -> None:
        super().__init__(StructuralConfig())
        self.records, self.nan, self.fail_call, self.calls = iter(range(n)), nan, fail_call, 0

    def get_batch(self, batch_size):
        self.calls += 1
        if self.calls == self.fail_call:
            raise OSError("network blip")
        values = [v for _, v in zip(range(batch_size), self.records)]
        if not values:
            return None
        return {"x": np.asarray([np.nan if v == self.nan else v for v in values], np.float32)}

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(np.zeros(1, np.float32))}


NO_GOING_BACK = ("NoRestart cannot go back to record {} of pass 0: it already read 4 records "
                 "past it")


def test_a_stream_without_restart_refuses_to_re_read_a_failed_batch_instead_of_dropping_it():
    pipeline = Pipeline(source=NoRestart(20, nan=9), batch_size=4, check_finite=True,
                        prefetch=0)
    it = iter(pipeline)
    assert [next(it)["x"].tolist() for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(SpecMismatchError, match="NaN"):
        next(it)
    for _ in range(2):  # records 8-11 were taken from the generator: not skipped silently
        with pytest.raises(SourceContractError, match=NO_GOING_BACK.format(8)):
            next(it)
    peeked = Pipeline(source=NoRestart(20), batch_size=4, prefetch=0)
    assert peeked.peek()["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(SourceContractError, match=NO_GOING_BACK.format(0)):
        next(iter(peeked))


def test_a_stream_without_restart_goes_on_after_a_read_that_took_nothing():
    it = iter(Pipeline(source=NoRestart(12, fail_call=2), batch_size=4, prefetch=0))
    assert next(it)["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(OSError, match="network blip") as raised:
        next(it)
    assert "does not implement restart(self, epoch), so the next read goes on from where " \
        "the stream stands" in raised.value.__notes__[0]
    assert [b["x"].tolist() for b in it] == [[4, 5, 6, 7], [8, 9, 10, 11]]


def inside_pass(name: str, read: int) -> str:
    return (f"{name} cannot begin pass 1: it stands inside pass 0, {read} records read, and "
            "does not implement restart(self, epoch), so pass 1 would serve the rest of pass 0.")


def test_a_loop_after_a_break_over_a_stream_without_restart_is_refused_not_renumbered():
    pipeline = Pipeline(source=NoRestart(10), batch_size=4)
    for batch in pipeline:
        break
    assert batch["x"].tolist() == [0, 1, 2, 3]
    saved = pipeline.get_state()
    assert (saved["epoch"], saved["position"]) == (0, 4)
    with pytest.raises(SourceContractError) as refused:
        for batch in pipeline:  # a MemorySource or a stream with restart begins pass 1
            pass
    assert str(refused.value).startswith(inside_pass("NoRestart", 4))
    assert "pipeline.set_state(pipeline.get_state()) before the next loop" in str(refused.value)
    pipeline.set_state(saved)  # the rest of pass 0, as pass 0
    assert [b["x"].tolist() for b in pipeline] == [[4, 5, 6, 7], [8, 9]]
    assert (pipeline.get_state()["epoch"], pipeline.get_state()["position"]) == (1, 0)


def test_a_stream_without_restart_goes_on_with_its_pass_in_the_same_iterator():
    pipeline = Pipeline(source=NoRestart(10), batch_size=4)
    it = iter(pipeline)
    for batch in it:
        break
    assert [b["x"].tolist() for b in it] == [[4, 5, 6, 7], [8, 9]]
    assert (pipeline.get_state()["epoch"], pipeline.get_state()["position"]) == (1, 0)


def test_a_take_or_skip_after_part_of_a_pass_of_a_stream_without_restart_is_refused():
    taken = Pipeline(source=NoRestart(10), batch_size=2)
    assert [b["x"].tolist() for b in taken.take(1)] == [[0, 1]]
    with pytest.raises(SourceContractError, match=re.escape(inside_pass("NoRestart", 2))):
        next(iter(taken))
    skipped = Pipeline(source=NoRestart(10), batch_size=2)
    next(iter(skipped))
    with pytest.raises(SourceContractError, match=re.escape(inside_pass("NoRestart", 2))):
        next(skipped.skip(1))


def test_interleaving_streams_without_restart_refuses_the_pass_after_a_break():
    from datarax.sources import InterleaveSource
    source = InterleaveSource([NoRestart(6), NoRestart(6)], cycle_length=2, num_epochs=2)
    pipeline = Pipeline(source=source, batch_size=2)
    assert next(iter(pipeline))["x"].tolist() == [0, 0]
    with pytest.raises(SourceContractError, match="NoRestart cannot begin pass 1: it stands "
                                                  "inside pass 0"):
        next(iter(pipeline))


def at(pipeline):
    state = pipeline.get_state()
    return state["epoch"], state["position"]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_refused_new_pass_leaves_the_position_where_the_break_left_it(prefetch):
    pipeline = Pipeline(source=NoRestart(10), batch_size=4, prefetch=prefetch)
    for batch in pipeline:
        break
    saved = pipeline.get_state()
    with pytest.raises(SourceContractError, match=re.escape(inside_pass("NoRestart", 4))):
        for batch in pipeline:
            pass
    assert at(pipeline) == (saved["epoch"], saved["position"]) == (0, 4)
    assert pipeline.get_state()["source"] == saved["source"]
    pipeline.set_state(pipeline.get_state())  # the rest of pass 0, once
    assert [b["x"].tolist() for b in pipeline] == [[4, 5, 6, 7], [8, 9]]
    assert at(pipeline) == (1, 0)


def test_a_state_saved_after_a_refused_pass_resumes_the_rest_of_the_pass_elsewhere():
    pipeline = Pipeline(source=NoRestart(10), batch_size=4)
    next(iter(pipeline))
    with pytest.raises(SourceContractError):
        next(iter(pipeline))
    resumed = Pipeline(source=NoRestart(10), batch_size=4)  # a new process, say
    resumed.set_state(pipeline.get_state())
    assert [b["x"].tolist() for b in resumed] == [[4, 5, 6, 7], [8, 9]]


def test_asking_again_for_a_refused_pass_is_refused_again_and_moves_nothing():
    pipeline = Pipeline(source=NoRestart(10), batch_size=2)
    next(iter(pipeline))
    refused = iter(pipeline)
    for ask in (lambda: next(refused), lambda: next(refused), lambda: next(iter(pipeline)),
                lambda: next(iter(pipeline.take(1))), lambda: next(pipeline.skip(1)),
                pipeline.step):
        with pytest.raises(SourceContractError, match=re.escape(inside_pass("NoRestart", 2))):
            ask()
        assert at(pipeline) == (0, 2)
    it = iter(pipeline)
    with pytest.raises(SourceContractError):
        next(it)
    pipeline.set_state(pipeline.get_state())  # a restore: the refused iterator follows it
    assert [b["x"].tolist() for b in it] == [[2, 3], [4, 5], [6, 7], [8, 9]]


def test_under_a_wrapper_reading_ahead_only_the_same_iterator_goes_on_with_the_pass():
    """The refusal's advice holds under a ShuffleBufferSource: its restore asks the stream
    for records the buffer already read (refused, named), the same iterator goes on."""
    from datarax.sources import ShuffleBufferSource

    def shuffled():
        return Pipeline(source=ShuffleBufferSource(NoRestart(20), buffer_size=4, seed=0),
                        batch_size=4)

    whole = [b["x"].tolist() for b in shuffled()]
    pipeline = shuffled()
    it = iter(pipeline)
    for batch in it:
        break
    with pytest.raises(SourceContractError) as refused:
        next(iter(pipeline))
    assert ("call pipeline.set_state(pipeline.get_state()) before the next loop (unless a "
            "wrapper read the stream ahead), or keep the pass's iterator (it = iter(pipeline)) "
            "and loop over it again after a break.") in str(refused.value)
    assert at(pipeline) == (0, 4)
    pipeline.set_state(pipeline.get_state())
    with pytest.raises(SourceContractError, match="NoRestart cannot go back to record 4 of "
                                                  "pass 0: it already read"):
        next(iter(pipeline))
    again = shuffled()
    it = iter(again)
    assert next(it)["x"].tolist() == whole[0]
    assert [b["x"].tolist() for b in it] == whole[1:]


def test_an_interleave_over_streams_without_restart_names_its_read_ahead_when_it_cannot_go_back():
    """InterleaveSource reads its children ahead (64 records at a time): a restore asks a
    child for records it already read, and the refusal says so; a new source resumes."""
    from datarax.sources import InterleaveSource

    def interleaved():
        return Pipeline(source=InterleaveSource([NoRestart(10), NoRestart(10)], cycle_length=2),
                        batch_size=4, prefetch=0)

    pipeline = interleaved()
    assert next(iter(pipeline))["x"].tolist() == [0, 0, 1, 1]
    saved = pipeline.get_state()
    pipeline.set_state(saved)
    with pytest.raises(SourceContractError) as refused:
        next(iter(pipeline))
    assert str(refused.value).startswith(
        "NoRestart cannot go back to record 2 of pass 0: it already read 8 records past it ("
        "a batch that failed after its read, batches read ahead with prefetch, peek(), a "
        "ShuffleBufferSource or InterleaveSource over it, which reads its records ahead)")
    resumed = interleaved()
    resumed.set_state(saved)
    assert [b["x"].tolist() for b in resumed] == [[2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7],
                                                  [8, 8, 9, 9]]


class Counted(NoRestart):
    """NoRestart with its length declared."""

    def length_or_reason(self):
        return 8


def test_a_stream_of_known_length_read_whole_without_its_end_is_refused_naming_why():
    pipeline = Pipeline(source=Counted(8), batch_size=4)
    assert [b["x"].tolist() for _, b in zip(range(len(pipeline)), pipeline)] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(SourceContractError) as refused:
        next(iter(pipeline))
    assert str(refused.value).startswith(inside_pass("Counted", 8))
    assert ("; here all 8 records its length says were read, but the loop stopped before "
            "asking for the end: a loop of len(pipeline) batches (zip, islice) or a take() "
            "of the whole pass). Implement restart") in str(refused.value)
    assert at(pipeline) == (0, 8)
    broke = Pipeline(source=Counted(8), batch_size=4)
    next(iter(broke))
    with pytest.raises(SourceContractError) as refused:
        next(iter(broke))
    assert "its length says" not in str(refused.value)

"""Elastic resume: states saved by N processes restore on M, the epoch's rest served
exactly once; share computation for 1..16 simulated processes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from datarax.core.errors import StateError
from datarax.core.share import Share, block_shares, remaining, runs_size
from devices_sources import host, make_pipeline


def positions(share) -> list[int]:
    return [p for lo, hi in share for p in range(lo, hi)]


def elastic_share(length, history, count, index):
    """The runs of share ``index`` of ``count`` of an epoch restarted after ``history``."""
    return Share(index, count, epoch=0, history=tuple(history)).runs(length)


# ------------------------------------------------------------ simulated processes
@pytest.mark.parametrize("length", [997, 1024])
def test_block_shares_for_1_to_16_processes_are_disjoint_and_equal(length):
    for count in range(1, 17):
        shares = [positions(s) for s in block_shares(length, count)]
        flat = [p for s in shares for p in s]
        assert {len(s) for s in shares} == {length // count}
        assert sorted(flat) == list(range(length // count * count))


def test_elastic_shares_between_1_and_16_processes_cover_the_rest_once():
    length = 720
    for old, new in itertools.product(range(1, 17), repeat=2):
        block = length // old
        for position in (0, 1, block // 3, block):
            shares = [elastic_share(length, [(old, position)], new, j) for j in range(new)]
            served = [positions(s) for s in shares]
            flat = [p for s in served for p in s]
            rest = positions(remaining(block_shares(length, old), position))
            assert len(set(flat)) == len(flat)  # disjoint
            assert {len(s) for s in served} == {len(rest) // new}  # equal
            # consecutive pieces of the rest, in order; only its last len % new left out
            assert flat == rest[: len(rest) // new * new]
            # each share is a few runs: per-process work stays flat as processes grow
            assert all(len(s) <= old // new + 2 for s in shares)


def test_a_second_elastic_restart_in_the_same_epoch_chains():
    length = 120
    first = [elastic_share(length, [(2, 12)], 3, j) for j in range(3)]
    assert [runs_size(s) for s in first] == [32] * 3
    served_before = {p for i in range(2) for p in range(i * 60, i * 60 + 12)}
    served_before |= {p for s in first for p in positions(s)[:8]}
    second = [elastic_share(length, [(2, 12), (3, 8)], 4, j) for j in range(4)]
    after = [p for s in second for p in positions(s)]
    assert sorted(served_before | set(after)) == list(range(120))
    assert len(after) + len(served_before) == 120


# ------------------------------------------------------------------ pipelines
def reference(n: int, batch: int, epoch: int, kind: str = "indexed") -> dict[int, dict]:
    """Stable index -> record of pass ``epoch`` of the unsharded pipeline."""
    pipeline = make_pipeline(kind, n, batch, shuffle=True, stochastic=True)
    for _ in range(epoch):
        list(pipeline)
    out = {}
    for b in pipeline:
        b = host(b)
        for row in range(len(b["x"])):
            out[int(b["x"][row]) // 2] = {k: v[row] for k, v in b.items()}
    return out


def records(batches) -> list[dict]:
    return [{k: v[row] for k, v in host(b).items()} for b in batches for row in range(len(b["x"]))]


def run(n, batch, shard, count, steps, kind="indexed"):
    """A pipeline of shard ``shard`` of ``count`` after ``steps`` batches, and what it served."""
    pipeline = make_pipeline(kind, n, batch, shuffle=True, stochastic=True,
                             shard_index=shard, shard_count=count)
    iterator = iter(pipeline)
    served = [next(iterator) for _ in range(steps)]
    return pipeline, records(served)


def check_exact(n, batch, old, steps, new, kind="indexed"):
    before = []
    states = []
    for i in range(old):
        pipeline, served = run(n, batch, i, old, steps, kind)
        before += served
        states.append(pipeline.get_state())
    after, per_shard = [], []
    restored = []
    for j in range(new):
        pipeline = make_pipeline(kind, n, batch, shuffle=True, stochastic=True,
                                 shard_index=j, shard_count=new)
        pipeline.set_state(states[j % old])  # any process's state says the same
        batches = list(pipeline)
        per_shard.append(len(batches))
        after += records(batches)
        restored.append(pipeline)
    want = reference(n, batch, 0, kind)
    ids = [int(r["x"]) // 2 for r in before + after]
    assert sorted(ids) == list(range(n // old * old))  # every record once, none repeated
    assert len(set(per_shard)) == 1  # equal steps on every new process
    for record in after:  # each record exactly as the unsharded run makes it
        for name, value in want[int(record["x"]) // 2].items():
            np.testing.assert_array_equal(record[name], value, err_msg=name)
    return restored


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_two_processes_restore_on_three(kind):
    # 42 records, batches of 3: each old share [0,21),[21,42) served 6; the rest (30)
    # splits 10/10/10, the middle share spanning both runs (a batch joins them)
    restored = check_exact(42, 3, old=2, steps=2, new=3, kind=kind)
    # the next epoch is the plain 3-process layout
    nxt = [int(r["x"]) // 2 for p in restored for r in records(p)]
    assert sorted(nxt) == list(range(42))
    assert restored[0].epoch == 2  # that epoch ended: the position is epoch 2's start


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_four_processes_restore_on_two(kind):
    check_exact(48, 4, old=4, steps=1, new=2, kind=kind)


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_elastic_state_restores_again_on_another_count(kind):
    n, batch = 60, 2
    # 12 of 60 served
    states = [run(n, batch, i, 2, 3, kind=kind)[0].get_state() for i in range(2)]
    middle = []
    for j in range(3):  # 48 left: 16 each; serve 4 batches, save
        pipeline = make_pipeline(kind, n, batch, shuffle=True, stochastic=True,
                                 shard_index=j, shard_count=3)
        pipeline.set_state(states[j % 2])
        iterator = iter(pipeline)
        middle += records([next(iterator) for _ in range(4)])
        state = pipeline.get_state()
        assert state["share"] == {"epoch": 0, "history": [[2, 6]]}
        assert len(iterator) == 4
    last = []
    for j in range(4):  # 24 left: 6 each
        pipeline = make_pipeline(kind, n, batch, shuffle=True, stochastic=True,
                                 shard_index=j, shard_count=4)
        pipeline.set_state(state)
        last += records(list(pipeline))
    first = [r for i in range(2) for r in run(n, batch, i, 2, 3, kind=kind)[1]]
    ids = [int(r["x"]) // 2 for r in first + middle + last]
    assert sorted(ids) == list(range(60))


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_elastic_state_restored_on_the_same_count_continues_its_share(kind):
    n, batch = 60, 2
    state = run(n, batch, 0, 2, 3, kind=kind)[0].get_state()
    pipeline = make_pipeline(kind, n, batch, shuffle=True, stochastic=True,
                             shard_index=1, shard_count=3)
    pipeline.set_state(state)
    iterator = iter(pipeline)
    next(iterator)
    mid = pipeline.get_state()
    rest = records(iterator)
    again = make_pipeline(kind, n, batch, shuffle=True, stochastic=True,
                          shard_index=1, shard_count=3)
    again.set_state(mid)
    assert [int(r["x"]) for r in records(again)] == [int(r["x"]) for r in rest]


@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_a_finished_share_restores_to_an_empty_pass_then_the_next_epoch(kind):
    # taken inside the for after the share's last batch: epoch 0, nothing left
    state = run(24, 4, 0, 2, 3, kind=kind)[0].get_state()  # 12 of 12: the share is done
    pipeline = make_pipeline(kind, 24, 4, shuffle=True, stochastic=True,
                             shard_index=0, shard_count=3)
    pipeline.set_state(state)
    assert list(pipeline) == [] and (pipeline.epoch, pipeline.position) == (1, 0)
    batches = list(pipeline)
    assert len(batches) == 2 and pipeline.epoch == 2


def test_streams_refuse_another_process_count():
    saver = make_pipeline("stream", 24, 4, shard_index=0, shard_count=2)
    iterator = iter(saver)
    next(iterator)
    state = iterator.get_state()
    restorer = make_pipeline("stream", 24, 4, shard_index=0, shard_count=3)
    with pytest.raises(StateError, match=r"this state was saved by 2 processes and this "
                       r"pipeline runs as shard 0 of 3; a stream source's position is its "
                       r"own share's .*only indexed and random-access sources take another "
                       r"process's state\. Restore it on 2 processes\."):
        restorer.set_state(state)


def test_tampered_elastic_history_and_position_are_refused():
    state = run(24, 2, 0, 2, 1)[0].get_state()
    pipeline = make_pipeline("indexed", 24, 2, shuffle=True, stochastic=True,
                             shard_index=0, shard_count=3)
    with pytest.raises(StateError, match=r"state 'share' must be .*got 'x'; the state was "
                       r"tampered with"):
        pipeline.set_state(dict(state, share="x"))
    with pytest.raises(StateError, match=r"position=13 is past the end of the share it was "
                       r"saved in \(12 records\)"):
        pipeline.set_state(dict(state, position=13))
    with pytest.raises(StateError, match=r"saved with batch_size=2 but this pipeline has "
                       r"batch_size=4"):
        make_pipeline("indexed", 24, 4, shuffle=True, stochastic=True, shard_index=0,
                      shard_count=3).set_state(state)


def test_text_fields_follow_their_records_across_joined_runs():
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    def build(index, count):
        data = {"x": np.arange(42, dtype=np.int32), "name": [f"r{i}" for i in range(42)]}
        return Pipeline(source=MemorySource(MemorySourceConfig(shuffle=True, seed=2), data),
                        batch_size=3, shard_index=index, shard_count=count)

    served = []
    old = [build(i, 2) for i in range(2)]
    for p in old:
        iterator = iter(p)
        served += [next(iterator), next(iterator)]
    rest = []
    for j in range(3):  # share 1 of 3 holds a batch joining two runs
        p = build(j, 3)
        p.set_state(old[0].get_state())
        rest += list(p)
    xs = [int(v) for b in served + rest for v in np.asarray(b["x"])]
    names = [n for b in served + rest for n in b["name"]]
    assert sorted(xs) == list(range(42))
    assert names == [f"r{x}" for x in xs]


def test_a_source_that_skips_bad_records_refuses_another_process_count(tmp_path):
    """Shards of an on_error='skip' source skip different numbers of records, so after
    the same steps they stand at different positions and one state cannot say what is
    left: restoring it on another count is refused (it served records twice before)."""
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    from int_record_files import write_int_parts

    paths = write_int_parts(tmp_path, [12])

    def decode(record):
        i = int(np.frombuffer(record, np.int32)[0])
        if i == 1:
            raise ValueError("bad record 1")
        return {"x": np.int32(i)}

    def build(index, count):
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error="skip"),
                                         paths=paths, decode=decode)
        return Pipeline(source=source, stages=[], batch_size=2, shard_index=index,
                        shard_count=count, prefetch=0)

    old = [build(i, 2) for i in range(2)]
    assert [np.asarray(next(iter(p))["x"]).tolist() for p in old] == [[0, 2], [6, 7]]
    states = [p.get_state() for p in old]
    assert [s["position"] for s in states] == [3, 2]  # the same step, other positions
    new = build(0, 1)
    with pytest.raises(StateError, match=r"shard 0 of 1; its source skips bad "
                       r"records \(on_error='skip'\).*Restore it on 2 processes"):
        new.set_state(states[0])
    same = build(0, 2)  # the count that saved it restores as before
    same.set_state(states[0])
    assert [np.asarray(b["x"]).tolist() for b in same] == [[3, 4], [5]]
    other = build(1, 2)  # but only into the shard that saved it
    with pytest.raises(StateError, match=r"\(shard 1 of 2\) was given the state of shard 0 "
                       r"of 2; its source skips bad records \(on_error='skip'\).*Save and "
                       r"restore each process's own state"):
        other.set_state(states[0])
    for p in [*old, new, same, other]:
        p.source.close()


# ------------------------------------------- another process's state, same count
@pytest.mark.parametrize("kind", ["indexed", "host"])
def test_a_process_restores_another_process_state_of_the_same_count(kind):
    """A multi-process Orbax checkpoint holds the primary process's data state only
    (Orbax writes JSON items from process 0): every process restores it. Saved at the
    same step, it says where every share stands, so shard 1 serves its own rest."""
    def build(index):
        return make_pipeline(kind, 22, 3, shuffle=True, stochastic=True,
                             shard_index=index, shard_count=2)

    old = [build(i) for i in range(2)]
    iterators = [iter(p) for p in old]
    for iterator in iterators:
        next(iterator), next(iterator)
    state = old[0].get_state()
    want = [int(r["x"]) for r in records(iterators[1])]  # shard 1's rest, uninterrupted
    restored = build(1)
    restored.set_state(state)
    assert [int(r["x"]) for r in records(restored)] == want
    assert len(want) == 5 and restored.epoch == 1


def test_a_stream_refuses_another_process_state_naming_both_shards():
    def build(index):
        return make_pipeline("stream", 24, 4, shard_index=index, shard_count=2)

    iterator = iter(build(0))
    next(iterator)
    with pytest.raises(StateError, match=r"\(shard 1 of 2\) was given the state of shard 0 "
                       r"of 2; a stream source's position is its own share's .*Save and "
                       r"restore each process's own state"):
        build(1).set_state(iterator.get_state())


def test_a_filtered_pipeline_refuses_another_process_state_of_the_same_count():
    """Filtered shares read different numbers of records to fill the same steps (shard
    0 keeps half of its records, shard 1 all): shard 0's position would skip records of
    shard 1, so its state is refused there."""
    from datarax.operators.filter import FilterOperator
    from datarax.pipeline import Pipeline
    from devices_sources import make_source

    def build(index):
        keep = FilterOperator(predicate=lambda el: (el.data["x"] >= 20) | (el.data["x"] % 2 == 0))
        return Pipeline(source=make_source("indexed", 40), stages=[keep], batch_size=2,
                        shard_index=index, shard_count=2)

    old = [build(i) for i in range(2)]
    iterators = [iter(p) for p in old]
    for iterator in iterators:
        next(iterator), next(iterator)
    assert [p.position for p in old] == [7, 4]
    with pytest.raises(StateError, match=r"\(shard 1 of 2\) was given the state of shard 0 of "
                       r"2, and it has a FilterOperator: each process's position counts the "
                       r"records it read"):
        build(1).set_state(old[0].get_state())
    own = build(1)
    own.set_state(old[1].get_state())
    assert [int(x) for b in own for x in np.asarray(b["x"])] == list(range(24, 40))


def test_a_restore_on_fewer_processes_keeps_the_global_batch_with_rebatch():
    # two processes of 4 records a batch, restored on one that hands out 8 at a time
    from datarax.pipeline import Pipeline, Rebatch
    from datarax.sources import MemorySource, MemorySourceConfig

    def build(index, count, batch_size=4):
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                              {"x": np.arange(48, dtype=np.int32)})
        return Pipeline(source=source, batch_size=batch_size, shard_index=index,
                        shard_count=count, drop_remainder=True)

    old = [build(i, 2) for i in range(2)]
    served = [np.asarray(next(iter(p))["x"]).tolist() for p in old]
    with pytest.raises(StateError, match=r"batch_size=4 but this pipeline has batch_size=8 "
                                         r"\(each process's; .*Rebatch\(pipeline, group=k"):
        build(0, 1, batch_size=8).set_state(old[0].get_state())
    one = build(0, 1)
    one.set_state(old[0].get_state())
    rest = [np.asarray(b["x"]).tolist() for b in Rebatch(one, group=2)]
    assert [len(b) for b in rest] == [8] * 5
    assert sorted(sum(served + rest, [])) == list(range(48))

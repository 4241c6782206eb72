"""Pipeline: epochs, exactly-once, per-record keys, compile reuse, resume, errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, SourceContractError, StateError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline, PipelineIterator
from datarax.sources import MemorySource, MemorySourceConfig


def add_noise(element, key):
    return element.update_data({"noise": jax.random.uniform(key)})


def halve(element, key=None):
    return element.update_data({"half": element.data["x"].astype(jnp.float32) / 2})


NOISE = ElementOperator(ElementOperatorConfig(stochastic=True), fn=add_noise)


def make(n=23, batch_size=5, shuffle=True, seed=7, drop_remainder=False, stages=None, rng=0):
    source = MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed), {"x": np.arange(n, dtype=np.int32)})
    if stages is None:
        stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=add_noise)]
    return Pipeline(source=source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(rng), drop_remainder=drop_remainder)


def records(batches):
    return [int(v) for b in batches for v in np.asarray(b["x"])]


@pytest.mark.parametrize("n, batch_size", [(23, 5), (20, 5), (3, 8), (1, 1)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_record_once_per_epoch_and_each_iter_is_a_new_epoch(n, batch_size, shuffle):
    pipeline = make(n, batch_size, shuffle)
    orders = []
    for _ in range(3):
        batches = list(pipeline)
        sizes = [len(b["x"]) for b in batches]
        assert sizes == [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
        assert sorted(records(batches)) == list(range(n))
        orders.append(records(batches))
    if shuffle and n > 3:
        assert orders[0] != orders[1] != orders[2]
    if not shuffle:
        assert orders[0] == list(range(n))


def test_drop_remainder_drops_only_the_short_batch():
    batches = list(make(23, 5, drop_remainder=True))
    assert [len(b["x"]) for b in batches] == [5, 5, 5, 5]
    assert len(set(records(batches))) == 20


def test_equally_built_pipelines_agree_and_seeds_change_order():
    assert records(make(seed=3)) == records(make(seed=3))
    assert records(make(seed=3)) != records(make(seed=4))


def draws_by_record(pipeline, epochs=1):
    out = []
    for _ in range(epochs):
        table = {}
        for batch in pipeline:
            for x, v in zip(np.asarray(batch["x"]), np.asarray(batch["noise"])):
                table[int(x)] = float(v)
        out.append(table)
    return out


def test_per_record_draws_do_not_depend_on_batch_size_or_order():
    reference = draws_by_record(make(batch_size=5, shuffle=True, seed=7))[0]
    assert draws_by_record(make(batch_size=4, shuffle=True, seed=7))[0] == reference
    assert draws_by_record(make(batch_size=23, shuffle=False))[0] == reference
    assert draws_by_record(make(batch_size=2, shuffle=True, seed=99))[0] == reference
    assert len(set(reference.values())) == 23


def test_new_epoch_gives_new_draws_and_rngs_change_draws():
    first, second = draws_by_record(make(), epochs=2)
    assert first.keys() == second.keys() and all(first[k] != second[k] for k in first)
    assert draws_by_record(make(rng=1))[0] != first


def test_explicit_operator_rngs_win_over_pipeline_rngs():
    def op():
        return ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="augment"), fn=add_noise, rngs=nnx.Rngs(augment=5))

    a = draws_by_record(make(stages=[op()], rng=0))[0]
    b = draws_by_record(make(stages=[op()], rng=1))[0]
    assert a == b


def test_stages_run_in_order_and_plain_callables_are_batch_stages():
    def total(batch):
        return {**batch, "total": jnp.full_like(batch["half"], batch["half"].sum())}

    pipeline = make(10, 4, shuffle=False, stages=[ElementOperator(ElementOperatorConfig(), fn=halve), total])
    batch = next(iter(pipeline))
    assert batch["half"].tolist() == [0.0, 0.5, 1.0, 1.5]
    assert batch["total"].tolist() == [3.0] * 4
    assert pipeline.stages[1] is total and pipeline.batch_size == 4


def test_one_compiled_step_serves_every_epoch_iterator_and_equal_pipeline():
    traces = []

    def counted(element, key=None):
        traces.append(1)
        return element

    def build():
        return make(23, 5, stages=[ElementOperator(ElementOperatorConfig(), fn=counted)])

    pipeline = build()
    for _ in range(3):
        list(pipeline)
    list(build())
    assert len(traces) == 1  # short last batch is padded inside the step, not retraced


def test_position_is_kept_in_nnx_variables():
    pipeline = make(23, 5)
    iterator = iter(pipeline)
    next(iterator)
    next(iterator)
    state = nnx.state(pipeline)
    position = state["source"]["datarax_position"]
    assert int(position["index_var"].get_value()) == 10 and int(position["epoch_var"].get_value()) == 0
    assert (pipeline.position, pipeline.epoch) == (10, 0)


def test_state_is_small_json_and_resume_is_exact_at_every_point():
    pipeline = make(23, 5)
    uninterrupted = [records(list(pipeline)) for _ in range(2)]
    flat = uninterrupted[0] + uninterrupted[1]
    for stop in range(0, 11):  # every batch boundary of two epochs
        pipeline = make(23, 5)
        consumed, state = [], None
        it = iter(pipeline)
        for step in range(stop):
            try:
                consumed += records([next(it)])
            except StopIteration:
                it = iter(pipeline)
                consumed += records([next(it)])
        state = json.loads(json.dumps(it.get_state()))
        assert len(json.dumps(state)) < 400
        fresh = make(23, 5)
        fresh.set_state(state)
        rest = []
        for _ in range(1 if stop > 5 else 2):  # the for loops left of the two epochs
            rest += records(list(fresh))
        assert consumed + rest == flat, stop


def test_resume_of_a_resume_and_draws_survive_resume():
    full = [(records([b]), np.asarray(b["noise"]).tolist()) for b in make(23, 5)]
    it = iter(make(23, 5))
    got = [next(it)]
    state = it.get_state()
    it2 = iter(make(23, 5))
    it2.set_state(json.loads(json.dumps(state)))
    got.append(next(it2))
    state2 = it2.get_state()
    it3 = iter(make(23, 5))
    it3.set_state(state2)
    got += list(it3)
    assert [(records([b]), np.asarray(b["noise"]).tolist()) for b in got] == full


def _take(route, pipeline, iterator):
    if route == "iterator":
        return json.loads(json.dumps(iterator.get_state()))
    if route == "pipeline":
        return json.loads(json.dumps(pipeline.get_state()))
    if route == "source":
        return json.loads(json.dumps(pipeline.source.get_state()))
    return jax.tree.map(lambda x: x.copy(), nnx.state(pipeline))


def _restore(route, fresh, state):
    """Restore ``state`` into ``fresh``; the first for loop after it (its batches)."""
    from datarax.testing.resume import restore_level

    iterator = restore_level(route, fresh, state)
    return records(list(fresh if iterator is None else iterator))


ROUTES = ["iterator", "pipeline", "source", "nnx"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_state_taken_after_the_last_batch_restores_to_an_empty_pass(route):
    # docs/reliability.md, "Epoch ends": inside the for, after its last batch, the pass is
    # still open: epoch 0 with nothing left. Its first loop serves nothing; the next is
    # epoch 1, so every for loop stays one epoch across the restore.
    reference = make(23, 5)
    list(reference)
    second = records(list(reference))
    pipeline = make(23, 5)
    iterator = iter(pipeline)
    for _ in iterator:
        state = _take(route, pipeline, iterator)
        said = pipeline.epoch, pipeline.position
    assert said == (0, 23)
    fresh = make(23, 5)
    assert _restore(route, fresh, state) == []
    assert (fresh.epoch, fresh.position) == (1, 0)
    assert records(list(fresh)) == second


@pytest.mark.parametrize("route", ROUTES)
def test_a_state_taken_after_the_loop_ended_says_and_restores_the_next_epoch(route):
    reference = make(23, 5)
    list(reference)
    second = records(list(reference))
    pipeline = make(23, 5)
    iterator = iter(pipeline)
    list(iterator)
    assert (pipeline.epoch, pipeline.position) == (1, 0)
    state = _take(route, pipeline, iterator)
    if route in ("iterator", "pipeline"):
        assert (state["epoch"], state["position"]) == (1, 0)
    elif route == "source":
        assert state == {"current_index": 0, "current_epoch": 1,
                         "settings": {"shuffle": True, "seed": 7}, "records": 23}
    fresh = make(23, 5)
    assert _restore(route, fresh, state) == second


def test_the_seed_epoch_loop_runs_its_epochs_across_restores_at_epoch_ends():
    # `for epoch in range(4): for batch in pipeline:` preempted right after each epoch's
    # last step and resumed from the state saved at that step: exactly 4 epochs.
    reference = make(23, 5)
    expected = [records(list(reference)) for _ in range(4)]
    got: list[list[int]] = [[] for _ in range(4)]
    preempted: set[int] = set()
    pipeline, start = make(23, 5), 0
    while start is not None:
        try:
            for epoch in range(start, 4):
                for batch in pipeline:
                    got[epoch] += records([batch])
                    saved = epoch, json.loads(json.dumps(pipeline.get_state()))
                    if len(got[epoch]) == 23 and epoch not in preempted:
                        preempted.add(epoch)
                        raise KeyboardInterrupt  # the job is preempted here
            start = None
        except KeyboardInterrupt:
            start, state = saved
            pipeline = make(23, 5)
            pipeline.set_state(state)
    assert got == expected
    assert preempted == {0, 1, 2, 3}


def test_break_then_a_new_loop_starts_the_next_epoch_and_after_the_end_the_same():
    reference = make(23, 5)
    epochs = [records(list(reference)) for _ in range(3)]
    pipeline = make(23, 5)
    for _ in pipeline:
        break  # one batch of epoch 0
    assert records(list(pipeline)) == epochs[1]
    assert records(list(pipeline)) == epochs[2]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"batch_size": 4}, "batch_size"),
        ({"seed": 8}, "source.seed"),
        ({"shuffle": False}, "source.shuffle"),
        ({"drop_remainder": True}, "drop_remainder"),
        ({"n": 24}, "num_records"),
    ],
)
def test_state_from_another_configuration_is_refused_naming_the_setting(change, field):
    state = make().get_state()
    with pytest.raises(StateError) as info:
        make(**change).set_state(state)
    assert info.value.field == field
    assert f"saved with {field}=" in str(info.value)


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda s: s.pop("position"), "missing 'position'"),
        (lambda s: s.update(position=-2), "'position' must be an int >= 0, got -2"),
        (lambda s: s.update(epoch="1"), "'epoch' must be an int >= 0, got '1'"),
        (lambda s: s.update(position=24), "position=24 is past the end of the epoch \\(23 records\\)"),
        (lambda s: s.update(version=9), "version 9 is not 4"),
    ],
)
def test_tampered_state_is_refused(tamper, message):
    pipeline = make()
    it = iter(pipeline)
    next(it)
    state = it.get_state()
    tamper(state)
    with pytest.raises(StateError, match=message):
        iter(make()).set_state(state)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"batch_size": 0}, ConfigError, "batch_size must be an int >= 1, got 0"),
        ({"batch_size": 2.0}, ConfigError, "batch_size must be an int >= 1, got 2.0"),
        ({"drop_remainder": 1}, ConfigError, "drop_remainder must be a bool"),
        ({"source": [1, 2, 3]}, SourceContractError, "source must be a DataSourceModule .*got list"),
        ({"stages": [3]}, SourceContractError, "stage 0 is int, which is neither an operator"),
        ({"stages": [ElementOperator]}, SourceContractError,
         r"stage 0 is the class ElementOperator, not an operator: build it first"),
        ({"stages": NOISE}, SourceContractError, "stages must be a list of operators"),
        ({"shard_index": 2, "shard_count": 2}, ConfigError, "0 <= shard_index < shard_count"),
        ({"shard_count": 2}, ConfigError,
         r"shard_count=2 without shard_index: .* jax.process_count\(\) = 1, so some shares "
         r"would never be read\. Pass shard_index="),
        ({"rngs": 0}, ConfigError, r"Pipeline rngs must be an nnx.Rngs or None, got int 0\. Pass rngs=nnx.Rngs\(seed\)"),
        ({"rngs": {"default": 0}}, ConfigError, "Pipeline rngs must be an nnx.Rngs or None, got dict"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    args = {"source": MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)}), "stages": [], "batch_size": 2}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        Pipeline(**args)


def test_iterator_repr_says_source_epoch_records_handed_out_and_whether_it_is_live():
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), {"x": np.arange(10, dtype=np.int32)}),
                        stages=[], batch_size=4)
    it = iter(pipeline)
    next(it), next(it)
    assert repr(it) == ("<PipelineIterator over MemorySource: epoch 0, batch_size 4, live, "
                        "8 records handed out>")
    newer = iter(pipeline)
    assert repr(it).endswith("superseded by a newer iter(pipeline)>")
    one = iter(Pipeline(source=MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)}),
                        stages=[], batch_size=1))
    next(one)
    assert repr(one).endswith("live, 1 record handed out>")  # one, not "1 records"
    list(newer)
    assert repr(newer) == "<PipelineIterator over MemorySource: epoch 1, batch_size 4, ended>"


def test_repr_of_an_iterator_whose_init_did_not_run_says_so_instead_of_raising():
    # what a verbose traceback (IPython %xmode Verbose) shows of ``self`` when __init__ raised
    assert repr(PipelineIterator.__new__(PipelineIterator)) == "<PipelineIterator, not started>"


def test_context_manager_and_close_end_the_epoch():
    pipeline = make(23, 5)
    with iter(pipeline) as it:
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_shards_are_disjoint_equal_and_keep_per_record_draws():
    whole = draws_by_record(make(30, 4))[0]
    seen = {}
    for index in range(3):
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=7), {"x": np.arange(31, dtype=np.int32)})
        pipeline = Pipeline(source=source, stages=[ElementOperator(ElementOperatorConfig(stochastic=True), fn=add_noise)], batch_size=4, rngs=nnx.Rngs(0), shard_index=index, shard_count=3)
        table = draws_by_record(pipeline)[0]
        assert len(table) == 10
        assert not set(table) & set(seen)
        seen.update(table)
    assert len(seen) == 30
    common = set(seen) & set(whole)
    assert common and all(seen[k] == whole[k] for k in common)


def test_stats_count_batches_and_name_the_timers():
    pipeline = make(23, 5)
    list(pipeline)
    stats = pipeline.stats()
    assert (stats["batches"], stats["records"]) == (5, 23)
    assert set(stats["seconds"]) == {"read", "validate", "transfer", "stages", "step", "compile", "wait"}
    assert stats["seconds"]["read"] == 0.0 and stats["seconds"]["step"] > 0.0
    assert stats["bottleneck"] == "step"
    pipeline.reset_stats()
    assert pipeline.stats()["batches"] == 0


def test_check_finite_names_field_position_and_stable_index():
    values = np.arange(12, dtype=np.float32)
    values[7] = np.nan
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=3), {"v": values, "i": np.arange(12, dtype=np.int32)})
    order = records_of(MemorySource(MemorySourceConfig(shuffle=True, seed=3), {"x": np.arange(12, dtype=np.int32)}))
    position = order.index(7)
    pipeline = Pipeline(source=source, stages=[], batch_size=5, check_finite=True)
    with pytest.raises(Exception) as info:
        list(pipeline)
    assert f"field 'v' of the record at position {position} of epoch 0 (stable index 7) holds NaN or inf" in str(info.value)
    assert [len(b["v"]) for b in Pipeline(source=source, stages=[], batch_size=5)] == [5, 5, 2]  # off by default


def records_of(source):
    return records(Pipeline(source=source, stages=[], batch_size=4))


def test_check_finite_must_be_bool():
    with pytest.raises(ConfigError, match="check_finite must be a bool"):
        make().__class__(source=make().source, stages=[], batch_size=2, check_finite=1)


def test_a_shard_index_given_alone_names_the_defaulted_shard_count():
    """shard_index=1 without shard_count: the count defaults to jax.process_count() (1
    here), and the error says so and what to pass."""
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    with pytest.raises(ConfigError, match=r"got shard_index=1 \(shard_count defaulted to "
                       r"jax.process_count\(\) = 1; pass shard_count= as well\)"):
        Pipeline(source=source, stages=[], batch_size=2, shard_index=1)


def test_a_zero_shard_count_says_it_must_be_at_least_one():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    with pytest.raises(ConfigError, match=r"shard_count must be an int >= 1 .* got 0\."):
        Pipeline(source=source, stages=[], batch_size=2, shard_index=0, shard_count=0)

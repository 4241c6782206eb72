"""MapOperator, CompositeOperatorModule, ProbabilisticOperator and SelectorOperator:
values, per-record choice (keys), exact resume through a Pipeline, and errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.errors import ConfigError, DataraxError
from datarax.core.keys import record_keys
from datarax.operators import (
    CompositeOperatorConfig,
    CompositeOperatorModule,
    CompositionStrategy,
    ElementOperator,
    ElementOperatorConfig,
    MapOperator,
    MapOperatorConfig,
    ProbabilisticOperator,
    SelectorOperator,
)
from datarax.testing import check_resume_exact

from operator_helpers import assert_key_invariant, pipeline

X = jnp.arange(6, dtype=jnp.float32).reshape(3, 2)


# One function object per operation: the fresh pipelines of a resume check find the step
# compiled before (a step is cached by its stages' functions) instead of tracing it again.
@functools.cache
def plus(v):
    return lambda a: a + v


@functools.cache
def times(v):
    return lambda a: a * v


def uniform_noise(a, k):
    return a + jax.random.uniform(k, a.shape)


def add(v):
    return MapOperator(MapOperatorConfig(subtree=["x"]), fn=plus(v), name=f"add{v}")


def mul(v):
    return MapOperator(MapOperatorConfig(subtree=["x"]), fn=times(v), name=f"mul{v}")


def noise():
    return MapOperator(MapOperatorConfig(subtree=["x"], stochastic=True), fn=uniform_noise,
                       name="noise")


def keys(n, seed=0):
    return record_keys(jax.random.key(seed), 0, jnp.arange(n))


def composite(strategy, ops, **kw):
    extra = {k: kw.pop(k) for k in ("merge", "weights") if k in kw}
    return CompositeOperatorModule(CompositeOperatorConfig(strategy=strategy, **extra),
                                   operators=ops, **kw)


# -- MapOperator ---------------------------------------------------------------------------
def test_map_applies_to_all_fields_a_list_or_a_mask():
    data = {"x": X, "y": X + 100}
    every = MapOperator(MapOperatorConfig(), fn=lambda a: -a).apply_batch(data, None)
    np.testing.assert_array_equal(every["x"], -X)
    np.testing.assert_array_equal(every["y"], -(X + 100))
    listed = MapOperator(MapOperatorConfig(subtree=["y"]), fn=lambda a: -a).apply_batch(data, None)
    np.testing.assert_array_equal(listed["x"], X)
    np.testing.assert_array_equal(listed["y"], -(X + 100))
    masked = MapOperator(MapOperatorConfig(subtree={"x": True, "y": False}),
                         fn=lambda a: a.sum()).apply_batch(data, None)
    assert masked["x"].tolist() == [1.0, 5.0, 9.0]  # fn sees one record (no batch axis)
    assert MapOperatorConfig(subtree={"x": True, "y": False}).subtree == ("x",)


def test_stochastic_map_gives_every_chosen_field_of_a_record_the_same_key():
    op = MapOperator(MapOperatorConfig(subtree=["a", "b"], stochastic=True),
                     fn=lambda a, k: a + jax.random.uniform(k))
    out = op.apply_batch({"a": jnp.zeros(4), "b": jnp.zeros(4)}, keys(4))
    np.testing.assert_array_equal(out["a"], out["b"])
    assert len(set(np.asarray(out["a"]).tolist())) == 4


# -- composites ----------------------------------------------------------------------------
def test_sequential_applies_in_order():
    out = composite("sequential", [add(1), mul(10)]).apply_batch({"x": X}, None)
    np.testing.assert_array_equal(out["x"], (X + 1) * 10)


@pytest.mark.parametrize("merge,expected", [
    ("stack", lambda a, b: np.stack([a, b], axis=1)),
    ("concat", lambda a, b: np.concatenate([a, b], axis=1)),
    ("sum", lambda a, b: a + b),
    ("mean", lambda a, b: (a + b) / 2),
])
def test_parallel_merges(merge, expected):
    out = composite("parallel", [add(1), mul(10)], merge=merge).apply_batch({"x": X}, None)
    np.testing.assert_allclose(out["x"], expected(np.asarray(X) + 1, np.asarray(X) * 10))


def test_parallel_sum_and_mean_of_uint8_images_do_not_wrap():
    images = jnp.full((2, 2, 2, 3), 200, jnp.uint8)
    same = [MapOperator(subtree="image", fn=lambda a: a, name=f"id{i}") for i in range(2)]
    summed = composite("parallel", same, merge="sum").apply_batch({"image": images}, None)
    assert summed["image"].dtype == jnp.uint32 and set(summed["image"].ravel().tolist()) == {400}
    mean = composite("parallel", same, merge="mean").apply_batch({"image": images}, None)
    assert mean["image"].dtype == jnp.float32 and set(mean["image"].ravel().tolist()) == {200.0}


def test_parallel_concat_of_a_field_with_one_value_per_record_says_what_to_use():
    op = composite("parallel", [add(1), mul(10)], merge="concat")
    with pytest.raises(DataraxError, match=r"parallel merge 'concat' joins each record's first "
                       r"axis, but field 'label' holds one value per record \(shapes "
                       r"\[\(3,\), \(3,\)\]\)\. Use merge='stack'"):
        op.apply_batch({"x": X, "label": jnp.arange(3)}, None)


def test_a_python_if_in_a_router_or_condition_says_what_to_write():
    data = {"x": X, "kind": jnp.array([0, 1, 1])}
    routed = composite("branching", [add(1), mul(10)], router=lambda r: 0 if r["kind"] else 1)
    with pytest.raises(ConfigError, match=r"CompositeOperatorModule 'Composite\[add1, mul10\]': "
                       r"the router needs a concrete value of a traced array "
                       r"\(TracerBoolConversionError: .*jnp\.where\(r\['kind'\] > 0, 0, 1\)"):
        routed.apply_batch(data, None)
    gated = composite("conditional_sequential", [add(1)],
                      conditions=[lambda r: r["kind"] > 0 and r["kind"] < 2])
    with pytest.raises(ConfigError, match=r"a condition needs a concrete value"):
        gated.apply_batch(data, None)


def test_weights_that_are_not_numbers_are_a_config_error():
    with pytest.raises(ConfigError, match=r"^CompositeOperatorConfig\.weights must be a list of "
                       r"numbers, one per operator, got \['a'\]\.$"):
        CompositeOperatorConfig(strategy="weighted_parallel", weights=["a"])


def test_parallel_dict_merge_keeps_outputs_apart():
    out = composite("parallel", [add(1), mul(10)], merge="dict").apply_batch({"x": X}, None)
    assert sorted(out) == ["x_0", "x_1"]
    np.testing.assert_array_equal(out["x_1"], X * 10)


def test_weighted_parallel_sums_with_weights():
    op = composite(CompositionStrategy.WEIGHTED_PARALLEL, [add(1), mul(10)], weights=(0.25, 0.5))
    out = op.apply_batch({"x": X}, None)
    np.testing.assert_allclose(out["x"], 0.25 * (X + 1) + 0.5 * X * 10)


def test_conditional_sequential_applies_each_operator_where_its_condition_holds():
    op = composite("conditional_sequential", [add(100), mul(-1)],
                   conditions=[lambda r: r["x"][0] >= 2, lambda r: r["x"][0] < 4])
    out = op.apply_batch({"x": X}, None)
    # each condition sees the record as it stands before its operator:
    # record 0: [0,1] -> only mul; record 1: [2,3] -> add, then 102 < 4 fails; record 2: add
    assert out["x"].tolist() == [[-0.0, -1.0], [102.0, 103.0], [104.0, 105.0]]


def test_branching_routes_each_record_to_one_operator():
    op = composite("branching", [add(1), mul(10), mul(0)], router=lambda r: r["k"])
    out = op.apply_batch({"x": X, "k": jnp.array([2, 0, 1])}, None)
    assert out["x"].tolist() == [[0.0, 0.0], [3.0, 4.0], [40.0, 50.0]]
    # a router value outside [0, 3) is clamped to the first / last operator (docs/operators.md)
    out = op.apply_batch({"x": X, "k": jnp.array([-4, 7, 1])}, None)
    assert out["x"].tolist() == [[1.0, 2.0], [0.0, 0.0], [40.0, 50.0]]


def test_composite_of_stochastic_children_is_stochastic_and_key_invariant():
    op = composite("sequential", [noise(), add(1)])
    assert op.stochastic and op.config.stochastic
    data = {"x": np.zeros((10, 2), np.float32), "id": np.arange(10, dtype=np.int32)}
    out = assert_key_invariant(lambda: composite("sequential", [noise(), add(1)]), data, field="x")
    assert len({v.tobytes() for v in out.values()}) == 10


# -- ProbabilisticOperator / SelectorOperator ----------------------------------------------
def test_probabilistic_applies_with_probability_per_record():
    op = ProbabilisticOperator(mul(-1), probability=0.3)
    ones = jnp.ones((2000, 1))
    out = np.asarray(op.apply_batch({"x": ones}, keys(2000))["x"])[:, 0]
    assert set(out.tolist()) == {1.0, -1.0}
    assert 0.27 < (out == -1).mean() < 0.33
    again = np.asarray(op.apply_batch({"x": ones[:500]}, keys(2000)[:500])["x"])[:, 0]
    np.testing.assert_array_equal(again, out[:500])  # the record's key decides, not the batch


def test_probabilistic_edges_and_stochasticity():
    assert ProbabilisticOperator(mul(-1), 1.0).stochastic is False
    assert ProbabilisticOperator(mul(-1), 0.5).stochastic is True
    assert ProbabilisticOperator(noise(), 1.0).stochastic is True
    np.testing.assert_array_equal(ProbabilisticOperator(mul(-1), 1.0).apply_batch({"x": X}, None)["x"], -X)
    np.testing.assert_array_equal(ProbabilisticOperator(mul(-1), 0.0).apply_batch({"x": X}, None)["x"], X)


def test_selector_picks_one_operator_per_record_by_weight():
    op = SelectorOperator([add(1), add(2), add(3)], weights=[1, 0, 3])
    out = np.asarray(op.apply_batch({"x": jnp.zeros((2000,))}, keys(2000))["x"])
    assert set(out.tolist()) == {1.0, 3.0}
    assert 0.72 < (out == 3).mean() < 0.78
    again = np.asarray(op.apply_batch({"x": jnp.zeros((7,))}, keys(2000)[5:12])["x"])
    np.testing.assert_array_equal(again, out[5:12])


def test_selector_resumes_exactly_in_a_pipeline():
    data = {"x": np.zeros((11, 2), np.float32), "id": np.arange(11, dtype=np.int32)}
    make = lambda: pipeline(
        [SelectorOperator([add(1), mul(2), noise()]), ProbabilisticOperator(add(5), 0.5)],
        data, batch_size=3)
    report = check_resume_exact(make, [1, 3, 3, 5], num_epochs=2)
    assert report.num_batches == 8


# -- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: ProbabilisticOperator(add(1), 1.5),
     "ProbabilisticOperator probability must be a number in [0, 1], got 1.5."),
    (lambda: ProbabilisticOperator(add(1), -0.1),
     "ProbabilisticOperator probability must be a number in [0, 1], got -0.1."),
    (lambda: SelectorOperator([]), "SelectorOperator: operators is empty; give at least one operator."),
    (lambda: SelectorOperator([add(1), add(2)], weights=[1.0]),
     "SelectorOperator: got 1 weight for 2 operators; give one weight per operator."),
    (lambda: SelectorOperator([add(1), add(2)], weights=[0, 0]),
     "SelectorOperator: weights sum to 0; at least one must be positive."),
    (lambda: SelectorOperator([add(1), add(2)], weights=[2, -1]),
     "SelectorOperator: weights must be finite numbers >= 0, got [2.0, -1.0]."),
    (lambda: SelectorOperator([add(1), add(2)], weights=[float("inf"), 1]),
     "SelectorOperator: weights must be finite numbers >= 0, got [inf, 1.0]."),
    (lambda: SelectorOperator([add(1), lambda b: b]),
     "SelectorOperator: operator 1 is function, not an operator module (wrap a function in "
     "ElementOperator or MapOperator)."),
    (lambda: CompositeOperatorConfig(strategy="zigzag"),
     "CompositeOperatorConfig.strategy must be one of ['sequential', 'conditional_sequential', "
     "'parallel', 'weighted_parallel', 'branching'], got 'zigzag'."),
    (lambda: CompositeOperatorConfig(merge="max"),
     "CompositeOperatorConfig.merge must be one of ['concat', 'stack', 'sum', 'mean', 'dict'], "
     "got 'max'."),
    (lambda: composite("sequential", []),
     "CompositeOperatorModule: operators is empty; give at least one operator."),
    (lambda: composite("weighted_parallel", [add(1), add(2)], weights=(1.0,)),
     "CompositeOperatorModule: got 1 weight for 2 operators; give one weight per operator."),
    (lambda: composite("branching", [add(1)]),
     "CompositeOperatorModule: strategy 'branching' needs router=callable(record) -> int."),
    (lambda: composite("conditional_sequential", [add(1), add(2)], conditions=[lambda r: True]),
     "CompositeOperatorModule: strategy 'conditional_sequential' needs one condition per "
     "operator: 2 operators, 1 condition."),
    (lambda: composite("conditional_sequential", [add(1), add(2)]),
     "CompositeOperatorModule: strategy 'conditional_sequential' needs one condition per "
     "operator: 2 operators, no conditions."),
    (lambda: MapOperatorConfig(subtree=[]), "MapOperatorConfig.subtree selects no field; name at least one."),
    (lambda: MapOperator(MapOperatorConfig(), fn=3), "MapOperator fn must be callable, got int."),
    (lambda: MapOperator(subtree=["x"]), "MapOperator needs fn=... as a keyword: the function "
     "it applies, e.g. MapOperator(fn=my_function) or MapOperator(MapOperatorConfig(), "
     "fn=my_function)."),
    (lambda: ElementOperator(ElementOperatorConfig(), lambda e, k=None: e),
     "ElementOperator needs fn=... as a keyword (got 2 positional arguments; only the config "
     "is positional): the function it applies, e.g. ElementOperator(fn=my_function) or "
     "ElementOperator(ElementOperatorConfig(), fn=my_function)."),
    (lambda: ElementOperator(lambda e, k=None: e),
     "ElementOperator needs fn=... as a keyword (the first argument, function, is the config): "
     "the function it applies, e.g. ElementOperator(fn=my_function) or "
     "ElementOperator(ElementOperatorConfig(), fn=my_function)."),
])
def test_construction_errors(make, message):
    with pytest.raises(ConfigError) as err:
        make()
    assert str(err.value) == message


def test_missing_field_named_at_first_batch():
    data = {"x": np.zeros((4, 2), np.float32), "id": np.arange(4, dtype=np.int32)}
    op = MapOperator(MapOperatorConfig(subtree=["image"]), fn=lambda a: a, name="touch")
    with pytest.raises(DataraxError) as err:
        next(iter(pipeline([op], data, batch_size=2)))
    assert str(err.value) == (
        "MapOperator 'touch': field(s) ['image'] not in the batch; the batch has fields "
        "['id', 'x']. Point the operator at one of those."
    )


def test_composite_names_carry_their_children_into_the_state_fingerprint():
    assert composite("sequential", [add(1), mul(2)]).name == "Composite[add1, mul2]"
    assert ProbabilisticOperator(mul(2), 0.5).name == "Probabilistic[mul2]"
    data = {"x": np.zeros((6, 2), np.float32), "id": np.arange(6, dtype=np.int32)}
    one = pipeline([SelectorOperator([add(1), mul(2)])], data, batch_size=2)
    other = pipeline([SelectorOperator([add(1), mul(3)])], data, batch_size=2)
    assert one.stages_fingerprint() != other.stages_fingerprint()


def test_choices_with_different_outputs_are_refused_naming_them():
    to_int = MapOperator(MapOperatorConfig(), fn=lambda a: a.astype(jnp.int32), name="to_int")
    with pytest.raises(DataraxError) as err:
        SelectorOperator([add(1), to_int]).apply_batch({"x": X}, keys(3))
    assert str(err.value) == (
        "SelectorOperator 'Selector[add1, to_int]': every choice must give the same fields, shapes "
        "and dtypes so one can be picked per record inside the compiled step; operator 0 "
        "(add1) gives {'x': 'float32(2,)'} but operator 1 (to_int) gives {'x': 'int32(2,)'}. "
        "Make them agree (e.g. cast dtypes, resize to one size)."
    )


def test_parallel_and_branching_composites_resume_exactly():
    data = {"x": np.zeros((9, 2), np.float32), "k": np.arange(9, dtype=np.int32) % 2,
            "id": np.arange(9, dtype=np.int32)}
    def route(r):  # the mean merge before it made k float32: round it back to an index
        return jnp.round(r["k"]).astype(jnp.int32)

    def later(r):
        return r["id"] > 4

    make = lambda: pipeline([
        composite("parallel", [noise(), add(1)], merge="mean"),
        composite("branching", [noise(), mul(3)], router=route),
        composite("conditional_sequential", [noise()], conditions=[later]),
    ], data, batch_size=4)
    report = check_resume_exact(make, [1, 2, 4], num_epochs=2)
    assert report.num_batches == 6


# -- per record or whole batch -------------------------------------------------------------
def test_composites_are_per_record_exactly_when_every_child_is():
    from datarax.operators import BatchMixOperator
    from datarax.core.operator import all_per_record as stages_per_record

    mix = BatchMixOperator(mode="mixup", alpha=1.0, num_classes=4)
    assert stages_per_record([add(1), noise()])
    assert stages_per_record([composite("sequential", [add(1), mul(2)])])
    assert stages_per_record([ProbabilisticOperator(mul(-1), 0.5)])
    assert stages_per_record([SelectorOperator([add(1), add(2)])])
    assert not stages_per_record([composite("sequential", [add(1), mix])])
    assert not stages_per_record([ProbabilisticOperator(mix, 1.0)])
    assert not stages_per_record([add(1), lambda batch: batch])  # a plain callable: batch level


def test_a_per_record_chain_pads_the_short_batch_and_still_serves_exact_records():
    data = {"x": np.arange(10, dtype=np.float32)}
    p = pipeline([composite("sequential", [add(1), mul(2)])], data, batch_size=4)
    got = [np.asarray(b["x"]).tolist() for b in p]  # a shuffled epoch: 4, 4, then 2
    assert [len(b) for b in got] == [4, 4, 2]
    assert sorted(v for b in got for v in b) == [2 * (i + 1) for i in range(10)]


def _mix():
    from datarax.operators import BatchMixOperator

    return BatchMixOperator(mode="mixup", alpha=1.0)


@pytest.mark.parametrize("make, owner", [
    (lambda: SelectorOperator([_mix(), add(1)]), "SelectorOperator"),
    (lambda: ProbabilisticOperator(_mix(), 0.5), "ProbabilisticOperator"),
    (lambda: composite("branching", [add(1), _mix()], router=lambda r: 0),
     "CompositeOperatorModule (strategy 'branching')"),
    (lambda: composite("conditional_sequential", [_mix()], conditions=[lambda r: True]),
     "CompositeOperatorModule (strategy 'conditional_sequential')"),
])
def test_a_batch_level_operator_in_a_per_record_choice_is_refused(make, owner):
    # picked per record it would see batches of one record: a mixup of a record with itself
    with pytest.raises(ConfigError, match=r"works on the whole batch") as err:
        make()
    assert str(err.value).startswith(f"{owner}: operator ")


def test_a_batch_level_operator_applied_to_every_batch_still_mixes():
    labels = jax.nn.one_hot(jnp.arange(8), 8)
    batch = {"image": jnp.arange(8.0)[:, None, None, None] * jnp.ones((8, 2, 2, 1)),
             "label": labels}
    for op in (ProbabilisticOperator(_mix(), 1.0), composite("sequential", [_mix()])):
        out = op.apply_batch(batch, keys(8))
        assert not np.array_equal(np.asarray(out["label"]), np.asarray(labels))


def test_a_condition_or_router_giving_a_vector_is_refused_naming_it():
    vector = lambda r: jnp.stack([r["x"][0] > 0, r["x"][1] > 0])  # noqa: E731
    cond = composite("conditional_sequential", [add(1), add(2)], conditions=[vector, vector])
    with pytest.raises(ConfigError, match=r"condition 0 must give one value per record \(a "
                                          r"scalar\), got shape \(2,\)"):
        cond.apply_batch({"x": X}, None)
    routed = composite("branching", [add(1), add(2)], router=lambda r: r["x"].astype(jnp.int32))
    with pytest.raises(ConfigError, match=r"the router must give one value per record"):
        routed.apply_batch({"x": X}, None)


def test_a_router_giving_a_float_is_refused_not_truncated():
    routed = composite("branching", [add(1), add(2)], router=lambda r: r["x"][0] * 0.5)
    with pytest.raises(ConfigError) as err:
        routed.apply_batch({"x": X}, None)
    assert str(err.value) == (
        f"CompositeOperatorModule '{routed.name}': the router must give an integer (the index "
        f"of the operator to apply), got {jnp.result_type(X.dtype, 0.5)}; it is not truncated "
        "for you: make it an integer, e.g. jnp.floor(x).astype(jnp.int32) or jnp.argmax(...).")
    by_bool = composite("branching", [add(1), add(2)], router=lambda r: r["x"][0] > 0)
    out = by_bool.apply_batch({"x": jnp.asarray([[0, 0], [5, 5]], jnp.int32)}, None)
    assert out["x"].tolist() == [[1, 1], [7, 7]]  # False -> operator 0, True -> operator 1


def test_weights_on_a_strategy_that_ignores_them_are_refused():
    with pytest.raises(ConfigError, match="weights apply only to 'weighted_parallel'; got "
                                          "strategy 'sequential'"):
        composite("sequential", [add(1), add(2)], weights=(1.0, 2.0))


def test_a_stochastic_choice_without_keys_is_refused_naming_it():
    for op in (ProbabilisticOperator(mul(-1), 0.5), SelectorOperator([add(1), add(2)])):
        with pytest.raises(DataraxError) as err:
            op.apply_batch({"x": X}, None)
        assert f"'{op.name}' is stochastic but got no keys" in str(err.value)


def test_probability_may_be_a_numpy_number():
    op = ProbabilisticOperator(mul(-1), probability=np.float32(1.0))
    assert op.config.probability == 1.0 and type(op.config.probability) is float
    np.testing.assert_array_equal(op.apply_batch({"x": X}, None)["x"], -X)
    with pytest.raises(ConfigError, match="must be a number in"):
        ProbabilisticOperator(mul(-1), probability=np.bool_(True))


def test_weighted_parallel_of_integer_fields_is_plain_float32():
    batch = {"x": X, "label": jnp.array([1, 2, 3], jnp.int32)}
    op = composite("weighted_parallel", [add(1), mul(10)], weights=(0.5, 0.5))
    out = op.apply_batch(batch, None)
    assert out["label"].dtype == jnp.float32 and not out["label"].weak_type
    np.testing.assert_array_equal(out["label"], [1.0, 2.0, 3.0])

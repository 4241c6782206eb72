"""Pipeline.from_dag: two views merged, order, per-record keys, resume, refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, DataraxError, StateError
from datarax.core.keys import draw, record_keys
from datarax.dag import DagOperator, Merge, SelectFields, plan_graph
from datarax.mixing import MixSource
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing import check_resume_exact

N = 10


def source(shuffle=True, lo=0, n=N):
    ids = np.arange(lo, lo + n, dtype=np.int32)
    data = {"image": np.stack([ids, -ids], 1).astype(np.float32), "label": ids % 3}
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=5), data)


def jitter(element, key):
    noise = jax.random.uniform(key, (2,))
    return element.replace_data({"image": element.data["image"] + noise})  # the view alone


def augment():
    return ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter)


def two_views(src, batch_size=4):
    return Pipeline.from_dag(
        source=src,
        nodes={"view1": augment(), "view2": augment(), "labels": SelectFields("label"),
               "pair": Merge()},
        edges={"view1": ["source"], "view2": ["source"], "labels": ["source"],
               "pair": ["view1", "view2", "labels"]},
        sink="pair",
        batch_size=batch_size,
        rngs=nnx.Rngs(3),
    )


def rows(pipeline):
    out = {}
    for batch in pipeline:
        b = jax.tree.map(np.asarray, batch)
        for k in range(len(b["labels_label"])):
            out[int(np.rint(b["view1_image"][k, 0] - 0.5))] = {f: b[f][k] for f in b}
    return out


def test_contrastive_two_views_are_the_record_plus_its_own_draws():
    pipeline = two_views(source(shuffle=False))
    batch = jax.tree.map(np.asarray, next(iter(pipeline)))
    assert sorted(batch) == ["labels_label", "view1_image", "view2_image"]
    ids = np.arange(4)
    image = np.stack([ids, -ids], 1).astype(np.float32)
    # The graph is stage 1: its per-record keys, then node i (place in nodes) folds in i.
    key, count = pipeline.key_pair()
    graph_keys = record_keys(jax.random.fold_in(draw(key, count), 1), 0, jnp.arange(4))
    for node, position in (("view1", 0), ("view2", 1)):
        noise = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, position), (2,)))(graph_keys)
        np.testing.assert_allclose(batch[f"{node}_image"], image + np.asarray(noise), rtol=1e-6)
    assert not np.allclose(batch["view1_image"], batch["view2_image"])
    assert batch["labels_label"].tolist() == (ids % 3).tolist()


@pytest.mark.slow
def test_views_are_the_same_at_any_batch_size_and_on_the_host_path():
    small, large = rows(two_views(source(), 3)), rows(two_views(source(), 7))
    assert sorted(small) == list(range(N))
    for i in range(N):
        for field in small[i]:
            np.testing.assert_array_equal(small[i][field], large[i][field])
    mixed = MixSource([source(lo=0, n=6), source(lo=6, n=4)], [6, 4], seed=1)
    host = rows(two_views(mixed, 4))
    assert sorted(host) == list(range(N))


def test_resume_through_a_dag_at_every_batch_boundary():
    def make():
        return two_views(source(), batch_size=3)

    for level in ("pipeline", "iterator"):
        report = check_resume_exact(make, range(9), num_epochs=2, level=level)
        assert report.batches_per_epoch == (4, 4) and report.num_records == 2 * N


def _pair_with(labels_node, view2_node):
    return Pipeline.from_dag(
        source=source(),
        nodes={"view1": augment(), "view2": view2_node, "labels": labels_node, "pair": Merge()},
        edges={"view1": ["source"], "view2": ["source"], "labels": ["source"],
               "pair": ["view1", "view2", "labels"]},
        sink="pair",
        batch_size=4,
        rngs=nnx.Rngs(3),
    )


def test_a_state_is_refused_by_a_graph_whose_nodes_differ():
    saved = iter(two_views(source()))
    next(saved)
    state = saved.get_state()
    _pair_with(SelectFields("label"), augment()).set_state(state)  # the same graph
    steady = ElementOperator(ElementOperatorConfig(), fn=lambda element, key=None: element)
    for other in (_pair_with(SelectFields("image"), augment()),
                  _pair_with(SelectFields("label"), steady)):
        with pytest.raises(StateError, match="Pipeline state was saved with stages="):
            other.set_state(state)


def test_nodes_run_in_topological_order_with_joined_inputs():
    calls = []

    def node(name, out_field):
        def fn(batch):
            calls.append((name, sorted(batch)))
            return {out_field: sum(batch.values())}
        return fn

    dag = DagOperator(
        nodes={"c": node("c", "z"), "a": node("a", "x"), "b": node("b", "y")},
        edges={"c": ["a", "b"], "a": ["source"], "b": ["a"]},
        sink="c",
    )
    out = dag.apply_batch({"v": jnp.arange(3)}, None)
    assert calls == [("a", ["v"]), ("b", ["x"]), ("c", ["x", "y"])]
    assert dag.order == ("a", "b", "c")
    assert out["z"].tolist() == [0, 2, 4]  # x + y = v + v


def test_the_linear_form_is_a_chain_graph():
    def add(k):
        return ElementOperator(ElementOperatorConfig(),
                               fn=lambda e, key=None: e.update_data({"image": e.data["image"] + k}))

    linear = Pipeline(source(), [add(1.0), add(10.0)], batch_size=4)
    chained = Pipeline(source(), [DagOperator.chain([add(1.0), add(10.0)])], batch_size=4)
    for a, b in zip(linear, chained):
        np.testing.assert_array_equal(np.asarray(a["image"]), np.asarray(b["image"]))
    assert DagOperator.chain([add(1.0), add(2.0)]).order == ("stage0", "stage1")
    with pytest.raises(ConfigError, match=r"chain needs a non-empty list of stages, got \[\]"):
        DagOperator.chain([])
    with pytest.raises(ConfigError, match=r"got SelectFields; wrap a single stage in a list"):
        DagOperator.chain(SelectFields("image"))


def test_select_fields_renames_and_refuses_missing_fields():
    pick = SelectFields("image", rename={"image": "pixels"})
    assert sorted(pick.apply_batch({"image": jnp.ones(2), "label": jnp.ones(2)}, None)) == ["pixels"]
    with pytest.raises(DataraxError, match=r"has no field\(s\) \['mask'\]; it has \['image'\]"):
        SelectFields("mask").apply_batch({"image": jnp.ones(2)}, None)


@pytest.mark.parametrize(
    ("nodes", "edges", "sink", "message"),
    [
        (["a", "b"], {"a": ["b"], "b": ["a"]}, "b", "The graph has a cycle: a -> b -> a."),
        (["a", "b", "c"], {"a": ["source"], "b": ["c"], "c": ["b"]}, "b",
         "The graph has a cycle: b -> c -> b."),
        (["a"], {"a": ["x"]}, "a", "edges['a'] names 'x', which is not a node; the nodes are ['a']"),
        (["a"], {"a": ["source"], "q": ["a"]}, "a", "edges lists predecessors of 'q', which is not a node"),
        (["a"], {"a": ["source"]}, "out", "The sink 'out' is not a node; the nodes are ['a']."),
        (["a", "b"], {"a": ["source"]}, "a", "Nodes ['b'] have no entry in edges"),
        (["a", "b"], {"a": ["source"], "b": ["source"]}, "a", "Nodes ['b'] do not lead to the sink 'a'"),
        (["source"], {"source": ["source"]}, "source", "'source' is the name of the source batch"),
        (["a"], {"a": []}, "a", "edges['a'] must be a non-empty list of node names"),
    ],
)
def test_bad_graphs_are_refused_naming_the_nodes(nodes, edges, sink, message):
    with pytest.raises(ConfigError) as err:
        plan_graph(nodes, edges, sink)
    assert message in str(err.value)
    ops = {n: SelectFields("image") for n in nodes}
    with pytest.raises(ConfigError) as err:
        Pipeline.from_dag(source(), nodes=ops, edges=edges, sink=sink, batch_size=2)
    assert message in str(err.value)


def test_bad_nodes_are_refused():
    own = ElementOperator(ElementOperatorConfig(stochastic=True), fn=jitter, rngs=nnx.Rngs(1))
    with pytest.raises(ConfigError, match="node 'a' was built with its own rngs"):
        DagOperator({"a": own}, {"a": ["source"]}, "a")
    with pytest.raises(ConfigError, match="node 'a' is int, neither an operator"):
        DagOperator({"a": 3}, {"a": ["source"]}, "a")
    with pytest.raises(ConfigError, match=r"node 'm' is the class Merge, not an operator: build it first"):
        DagOperator({"m": Merge}, {"m": ["source"]}, "m")  # a class is callable, but not a node
    with pytest.raises(ConfigError, match=r"nodes must be a non-empty dict \{name: operator\}, got a list\.$"):
        DagOperator([SelectFields("image")], {}, "a")
    with pytest.raises(ConfigError, match=r"node names must be strings .*, got 1 \(int\)"):
        DagOperator({1: SelectFields("image")}, {1: ["source"]}, 1)
    clash = DagOperator({"a": SelectFields("image"), "b": SelectFields("image"),
                         "c": lambda b: b}, {"a": ["source"], "b": ["source"], "c": ["a", "b"]}, "c")
    with pytest.raises(DataraxError, match="field 'image' comes from both 'a' and 'b'"):
        clash.apply_batch({"image": jnp.ones(2)}, None)
    with pytest.raises(ConfigError, match="Merge naming must contain"):
        Merge(naming="{node}")


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: SelectFields("a", "b", rename={"a": "b"}), "both 'a' and 'b' would be named 'b'"),
        (lambda: SelectFields("a", "a"), "selects 'a' twice"),
        (lambda: SelectFields("a", rename={"a": 3}), "rename 'a' to a string, got 3"),
        (lambda: Merge(naming="{nod}_{field}"), r"\{nod\}"),
        (lambda: Merge(naming="{node}_{field}_{0}"), r"\{0\}"),
    ],
)
def test_select_and_merge_settings_that_would_lose_or_garble_fields_are_refused(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_a_filter_as_a_graph_node_is_refused_when_built_naming_the_node():
    from datarax.operators import FilterOperator

    even = FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0)
    with pytest.raises(ConfigError, match="node 'keep' is a FilterOperator.*Pipeline's stages"):
        DagOperator({"keep": even, "m": Merge()}, {"keep": ["source"], "m": ["keep", "source"]}, "m")


def test_from_dag_with_stages_says_how_to_put_stages_around_the_graph():
    source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    with pytest.raises(ConfigError, match=r"stages=\[\.\.\., DagOperator\(nodes, edges, sink\)"):
        Pipeline.from_dag(source=source, nodes={"a": SelectFields("x")}, edges={"a": ["source"]},
                          sink="a", stages=[SelectFields("x")])

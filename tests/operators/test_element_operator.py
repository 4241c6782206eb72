"""ElementOperator: config, keys, per-record host path, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.element import Element
from datarax.core.errors import ConfigError, DataraxError
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def scale(element, key=None):
    return element.update_data({"x": element.data["x"] * 3})


def test_config_defaults_and_validation():
    assert ElementOperatorConfig() == ElementOperatorConfig(stochastic=False, stream_name=None)
    with pytest.raises(ConfigError, match="stochastic must be a bool"):
        ElementOperatorConfig(stochastic="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="stream_name must be None or an identifier string .*, got 'a b'"):
        ElementOperatorConfig(stream_name="a b")


def test_fn_must_be_callable():
    with pytest.raises(ConfigError, match="fn must be callable, got int"):
        ElementOperator(ElementOperatorConfig(), fn=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("stochastic", [False, True])
def test_rngs_that_is_not_an_nnx_rngs_is_refused_naming_the_operator(stochastic):
    with pytest.raises(ConfigError, match=r"ElementOperator rngs must be an nnx.Rngs or None, "
                       r"got int 0\. Pass rngs=nnx.Rngs\(seed\)"):
        ElementOperator(ElementOperatorConfig(stochastic=stochastic), fn=scale, rngs=0)


def test_fn_that_cannot_take_element_and_key_is_refused_when_built():
    def normalize(element):
        return element

    with pytest.raises(ConfigError) as err:
        ElementOperator(fn=normalize)
    assert str(err.value) == (
        "ElementOperator 'normalize' calls fn(element, key), but fn(element) cannot take that "
        "(too many positional arguments). Give fn 2 positional parameter(s), e.g. "
        "def normalize(element, key=None).")
    with pytest.raises(ConfigError, match=r"e\.g\. lambda element, key=None: element\.$"):
        ElementOperator(fn=lambda e: e)
    ElementOperator(fn=lambda *args: args[0])  # anything that takes (element, key) is fine


def test_map_fn_is_checked_against_the_arguments_it_gets():
    from datarax.operators import MapOperator

    with pytest.raises(ConfigError, match=r"MapOperator '<lambda>' calls fn\(array, key\), but "
                       r"fn\(a\) cannot take that"):
        MapOperator(fn=lambda a: a, stochastic=True)
    with pytest.raises(ConfigError, match=r"calls fn\(array\), but fn\(a, k\) cannot take that .*"
                       r"\(a fn that draws from a key needs stochastic=True; one that ignores it can "
                       r"default it, lambda array, key=None: \.\.\.\)\.$"):
        MapOperator(fn=lambda a, k: a)
    MapOperator(fn=jnp.sqrt)  # a function without a readable signature is called as is


def test_apply_batch_vmaps_fn_over_records():
    op = ElementOperator(ElementOperatorConfig(), fn=scale)
    assert op.apply_batch({"x": jnp.arange(4)}, None)["x"].tolist() == [0, 3, 6, 9]
    assert op.name == "scale" and not op.stochastic


def test_a_returned_dict_updates_only_its_fields_and_nothing_else_is_accepted():
    op = ElementOperator(ElementOperatorConfig(), fn=lambda e, k: {"y": e.data["x"] + 1})
    out = op.apply_batch({"x": jnp.arange(2)}, None)
    assert list(out) == ["x", "y"]
    assert out["x"].tolist() == [0, 1] and out["y"].tolist() == [1, 2]
    bad = ElementOperator(ElementOperatorConfig(), fn=lambda e, k: 1, name="bad")
    with pytest.raises(DataraxError, match="ElementOperator 'bad': fn must return an Element"):
        bad.apply_batch({"x": jnp.arange(2)}, None)


def test_a_partial_dict_keeps_the_label_through_a_pipeline():
    def brighten(element, key=None):
        return {"image": element.data["image"] * 2.0}  # the label is not mentioned

    source = MemorySource(
        MemorySourceConfig(),
        {"image": np.arange(6, dtype=np.float32), "label": np.arange(6, dtype=np.int32) + 10},
    )
    pipe = Pipeline(source=source, stages=[ElementOperator(fn=brighten)], batch_size=4,
                    rngs=nnx.Rngs(0))
    batches = list(pipe)
    assert [sorted(b) for b in batches] == [["image", "label"]] * 2
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]),
                                  np.arange(6) * 2.0)
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]),
                                  np.arange(6) + 10)


def test_replace_data_is_how_a_field_is_dropped():
    op = ElementOperator(fn=lambda e, k: e.replace_data({"x": e.data["x"]}))
    out = op.apply_batch({"x": jnp.arange(2), "y": jnp.arange(2)}, None)
    assert list(out) == ["x"] and out["x"].tolist() == [0, 1]


def test_stochastic_base_key_from_rngs_stream():
    a = ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="augment"), fn=scale, rngs=nnx.Rngs(augment=1))
    b = ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="augment"), fn=scale, rngs=nnx.Rngs(augment=1))
    c = ElementOperator(ElementOperatorConfig(stochastic=True), fn=scale, rngs=nnx.Rngs(2))
    key = lambda op: jax.random.key_data(op.base_key.get_value()).tolist()
    assert key(a) == key(b) != key(c)


def test_text_batches_run_record_by_record():
    def shout(element, key=None):
        return element.update_data({"text": element.data["sentence"].upper(), "n": len(element.data["sentence"])})

    op = ElementOperator(ElementOperatorConfig(), fn=shout)
    out = op.apply_batch({"sentence": ["ab", "cde"], "label": np.array([0, 1], np.int32)}, None)
    assert out["text"] == ["AB", "CDE"] and out["sentence"] == ["ab", "cde"]
    assert out["n"].tolist() == [2, 3] and out["label"].tolist() == [0, 1]


def test_element_passed_to_fn_has_data():
    seen = []

    def record(element, key):
        seen.append(type(element))
        return element

    ElementOperator(ElementOperatorConfig(), fn=record).apply_batch({"x": jnp.zeros(2)}, None)
    assert seen and all(t is Element for t in seen)


def test_metadata_is_none_in_a_pipeline_stage_and_filled_by_direct_iteration():
    """track_metadata fills element.metadata when the source is iterated directly; a
    Pipeline's stage sees the record's fields alone (docs/operators.md says so), and
    the documented way to know a record's origin there is a field of the data."""
    data = {"x": np.arange(6, dtype=np.int32) * 10, "index": np.arange(6, dtype=np.int32)}

    def source():
        return MemorySource(MemorySourceConfig(shuffle=True, seed=3, track_metadata=True),
                            data)

    def mark(element, key=None):
        return {"has_metadata": jnp.int32(element.metadata is not None)}

    pipe = Pipeline(source=source(), stages=[ElementOperator(fn=mark)], batch_size=3,
                    rngs=nnx.Rngs(0))
    batches = list(pipe)
    assert np.concatenate([b["has_metadata"] for b in batches]).tolist() == [0] * 6
    served = np.concatenate([b["index"] for b in batches]).tolist()
    assert sorted(served) == list(range(6))
    assert np.concatenate([b["x"] for b in batches]).tolist() == [10 * i for i in served]

    elements = list(source())
    assert [e.metadata.index for e in elements] == [int(e.data["index"]) for e in elements]
    assert {e.metadata.epoch for e in elements} == {0}

"""What a user sees when an ElementOperator / MapOperator / FilterOperator function does
something the compiled step cannot run: the operator named, and what to write instead."""

import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.errors import ConfigError, DataraxError
from datarax.operators import ElementOperator, FilterOperator, MapOperator
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

DATA = {"x": np.arange(6, dtype=np.float32), "label": np.arange(6, dtype=np.int32) % 3}


def first_batch(stage):
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), DATA), stages=[stage],
                        batch_size=3)
    return next(iter(pipeline))


def python_if(element, key=None):
    if element.data["label"] > 1:
        return {"label": element.data["label"] * 0}
    return {}


def float_of_field(element, key=None):
    return {"y": float(element.data["x"])}


TABLE = np.array([10.0, 20.0, 30.0], np.float32)


def numpy_lookup(element, key=None):
    return {"y": TABLE[element.data["label"]]}


@pytest.mark.parametrize("fn, jax_error", [
    (python_if, "TracerBoolConversionError"),
    (float_of_field, "ConcretizationTypeError"),
    (numpy_lookup, "TracerArrayConversionError"),
])
def test_python_control_flow_on_a_traced_field_names_the_operator_and_the_fix(fn, jax_error):
    with pytest.raises(ConfigError) as info:
        first_batch(ElementOperator(fn=fn))
    message = str(info.value)
    assert message.startswith(f"ElementOperator '{fn.__name__}': fn needs a concrete value "
                              f"of a traced array ({jax_error}: ")
    for advice in ("jnp.where(...) or jax.lax.cond(...) instead of if",
                   "instead of float(x) or int(x)", "jnp.asarray(table)[x]", "jax.debug.print"):
        assert advice in message


def test_map_operator_python_if_names_the_operator_and_the_fix():
    op = MapOperator(subtree="x", fn=lambda a: a if a > 2 else a * 0)
    with pytest.raises(ConfigError, match=r"^MapOperator '<lambda>': fn needs a concrete value "
                       r"of a traced array \(TracerBoolConversionError: .*instead of if"):
        first_batch(op)


def test_the_numpy_lookup_written_with_jnp_runs():
    out = first_batch(ElementOperator(
        fn=lambda el, key=None: {"y": jnp.asarray(TABLE)[el.data["label"]]}))
    assert out["y"].tolist() == [10.0, 20.0, 30.0]


def test_a_field_returned_as_none_is_refused_saying_how_to_drop_a_field():
    with pytest.raises(DataraxError, match=r"ElementOperator '<lambda>': fn returned None for "
                       r"field\(s\) \['label'\]; .*To drop a field, return "
                       r"element\.replace_data"):
        first_batch(ElementOperator(fn=lambda el, key=None: {"label": None}))
    with pytest.raises(DataraxError, match=r"MapOperator '<lambda>': fn returned None for "
                       r"field\(s\) \['x'\]"):
        first_batch(MapOperator(subtree="x", fn=lambda a: None))


def test_a_string_field_in_the_compiled_step_is_refused_naming_it():
    with pytest.raises(DataraxError, match=r"ElementOperator '<lambda>': fn returned field "
                       r"\['tag'\] as str 'cat'; in the compiled step every field must be "
                       r"an array or a number"):
        first_batch(ElementOperator(fn=lambda el, key=None: {"tag": "cat"}))
    with pytest.raises(DataraxError, match=r"MapOperator '<lambda>': fn returned field "
                       r"\['x'\] as str"):
        first_batch(MapOperator(subtree="x", fn=lambda a: "s"))


def test_filter_predicate_taking_a_key_is_refused_when_built():
    with pytest.raises(ConfigError, match=r"FilterOperator '<lambda>' calls predicate\(element\), "
                       r"but predicate\(el, key\) cannot take that .*one positional parameter"):
        FilterOperator(predicate=lambda el, key: True)
    assert FilterOperator(predicate=lambda el, key=None: True).name == "<lambda>"


def test_reading_a_field_the_records_lack_names_it_and_the_fields_present():
    with pytest.raises(KeyError, match="image") as info:
        first_batch(ElementOperator(fn=lambda el, key=None: {"y": el.data["image"] * 2}))
    assert info.value.__notes__[:2] == [
        "ElementOperator '<lambda>': fn read field 'image', which the records do not have; "
        "they have fields ['label', 'x']. Read one of those (an earlier stage may have renamed "
        "or dropped it).",
        "raised in Pipeline stage 0 (ElementOperator '<lambda>')",
    ]


def test_filter_predicate_without_a_return_says_it_returned_none():
    def no_return(element):
        element.data["label"] > 0  # noqa: B015 - the missing return is the point

    with pytest.raises(ConfigError, match=r"^Pipeline stage 0: FilterOperator 'no_return': the "
                       r"predicate returned None; it must return one boolean per record"):
        first_batch(FilterOperator(predicate=no_return))


def test_upstream_none_leaf_subtree_mask_says_how_to_name_the_fields():
    from datarax.operators import MapOperatorConfig

    with pytest.raises(ConfigError, match=r"A None leaf is upstream datarax's mask form; here "
                       r"name the fields: subtree=\['image', 'mask'\] \(or \{'image': True, "
                       r"'mask': True\}\)\."):
        MapOperatorConfig(subtree={"image": None, "mask": None, "label": False})


@pytest.mark.parametrize("config", ["MapOperatorConfig", "CompositeOperatorConfig",
                                    "BatchMixOperatorConfig", "ProbabilisticOperatorConfig",
                                    "SelectorOperatorConfig", "ElementOperatorConfig"])
def test_a_stream_name_that_is_not_an_identifier_is_refused_naming_the_config(config):
    import datarax.operators as operators

    with pytest.raises(ConfigError, match=rf"^{config}\.stream_name must be None or an "
                       r"identifier string \(the nnx\.Rngs stream to draw from, e\.g\. "
                       r"'augment'\), got 'a b'\.$"):
        getattr(operators, config)(stream_name="a b")


def test_keys_that_are_not_one_per_record_are_refused_naming_the_operator():
    import jax

    from datarax.operators import image as I

    batch = {"image": jnp.zeros((3, 4, 4, 3), jnp.uint8), "label": jnp.arange(3)}
    one_key = jax.random.key(0)
    for op in [I.RandomCrop(2), ElementOperator(fn=lambda el, key: {}, stochastic=True)]:
        with pytest.raises(DataraxError, match=rf"^{type(op).__name__} '{op.name}': got keys of "
                           r"shape \(\) for a batch of 3 records; it needs one key per record, "
                           r"e\.g\. datarax\.core\.keys\.record_keys\(key, epoch, "
                           r"jnp\.arange\(3\)\)"):
            op.apply_batch(batch, one_key)
    two = jax.random.split(one_key, 2)
    with pytest.raises(DataraxError, match=r"got keys of shape \(2,\) for a batch of 3 records"):
        MapOperator(subtree="label", fn=lambda a, k: a, stochastic=True).apply_batch(batch, two)
    out = I.RandomCrop(2).apply_batch(batch, jax.random.split(one_key, 3))
    assert out["image"].shape == (3, 2, 2, 3)


def test_element_fn_without_a_return_says_it_returned_none():
    def no_return(element, key=None):
        element.update_data({"x": element.data["x"] + 1})  # the missing return is the point

    with pytest.raises(DataraxError, match=r"^ElementOperator 'no_return': fn must return an "
                       r"Element .* got NoneType \(a function without a return statement "
                       r"gives None\)\."):
        first_batch(ElementOperator(fn=no_return))


def test_untraceable_filter_predicate_gives_jax_first_line_and_the_fix():
    with pytest.raises(ConfigError) as info:
        first_batch(FilterOperator(predicate=lambda el: int(el.data["x"]) > 2))
    message = str(info.value)
    assert message.startswith("Pipeline stage 0 (FilterOperator '<lambda>'): the predicate "
                              "failed on the records it sees (fields ['label', 'x']): "
                              "ConcretizationTypeError: Abstract tracer value encountered")
    assert "x.astype(...) instead of int() or float()" in message
    assert "object id" not in message and "filter.py" not in message  # JAX's trace noise
    assert len(message.splitlines()) == 2
    assert "on_host" not in message  # an indexed source has no host filter

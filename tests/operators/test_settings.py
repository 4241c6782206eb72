"""Operators take their settings as keywords or as the config object, one mechanism for all."""

import inspect

import pytest

from datarax.core.errors import ConfigError
from datarax.operators import (
    BatchMixOperatorConfig,
    BatchMixOperator,
    CompositeOperatorConfig,
    CompositeOperatorModule,
    ElementOperator,
    ElementOperatorConfig,
    FilterOperator,
    FilterOperatorConfig,
    MapOperator,
    MapOperatorConfig,
    ProbabilisticOperator,
    ProbabilisticOperatorConfig,
    SelectorOperator,
    SelectorOperatorConfig,
)
from datarax.operators import image as I


def double(element, key=None):
    return element.update_data({"x": element.data["x"] * 2})


def neg(a):
    return -a


def child():
    return MapOperator(fn=neg)


# (class, config-object form, keyword form): each pair must build equal configs.
BOTH_WAYS = {
    "ElementOperator": (
        lambda: ElementOperator(ElementOperatorConfig(stochastic=True, stream_name="aug"), fn=double),
        lambda: ElementOperator(fn=double, stochastic=True, stream_name="aug"),
    ),
    "MapOperator": (
        lambda: MapOperator(MapOperatorConfig(subtree=["x", "y"], stochastic=False), fn=neg),
        lambda: MapOperator(fn=neg, subtree=("x", "y")),
    ),
    "CompositeOperatorModule": (
        lambda: CompositeOperatorModule(
            CompositeOperatorConfig(strategy="parallel", merge="sum"), operators=[child(), child()]
        ),
        lambda: CompositeOperatorModule(operators=[child(), child()], strategy="parallel", merge="sum"),
    ),
    "ProbabilisticOperator": (
        lambda: ProbabilisticOperator(child(), config=ProbabilisticOperatorConfig(probability=0.3)),
        lambda: ProbabilisticOperator(child(), probability=0.3),
    ),
    "SelectorOperator": (
        lambda: SelectorOperator([child(), child()], config=SelectorOperatorConfig(weights=[1, 3])),
        lambda: SelectorOperator([child(), child()], weights=[1, 3]),
    ),
    "BatchMixOperator": (
        lambda: BatchMixOperator(BatchMixOperatorConfig(mode="cutmix", alpha=0.4, num_classes=5)),
        lambda: BatchMixOperator(mode="cutmix", alpha=0.4, num_classes=5),
    ),
    "FilterOperator": (
        lambda: FilterOperator(FilterOperatorConfig(on_host=True), predicate=bool),
        lambda: FilterOperator(predicate=bool, on_host=True),
    ),
}


def test_every_operator_class_is_covered():
    import datarax.operators as ops

    classes = {n for n in ops.__all__ if inspect.isclass(getattr(ops, n)) and n.endswith(("Operator", "Module"))}
    assert classes == set(BOTH_WAYS)


@pytest.mark.parametrize("name", sorted(BOTH_WAYS))
def test_config_object_and_keywords_build_equal_configs(name):
    with_config, with_keywords = BOTH_WAYS[name]
    a, b = with_config(), with_keywords()
    assert type(a).__name__ == name
    assert a.config == b.config
    assert a.stochastic == b.stochastic


def test_seed_form_with_rngs_and_keyword_form_draw_the_same_base_key():
    import jax
    from flax import nnx

    seeds = ElementOperator(ElementOperatorConfig(stochastic=True), fn=double, rngs=nnx.Rngs(4))
    plain = ElementOperator(fn=double, stochastic=True, rngs=nnx.Rngs(4))
    key = lambda op: jax.random.key_data(op.base_key.get_value()).tolist()  # noqa: E731
    assert key(seeds) == key(plain)


def test_agreeing_keywords_next_to_a_config_are_accepted():
    op = MapOperator(MapOperatorConfig(subtree=["x"]), fn=neg, subtree="x")
    assert op.config.subtree == ("x",)


@pytest.mark.parametrize("build, message", [
    (lambda: ElementOperator(ElementOperatorConfig(stochastic=False), fn=double, stochastic=True),
     "ElementOperator got keyword settings that disagree with its ElementOperatorConfig: "
     "stochastic=True (config: False). Give each setting once, in the config or as a keyword."),
    (lambda: ProbabilisticOperator(child(), 0.5, config=ProbabilisticOperatorConfig(probability=0.3)),
     "probability=0.5 (config: 0.3)"),
    (lambda: SelectorOperator([child(), child()], [1, 2], config=SelectorOperatorConfig(weights=[1, 3])),
     "weights=(1.0, 2.0) (config: (1.0, 3.0))"),
    (lambda: ElementOperator(fn=double, stochastik=True),
     "ElementOperator got unknown setting(s) ['stochastik']; its settings are ['stochastic', 'stream_name']."),
    (lambda: ElementOperator(MapOperatorConfig(), fn=double),
     "ElementOperator's config (its first argument) must be of type ElementOperatorConfig, "
     "got MapOperatorConfig"),
    (lambda: BatchMixOperator("mixup"),
     "BatchMixOperator's config (its first argument) must be of type BatchMixOperatorConfig, got "
     "str 'mixup'. Pass the "
     "settings as keywords instead, e.g. BatchMixOperator(mode=...)"),
    (lambda: BatchMixOperator(stochastic=False), "BatchMixOperator is always stochastic"),
    (lambda: I.Brightness(0.1, delta=0.2), "Brightness needs delta once"),
    (lambda: I.Contrast(delta=0.2), "Contrast got unknown argument(s) ['delta']; its parameter is factor."),
])
def test_bad_or_conflicting_settings_are_refused_with_a_clear_message(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert message in str(err.value)


@pytest.mark.parametrize("by_position, by_name", [
    (lambda: I.Brightness(0.2), lambda: I.Brightness(delta=0.2)),
    (lambda: I.Contrast((0.5, 1.5)), lambda: I.Contrast(factor=(0.5, 1.5))),
    (lambda: I.Saturation(0.7), lambda: I.Saturation(factor=0.7)),
    (lambda: I.Hue((-0.1, 0.1)), lambda: I.Hue(delta=(-0.1, 0.1))),
    (lambda: I.GaussianBlur(1.0), lambda: I.GaussianBlur(sigma=1.0)),
    (lambda: I.Normalize(0.5, 0.25), lambda: I.Normalize(mean=0.5, std=0.25)),
    (lambda: I.Resize(8), lambda: I.Resize(size=8)),
    (lambda: I.Crop(4), lambda: I.Crop(size=4)),
    (lambda: I.RandomResizedCrop(4), lambda: I.RandomResizedCrop(size=4)),
    (lambda: I.HorizontalFlip(0.3), lambda: I.HorizontalFlip(probability=0.3)),
    (lambda: I.Rotate(10), lambda: I.Rotate(degrees=10)),
    (lambda: I.Translate(1, 2), lambda: I.Translate(dy=1, dx=2)),
    (lambda: I.GaussianNoise(0.1), lambda: I.GaussianNoise(std=0.1)),
    (lambda: I.Cutout(2), lambda: I.Cutout(size=2)),
    (lambda: I.PatchDropout(2, 0.5), lambda: I.PatchDropout(patch_size=2, rate=0.5)),
    (lambda: I.RandAugment(1, 5.0), lambda: I.RandAugment(num_ops=1, magnitude=5.0)),
])
def test_image_operators_take_their_parameters_by_name(by_position, by_name):
    assert by_position().config == by_name().config

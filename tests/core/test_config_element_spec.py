"""StructuralConfig, Element/RecordMetadata and the spec checks."""

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.config import StructuralConfig
from datarax.core.element import Element, RecordMetadata
from datarax.core.errors import SpecMismatchError
from datarax.core.spec import (
    TextSpec,
    array_to_spec_strip_leading,
    check_spec_x64,
    validate_batch,
)
from datarax.sources import ArrayRecordSourceConfig, MemorySourceConfig


@dataclass(frozen=True)
class SizeConfig(StructuralConfig):
    size: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size < 1:
            raise ValueError("size must be >= 1")


def test_config_is_frozen_validated_hashable_and_comparable():
    config = SizeConfig(size=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.size = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="size must be >= 1"):
        SizeConfig(size=0)
    assert hash(config) == hash(SizeConfig(size=3))
    assert config.to_dict() == {"size": 3}
    assert config.replace(size=7) == SizeConfig(size=7)
    with pytest.raises(ValueError, match="size must be >= 1"):
        config.replace(size=-1)


def test_element_update_data_merges_and_returns_new_element():
    element = Element({"x": jnp.ones(2), "y": 3}, RecordMetadata(index=5, epoch=1, source="s"))
    updated = element.update_data({"x": element.data["x"] + 1, "z": 0})
    assert set(updated.data) == {"x", "y", "z"}
    assert updated.data["x"].tolist() == [2.0, 2.0] and element.data["x"].tolist() == [1.0, 1.0]
    assert updated.metadata == element.metadata
    assert set(element.replace_data({"y": 1}).data) == {"y"}
    with pytest.raises(TypeError, match="expects a dict"):
        element.update_data([1])  # type: ignore[arg-type]


def test_element_is_a_pytree_under_vmap():
    batch = {"x": jnp.arange(4.0)}
    out = jax.vmap(lambda d: Element(d).update_data({"x": d["x"] * 2}).data)(batch)
    assert out["x"].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_array_to_spec_strip_leading():
    spec = array_to_spec_strip_leading(np.zeros((10, 28, 28), np.uint8))
    assert spec.shape == (28, 28) and spec.dtype == np.uint8
    with pytest.raises(ValueError, match="leading"):
        array_to_spec_strip_leading(np.float32(1))


SPEC = {
    "image": jax.ShapeDtypeStruct((2, 2), np.float32),
    "label": jax.ShapeDtypeStruct((), np.int32),
    "text": TextSpec(),
}


def good_batch(n=3):
    return {
        "image": np.zeros((n, 2, 2), np.float32),
        "label": np.zeros((n,), np.int32),
        "text": ["a"] * n,
    }


def test_validate_batch_accepts_matching_batch():
    validate_batch(good_batch(), SPEC, batch_size=3)


def test_validate_batch_names_every_disagreeing_field():
    batch = good_batch()
    del batch["label"]
    batch["extra"] = np.zeros(3)
    batch["image"] = np.zeros((3, 2, 3), np.float64)
    with pytest.raises(SpecMismatchError) as info:
        validate_batch(batch, SPEC, where="MySource batch 7")
    message = str(info.value)
    assert "MySource batch 7 does not match element_spec()" in message
    assert "field 'label' is declared in element_spec() but missing" in message
    assert "field 'extra' is not declared in element_spec()" in message
    assert "field 'image' has per-record shape (2, 3), declared (2, 2)" in message
    assert "field 'image' has dtype float64, declared float32" in message
    assert sorted(set(info.value.fields)) == ["extra", "image", "label"]


def test_validate_batch_leading_axis_and_text_checks():
    batch = good_batch()
    batch["label"] = np.zeros((2,), np.int32)
    with pytest.raises(SpecMismatchError, match="fields disagree on the number of records"):
        validate_batch(batch, SPEC)
    with pytest.raises(SpecMismatchError, match="more than batch_size=2"):
        validate_batch(good_batch(3), SPEC, batch_size=2)
    batch = good_batch()
    batch["label"] = ["x", "y", "z"]
    with pytest.raises(SpecMismatchError, match="field 'label' is declared int32.. but holds strings"):
        validate_batch(batch, SPEC)
    batch = good_batch()
    batch["text"] = np.zeros(3, np.int32)
    with pytest.raises(SpecMismatchError, match="field 'text' is declared text but holds int32"):
        validate_batch(batch, SPEC)
    with pytest.raises(SpecMismatchError, match="no leading record axis"):
        validate_batch({**good_batch(), "label": np.int32(1)}, SPEC)


def test_sixty_four_bit_declarations_refused_without_x64():
    spec = {"a": jax.ShapeDtypeStruct((), np.float64), "b": jax.ShapeDtypeStruct((), np.int64)}
    with pytest.raises(SpecMismatchError) as info:
        check_spec_x64(spec, where="Src.element_spec()")
    assert "'a' (float64), 'b' (int64)" in str(info.value)
    assert "jax_enable_x64 is off" in str(info.value)
    assert info.value.fields == ["a", "b"]
    check_spec_x64({"a": jax.ShapeDtypeStruct((), np.float32)})



@pytest.mark.parametrize(
    ("config", "wrong", "suggested"),
    [(ArrayRecordSourceConfig, "shuffle", "shuffle_files"), (MemorySourceConfig, "sed", "seed")],
)
def test_an_unknown_config_option_names_the_closest_option_and_all_options(config, wrong, suggested):
    with pytest.raises(TypeError) as info:
        config(**{wrong: True})
    message = str(info.value)
    assert f"{config.__name__} got an unexpected keyword argument {wrong!r}" in message
    assert f"did you mean {suggested!r}?" in message
    assert "its options are: " in message and "num_epochs" in message

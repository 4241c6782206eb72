"""core/dtypes: the one 64-bit policy for values a source sees, and the text rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.dtypes import (
    declared_64bit,
    fit_column,
    fit_value,
    is_64bit,
    is_text_dtype,
    is_text_value,
)
from datarax.core.errors import ConfigError, RecordError

HINT = (
    "so it cannot be cast to int32 without loss while jax_enable_x64 is off. Enable x64 "
    "with jax.config.update('jax_enable_x64', True), or drop the field (exclude_keys)"
)


@pytest.fixture
def x64():
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def fit(column, **kw):
    kw.setdefault("where", "Src")
    kw.setdefault("cast_float64", False)
    return fit_column("f", column, **kw)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_64bit_ints_that_fit_become_int32(dtype):
    column = np.array([[0, 5], [2**31 - 1, 7]], dtype)
    out = fit(column)
    assert out.dtype == np.int32
    assert out.tolist() == [[0, 5], [2**31 - 1, 7]]


@pytest.mark.parametrize(
    "values, record, bad",
    [
        ([[0, 1], [2, 2**31]], 1, 2**31),
        ([[0, 1], [-(2**31) - 1, 0], [2**40, 0]], 1, -(2**31) - 1),
        ([[0, 1], [3, 4], [5, 2**40]], 2, 2**40),
    ],
)
def test_an_int_that_does_not_fit_is_refused_naming_field_record_and_value(values, record, bad):
    with pytest.raises(RecordError) as err:
        fit(np.array(values, np.int64), first_record=100)
    assert str(err.value) == (
        f"Src: field 'f' is int64 and record {100 + record} holds {bad}, outside the int32 "
        f"range, {HINT}."
    )
    assert err.value.index == 100 + record


def test_float64_is_refused_unless_the_user_opts_in():
    with pytest.raises(ConfigError) as err:
        fit(np.array([0.5, 1.5]))
    assert str(err.value) == (
        "Src: field 'f' is float64 but jax_enable_x64 is off, and datarax never narrows "
        "silently. Set cast_float64=True in the config to cast it to float32, enable x64 "
        "with jax.config.update('jax_enable_x64', True), or drop the field (exclude_keys)."
    )
    out = fit(np.array([0.5, 1.5]), cast_float64=True)
    assert out.dtype == np.float32 and out.tolist() == [0.5, 1.5]
    out = fit(np.array([1 + 2j]), cast_float64=True)
    assert out.dtype == np.complex64 and out.tolist() == [1 + 2j]
    with pytest.raises(ConfigError, match="is complex128 .* to cast it to complex64"):
        fit(np.array([1 + 2j]))


def test_the_fix_named_last_can_be_the_callers():
    with pytest.raises(ConfigError) as err:
        fit(np.zeros(2), where="MemorySource", drop_hint="cast it first (x.astype(np.float32))")
    assert str(err.value).endswith(
        "enable x64 with jax.config.update('jax_enable_x64', True), or cast it first "
        "(x.astype(np.float32))."
    )


def test_python_numbers_take_jax_defaults():
    ints = fit([1, 2, 3])
    assert ints.dtype == np.int32 and ints.tolist() == [1, 2, 3]
    floats = fit([0.5, 2.0])  # no cast_float64 needed: Python floats have no precision
    assert floats.dtype == np.float32 and floats.tolist() == [0.5, 2.0]
    with pytest.raises(RecordError, match="record 1 holds 1099511627776, outside"):
        fit([1, 2**40])


def test_other_values_pass_unchanged():
    for column in (
        np.arange(3, dtype=np.int32),
        np.zeros(3, np.float32),
        np.zeros(3, np.int8),
        np.array([True, False]),
        np.zeros(2, np.float16),
    ):
        out = fit(column)
        assert out is column
    text = np.array(["a", "b"], dtype=object)
    assert fit(text) is text
    words = ["a", "b"]
    assert fit(words) is words
    device = jnp.arange(3)
    assert fit(device) is device


def test_x64_on_keeps_every_dtype(x64):
    column = np.array([2**40, 1])
    assert fit(column) is column
    assert fit(np.array([0.5])).dtype == np.float64
    assert declared_64bit({"a": np.float64}) == []


def test_fit_value_is_a_clause_for_the_reader_to_locate():
    assert fit_value("label", np.int64(7), cast_float64=False).dtype == np.int32
    assert fit_value("label", 7, cast_float64=False).dtype == np.int32
    with pytest.raises(RecordError) as err:
        fit_value("label", np.array([1, 2**40]), cast_float64=False)
    assert str(err.value) == (
        f"field 'label' is int64 and holds 1099511627776, outside the int32 range, {HINT}"
    )
    assert err.value.index is None


def test_text_rule():
    assert all(is_text_dtype(d) for d in ("U3", "S2", object))
    assert not any(is_text_dtype(d) for d in (np.int32, np.float32, bool))
    assert is_text_value("a") and is_text_value(b"a") and is_text_value(["a", "b"])
    assert is_text_value(np.array(["a"])) and is_text_value(np.array([b"a"]))
    assert not is_text_value([1, 2]) and not is_text_value([]) and not is_text_value(np.zeros(2))


def test_declared_64bit_lists_the_fields_jax_would_narrow():
    assert [d for d in (np.int64, np.uint64, np.float64, np.complex128) if is_64bit(d)] == [
        np.int64, np.uint64, np.float64, np.complex128
    ]
    dtypes = {"a": np.float32, "b": np.int64, "c": np.float64, "d": np.int32}
    assert declared_64bit(dtypes) == ["b", "c"]

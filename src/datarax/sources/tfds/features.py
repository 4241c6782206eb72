"""TFDS examples to batch fields: flattened names, text decoded, the 64-bit policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from datarax.core.dtypes import fit_column, fit_value, is_64bit, is_text_dtype
from datarax.core.spec import flatten_fields
from datarax.sources._columns import select_keys
from datarax.sources.tfds.config import TFDSConfig


class Decoder:
    """Turns one TFDS example (nested dict) into a flat dict of kept, policy-cast fields."""

    def __init__(self, info: Any, config: TFDSConfig, where: str) -> None:
        self.where = where
        self.cast_float64 = config.cast_float64
        self.dtypes: dict[str, np.dtype] = {}
        self.text: set[str] = set()
        infos = flatten_fields(info.features.get_tensor_info())
        for key, tensor_info in infos.items():
            dtype = _np_dtype(getattr(tensor_info, "np_dtype", None) or tensor_info.dtype)
            if is_text_dtype(dtype):
                self.text.add(key)
            else:
                self.dtypes[key] = dtype
        self.keys = select_keys(list(infos), config.include_keys, config.exclude_keys, where=where)
        for key in self.keys:
            dtype = self.dtypes.get(key)
            if dtype is not None and is_64bit(dtype) and dtype.kind in "fc":
                # refuse float64 up front (never narrowed unless cast_float64=True)
                fit_column(key, np.zeros(1, dtype), where=where, cast_float64=config.cast_float64)

    def __call__(self, example: Mapping[str, Any]) -> dict[str, Any]:
        flat = flatten_fields(example)
        out: dict[str, Any] = {}
        for key in self.keys:
            value = flat[key]
            if key in self.text:
                out[key] = decode_text(value)
                continue
            array = np.asarray(value, dtype=self.dtypes.get(key))
            out[key] = fit_value(key, array, cast_float64=self.cast_float64)
        return out


def _np_dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(getattr(dtype, "as_numpy_dtype", object))


def decode_text(value: Any) -> Any:
    """``bytes`` (TFDS's form of ``Text`` features) decoded to ``str``, element-wise for arrays."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.dtype.kind in "OS":
        return np.array([decode_text(v) for v in value.ravel()], dtype=object).reshape(value.shape)
    return value


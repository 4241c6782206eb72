"""TFDS examples to batch fields: flattened names, text decoded, the 64-bit policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from datarax.core.dtypes import fit_column, fit_value, is_64bit, is_text_dtype, text_kind
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
        # fields declared with a length that varies by record (a None in their shape)
        self.varying: dict[str, tuple[Any, ...]] = {}
        infos = flatten_fields(info.features.get_tensor_info())
        # string fields served as str: Text features; other string Tensors stay bytes
        self.utf8 = set(_text_features(info.features))
        for key, tensor_info in infos.items():
            dtype = _np_dtype(getattr(tensor_info, "np_dtype", None) or tensor_info.dtype)
            shape = tuple(getattr(tensor_info, "shape", None) or ())
            if any(d is None for d in shape):
                self.varying[key] = shape
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

    def varying_hint(self, cause: BaseException | None) -> str | None:
        """What to do when ``cause`` is a record whose field, declared with a varying
        shape, differs from the first record's; None for any other cause."""
        text = str(cause) if cause is not None else ""
        for key, shape in self.varying.items():
            if key in self.keys and text.startswith(f"field '{key}' decodes to"):
                return (
                    f" The dataset declares '{key}' with shape {_shape_text(shape)}, which "
                    "varies by record, and a batch needs one shape per field: pad or resize "
                    f"it to one shape when preparing the dataset, or drop it "
                    f"(exclude_keys=({key!r},))."
                )
        return None

    def __call__(self, example: Mapping[str, Any]) -> dict[str, Any]:
        flat = flatten_fields(example)
        out: dict[str, Any] = {}
        for key in self.keys:
            value = flat[key]
            if key in self.text:
                out[key] = decode_text(value) if key in self.utf8 else value
                continue
            array = np.asarray(value, dtype=self.dtypes.get(key))
            out[key] = fit_value(key, array, cast_float64=self.cast_float64)
        return out


def _text_features(feature: Any, prefix: str = "") -> list[str]:
    """The flattened names of the ``Text`` features in ``feature`` (a FeaturesDict)."""
    kind = type(feature).__name__
    if kind == "Text":
        return [prefix.rstrip("/")]
    if kind == "Sequence":
        return _text_features(feature.feature, prefix)
    if hasattr(feature, "items"):  # FeaturesDict
        return [name for key, inner in feature.items()
                for name in _text_features(inner, f"{prefix}{key}/")]
    return []


def _shape_text(shape: tuple[Any, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _np_dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(getattr(dtype, "as_numpy_dtype", object))


def decode_text(value: Any) -> Any:
    """``bytes`` (TFDS's form of ``Text`` features) decoded to ``str``, element-wise for arrays."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and text_kind(value) in ("bytes", ""):
        return np.array([decode_text(v) for v in value.ravel()], dtype=object).reshape(value.shape)
    return value


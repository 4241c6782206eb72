"""``LabelEncoder``: string labels to ``int32`` ids with a stable, saved vocabulary.

Also exported as ``datarax.sources.LabelEncoder``. :meth:`LabelEncoder.fit` sorts the
distinct labels (ids depend neither on record order nor on the process); id ``i`` is
``vocabulary[i]``. Save it with the model (:meth:`~LabelEncoder.save`) so evaluation
decodes the same ids. An unknown label is refused, naming it.

Example:
    >>> import numpy as np
    >>> from datarax.dataset import LabelEncoder
    >>> encoder = LabelEncoder.fit(["dog", "cat", "dog", "bird"])
    >>> encoder.vocabulary
    ('bird', 'cat', 'dog')
    >>> encoder.encode(["cat", "dog"]).tolist(), encoder.encode(["cat"]).dtype
    ([1, 2], dtype('int32'))
    >>> encoder.decode(np.array([2, 0])).tolist()
    ['dog', 'bird']
    >>> data = encoder.encode_field({"x": np.zeros((2, 3)), "label": ["dog", "cat"]}, "label")
    >>> data["label"].tolist()
    [2, 1]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.errors import ConfigError, DataraxError
from datarax.host.dtypes import is_text_scalar

FORMAT = "datarax.LabelEncoder"
VERSION = 1


class LabelEncoder:
    """A fixed vocabulary of labels; id ``i`` is ``vocabulary[i]``.

    Args:
        vocabulary: the labels, each once, in id order (``str``; ``bytes`` are decoded
            as UTF-8). :meth:`fit` builds the sorted one from data.
    """

    def __init__(self, vocabulary: Sequence[str]) -> None:
        if isinstance(vocabulary, (str, bytes)) or not isinstance(vocabulary, Iterable):
            raise ConfigError(
                "LabelEncoder needs a sequence of labels (e.g. ['cat', 'dog']), got "
                f"{type(vocabulary).__name__} {vocabulary!r}."
            )
        labels = [_as_label(v, "vocabulary") for v in vocabulary]
        if not labels:
            raise ConfigError("LabelEncoder needs at least one label in its vocabulary.")
        seen: dict[str, int] = {}
        for i, label in enumerate(labels):
            if label in seen:
                raise ConfigError(
                    f"LabelEncoder vocabulary lists {label!r} twice (ids {seen[label]} and "
                    f"{i}); each label must appear once."
                )
            seen[label] = i
        self._vocabulary = tuple(labels)
        self._ids = seen

    # ------------------------------------------------------------ building
    @classmethod
    def fit(cls, values: Any) -> LabelEncoder:
        """The encoder of the distinct labels in ``values`` (any array or iterable of
        ``str``/``bytes``), sorted."""
        flat = _flatten(values, "fit")
        if not flat:
            raise DataraxError("LabelEncoder.fit got no labels; pass the label column.")
        return cls(sorted(set(flat)))

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The labels in id order."""
        return self._vocabulary

    def __len__(self) -> int:
        return len(self._vocabulary)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelEncoder) and other._vocabulary == self._vocabulary

    def __hash__(self) -> int:
        return hash(self._vocabulary)

    def __repr__(self) -> str:
        return f"LabelEncoder({list(self._vocabulary)!r})"

    # ------------------------------------------------------------ mapping
    def encode(self, values: Any, *, field: str | None = None) -> np.ndarray:
        """``int32`` ids of ``values`` (same shape); an unknown label is refused, naming
        ``field``."""
        array = _as_array(values)
        flat = _flatten(array, "encode")
        ids = np.empty(len(flat), np.int32)
        for i, label in enumerate(flat):
            found = self._ids.get(label)
            if found is None:
                where = f" in field '{field}'" if field else ""
                shown = list(self._vocabulary[:10]) + (["..."] if len(self) > 10 else [])
                raise DataraxError(
                    f"LabelEncoder: label {label!r}{where} (value {i}) is not in the "
                    f"vocabulary of {len(self)} labels {shown}. Fit the encoder on data "
                    "holding every label (LabelEncoder.fit over all splits), or drop such "
                    "records first."
                )
            ids[i] = found
        return ids.reshape(np.shape(array))

    def decode(self, ids: Any) -> np.ndarray:
        """The labels of ``ids`` (an ``object`` array of ``str``, same shape)."""
        array = np.asarray(ids)
        if array.dtype.kind not in "iu":
            raise DataraxError(
                f"LabelEncoder.decode needs integer ids, got {array.dtype.name} values."
            )
        bad = (array < 0) | (array >= len(self))
        if bad.any():
            value = int(array.reshape(-1)[int(np.flatnonzero(bad.reshape(-1))[0])])
            raise DataraxError(
                f"LabelEncoder.decode: id {value} is outside the vocabulary (0..{len(self) - 1})."
            )
        labels = np.asarray(self._vocabulary, dtype=object)
        return labels[array]

    def encode_field(self, data: Mapping[str, Any], field: str) -> dict[str, Any]:
        """A copy of ``data`` (a dict of columns) with ``field`` encoded to ``int32`` ids,
        ready for :class:`~datarax.sources.MemorySource` (the compiled path)."""
        if field not in data:
            raise DataraxError(
                f"LabelEncoder.encode_field: no field '{field}' in the data (fields: "
                f"{list(data)})."
            )
        return {**data, field: self.encode(data[field], field=field)}

    # ------------------------------------------------------------ saving
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (format, version, vocabulary)."""
        return {"format": FORMAT, "version": VERSION, "vocabulary": list(self._vocabulary)}

    @classmethod
    def from_dict(cls, description: Mapping[str, Any]) -> LabelEncoder:
        """The encoder :meth:`to_dict` described."""
        if not isinstance(description, Mapping) or description.get("format") != FORMAT:
            raise DataraxError(
                f"LabelEncoder.from_dict expects the dict to_dict() wrote (format {FORMAT!r}), "
                f"got {description!r:.200}."
            )
        if description.get("version") != VERSION:
            raise DataraxError(
                f"LabelEncoder vocabulary version {description.get('version')!r} is not "
                f"{VERSION}, the version this datarax reads."
            )
        return cls(description["vocabulary"])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the vocabulary as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, ensure_ascii=False, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LabelEncoder:
        """The encoder :meth:`save` wrote to ``path``."""
        with open(path, encoding="utf-8") as f:
            try:
                description = json.load(f)
            except json.JSONDecodeError as err:
                raise DataraxError(f"LabelEncoder.load: '{path}' is not JSON: {err}") from err
        return cls.from_dict(description)


def _as_label(value: Any, where: str) -> str:
    if isinstance(value, bytes):  # np.bytes_ too
        return bytes(value).decode("utf-8")
    if isinstance(value, str):  # np.str_ too: made a plain str
        return str(value)
    raise DataraxError(
        f"LabelEncoder.{where}: labels must be str (or bytes), got {type(value).__name__} "
        f"{value!r}. Numeric labels need no encoding."
    )


def _as_array(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, Iterable) and not isinstance(values, (Sequence, str, bytes)):
        values = list(values)  # a set, a generator, dict keys
    return np.asarray(values, dtype=object)


def _flatten(values: Any, where: str) -> list[str]:
    if is_text_scalar(values):
        return [_as_label(values, where)]
    return [_as_label(v, where) for v in _as_array(values).reshape(-1).tolist()]

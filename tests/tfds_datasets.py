"""Small TFDS datasets prepared offline, the one builder the tests share
(``tests/conftest.py`` puts this folder on ``sys.path``).

``prepare(root, "DataraxTiny", features, {"train": {key: example}})`` defines a
``GeneratorBasedBuilder`` of that class name (TFDS names the dataset ``datarax_tiny``)
and writes its splits under ``root``; the examples of each split are given by key, as
TFDS orders a split by its keys. Preparing needs TensorFlow, reading does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pytest

_BUILDERS: dict[str, type] = {}  # a name is registered with TFDS once per process


def builder(class_name: str, features: Mapping[str, Any],
            splits: Mapping[str, Mapping[Any, Mapping[str, Any]]]) -> type:
    """The builder class ``class_name``: ``features`` (``tfds.features`` by field) and
    each split's examples by key; defined once per name."""
    if class_name in _BUILDERS:
        return _BUILDERS[class_name]
    tfds = pytest.importorskip("tensorflow_datasets")

    def _info(self: Any) -> Any:
        return tfds.core.DatasetInfo(builder=self,
                                     features=tfds.features.FeaturesDict(dict(features)))

    def _split_generators(self: Any, dl_manager: Any) -> dict[str, Any]:
        return {split: self._generate_examples(examples) for split, examples in splits.items()}

    def _generate_examples(self: Any, examples: Mapping[Any, Any]) -> Any:
        yield from examples.items()

    _BUILDERS[class_name] = type(class_name, (tfds.core.GeneratorBasedBuilder,), {
        "__module__": __name__,
        "__doc__": f"{class_name}: splits {list(splits)} of fields {list(features)}.",
        "VERSION": tfds.core.Version("1.0.0"),
        "code_path": tfds.core.Path(__file__),  # TFDS's lookup trips on the package `tests`
        "_info": _info,
        "_split_generators": _split_generators,
        "_generate_examples": _generate_examples,
    })
    return _BUILDERS[class_name]


def prepare(root: str | os.PathLike[str], class_name: str, features: Mapping[str, Any],
            splits: Mapping[str, Mapping[Any, Mapping[str, Any]]],
            file_format: str = "array_record") -> str:
    """Prepares the dataset of :func:`builder` under ``root`` in ``file_format``; returns
    ``str(root)``. Skips the test where TensorFlow is not installed."""
    pytest.importorskip("tensorflow")  # preparing datasets uses TF; reading them does not
    cls = builder(class_name, features, splits)
    cls(data_dir=str(root), file_format=file_format).download_and_prepare()
    return str(root)

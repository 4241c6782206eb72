"""``datarax inspect / scan tfds:NAME:SPLIT --data-dir`` on a TFDS dataset prepared here.

The CLI process has never seen the builder class: TFDS reads the prepared split from
``--data-dir`` by name alone (no download).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from cli_helpers import datarax  # noqa: E402
from tfds_datasets import prepare  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """datarax_cli_tiny: 12 train / 3 test records: a 4x4 uint8 image of value i, a
    label, a text."""
    def example(i: int) -> dict:
        return {"image": np.full((4, 4), i, np.uint8), "label": i % 3, "text": f"doc {i}"}

    return prepare(tmp_path_factory.mktemp("tfds"), "DataraxCliTiny", {
        "image": tfds.features.Tensor(shape=(4, 4), dtype=np.uint8),
        "label": tfds.features.ClassLabel(num_classes=3),
        "text": tfds.features.Text(),
    }, {"train": {i: example(i) for i in range(12)}, "test": {i: example(i) for i in range(12, 15)}})


@pytest.mark.slow  # builds a TFDS dataset (TensorFlow) and starts two interpreters
def test_inspect_and_scan_a_prepared_tfds_split(data_dir, tmp_path):
    result = datarax(
        "inspect", "tfds:datarax_cli_tiny:test", "--data-dir", str(data_dir), "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["source"] == "TFDSStreamingSource" and report["records"] == 3
    assert report["data_dir"] == [str(data_dir)]
    assert report["element_spec"] == {
        "image": "uint8 (4, 4)",
        "label": "int32 ()",
        "text": "text ()",
    }
    assert sorted(r["text"] for r in report["first_records"]) == [
        "'doc 12'",
        "'doc 13'",
        "'doc 14'",
    ]

    result = datarax("scan", "tfds:datarax_cli_tiny", "--data-dir", str(data_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[-1]
        == "scanned 12 records of tfds:datarax_cli_tiny: 12 good, 0 bad"
    )

"""ArrayRecordSourceModule over a dataset folder: no decode, metadata-driven batches."""

from __future__ import annotations

import os

import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import ConfigError, RecordError
from datarax.core.spec import TextSpec
from datarax.dataset.writer import write_dataset
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    dst = str(tmp_path_factory.mktemp("ds") / "ds")
    records = [{"image": np.full((4, 4, 3), i, np.uint8), "label": i % 3, "name": f"r{i}"}
               for i in range(40)]
    write_dataset(records, dst, shards=4, class_names={"label": ["a", "b", "c"]})
    return dst


def test_folder_reads_without_decode(folder) -> None:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), folder)
    spec = source.element_spec()
    assert spec["image"].shape == (4, 4, 3) and spec["image"].dtype == np.uint8
    assert spec["label"].dtype == np.int32 and spec["name"] == TextSpec(())
    assert source.dataset_info.features["label"].class_names == ("a", "b", "c")
    assert len(source) == 40 and len(source.paths) == 4
    batch, indices = source.get_batch_with_indices(16)
    assert batch["image"][:, 0, 0, 0].tolist() == list(range(16))
    assert batch["label"].tolist() == [i % 3 for i in range(16)]
    assert list(batch["name"]) == [f"r{i}" for i in range(16)]
    source.close()


def test_pipeline_shuffled_epoch_serves_every_record_once(folder) -> None:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=3),
                                     os.path.join(folder, "data-*.array_record"))
    pipeline = Pipeline(source=source, stages=[], batch_size=8, rngs=nnx.Rngs(0))
    seen = [int(v) for batch in pipeline for v in np.asarray(batch["image"])[:, 0, 0, 0]]
    assert sorted(seen) == list(range(40)) and seen != list(range(40))
    source.close()


def test_subset_of_shards_and_stray_files(folder, tmp_path) -> None:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1),
                                     [os.path.join(folder, "data-00002-of-00004.array_record")])
    assert [int(r["image"][0, 0, 0]) for r in source] == list(range(20, 30))
    source.close()
    with pytest.raises(RecordError, match="'nope.array_record' is not a shard"):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), [os.path.join(folder, "nope.array_record")])


def test_variable_shape_field_refused_with_the_fix(tmp_path) -> None:
    write_dataset([{"ids": b"ab"}, {"ids": b"c"}], tmp_path / "v")
    with pytest.raises(ConfigError, match="field 'ids' has a variable shape.*decode="):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "v"))



def test_decoded_fields_carry_the_native_dtype(tmp_path) -> None:
    """Fields stored little-endian decode to the native dtype object: one spelt '<i4' (equal
    to int32) would be what JAX's dtype cache hands back for every later int32 array."""
    from datarax.dataset import decode_records, encode_record, read_metadata

    write_dataset([{"x": np.int32(i), "f": np.float32(i)} for i in range(2)], tmp_path / "d")
    features = read_metadata(tmp_path / "d").features
    out = decode_records(features, [encode_record(features, {"x": 3, "f": 0.5})])
    assert [repr(out[k].dtype) for k in ("x", "f")] == ["dtype('int32')", "dtype('float32')"]

"""A dataset folder read with the user's ``decode=``: the shards come from the metadata
(local folders, and a URL through fsspec's in-memory filesystem); the reader's refusal
of a field of variable shape without ``decode`` stays."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

pytest.importorskip("array_record")

from datarax.core.errors import ConfigError, DataraxError, RecordError  # noqa: E402
from datarax.dataset import Features, Field, decode_records, read_metadata, write_dataset  # noqa: E402
from datarax.dataset.reading import remote_dataset  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402
from datarax.storage import ShardCache  # noqa: E402

FEATURES = Features((Field("blob", "uint8", (None,), "varlen"),
                     Field("tokens", "int32", (None,), "varlen"),
                     Field("label", "int32", (), "raw")))


def _rows(n: int) -> list[dict]:
    return [{"blob": bytes([i]) * (i + 1), "tokens": np.arange(i + 1, dtype=np.int32) * 10,
             "label": np.int32(i)} for i in range(n)]


@pytest.fixture(scope="module")
def varlen_ds(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("edges") / "ds")
    write_dataset(_rows(7), folder, features=FEATURES, shards=3)
    return folder


def _padded(features: Features):
    def decode(record: bytes) -> dict:
        fields = decode_records(features, [record])
        tokens = np.full(8, -1, np.int32)
        tokens[: len(fields["tokens"][0])] = fields["tokens"][0]
        return {"tokens": tokens, "blob_len": np.int32(len(fields["blob"][0])),
                "label": np.int32(fields["label"][0])}
    return decode


def test_folder_with_decode_reads_the_metadata_shards_in_order(varlen_ds):
    info = read_metadata(varlen_ds)
    # a stray file in the folder is not read: the shards come from the metadata
    with open(os.path.join(varlen_ds, "notes.txt"), "w") as f:
        f.write("not a shard")
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), varlen_ds,
                                     decode=_padded(info.features))
    try:
        assert [os.path.basename(p) for p in source.paths] == [s.file for s in info.shards]
        assert len(source) == 7
        records = list(source)
        assert [int(r["label"]) for r in records] == list(range(7))
        assert [int(r["blob_len"]) for r in records] == [1, 2, 3, 4, 5, 6, 7]
        assert records[2]["tokens"].tolist() == [0, 10, 20, -1, -1, -1, -1, -1]
        assert source.dataset_info is not None and source.dataset_info.num_records == 7
    finally:
        source.close()


def test_folder_with_decode_batch_only(varlen_ds):
    features = read_metadata(varlen_ds).features

    def decode_batch(records: list[bytes]) -> dict:
        columns = decode_records(features, records)
        return {"label": columns["label"].astype(np.int32),
                "n": np.array([len(t) for t in columns["tokens"]], np.int32)}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), varlen_ds,
                                     decode_batch=decode_batch)
    try:
        assert [(int(r["label"]), int(r["n"])) for r in source] == [(i, i + 1) for i in range(7)]
    finally:
        source.close()


def test_without_decode_the_reader_still_refuses_a_variable_shape(varlen_ds):
    with pytest.raises(ConfigError, match=r"field 'blob' has a variable shape.*decode="):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), varlen_ds)


def test_images_of_several_sizes_without_decode_point_to_decode_images(tmp_path):
    folder = str(tmp_path / "ds")
    features = Features((Field("image", "uint8", (None, None, 3), "png"),))
    write_dataset([{"image": np.zeros((4 + i, 5, 3), np.uint8)} for i in range(2)], folder,
                  features=features)
    with pytest.raises(ConfigError, match=r"field 'image' has a variable shape \(None, None, 3\), "
                                          r".*decode=datarax.decode_images\('image', resize=N"):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), folder)


def test_folder_with_decode_and_a_missing_shard_names_it(tmp_path):
    folder = str(tmp_path / "ds")
    write_dataset(_rows(4), folder, features=FEATURES, shards=2)
    os.remove(os.path.join(folder, "data-00001-of-00002.array_record"))
    with pytest.raises(RecordError, match=r"lists the shard 'data-00001-of-00002.array_record', "
                                          r"which is missing"):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), folder,
                                decode=_padded(FEATURES))


def test_plain_folder_with_decode_says_what_a_folder_needs(tmp_path):
    with pytest.raises(RecordError, match=r"is a directory, not a file\. .* A folder is read "
                                          r"whole only when it holds a datarax dataset's "
                                          r"datarax_dataset.json\."):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), str(tmp_path),
                                decode=lambda r: {"x": np.int32(0)})


def test_unfinished_conversion_with_decode_points_at_resume(tmp_path):
    os.makedirs(tmp_path / "ds" / ".datarax-partial")
    with pytest.raises(DataraxError, match="unfinished conversion.*resume"):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), str(tmp_path / "ds"),
                                decode=lambda r: {"x": np.int32(0)})


@pytest.fixture
def memory_ds(varlen_ds):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    prefix = f"/edges-{uuid.uuid4().hex[:8]}"
    fs.put(varlen_ds, prefix + "/ds", recursive=True)
    try:
        yield f"memory:/{prefix}/ds"
    finally:
        fs.rm(prefix, recursive=True)


def test_remote_folder_with_decode_reads_the_metadata_shards(memory_ds, tmp_path):
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), memory_ds,
                                     decode=_padded(FEATURES),
                                     cache=ShardCache(str(tmp_path), max_bytes=1 << 20))
    try:
        assert [int(r["label"]) for r in source] == list(range(7))
        assert source.paths == [f"{memory_ds}/data-0000{i}-of-00003.array_record" for i in range(3)]
        assert source.dataset_info is not None
    finally:
        source.close()


def test_remote_dataset_without_dataset_mode_finds_a_folder_and_still_refuses_the_missing(
        memory_ds):
    objects, info = remote_dataset(memory_ds, dataset=False)
    assert info is not None and [o.records for o in objects] == [s.records for s in info.shards]
    objects, info = remote_dataset(memory_ds + "/data-00000-of-00003.array_record", dataset=False)
    assert info is None and [o.name for o in objects] == ["data-00000-of-00003.array_record"]
    with pytest.raises(RecordError, match="does not exist"):
        remote_dataset(memory_ds + "/nothing-here", dataset=False)

"""convert from a Hugging Face save_to_disk folder, a datarax source, a prepared TFDS
dataset; reading images in decode processes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from datarax.dataset import convert, write_dataset


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _read(dst) -> dict:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), str(dst))
    batch, _ = source.get_batch_with_indices(len(source))
    source.close()
    return batch


def test_hf_save_to_disk_folder_split(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"label": datasets.ClassLabel(names=["no", "yes"]),
                                  "text": datasets.Value("string")})
    splits = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"label": [0, 1, 1], "text": ["a", "b", "c"]}, features=features),
        "test": datasets.Dataset.from_dict({"label": [1], "text": ["z"]}, features=features)})
    splits.save_to_disk(str(tmp_path / "hf"))
    info, _ = convert(str(tmp_path / "hf"), tmp_path / "out")
    assert info.features["label"].class_names == ("no", "yes") and info.num_records == 3
    info, _ = convert(str(tmp_path / "hf"), tmp_path / "out_test", split="test")
    assert list(_read(tmp_path / "out_test")["text"]) == ["z"]


def test_datarax_source_is_written_in_its_order(tmp_path) -> None:
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(), {"x": np.arange(12, dtype=np.float32).reshape(6, 2),
                                                 "y": np.arange(6, dtype=np.int32)})
    info, _ = write_dataset(source, tmp_path / "out", shards=2)
    assert [s.records for s in info.shards] == [3, 3]
    assert _read(tmp_path / "out")["y"].tolist() == list(range(6))


@pytest.mark.slow
def test_png_dataset_read_in_decode_processes(tmp_path) -> None:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    write_dataset([{"image": _png(i), "label": i} for i in range(20)], tmp_path / "ds", shards=2)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), str(tmp_path / "ds"),
                                     decode_processes=1)
    batch, _ = source.get_batch_with_indices(20)
    source.close()
    assert batch["image"].shape == (20, 4, 4, 3) and batch["image"][:, 0, 0, 0].tolist() == list(range(20))


@pytest.mark.slow
def test_prepared_tfds_dataset(tmp_path) -> None:
    tfds = pytest.importorskip("tensorflow_datasets")

    class DataraxConvertTiny(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")
        code_path = tfds.core.Path(__file__)

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(4, 4, 3)),
                "label": tfds.features.ClassLabel(names=["ant", "bee"]),
                "text": tfds.features.Text()}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(0, 6), "test": self._generate_examples(6, 8)}

        def _generate_examples(self, lo, hi):
            for i in range(lo, hi):
                yield i, {"image": np.full((4, 4, 3), i, np.uint8), "label": i % 2, "text": f"doc {i}"}

    DataraxConvertTiny(data_dir=str(tmp_path / "tfds"), file_format="array_record").download_and_prepare()
    info, _ = convert("tfds:datarax_convert_tiny", tmp_path / "out", data_dir=str(tmp_path / "tfds"))
    assert info.features["image"].encoding == "png" and info.features["label"].class_names == ("ant", "bee")
    assert info.features["text"].encoding == "utf8"
    batch = _read(tmp_path / "out")
    assert sorted(batch["image"][:, 0, 0, 0].tolist()) == list(range(6))
    folder = tmp_path / "tfds" / "datarax_convert_tiny" / "1.0.0"
    info, _ = convert(str(folder), tmp_path / "out2", split="test")
    assert info.num_records == 2 and sorted(_read(tmp_path / "out2")["text"]) == ["doc 6", "doc 7"]


def test_hf_load_dataset_cache_folder(tmp_path, monkeypatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    features = datasets.Features({"label": datasets.ClassLabel(names=["p", "q"]),
                                  "text": datasets.Value("string")})
    datasets.Dataset.from_dict({"label": [0, 1, 1], "text": ["a", "b", "c"]},
                               features=features).to_parquet(str(tmp_path / "a.parquet"))
    datasets.load_dataset("parquet", data_files={"train": str(tmp_path / "a.parquet")},
                          cache_dir=str(tmp_path / "cache"))
    info, _ = convert(str(tmp_path / "cache"), tmp_path / "out")
    assert info.features["label"].class_names == ("p", "q")
    assert list(_read(tmp_path / "out")["text"]) == ["a", "b", "c"]


def test_a_photo_s_exif_orientation_is_kept_as_stored_where_hf_turns_it_upright(tmp_path):
    """docs/data-in.md: convert stores a Hugging Face Image column's bytes as they are (as
    torchvision reads a file), where datasets' own decoding, and so from_hf, applies the
    EXIF orientation (height and width swapped for orientation 6)."""
    datasets = pytest.importorskip("datasets")
    from datarax import Pipeline, from_hf

    pixels = np.random.default_rng(0).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", exif=exif)
    hf = datasets.Dataset.from_dict({"image": [{"bytes": out.getvalue(), "path": None}]},
                                    features=datasets.Features({"image": datasets.Image()}))
    hf.save_to_disk(str(tmp_path / "hf"))
    convert(str(tmp_path / "hf"), tmp_path / "out")
    np.testing.assert_array_equal(_read(tmp_path / "out")["image"][0], pixels)
    upright = next(iter(Pipeline(source=from_hf(str(tmp_path / "hf")), stages=[], batch_size=1)))
    np.testing.assert_array_equal(np.asarray(upright["image"][0]), np.rot90(pixels, -1))

"""W11 harness, tiny: the generated folder is ImageNet-like, every contender serves every
record once, and the report pairs the runs. No timing asserts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("array_record")
pytest.importorskip("PIL")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import w11_imagenet as W  # noqa: E402


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("w11")


def test_the_folder_holds_jpegs_of_imagenet_like_sizes_in_ten_classes(work):
    from PIL import Image

    folder = W.make_folder(work, 20)
    files = sorted(folder.glob("class*/*.jpg"))
    assert len(files) == 20 and len({f.parent.name for f in files}) == 10
    sizes = [Image.open(f).size for f in files]
    assert all(300 <= side <= 600 for size in sizes for side in size)
    assert len(set(sizes)) > 10  # of every size
    assert W.make_folder(work, 20) == folder  # written once, then reused


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_datarax_serves_every_record_once_per_epoch(work, mode, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # the runner sets it for its decode workers
    dataset = W.make_dataset(work, W.make_folder(work, 20), 20)
    result = W.run_datarax(str(dataset), mode, processes=0)
    assert result["records"] == 20 and result["epoch_rate"] > 0


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_grain_serves_every_record_once_per_epoch(work, mode):
    pytest.importorskip("grain")
    result = W.run_grain(str(W.make_folder(work, 20)), mode, workers=0)
    assert result["records"] == 20 and result["epoch_rate"] > 0


def test_grains_records_are_the_transforms_it_names(work):
    import numpy as np
    from PIL import Image

    path = str(sorted(W.make_folder(work, 20).glob("class*/*.jpg"))[3])
    out = W._grain_record(path, None, "eval")
    with Image.open(path) as image:
        w, h = image.size
        scale = 256 / min(w, h)
        size = (round(w * scale), round(h * scale))
        small = image.convert("RGB").resize(size, Image.BILINEAR)
    left, top = (size[0] - 224) // 2, (size[1] - 224) // 2
    want = np.asarray(small)[top:top + 224, left:left + 224] / np.float32(255)
    want = (want - np.asarray(W.MEAN, np.float32)) / np.asarray(W.STD, np.float32)
    np.testing.assert_allclose(out["image"], want, rtol=0, atol=1e-5)
    assert out["label"] == int(path.split("/")[-2].removeprefix("class"))
    train = W._grain_record(path, np.random.default_rng(0), "train")["image"]
    assert train.shape == (224, 224, 3) and train.dtype == np.float32


def test_main_runs_the_floor_and_reports_it(work, tmp_path):
    out = tmp_path / "w11.json"
    assert W.main(["--images", "20", "--work", str(work), "--contenders", "floor",
                   "--modes", "eval", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["images"] == 20 and report["batch_size"] == 256
    assert report["runs"]["eval/floor"]["best"]["records"] == 20


def test_decoder_table_checks_each_installed_decoders_pixels(work, tmp_path):
    from benchmarks import w11_decoders

    out = tmp_path / "decoders.json"
    assert w11_decoders.main(["--images", "6", "--work", str(work), "--no-tf",
                              "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["images"] == 6 and 0 < report["box_area_share"] <= 1
    rows = report["decoders"]
    # simplejpeg (decode_images' decoder) is the reference; Pillow, its fallback, gives
    # the same pixels in every record's train box
    assert rows["pillow"]["boxes_equal"] == rows["pillow"]["boxes_checked"] == 6
    assert rows["simplejpeg"]["boxes_equal"] == 6
    assert all(row == {"installed": False} or row["box_cpu_ms"] > 0 for row in rows.values())

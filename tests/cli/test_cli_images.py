"""``datarax convert --resize`` and ``datarax inspect --resize/--crop/--random-resized-crop``:
an image folder of many sizes, resized as it is written or decoded as it is read."""

from __future__ import annotations

import io
import json
import pathlib

import numpy as np
import pytest

pytest.importorskip("array_record")
Image = pytest.importorskip("PIL.Image")

from datarax.dataset import read_metadata  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402

SIZES = [(120, 90), (80, 160), (100, 100), (150, 110)]  # (height, width)


def run(*args: str, cwd: pathlib.Path, capsys, monkeypatch) -> tuple[int, str, str]:
    from datarax.cli.main import main

    monkeypatch.chdir(cwd)
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("photos")
    for i, (h, w) in enumerate(SIZES * 2):
        folder = root / "photos" / ("a" if i < 4 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(i)
        small = Image.fromarray((rng.random((5, 5, 3)) * 255).astype(np.uint8))
        small.resize((w, h), Image.Resampling.BILINEAR).save(folder / f"{i}.jpg", quality=90)
    return root


def stored_images(folder: pathlib.Path) -> list[bytes]:
    from datarax.dataset import decode_records

    info = read_metadata(folder)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(folder),
                                     decode=lambda r: {"r": np.frombuffer(r, np.uint8)})
    try:
        raw = source.read_records(list(range(info.num_records)))
    finally:
        source.close()
    return list(decode_records(info.features, raw, encoded=frozenset({"image"}))["image"])


def test_convert_resize_sets_each_shorter_side_as_torchvision(photos, capsys, monkeypatch):
    code, out, _ = run("convert", "photos", "short", "--resize", "64", "--no-progress",
                       cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and out.startswith("wrote short: 8 records")
    info = read_metadata(photos / "short")
    assert info.features["image"].shape == (None, None, 3) and info.extra["resize"] == 64
    sizes = [Image.open(io.BytesIO(b)).size for b in stored_images(photos / "short")]
    # (width, height): the shorter side 64, the other int(64 * long / short)
    assert sizes == [(64, 85), (128, 64), (64, 64), (64, 87)] * 2
    original = Image.open(photos / "photos" / "a" / "0.jpg").convert("RGB")
    want = np.asarray(original.resize((64, 85), Image.Resampling.BILINEAR), dtype=int)
    got = np.asarray(Image.open(io.BytesIO(stored_images(photos / "short")[0])), dtype=int)
    assert np.abs(got - want).mean() < 2.0  # re-encoded at JPEG quality 95


def test_convert_resize_to_height_x_width_gives_a_field_read_without_decode(
        photos, capsys, monkeypatch):
    code, _, _ = run("convert", "photos", "fixed", "--resize", "24x32", "--no-progress",
                     cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    assert read_metadata(photos / "fixed").features["image"].shape == (24, 32, 3)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(photos / "fixed"))
    try:
        batch = source.get_batch(8)
    finally:
        source.close()
    assert batch["image"].shape == (8, 24, 32, 3)
    assert np.asarray(batch["label"]).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_convert_refuses_a_resize_that_is_not_a_size(photos, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit_:
        run("convert", "photos", "bad", "--resize", "big", cwd=photos, capsys=capsys,
            monkeypatch=monkeypatch)
    assert exit_.value.code == 2
    assert "resize must be a size >= 1 for the shorter side (256) or a height and width " \
           "(224x224), got 'big'" in capsys.readouterr().err


def test_inspect_shows_the_images_as_decode_images_decodes_them(photos, capsys, monkeypatch):
    run("convert", "photos", "ds", "--no-progress", cwd=photos, capsys=capsys,
        monkeypatch=monkeypatch)
    code, out, _ = run("inspect", "ds", "--resize", "40", "--crop", "32", "--records", "2",
                       "--grid", "eval.png", "--json", cwd=photos, capsys=capsys,
                       monkeypatch=monkeypatch)
    report = json.loads(out)
    assert code == 0
    assert report["element_spec"] == {"image": "uint8 (32, 32, 3)", "label": "int32 ()"}
    assert report["metadata"]["features"]["image"] == "uint8 (None, None, 3) jpeg"
    assert report["grid"]["field"] == "image" and report["grid"]["records"] == 8
    assert (photos / "eval.png").exists()
    code, out, _ = run("inspect", "ds", "--random-resized-crop", "24", "--records", "1",
                       cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and "image: uint8 (24, 24, 3)" in out


def test_inspect_image_options_refuse_a_decode_of_your_own(photos, capsys, monkeypatch):
    code, _, err = run("inspect", "photos", "--decode", "m:f", "--crop", "8", cwd=photos,
                       capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2
    assert "in place of --decode: give one or the other" in err


def test_inspect_image_options_name_the_flags_to_add(photos, capsys, monkeypatch):
    code, _, err = run("inspect", "photos", "--resize", "40", cwd=photos, capsys=capsys,
                       monkeypatch=monkeypatch)
    assert code == 2
    assert "--resize 40 alone keeps each image's aspect ratio, so the sizes vary; add --crop " \
           "(e.g. --crop 40), or give --resize 40x40." in err
    code, _, err = run("inspect", "photos", "--resize", "40", "--random-resized-crop", "8",
                       cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and "give it alone, or --resize N --crop C." in err


def test_convert_loads_no_jax(photos, tmp_path):
    """`datarax convert` (and its error path) runs without importing JAX or Flax: the
    command's whole CPU was 2.2-2.5 s for 20,000 PNGs with them, 0.8 s without."""
    import subprocess
    import sys

    from cli_helpers import SRC

    code = (
        "import sys\nfrom datarax.cli.main import main\n"
        f"ok = main(['convert', {str(photos / 'photos')!r}, {str(tmp_path / 'ds')!r}, "
        "'--no-progress'])\n"
        f"bad = main(['convert', {str(tmp_path / 'missing')!r}, {str(tmp_path / 'x')!r}])\n"
        "print(ok, bad, sorted(m for m in ('jax', 'flax') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": SRC}, timeout=120)
    assert done.stdout.split("\n")[-2] == "0 2 []", done.stdout + done.stderr
    assert read_metadata(tmp_path / "ds").num_records == 8


def test_inspect_image_options_name_the_field_option_for_a_wrong_field(
    photos, capsys, monkeypatch
):
    run("convert", "photos", "ds_field", "--no-progress", cwd=photos, capsys=capsys,
        monkeypatch=monkeypatch)
    code, out, err = run("inspect", "ds_field", "--field", "picture", "--resize", "40x40",
                         cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.endswith("has no field 'picture'; its fields are ['image', 'label']. Pass --field "
                        "image.\n")


def test_inspect_of_images_of_many_sizes_names_a_record_the_file_cannot_give(
    photos, capsys, monkeypatch
):
    # read one record at a time (no batch for sizes that vary): a damaged block is a
    # one-line error naming the record, as for a batch read, not a traceback
    from int_record_files import damaged_copy

    run("convert", "photos", "ds_damaged", "--no-progress", cwd=photos, capsys=capsys,
        monkeypatch=monkeypatch)
    shard = next((photos / "ds_damaged").glob("*.array_record"))
    _, unreadable = damaged_copy(shard, shard)
    code, out, err = run("inspect", "ds_damaged", "--records", "8", cwd=photos, capsys=capsys,
                         monkeypatch=monkeypatch)
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith(f"datarax inspect: error: ArrayRecordSourceModule: cannot read record "
                          f"{unreadable[0]} of file '{shard}': RuntimeError: ")
    assert err.endswith("Fix or regenerate the file. 'datarax scan ds_damaged' lists every bad "
                        "record.\n")



def test_convert_classes_from_a_dataset_keeps_its_labels_for_a_split_missing_a_class(
    photos, capsys, monkeypatch
):
    import shutil

    from datarax.dataset import decode_records, write_dataset

    (photos / "val_b").mkdir()
    shutil.copytree(photos / "photos" / "b", photos / "val_b" / "b")  # class 'a' missing
    run("convert", "photos", "ds_train", "--no-progress", cwd=photos, capsys=capsys,
        monkeypatch=monkeypatch)
    code, out, _ = run("convert", "val_b", "ds_val", "--classes-from", "ds_train", "--no-progress",
                       cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and out.startswith("wrote ds_val: 4 records")
    info = read_metadata(photos / "ds_val")
    assert info.features["label"].class_names == ("a", "b")
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(photos / "ds_val"),
                                     decode=lambda r: {"r": np.frombuffer(r, np.uint8)})
    try:
        raw = source.read_records(list(range(4)))
    finally:
        source.close()
    labels = decode_records(info.features, raw, encoded=frozenset({"image"}))["label"]
    assert labels.tolist() == [1, 1, 1, 1]  # ds_train's 'b', not class 0 of one class
    write_dataset([{"x": 1}], photos / "no_classes")
    code, out, err = run("convert", "val_b", "ds_none", "--classes-from", "no_classes",
                         cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "") and err == (
        "datarax convert: error: --classes-from no_classes: that dataset has no field with class "
        "names (its fields: x); name a dataset with class names, such as an image folder "
        "converted before.\n")
    (photos / "labels.csv").write_text("x\n1\n")  # a file, not a dataset folder
    code, out, err = run("convert", "val_b", "ds_none", "--classes-from", "labels.csv",
                         cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "") and err == (
        "datarax convert: error: --classes-from labels.csv: 'labels.csv' is a file, not a "
        "dataset: a dataset is the folder that convert wrote, holding datarax_dataset.json and "
        "its shards.\n")


def test_convert_names_empty_class_folders_and_files_left_out(photos, capsys, monkeypatch):
    import shutil

    shutil.copytree(photos / "photos", photos / "with_empty")
    (photos / "with_empty" / "0_none").mkdir()
    (photos / "with_empty" / "0_none" / "IMG_1.HEIC").write_bytes(b"x")  # no image suffix
    code, out, _ = run("convert", "with_empty", "ds_with_empty", "--no-progress", cwd=photos,
                       capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and out.splitlines()[1:] == [
        "  class folder(s) of SRC holding no images, kept as classes with no records: "
        "'0_none' (label 0).",
        "  left out 1 file of SRC that is no image by its suffix: 1 .heic."]
    code, out, _ = run("inspect", "ds_with_empty", "--records", "0", cwd=photos, capsys=capsys,
                       monkeypatch=monkeypatch)
    assert "  label: int64 () raw, 3 classes: 0_none, a, b; without records: 0_none" in out


def test_inspect_grid_shrinks_photo_sized_images_to_tiles_of_256(tmp_path, capsys, monkeypatch):
    # 4000 x 3000 photos made a grid of tens of thousands of pixels a side (a 56 MB PNG,
    # 84 s and 1.2 GB for six); a tile is now at most 256 pixels on its longer side
    from datarax.cli.charts import CAPTION_HEIGHT, PAD, grid_size

    for i, colour in enumerate([(250, 0, 0), (0, 0, 250)]):
        (tmp_path / "big" / "ab"[i]).mkdir(parents=True)
        Image.new("RGB", (1000, 600), colour).save(tmp_path / "big" / "ab"[i] / "0.png")
    run("convert", "big", "big_ds", "--no-progress", cwd=tmp_path, capsys=capsys,
        monkeypatch=monkeypatch)
    code, out, err = run("inspect", "big_ds", "--grid", "grid.png", cwd=tmp_path, capsys=capsys,
                         monkeypatch=monkeypatch)
    assert code == 0, err
    with Image.open(tmp_path / "grid.png") as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape[:2] == grid_size(2, 600, 1000, CAPTION_HEIGHT) == (
        154 + CAPTION_HEIGHT + 2 * PAD, 2 * 256 + 3 * PAD)
    first, second = pixels[PAD:PAD + 154, PAD:PAD + 256], pixels[PAD:PAD + 154, 2 * PAD + 256:-PAD]
    assert (first == (250, 0, 0)).all() and (second == (0, 0, 250)).all()


def test_bench_times_a_dataset_folder_its_images_cut_by_decode_images(photos, capsys, monkeypatch):
    # bench took py:MODULE:FUNCTION only: an image dataset needed a module written for it
    run("convert", "photos", "ds_bench", "--no-progress", cwd=photos, capsys=capsys,
        monkeypatch=monkeypatch)
    code, out, err = run("bench", "ds_bench", "--resize", "40", "--crop", "32", "--batch-size",
                         "3", "--epochs", "1", "--json", cwd=photos, capsys=capsys,
                         monkeypatch=monkeypatch)
    assert code == 0, err
    result = json.loads(out)
    assert (result["batches"], result["records"], result["batch_size"], result["source"]) == (
        3, 8, 3, "ArrayRecordSourceModule")
    code, out, err = run("bench", "ds_bench", cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "") and err.startswith(
        "datarax bench: error: the dataset's field 'image' has a variable shape (None, None, 3)")
    assert err.endswith("On the command line: bench ds_bench --resize N --crop C (or "
                        "--random-resized-crop S).\n")
    code, _, err = run("bench", "ds_bench", "--random-resized-crop", "8", "--field", "photo",
                       cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and err.endswith("has no field 'photo'; its fields are ['image', 'label']. "
                                      "Pass --field image.\n")
    code, _, err = run("bench", "hf:photos", cwd=photos, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and err == ("datarax bench: error: bench takes py:MODULE:FUNCTION (a "
                                 "function returning a Pipeline or source) or a datarax dataset "
                                 "folder, got 'hf:photos'.\n")


def test_inspect_grid_of_photos_of_several_sizes_shrinks_them_by_one_factor(
    tmp_path, capsys, monkeypatch
):
    # padded to the largest at full size before (a grid of phone photos took gigabytes);
    # now shrunk first, all by one factor, so their sizes keep their proportions
    from datarax.cli.charts import CAPTION_HEIGHT, PAD

    (tmp_path / "mixed" / "a").mkdir(parents=True)
    Image.new("RGB", (1000, 600), (250, 0, 0)).save(tmp_path / "mixed" / "a" / "0.png")
    Image.new("RGB", (200, 300), (0, 0, 250)).save(tmp_path / "mixed" / "a" / "1.png")
    run("convert", "mixed", "mixed_ds", "--no-progress", cwd=tmp_path, capsys=capsys,
        monkeypatch=monkeypatch)
    code, _, err = run("inspect", "mixed_ds", "--grid", "grid.png", cwd=tmp_path, capsys=capsys,
                       monkeypatch=monkeypatch)
    assert code == 0, err
    with Image.open(tmp_path / "grid.png") as image:
        pixels = np.asarray(image.convert("RGB"))
    tile = 256  # 1000 x 600 and 200 x 300 -> 256 x 154 and 51 x 77, padded to 256 x 154
    assert pixels.shape[:2] == (154 + CAPTION_HEIGHT + 2 * PAD, 2 * tile + 3 * PAD)
    assert (pixels[PAD:PAD + 154, PAD:PAD + tile] == (250, 0, 0)).all()
    second = pixels[PAD:PAD + 154, 2 * PAD + tile:2 * PAD + 2 * tile]
    assert (second[:77, :51] == (0, 0, 250)).all() and (second[:, 52:] == 0).all()

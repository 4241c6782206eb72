"""convert / datarax convert: each SRC kind, bad rows, the CLI face."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from dataset_helpers import png, read_dataset
from PIL import Image

from datarax.cli.main import main
from datarax.dataset.conversion import convert
from datarax.dataset.writer import ConversionError


def test_hf_parquet_with_images_and_class_labels(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["cat", "dog"]),
                                  "caption": datasets.Value("string")})
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": png(i), "path": None} for i in range(6)],
         "label": [i % 2 for i in range(6)], "caption": [f"c{i}" for i in range(6)]},
        features=features)
    ds.to_parquet(str(tmp_path / "train.parquet"))
    info, summary = convert(str(tmp_path / "train.parquet"), tmp_path / "out", shards=2)
    assert summary.records == 6 and [s.records for s in info.shards] == [3, 3]
    assert info.features["image"].encoding == "png" and info.features["image"].shape == (4, 4, 3)
    assert info.features["label"].class_names == ("cat", "dog")
    assert info.features["caption"].encoding == "utf8"
    out = read_dataset(tmp_path / "out")
    assert out["image"][:, 0, 0, 0].tolist() == list(range(6))
    assert list(out["caption"]) == [f"c{i}" for i in range(6)]


def test_image_folder_labels_and_bad_image(tmp_path) -> None:
    for c, name in enumerate(["ant", "bee"]):
        os.makedirs(tmp_path / "src" / name)
        for i in range(3):
            (tmp_path / "src" / name / f"{i}.png").write_bytes(png(10 * c + i))
    info, _ = convert(str(tmp_path / "src"), tmp_path / "out")
    assert info.features["label"].class_names == ("ant", "bee")
    out = read_dataset(tmp_path / "out")
    assert out["label"].tolist() == [0, 0, 0, 1, 1, 1]
    assert out["image"][:, 0, 0, 0].tolist() == [0, 1, 2, 10, 11, 12]
    (tmp_path / "src" / "bee" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(ConversionError, match=r"row 6 \(bee/3.png\), field 'image': undecodable image"):
        convert(str(tmp_path / "src"), tmp_path / "out2")
    info, _ = convert(str(tmp_path / "src"), tmp_path / "out3", on_error="skip")
    assert info.num_records == 6 and [s["row"] for s in info.skipped] == [6]


def test_dst_in_a_class_folder_or_the_src_itself_is_refused(tmp_path) -> None:
    for name in ["ant", "bee"]:
        os.makedirs(tmp_path / "src" / name)
        (tmp_path / "src" / name / "0.png").write_bytes(png(1))
    src = str(tmp_path / "src")
    with pytest.raises(ConversionError, match="inside the class folder 'ant' of the image folder"):
        convert(src, tmp_path / "src" / "ant" / "ds")
    with pytest.raises(ConversionError, match="is the input folder itself"):
        convert(src, src)
    assert sorted(os.listdir(tmp_path / "src" / "ant")) == ["0.png"]  # nothing written
    info, _ = convert(src, tmp_path / "src" / "ds")  # beside the classes: fine
    assert info.features["label"].class_names == ("ant", "bee")


def test_a_split_asked_of_an_image_folder_or_numpy_files_is_refused(tmp_path) -> None:
    from datarax.core.errors import ConfigError

    # root/{train,val}/<class>/<image>: read whole, 'train' and 'val' would be the classes
    for split in ("train", "val"):
        for name in ("ant", "bee"):
            os.makedirs(tmp_path / "photos" / split / name)
            (tmp_path / "photos" / split / name / "0.png").write_bytes(png(1))
    np.save(tmp_path / "x.npy", np.arange(3))
    with pytest.raises(ConfigError, match=r"'val' picks a split of a Hugging Face / TFDS dataset "
                       r"or of table files; '.*photos' is an image folder, read whole; to convert "
                       r"the images in '.*photos/val', give that folder as SRC\."):
        convert(str(tmp_path / "photos"), tmp_path / "out", split="val")
    with pytest.raises(ConfigError, match=r"x.npy' holds numpy files, read whole; leave split out"):
        convert(str(tmp_path / "x.npy"), tmp_path / "out", split="train")
    assert not (tmp_path / "out").exists()
    info, _ = convert(str(tmp_path / "photos" / "val"), tmp_path / "out")
    assert info.features["label"].class_names == ("ant", "bee")


def test_jsonl_csv_and_npz(tmp_path) -> None:
    with open(tmp_path / "a.jsonl", "w") as f:
        for i in range(5):
            f.write(json.dumps({"x": i, "text": f"t{i}"}) + "\n")
    info, _ = convert(str(tmp_path / "a.jsonl"), tmp_path / "j")
    assert list(read_dataset(tmp_path / "j")["text"]) == [f"t{i}" for i in range(5)]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.csv").write_text("x,y\n1,0.5\n2,1.5\n")
    info, _ = convert(str(tmp_path / "c"), tmp_path / "cv")
    assert read_dataset(tmp_path / "cv")["y"].tolist() == [0.5, 1.5]
    np.savez(tmp_path / "d.npz", a=np.arange(8).reshape(4, 2), b=np.arange(4, dtype=np.uint8))
    info, _ = convert(str(tmp_path / "d.npz"), tmp_path / "n", shards=2)
    out = read_dataset(tmp_path / "n")
    assert out["a"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]] and out["b"].dtype == np.uint8


def test_cli_convert_summary_refusal_and_beam_error(tmp_path, capsys) -> None:
    np.save(tmp_path / "x.npy", np.arange(10, dtype=np.float32))
    src, dst = str(tmp_path / "x.npy"), str(tmp_path / "out")
    assert main(["convert", src, dst, "--shards", "2", "--no-progress"]) == 0
    assert "wrote " + dst + ": 10 records" in capsys.readouterr().out
    assert main(["convert", src, dst, "--no-progress"]) == 2
    assert "already holds a finished dataset" in capsys.readouterr().err
    assert main(["convert", src, dst, "--no-progress", "--", "--direct_num_workers=2"]) == 2
    assert "add --runner beam" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error, naming the option
        main(["convert", src, str(tmp_path / "nope"), "--shards", "0"])
    assert exit_.value.code == 2
    assert "argument --shards: must be 1 or more, got 0" in capsys.readouterr().err


def test_inspect_shows_metadata_and_captions_the_grid(tmp_path, capsys) -> None:
    for c, name in enumerate(["ant", "bee"]):
        os.makedirs(tmp_path / "src" / name)
        for i in range(2):
            (tmp_path / "src" / name / f"{i}.png").write_bytes(png(10 * c + i, size=8))
    dst, grid = str(tmp_path / "ds"), str(tmp_path / "g.png")
    assert main(["convert", str(tmp_path / "src"), dst, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", dst, "--grid", grid, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["metadata"]["features"]["label"] == "int64 () raw, 2 classes: ant, bee"
    assert report["metadata"]["records"] == 4 and report["metadata"]["shards"] == 1
    assert report["grid"]["captions"] == "label"
    assert report["grid"]["caption_texts"] == ["ant", "ant", "bee", "bee"]
    assert [r["label"] for r in report["first_records"]] == ["int32 0 (ant)", "int32 0 (ant)",
                                                              "int32 1 (bee)"]
    assert Image.open(grid).size == (report["grid"]["width"], report["grid"]["height"])


def test_cli_progress_bar_counts_records_and_summary_sums_up(tmp_path, capsys) -> None:
    np.save(tmp_path / "x.npy", np.arange(40, dtype=np.int32).reshape(20, 2))
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "ds"), "--shards", "2"]) == 0
    out, err = capsys.readouterr()
    assert "20/20" in err and "records/s" in err  # whole counts under 10,000, not '20.0/20.0'
    assert "20 records, " in out and " in 2 shards (0 resumed), 0 rows skipped, " in out


def test_image_folder_of_several_sizes_gets_none_dimensions(tmp_path, capsys) -> None:
    sizes = {"a": [(8, 8), (8, 5)], "b": [(8, 6)]}  # one height, widths vary
    for name, shapes in sizes.items():
        os.makedirs(tmp_path / "src" / name)
        for i, (h, w) in enumerate(shapes):
            Image.fromarray(np.full((h, w, 3), i, np.uint8)).save(tmp_path / "src" / name / f"{i}.png")
    (tmp_path / "src" / "b" / "9.png").write_bytes(b"not an image")  # skipped, not measured
    info, _ = convert(str(tmp_path / "src"), tmp_path / "out", on_error="skip")
    assert info.features["image"].shape == (8, None, 3) and info.num_records == 3
    images = read_dataset(tmp_path / "out")["image"]
    assert [im.shape for im in images] == [(8, 8, 3), (8, 5, 3), (8, 6, 3)]
    capsys.readouterr()
    grid = str(tmp_path / "g.png")
    assert main(["inspect", str(tmp_path / "out"), "--grid", grid, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # padded to 8x8 for the grid
    assert report["grid"]["kind"] == "image grid" and report["grid"]["field"] == "image"
    assert report["grid"]["caption_texts"] == ["a", "a", "b"]


@pytest.mark.parametrize("name, text", [
    ("t.csv", b"a,s\n1,ok\n2,caf\xe9\n3,fine\n"),
    ("t.jsonl", b'{"a": 1, "s": "ok"}\n{"a": 2, "s": "caf\xe9"}\n{"a": 3, "s": "fine"}\n'),
])
def test_text_that_is_not_utf8_in_csv_or_jsonl_is_named_or_skipped(tmp_path, name, text) -> None:
    (tmp_path / name).write_bytes(text)
    with pytest.raises(ConversionError, match="row 1, field 's': text is not valid UTF-8"):
        convert(str(tmp_path / name), tmp_path / "out")
    info, _ = convert(str(tmp_path / name), tmp_path / "skip", on_error="skip")
    assert info.features["s"].encoding == "utf8" and [s["row"] for s in info.skipped] == [1]
    assert list(read_dataset(tmp_path / "skip")["s"]) == ["ok", "fine"]


def test_jsonl_whose_column_changes_type_names_the_row_or_skips_it(tmp_path) -> None:
    # pyarrow cannot read this file as one table: its rows are then checked one by one
    src = tmp_path / "mixed.jsonl"
    src.write_text('{"x": 1, "t": "a"}\n{"x": "abc", "t": "b"}\n\n{"x": 3, "t": "c"}\n')
    with pytest.raises(ConversionError, match=r"row 1, field 'x': a str .* does not fit the "
                                              r"features' int64"):
        convert(str(src), tmp_path / "out")
    info, _ = convert(str(src), tmp_path / "skip", on_error="skip")
    assert [(s["row"], s["field"]) for s in info.skipped] == [(1, "x")]
    records = read_dataset(tmp_path / "skip")
    assert list(records["x"]) == [1, 3] and list(records["t"]) == ["a", "c"]


def test_a_json_array_file_is_read_and_a_broken_one_refused(tmp_path) -> None:
    src = tmp_path / "array.json"
    src.write_text('[{"x": 1}, {"x": 2}]\n')
    info, _ = convert(str(src), tmp_path / "out")
    assert info.num_records == 2
    src.write_text('[{"x": 1}, {"x": 2}\n')  # the closing bracket missing
    with pytest.raises(ConversionError, match="the file is not one JSON array .*JSON Lines: one "
                                              "object a line, or one JSON array of objects"):
        convert(str(src), tmp_path / "out2")


def test_the_files_of_a_folder_are_records_in_the_order_of_their_paths_as_text(tmp_path) -> None:
    (tmp_path / "src" / "more").mkdir(parents=True)
    for name in ("part2.csv", "part10.csv", "part1.csv", "more/part0.csv"):
        (tmp_path / "src" / name).write_text(f"id,src\n1,{name}\n2,{name}\n")
    info, _ = convert(str(tmp_path / "src"), tmp_path / "ds")
    assert info.num_records == 8
    assert list(read_dataset(tmp_path / "ds")["src"]) == [
        n for n in ("more/part0.csv", "part1.csv", "part10.csv", "part2.csv") for _ in (1, 2)]

"""Inputs a new user hands the writer first: empty or odd records, missing values, list
columns whose length varies, broken files. Each is written right or refused with the row,
the field and what to do."""

from __future__ import annotations

import json

import numpy as np
import pytest
from dataset_helpers import png, read_dataset

from datarax.dataset import ConversionError, convert, write_dataset
from datarax.dataset.conversion import open_rows
from datarax.dataset.reading import DatasetDecoder
from datarax.errors import ConfigError, DataraxError


def test_no_records_and_odd_records_are_refused_by_name(tmp_path) -> None:
    with pytest.raises(ConversionError, match="holds no records; nothing to write"):
        write_dataset([], tmp_path / "a")
    with pytest.raises(ConversionError, match=r"row 0 .*field names are str, got the key 1 \(int\)"):
        write_dataset([{1: 2}], tmp_path / "b")
    with pytest.raises(ConfigError, match="class_names names the field 'lable'.*\\['x', 'label'\\]"):
        write_dataset([{"x": 1.0, "label": 0}], tmp_path / "c", class_names={"lable": ["a"]})


def test_a_missing_value_is_named_not_a_nonetype_dtype(tmp_path) -> None:
    with pytest.raises(ConversionError, match=r"row 0 .*field 'y': no value \(None"):
        write_dataset([{"x": 1, "y": None}], tmp_path / "a")
    with pytest.raises(ConversionError, match=r"row 1, field 'y': no value \(None") as err:
        write_dataset([{"x": 1, "y": "a"}, {"x": 2, "y": None}], tmp_path / "b")
    assert "inferred from the first row" not in str(err.value)  # not a shape or dtype question
    (tmp_path / "gap.csv").write_text("a,b\n1,2\n3,\n")
    with pytest.raises(ConversionError, match=r"gap.csv, row 1, field 'b': no value"):
        convert(str(tmp_path / "gap.csv"), tmp_path / "c")


def test_a_shape_that_varies_says_how_to_declare_it(tmp_path) -> None:
    records = [{"x": np.zeros(i + 1, np.float32)} for i in range(3)]
    with pytest.raises(ConversionError, match=r"row 1, field 'x': shape \(2,\).*None for a "
                                              r"dimension that varies.*on_error='skip'"):
        write_dataset(records, tmp_path / "a")


def test_list_columns_take_their_shape_from_every_row(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    toks = [list(range(i % 4)) for i in range(10)]  # row 0 is an empty list
    table = pa.table({"toks": pa.array(toks, pa.list_(pa.int32())),
                      "emb": [[float(i)] * 3 for i in range(10)],
                      "label": list(range(10))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=4)
    info, _ = convert(str(tmp_path / "t.parquet"), tmp_path / "out", shards=2)
    feats = {f.name: (f.dtype, f.shape, f.encoding) for f in info.features.fields}
    assert feats == {"toks": ("int32", (None,), "varlen"), "emb": ("float32", (3,), "raw"),
                     "label": ("int64", (), "raw")}
    back = read_dataset(tmp_path / "out")
    assert [t.tolist() for t in back["toks"]] == toks and back["toks"][5].dtype == np.int32
    assert back["emb"][:, 0].tolist() == list(range(10))
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"v": [1] * (i % 2 + 1)}) + "\n"
                                              for i in range(4)))
    info, _ = convert(str(tmp_path / "t.jsonl"), tmp_path / "json")
    assert info.features["v"].shape == (None,)


def test_hugging_face_sequences_and_iterable_datasets(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {"toks": [list(range(i + 1)) for i in range(4)], "label": [0, 1, 0, 1]},
        features=datasets.Features({"toks": datasets.Sequence(datasets.Value("int32")),
                                    "label": datasets.ClassLabel(names=["no", "yes"])}))
    info, _ = write_dataset(ds, tmp_path / "a")
    assert info.features["toks"].shape == (None,) and info.features["toks"].dtype == "int32"
    assert [len(t) for t in read_dataset(tmp_path / "a")["toks"]] == [1, 2, 3, 4]
    info, _ = write_dataset(ds.remove_columns("toks").to_iterable_dataset(), tmp_path / "b")
    assert info.num_records == 4 and info.features["label"].class_names == ("no", "yes")


def _image_folder(root, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not an image" if "broken" in name else png(7))


def test_a_broken_image_is_named_the_same_every_run(tmp_path) -> None:
    _image_folder(tmp_path / "imgs", ["a/0.png", "a/1.png", "b/0_broken.png", "b/2.png"])
    with pytest.raises(ConversionError, match=r"row 2 \(b/0_broken.png\), field 'image': "
                                              r"undecodable image") as err:
        convert(str(tmp_path / "imgs"), tmp_path / "x")
    assert " at 0x" not in str(err.value)
    first, _ = convert(str(tmp_path / "imgs"), tmp_path / "one", on_error="skip")
    convert(str(tmp_path / "imgs"), tmp_path / "two", on_error="skip")
    assert [s["row"] for s in first.skipped] == [2]
    metadata = [(tmp_path / d / "datarax_dataset.json").read_bytes() for d in ("one", "two")]
    assert metadata[0] == metadata[1]


def test_an_empty_image_file_is_named_as_empty_not_as_unidentified(tmp_path) -> None:
    # a 0-byte file (a failed download) was 'undecodable image (UnidentifiedImageError:
    # cannot identify image file)', which reads as a format problem
    root = tmp_path / "imgs"
    _image_folder(root, ["a/0.png", "b/1.png"])
    (root / "a" / "1_empty.jpg").write_bytes(b"")
    with pytest.raises(ConversionError, match=r"row 1 \(a/1_empty.jpg\), field 'image': the "
                                              r"image is empty \(0 bytes\)\. Fix the source row"):
        convert(str(root), tmp_path / "x")
    info, _ = convert(str(root), tmp_path / "y", on_error="skip")
    assert info.num_records == 2
    assert list(info.skipped) == [{"row": 1, "field": "image",
                             "error": "row 1 (a/1_empty.jpg), field 'image': the image is empty "
                                      "(0 bytes)."}]


def test_a_broken_first_row_is_skipped_when_asked(tmp_path) -> None:
    _image_folder(tmp_path / "imgs", ["a/0_broken.png", "a/1.png"])
    with pytest.raises(ConversionError, match=r"row 0 \(a/0_broken.png\) \(the features are "
                                              r"inferred from the first row\).*--on-error skip"):
        convert(str(tmp_path / "imgs"), tmp_path / "x")
    info, _ = convert(str(tmp_path / "imgs"), tmp_path / "y", on_error="skip")
    assert info.num_records == 1 and [s["row"] for s in info.skipped] == [0]
    assert info.features["image"].shape == (4, 4, 3)


def test_every_row_bad_under_skip_says_all_rows_were_tried_not_row_0_alone(tmp_path) -> None:
    # with --on-error skip every row is tried for the features: the error said 'Fix the
    # row' naming row 0, as if the others had been good
    _image_folder(tmp_path / "imgs", ["a/0_broken.png", "a/1_broken.jpg", "b/2_broken.png"])
    with pytest.raises(ConversionError) as err:
        convert(str(tmp_path / "imgs"), tmp_path / "x", on_error="skip")
    assert str(err.value).startswith(
        f"the image folder {tmp_path / 'imgs'}: all 3 rows tried for the features (with "
        "on_error='skip' the first good row gives them) are bad, so nothing describes the "
        "fields; the first, row 0 (a/0_broken.png): field 'image': undecodable image")
    assert str(err.value).endswith("Fix the rows, or pass features= (a datarax.dataset.Features) "
                                   "to declare every field.")


def test_an_unreadable_table_file_is_named(tmp_path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')  # line 2 is not JSON
    with pytest.raises(ConversionError, match=r"cannot read the json file '.*bad.jsonl'"):
        open_rows(str(tmp_path / "bad.jsonl"))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ConversionError, match=r"cannot read the parquet file '.*bad.parquet'"):
        open_rows(str(tmp_path / "bad.parquet"))


def test_reading_an_unfinished_conversion_says_resume(tmp_path) -> None:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    (tmp_path / "ds" / ".datarax-partial").mkdir(parents=True)
    with pytest.raises(DataraxError, match="unfinished conversion.*--resume"):
        ArrayRecordSourceModule(ArrayRecordSourceConfig(), tmp_path / "ds")


def test_a_variable_field_is_refused_with_its_shape_and_a_way_out(tmp_path) -> None:
    info, _ = write_dataset([{"b": b"ab"}, {"b": b"c"}], tmp_path / "a")
    with pytest.raises(ConfigError, match=r"field 'b' has a variable shape \(None,\).*decode="):
        DatasetDecoder(info.features)


def test_table_splits_are_picked_by_file_name_or_refused(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3]}), tmp_path / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"x": [7]}), tmp_path / "data" / "test-00000-of-00001.parquet")
    assert open_rows(str(tmp_path)).length == 3  # several splits: train, as for Hugging Face folders
    assert open_rows(str(tmp_path), split="test").length == 1
    with pytest.raises(ConversionError, match=r"no files of the split 'valid'.*\['test', 'train'\]"):
        open_rows(str(tmp_path), split="valid")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "rows.parquet")
    with pytest.raises(ConversionError, match=r"no files of the split 'test'.*leave out split="):
        open_rows(str(tmp_path / "rows.parquet"), split="test")



def test_files_of_no_split_beside_files_of_several_are_refused_not_left_out(tmp_path) -> None:
    for name, rows in (("train.csv", "1\n"), ("test.csv", "2\n"), ("training.csv", "3\n4\n")):
        (tmp_path / name).write_text("x\n" + rows)
    with pytest.raises(ConversionError, match=r"holds files of the splits test, train and files "
                                              r"of none \(training.csv\); pick a split with "
                                              r"split= \(--split NAME"):
        open_rows(str(tmp_path))
    assert open_rows(str(tmp_path), split="train").length == 1  # asked: that split's files
    (tmp_path / "test.csv").unlink()  # one split and files of none: every file, as before
    assert open_rows(str(tmp_path)).length == 3

def test_destinations_and_sources_that_are_not_what_convert_takes(tmp_path) -> None:
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    (tmp_path / "file").write_text("")
    with pytest.raises(ConversionError, match="'.*file' is a file; the destination is the folder"):
        convert(str(tmp_path / "x.npy"), tmp_path / "file")
    convert(str(tmp_path / "x.npy"), tmp_path / "ds")
    with pytest.raises(ConversionError, match="is a datarax dataset already; read it with "
                                              "ArrayRecordSourceModule"):
        convert(str(tmp_path / "ds"), tmp_path / "again")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match="the folder '.*empty' is empty; SRC is the folder"):
        convert(str(tmp_path / "empty"), tmp_path / "out")
    (tmp_path / "x.xlsx").write_bytes(b"PK\x03\x04")
    with pytest.raises(ConversionError, match=r"'.*x.xlsx' is a .xlsx file, which convert does "
                                              r"not read; it reads Parquet"):
        convert(str(tmp_path / "x.xlsx"), tmp_path / "out")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("hi")
    with pytest.raises(ConversionError, match=r"the folder '.*notes' holds nothing convert reads "
                                              r"\(it holds a.txt\)"):
        convert(str(tmp_path / "notes"), tmp_path / "out")
    with pytest.raises(ConversionError, match=r"'.*missing.csv' does not exist. Check the path"):
        convert(str(tmp_path / "missing.csv"), tmp_path / "out")
    with pytest.raises(ConversionError, match=r"the pattern '.*\*.parquet' matches no file"):
        convert(str(tmp_path / "*.parquet"), tmp_path / "out")
    with pytest.raises(ConversionError, match=r"not 'hf:user/data' \(a Hub name\): save it "
                                              r"first, e.g. datasets.load_dataset\('user/data'"):
        convert("hf:user/data", tmp_path / "out")


def test_a_destination_that_cannot_be_created_is_named_with_what_to_do(tmp_path, capsys) -> None:
    from datarax.cli.main import main

    (tmp_path / "file").write_text("")
    rows = [{"a": np.int32(1)}]
    with pytest.raises(ConversionError, match=r"cannot write the dataset folder '.*file/ds': Not a "
                                              r"directory\. Pick a destination whose parent"):
        write_dataset(rows, tmp_path / "file" / "ds")
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "file" / "sub" / "ds"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "datarax convert: error: cannot write the dataset folder" in err
    assert "Not a directory" in err and "Pick a destination" in err


def test_a_data_dir_for_a_source_that_is_not_tfds_is_refused_not_ignored(tmp_path) -> None:
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    with pytest.raises(ConfigError, match=r"data_dir \(--data-dir\) '.*tfds' names the TFDS data "
                                          r"directory of a tfds:NAME source; '.*x\.npy' is read as"):
        convert(str(tmp_path / "x.npy"), tmp_path / "ds", data_dir=str(tmp_path / "tfds"))
    assert not (tmp_path / "ds").exists()


def test_a_url_destination_of_the_local_writer_is_refused_not_written_as_a_local_folder(
        tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a URL taken as a relative path would land here, in 's3:/'
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    with pytest.raises(ConfigError, match=r"write_dataset writes a local folder, and "
                                          r"'s3://bucket/ds' is a URL\. .*runner='beam'"):
        write_dataset([{"a": np.int32(1)}], "s3://bucket/ds")
    with pytest.raises(ConfigError, match=r"convert with runner='local' writes a local folder, "
                                          r"and 'gs://bucket/ds' is a URL"):
        convert(str(tmp_path / "x.npy"), "gs://bucket/ds")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]
    with pytest.raises(ConversionError, match=r"convert reads local files, and "
                                              r"'s3://bucket/x\.parquet' is a URL\. Copy the files"):
        convert("s3://bucket/x.parquet", tmp_path / "ds")


@pytest.mark.parametrize("args,message", [
    (("a", "int32", (-1,), "raw"), r"field 'a': shape \(-1,\) has a negative dimension"),
    (("", "int32", (), "raw"), r"a field's name is a non-empty str, got ''"),
    (("a", "int33", (), "raw"), r"field 'a': dtype 'int33' is not a NumPy dtype"),
    (("a", "U5", (), "raw"), r"field 'a': dtype 'U5' is not a number type; text is dtype 'str'"),
    (("a", "T", (), "raw"), r"field 'a': dtype 'T' is not a number type; text is dtype 'str'"),
])
def test_a_declared_field_that_cannot_be_stored_is_refused_by_name(args, message) -> None:
    from datarax.dataset import Field

    with pytest.raises(DataraxError, match=message):
        Field(*args)


def test_a_bad_row_in_a_worker_reads_as_with_one_process(tmp_path) -> None:
    records = [{"x": np.float32([i, i])} for i in range(40)]
    records[30] = {"x": np.float32([1])}
    with pytest.raises(ConversionError) as one:
        write_dataset(records, tmp_path / "one", shards=4)
    with pytest.raises(ConversionError) as two:
        write_dataset(records, tmp_path / "two", shards=4, workers=2)
    assert str(two.value).startswith(str(one.value)) and "resume=True" in str(two.value)


def test_a_bad_row_in_the_main_process_share_reads_as_with_one_process(tmp_path) -> None:
    # with workers=2 the main process writes shards 0 and 2 itself, its worker 1 and 3
    records = [{"x": np.float32([i, i])} for i in range(40)]
    records[3] = {"x": np.float32([1])}
    with pytest.raises(ConversionError) as one:
        write_dataset(records, tmp_path / "one", shards=4)
    with pytest.raises(ConversionError) as two:
        write_dataset(records, tmp_path / "two", shards=4, workers=2)
    assert str(two.value) == str(one.value) and "row 3" in str(one.value)


def test_npz_text_entries_are_str_and_object_arrays_are_named(tmp_path) -> None:
    np.savez(tmp_path / "a.npz", x=np.arange(3, dtype=np.float32), name=np.array(["a", "bb", "c"]))
    info, _ = convert(str(tmp_path / "a.npz"), tmp_path / "out")
    assert info.features["name"].encoding == "utf8"
    assert list(read_dataset(tmp_path / "out")["name"]) == ["a", "bb", "c"]
    np.save(tmp_path / "obj.npy", np.array([[1], [1, 2]], dtype=object))
    with pytest.raises(ConversionError, match=r"cannot read the numpy file '.*obj.npy'.*object arrays"):
        convert(str(tmp_path / "obj.npy"), tmp_path / "out2")


def test_a_structured_npy_gives_a_field_per_named_field(tmp_path) -> None:
    records = np.array([(1, 2.5, [1, 2, 3]), (3, 4.5, [4, 5, 6])],
                       dtype=[("x", "i4"), ("y", "f8"), ("p", "u1", (3,))])
    np.save(tmp_path / "table.npy", records)
    info, _ = convert(str(tmp_path / "table.npy"), tmp_path / "out")
    assert [f.name for f in info.features.fields] == ["x", "y", "p"]
    back = read_dataset(tmp_path / "out")
    assert back["x"].tolist() == [1, 3] and back["y"].tolist() == [2.5, 4.5]
    assert back["p"].tolist() == [[1, 2, 3], [4, 5, 6]]
    np.savez(tmp_path / "clash.npz", x=np.arange(2), t=records)
    with pytest.raises(ConversionError, match="two arrays give the field 'x'.*'t'.*rename one"):
        convert(str(tmp_path / "clash.npz"), tmp_path / "out2")
    np.save(tmp_path / "raw.npy", np.zeros(3, "V2"))  # how numpy.save writes a bfloat16 array
    with pytest.raises(ConversionError, match=r"'raw' holds raw values of 2 byte\(s\).*bfloat16"):
        convert(str(tmp_path / "raw.npy"), tmp_path / "out3")


@pytest.mark.slow
def test_workers_end_with_their_killed_main_process(tmp_path) -> None:
    import os
    import subprocess
    import sys
    import time

    here = os.path.dirname(os.path.abspath(__file__))
    script = (f"import sys; sys.path.insert(0, {here!r})\n"
              "from killer_rows import ParentKillerRows\n"
              "from datarax.dataset import write_dataset\n"
              "if __name__ == '__main__':\n"
              f"    write_dataset(ParentKillerRows(80, 40, 0.05), {str(tmp_path / 'ds')!r}, "
              "shards=2, workers=2)\n")
    (tmp_path / "run.py").write_text(script)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py")], timeout=240)
    assert done.returncode == -9
    # a worker left running would finish its 40-row shard (rows 40..79, 2 s) by now;
    # the main process writes rows 0..39 itself (2 s), and is killed at row 40
    time.sleep(2.5)
    assert sorted(n for n in os.listdir(tmp_path / "ds") if n.endswith(".array_record")) == []


def test_convert_of_python_records_names_them_and_sizes_shards(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    info, _ = convert(datasets.Dataset.from_dict({"a": [1, 2]}), tmp_path / "hf")
    assert info.extra["source"] == "a Hugging Face dataset"
    info, summary = convert([{"a": i} for i in range(60_001)], tmp_path / "list")
    assert info.extra["source"] == "a sequence of records" and summary.shards == 2


def test_a_beam_record_with_a_digest_key_is_named_in_hex(tmp_path) -> None:
    beam = pytest.importorskip("apache_beam")
    from datarax.beam import WriteDataset, direct_runner
    from datarax.dataset import read_metadata

    records = [{"v": np.float32([i, i])} for i in range(6)]
    records[4] = {"v": np.float32([1])}
    with beam.Pipeline(runner=direct_runner()) as p:
        _ = p | beam.Create(records) | WriteDataset(str(tmp_path / "b"), on_error="skip")
    (skipped,) = read_metadata(tmp_path / "b").skipped
    assert skipped["field"] == "v" and "\\x" not in skipped["error"]
    assert skipped["error"].startswith("the record with key 0x")


def test_a_full_disk_is_named_and_leaves_no_complete_looking_shard(tmp_path) -> None:
    import os
    import subprocess
    import sys

    pytest.importorskip("resource")  # POSIX file size limits

    # RLIMIT_FSIZE stands in for a full disk: a write past 1 MB fails
    script = ("import resource, signal, numpy as np\n"
              "from datarax.dataset import ConversionError, write_dataset\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))\n"
              "rng = np.random.default_rng(0)\n"
              "records = [{'x': rng.random(1000, dtype=np.float32)} for _ in range(400)]\n"
              "try:\n"
              f"    write_dataset(records, {str(tmp_path / 'ds')!r})\n"
              "except ConversionError as err:\n"
              "    print(err)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240)
    assert "writing the shard 'data-00000-of-00001.array_record'" in done.stdout, done.stderr
    assert "resume=True" in done.stdout
    assert sorted(os.listdir(tmp_path / "ds")) == [".datarax-partial"]


def test_cli_convert_interrupted_says_how_to_finish(tmp_path, capsys, monkeypatch) -> None:
    import datarax.dataset.conversion as conversion
    from datarax.cli.main import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(conversion, "convert", interrupted)
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "ds"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume to finish" in err
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "ds"), "--runner", "beam"]) == 130
    assert "--overwrite to start again" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "ds"), "--overwrite"]) == 130
    assert "a dataset that was in " + str(tmp_path / "ds") + " is kept as it was: run the same " \
        "command to start again" in capsys.readouterr().err


def test_a_ragged_nested_list_is_named_with_a_way_out(tmp_path) -> None:
    with pytest.raises(ConversionError, match=r"row 0 .*field 'm': not an array .*rectangular"):
        write_dataset([{"m": [[1, 2], [3]]}], tmp_path / "a")
    with pytest.raises(ConversionError, match=r"row 1, field 'm': not an array .*rectangular"):
        write_dataset([{"m": [[1, 2], [3, 4]]}, {"m": [[1, 2], [3]]}], tmp_path / "b")


def test_an_image_dict_naming_a_missing_file_is_named(tmp_path) -> None:
    records = [{"image": {"bytes": png(1), "path": None}},
               {"image": {"bytes": None, "path": str(tmp_path / "gone.png")}}]
    with pytest.raises(ConversionError, match=r"row 1, field 'image': cannot read the image file "
                                              r".*gone.png"):
        write_dataset(records, tmp_path / "a")
    with pytest.raises(ConversionError, match=r"row 0 .*field 'image': cannot read the image"):
        write_dataset(records[1:], tmp_path / "b")


def test_hidden_folders_of_an_image_folder_are_no_class(tmp_path) -> None:
    _image_folder(tmp_path / "imgs", ["ant/0.png", "bee/1.png", ".ipynb_checkpoints/x.png"])
    info, _ = convert(str(tmp_path / "imgs"), tmp_path / "imgs" / "ds")
    assert info.features["label"].class_names == ("ant", "bee") and info.num_records == 2
    _, summary = convert(str(tmp_path / "imgs"), tmp_path / "imgs" / "ds", resume=True)
    assert summary.shards_resumed == 1  # the dataset written inside is not a class either


def test_an_image_folder_starting_with_a_jpeg_keeps_every_other_image_exact(tmp_path) -> None:
    """The field's encoding comes from the first image (a JPEG here); a PNG, a palette PNG
    and a grey JPEG after it are stored losslessly, not re-encoded as JPEG: every record
    holds exactly the pixels of PIL's ``convert("RGB")`` of its file (ImageFolder's)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    files = {"a/0.jpg": ("RGB", "JPEG"), "a/1.png": ("RGB", "PNG"), "b/2.png": ("P", "PNG"),
             "b/3.jpg": ("L", "JPEG")}
    for name, (mode, fmt) in files.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        pixels = Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8))
        pixels.convert(mode).save(tmp_path / "src" / name, format=fmt)
    info, _ = convert(str(tmp_path / "src"), tmp_path / "ds")
    assert info.features["image"].encoding == "jpeg" and info.features["image"].shape == (12, 10, 3)
    images = read_dataset(tmp_path / "ds")["image"]
    for image, name in zip(images, files):
        expected = np.asarray(Image.open(tmp_path / "src" / name).convert("RGB"))
        np.testing.assert_array_equal(image, expected, err_msg=name)


def test_a_null_inside_a_list_is_named_with_its_position(tmp_path) -> None:
    (tmp_path / "d.jsonl").write_text('{"v": [1, 2]}\n{"v": [null, 3]}\n')
    with pytest.raises(ConversionError, match=r"row 1, field 'v': a list holding a null \(None\) "
                                              r"at \[0\]; every element of a list needs a value"):
        convert(str(tmp_path / "d.jsonl"), tmp_path / "a")
    with pytest.raises(ConversionError, match=r"row 0 .*field 'v': a list holding a null "
                                              r"\(None\) at \[1, 1\]"):
        write_dataset([{"v": [[1, 2], [3, None]]}], tmp_path / "b")
    info, _ = convert(str(tmp_path / "d.jsonl"), tmp_path / "c", on_error="skip")
    assert [s["row"] for s in info.skipped] == [1]
    assert read_dataset(tmp_path / "c")["v"].tolist() == [[1, 2]]


def test_a_tfds_name_unknown_or_not_prepared_is_named_in_one_short_message(tmp_path) -> None:
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(ConversionError) as err:
        convert("tfds:no_such_dataset_xyz", tmp_path / "ds")
    assert str(err.value).startswith("TFDS has no dataset named 'no_such_dataset_xyz' (not in "
                                     "its catalog or in the default TFDS data_dir).")
    assert len(str(err.value)) < 300  # not TFDS's whole catalog
    (tmp_path / "tfds").mkdir()
    with pytest.raises(ConversionError, match=r"the TFDS dataset 'mnist' is not prepared in "
                                              r"data_dir '.*tfds'; convert reads prepared data "
                                              r"only \(it never downloads\)"):
        convert("tfds:mnist", tmp_path / "ds", data_dir=str(tmp_path / "tfds"))
    assert not (tmp_path / "ds").exists()


def test_a_pattern_matching_unreadable_paths_says_which_is_or_none_of_them_is_read(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("hi")
    with pytest.raises(ConversionError, match=r"the pattern '.*/notes/\*\.txt' matches 1 path "
                                              r"\(.*a\.txt\), which is none of Parquet"):
        convert(str(tmp_path / "notes" / "*.txt"), tmp_path / "out")
    (tmp_path / "notes" / "b.txt").write_text("ho")
    with pytest.raises(ConversionError, match=r"matches 2 paths \(.*a\.txt, .*b\.txt\), none "
                                              r"of them Parquet"):
        convert(str(tmp_path / "notes" / "*.txt"), tmp_path / "out")

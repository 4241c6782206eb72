"""Values of CSV / JSON Lines / Parquet cells as a user writes them: each comes back
exactly, or the conversion stops naming the file, the row or column and what to do."""

from __future__ import annotations

import numpy as np
import pytest
from dataset_helpers import read_dataset

from datarax.dataset import ConversionError, convert


def test_a_nan_cell_of_a_csv_float_column_is_nan_not_a_missing_value(tmp_path) -> None:
    # "nan" is what Python's csv module and numpy.savetxt write for a float NaN
    (tmp_path / "t.csv").write_text("x,n\n1.5,1\nnan,2\nNaN,3\n-inf,4\n")
    info, _ = convert(str(tmp_path / "t.csv"), tmp_path / "d")
    data = read_dataset(tmp_path / "d")
    assert info.num_records == 4 and info.features["x"].dtype == "float32"
    np.testing.assert_array_equal(data["x"], np.float32([1.5, np.nan, np.nan, -np.inf]))
    assert data["n"].tolist() == [1, 2, 3, 4]
    (tmp_path / "all.csv").write_text("x,n\nnan,1\nNaN,2\n")  # no other value in the column
    info, _ = convert(str(tmp_path / "all.csv"), tmp_path / "f")
    assert info.features["x"].dtype == "float32"
    assert np.isnan(read_dataset(tmp_path / "f")["x"]).tolist() == [True, True]
    # a missing-value marker stays a missing value, named by row and field
    (tmp_path / "na.csv").write_text("x\n1.5\nNA\n")
    with pytest.raises(ConversionError, match=r"na.csv, row 1, field 'x': no value"):
        convert(str(tmp_path / "na.csv"), tmp_path / "e")


@pytest.mark.parametrize("suffix, text", [
    ("csv", "id,h\n1,18446744073709551615\n2,1099511627777\n"),
    ("jsonl", '{"id": 1, "h": 18446744073709551615}\n{"id": 2, "h": 1099511627777}\n'),
    ("jsonl", '{"id": 1.0, "h": 18446744073709551615}\n{"id": NaN, "h": 1099511627777}\n'),
])
def test_integers_beyond_int64_keep_every_digit_as_uint64(tmp_path, suffix, text) -> None:
    (tmp_path / f"t.{suffix}").write_text(text)
    info, _ = convert(str(tmp_path / f"t.{suffix}"), tmp_path / "d")
    assert info.features["h"].dtype == "uint64"
    assert read_dataset(tmp_path / "d")["h"].tolist() == [2**64 - 1, 1099511627777]


@pytest.mark.parametrize("suffix, text", [
    ("csv", "id,h\n1,5\n2,-18446744073709551615\n"),
    ("jsonl", '{"id": 1, "h": 5}\n{"id": 2, "h": -18446744073709551615}\n'),
])
def test_integers_no_64_bit_type_holds_are_refused_by_row_and_field(tmp_path, suffix, text) -> None:
    (tmp_path / f"t.{suffix}").write_text(text)
    with pytest.raises(ConversionError, match=rf"t.{suffix}', row 1, column 'h': the integer "
                                              r"-18446744073709551615 fits neither int64 nor "
                                              r"uint64"):
        convert(str(tmp_path / f"t.{suffix}"), tmp_path / "d")
    big = "18446744073709551615"
    mixed = text.replace(": 5}", f": {big}}}").replace(",5\n", f",{big}\n")
    (tmp_path / f"u.{suffix}").write_text(mixed.replace("-18446744073709551615", "-5"))
    with pytest.raises(ConversionError, match=rf"u.{suffix}', column 'h': row 0 holds "
                                              r"18446744073709551615 \(beyond int64\) and row 1 "
                                              r"holds -5 \(below uint64\)"):
        convert(str(tmp_path / f"u.{suffix}"), tmp_path / "e")


def test_a_parquet_uint64_column_keeps_its_values(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"h": pa.array([5, 2**64 - 1], pa.uint64())}), tmp_path / "u.parquet")
    info, _ = convert(str(tmp_path / "u.parquet"), tmp_path / "d")
    assert info.features["h"].dtype == "uint64"
    assert read_dataset(tmp_path / "d")["h"].tolist() == [5, 2**64 - 1]


def test_csv_header_names_that_would_lose_a_column_are_refused(tmp_path) -> None:
    (tmp_path / "dup.csv").write_text("a,a,b\n1,2,3\n")
    with pytest.raises(ConversionError, match=r"dup.csv': the header names the column 'a' twice "
                                              r"\(columns 1 and 2\).*own name"):
        convert(str(tmp_path / "dup.csv"), tmp_path / "d")
    (tmp_path / "blank.csv").write_text("a,\n1,2\n")
    with pytest.raises(ConversionError, match=r"blank.csv': column 2 of the header has no name"):
        convert(str(tmp_path / "blank.csv"), tmp_path / "e")


def test_a_short_csv_row_is_named_by_its_row_number(tmp_path) -> None:
    (tmp_path / "r.csv").write_text('a,b\n1,2\n"x\ny",3\n4\n5,6\n')  # row 1 spans two lines
    with pytest.raises(ConversionError, match=r"r.csv': row 2 \('4'\) has 1 column where the "
                                              r"header has 2"):
        convert(str(tmp_path / "r.csv"), tmp_path / "d")


def test_a_nested_json_object_says_to_flatten_it(tmp_path) -> None:
    (tmp_path / "n.jsonl").write_text('{"id": 1, "meta": {"lang": "en", "n": 2}}\n')
    with pytest.raises(ConversionError, match=r"row 0.*field 'meta' holds a nested object "
                                              r"\(keys 'lang', 'n'\).*'meta.lang'") as err:
        convert(str(tmp_path / "n.jsonl"), tmp_path / "d")
    assert "on_error='skip'" not in str(err.value)  # skipping rows cannot help
    (tmp_path / "l.jsonl").write_text('{"id": 1, "tags": ["a", "b"]}\n')
    with pytest.raises(ConversionError, match=r"field 'tags' holds a list of str \('a', 'b'\); "
                                              r"a text field holds one text. Join"):
        convert(str(tmp_path / "l.jsonl"), tmp_path / "e")


def test_a_bad_row_of_several_files_names_its_file(tmp_path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.csv").write_text("a\n1\n2\n")
    (tmp_path / "in" / "2.csv").write_text("a\nx\ny\n")  # a text column
    with pytest.raises(ConversionError, match=r"row 2 \(.*2.csv, row 0\), field 'a'"):
        convert(str(tmp_path / "in"), tmp_path / "d")
    info, _ = convert(str(tmp_path / "in"), tmp_path / "e", on_error="skip")
    assert [s["row"] for s in info.skipped] == [2, 3]
    assert "2.csv, row 1)" in info.skipped[1]["error"]


def test_a_json_lines_line_that_is_not_an_object_is_named_by_line(tmp_path) -> None:
    (tmp_path / "t.jsonl").write_text('{"a": 1}\n\n{"a": 2}\n{"a": \n')
    with pytest.raises(ConversionError, match=r"t.jsonl': line 4 is not JSON \(Expecting value"):
        convert(str(tmp_path / "t.jsonl"), tmp_path / "d")
    (tmp_path / "u.jsonl").write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ConversionError, match=r"u.jsonl': line 2 is a JSON list, not an object"):
        convert(str(tmp_path / "u.jsonl"), tmp_path / "e")
    (tmp_path / "v.json").write_text('[{"a": 1}, 2]')
    with pytest.raises(ConversionError, match=r"v.json': item 1 of its JSON array is a JSON int"):
        convert(str(tmp_path / "v.json"), tmp_path / "f")


def test_a_json_file_holding_one_array_of_objects_is_read(tmp_path) -> None:
    text = '\ufeff[\n  {"a": 1, "t": "x\u2028y"},\n  {"a": 2, "t": "z"}\n]\n'  # a BOM, U+2028
    (tmp_path / "t.json").write_text(text, encoding="utf-8")
    convert(str(tmp_path / "t.json"), tmp_path / "d")
    data = read_dataset(tmp_path / "d")
    assert data["a"].tolist() == [1, 2] and list(data["t"]) == ["x\u2028y", "z"]


def test_a_hugging_face_uint64_column_keeps_its_values(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    pa = pytest.importorskip("pyarrow")
    from datarax.dataset import write_dataset

    ds = datasets.Dataset.from_dict({"u": pa.array([1, 2**64 - 1], pa.uint64())},
                                    features=datasets.Features({"u": datasets.Value("uint64")}))
    info, _ = write_dataset(ds, tmp_path / "d")
    assert info.features["u"].dtype == "uint64"
    assert read_dataset(tmp_path / "d")["u"].tolist() == [1, 2**64 - 1]


def test_convert_help_describes_the_command_and_bad_counts_name_the_option(capsys) -> None:
    from datarax.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["convert", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "self-describing ArrayRecord dataset" in out and "datarax convert train.csv" in out
    assert "table files named SPLIT-*" in out
    with pytest.raises(SystemExit):  # a glob the shell expanded: more than one SRC
        main(["convert", "a.csv", "b.csv", "ds"])
    assert "unrecognized arguments: ds; convert takes one SRC and one DST: quote a glob" in (
        capsys.readouterr().err)
    for option in ("--shards", "--workers"):
        with pytest.raises(SystemExit) as exit_:
            main(["convert", "a.csv", "ds", option, "0"])
        assert exit_.value.code == 2
        assert f"argument {option}: must be 1 or more, got 0" in capsys.readouterr().err


def test_an_image_deeper_than_8_bits_is_refused_not_clipped(tmp_path) -> None:
    from PIL import Image

    (tmp_path / "im" / "a").mkdir(parents=True)
    Image.fromarray(np.uint16([[0, 1000], [255, 7]])).save(tmp_path / "im" / "a" / "deep.png")
    with pytest.raises(ConversionError, match=r"row 0 \(a/deep.png\), field 'image': a 16-bit grey "
                                              r"image \(values 0..1000\); image fields hold "
                                              r"8 bits"):
        convert(str(tmp_path / "im"), tmp_path / "d")
    # a 16-bit grey PNG whose values fit 8 bits is stored exactly
    Image.fromarray(np.uint16([[0, 200], [255, 7]])).save(tmp_path / "im" / "a" / "deep.png")
    convert(str(tmp_path / "im"), tmp_path / "e")
    assert read_dataset(tmp_path / "e")["image"][0, :, :, 0].tolist() == [[0, 200], [255, 7]]


def test_a_csv_file_in_another_encoding_says_to_save_it_as_utf8(tmp_path) -> None:
    (tmp_path / "t.csv").write_bytes("id,name\n1,café\n".encode("cp1252"))
    with pytest.raises(ConversionError, match=r"row 0, field 'name': text is not valid UTF-8 .*"
                                              r"is saved as UTF-8 first"):
        convert(str(tmp_path / "t.csv"), tmp_path / "d")


def test_a_csv_column_empty_in_every_row_is_text(tmp_path) -> None:
    (tmp_path / "t.csv").write_text("id,notes,名前\n1,,山田\n2,,\"x, y\"\n")
    info, _ = convert(str(tmp_path / "t.csv"), tmp_path / "d")
    data = read_dataset(tmp_path / "d")
    assert info.features["notes"].encoding == "utf8"
    assert list(data["notes"]) == ["", ""] and list(data["名前"]) == ["山田", "x, y"]


def test_an_integer_float32_cannot_hold_is_refused_not_rounded(tmp_path) -> None:
    from datarax.dataset import write_dataset

    with pytest.raises(ConversionError, match=r"row 1, field 'x': the integer 1099511627777 "
                                              r"has no exact float32 value \(it would be stored as "
                                              r"1.09951163e\+12\)"):
        write_dataset([{"x": 1.5}, {"x": 2**40 + 1}], tmp_path / "a")
    write_dataset([{"x": 1.5}, {"x": 2**24}, {"x": -7}], tmp_path / "b")
    assert read_dataset(tmp_path / "b")["x"].tolist() == [1.5, 2.0**24, -7.0]


def test_numpy_arrays_of_no_entries_hold_no_records(tmp_path) -> None:
    np.savez(tmp_path / "e.npz", x=np.zeros((0, 3), np.float32), y=np.zeros(0, np.int64))
    with pytest.raises(ConversionError, match=r"numpy files .*e.npz holds no records; nothing to "
                                              r"write"):
        convert(str(tmp_path / "e.npz"), tmp_path / "d")


@pytest.mark.parametrize("suffix, text", [
    ("csv", "d,t,x\n2024-01-01,12:30:00,1\n2024-01-02,13:00:05,2\n"),
    ("jsonl", '{"d": "2024-01-01", "t": "2024-01-01 10:00:00", "x": 1}\n'
              '{"d": "2024-01-02", "t": "2024-01-02T11:00:00", "x": 2}\n'),
])
def test_dates_in_csv_and_json_lines_are_kept_as_their_text(tmp_path, suffix, text) -> None:
    (tmp_path / f"t.{suffix}").write_text(text)
    info, _ = convert(str(tmp_path / f"t.{suffix}"), tmp_path / "d")
    data = read_dataset(tmp_path / "d")
    assert info.features["d"].encoding == info.features["t"].encoding == "utf8"
    rows = [line.split(",") for line in text.splitlines()[1:]] if suffix == "csv" else None
    expected_t = [r[1] for r in rows] if rows else ["2024-01-01 10:00:00", "2024-01-02T11:00:00"]
    assert list(data["d"]) == ["2024-01-01", "2024-01-02"] and list(data["t"]) == expected_t
    assert data["x"].tolist() == [1, 2]


def test_a_parquet_timestamp_or_decimal_says_how_to_store_it(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    import datetime
    import decimal

    import pyarrow.parquet as pq

    pq.write_table(pa.table({"t": pa.array([datetime.datetime(2024, 1, 2)]),
                             "d": pa.array([decimal.Decimal("1.10")])}), tmp_path / "x.parquet")
    with pytest.raises(ConversionError, match=r"row 0.*field 't' holds a datetime \(2024-01-02 "
                                              r"00:00:00\).*Store it as text \(ISO 8601") as err:
        convert(str(tmp_path / "x.parquet"), tmp_path / "d")
    assert "features=" not in str(err.value)  # no field holds it
    np.save(tmp_path / "when.npy", np.array(["2024-01-01"], "datetime64[D]"))
    with pytest.raises(ConversionError, match=r"field 'when' holds a datetime64\[D\] value "
                                              r"\(2024-01-01\).*"
                                              r"Store it as text \(ISO 8601"):
        convert(str(tmp_path / "when.npy"), tmp_path / "w")
    pq.write_table(pa.table({"d": pa.array([decimal.Decimal("1.10")])}), tmp_path / "y.parquet")
    with pytest.raises(ConversionError, match=r"field 'd' holds a decimal \(1.10\).*a float, or "
                                              r"text"):
        convert(str(tmp_path / "y.parquet"), tmp_path / "e")


def test_tfds_images_and_sequences_of_varying_shape_are_written(tmp_path, monkeypatch) -> None:
    import sys
    import types

    class Image:  # TFDS feature classes are told apart by name
        shape, np_dtype = (None, None, 3), np.uint8

    class Sequence:
        shape, np_dtype = (None,), np.int32

    class ClassLabel:
        shape, names = (), ["a", "b"]

    records = [{"image": np.full((2 + i, 3, 3), i, np.uint8), "seq": np.arange(i, dtype=np.int32),
                "label": i % 2} for i in range(3)]
    info = types.SimpleNamespace(
        features={"image": Image(), "seq": Sequence(), "label": ClassLabel()},
        splits={"train": types.SimpleNamespace(num_examples=3)}, full_name="fake/1.0.0")
    builder = types.SimpleNamespace(info=info, as_data_source=lambda split: records)
    fake = types.SimpleNamespace(builder_from_directory=lambda path: builder)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake)
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf" / "features.json").write_text("{}")
    (tmp_path / "tf" / "dataset_info.json").write_text("{}")
    info_out, _ = convert(str(tmp_path / "tf"), tmp_path / "d")
    assert info_out.features["image"].shape == (None, None, 3)
    assert info_out.features["image"].encoding == "png"
    assert info_out.features["seq"].shape == (None,) and info_out.features["seq"].dtype == "int32"
    got = read_dataset(tmp_path / "d")
    for i, record in enumerate(records):
        np.testing.assert_array_equal(got["image"][i], record["image"])
        np.testing.assert_array_equal(got["seq"][i], record["seq"])
    assert list(got["label"]) == [0, 1, 0]


def test_hugging_face_images_of_several_sizes_are_written(tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    from datarax.dataset import write_dataset

    pixels = [np.full((4, 4), 7, np.uint8), np.full((5, 4, 3), 8, np.uint8),
              np.full((6, 4, 3), 9, np.uint8)]  # grey first, then colour of other heights
    ds = datasets.Dataset.from_dict(
        {"img": [Image.fromarray(p) for p in pixels]},
        features=datasets.Features({"img": datasets.Image()}))
    ds.to_parquet(str(tmp_path / "hf.parquet"))
    written = {"dataset": write_dataset(ds, tmp_path / "a"),
               "parquet": convert(str(tmp_path / "hf.parquet"), tmp_path / "b")}
    for name, (info, _) in written.items():
        assert info.features["img"].shape == (None, 4, 3), name
    for folder in ("a", "b"):
        got = read_dataset(tmp_path / folder)["img"]
        assert [g.shape for g in got] == [(4, 4, 3), (5, 4, 3), (6, 4, 3)]
        assert [int(g[0, 0, 0]) for g in got] == [7, 8, 9]


def test_resume_and_overwrite_together_name_both_options(tmp_path) -> None:
    from datarax.errors import ConfigError

    np.save(tmp_path / "x.npy", np.arange(3))
    with pytest.raises(ConfigError, match=r"resume=True \(--resume\) or overwrite=True "
                                          r"\(--overwrite\), not both"):
        convert(str(tmp_path / "x.npy"), tmp_path / "d", resume=True, overwrite=True)


def test_after_a_bad_row_the_same_command_runs_again_with_skip(tmp_path) -> None:
    (tmp_path / "t.csv").write_text("a,b\n1,2\n3,\n5,6\n")
    with pytest.raises(ConversionError, match=r"row 1, field 'b': no value"):
        convert(str(tmp_path / "t.csv"), tmp_path / "d")
    info, _ = convert(str(tmp_path / "t.csv"), tmp_path / "d", on_error="skip")  # as it says
    assert info.num_records == 2 and [s["row"] for s in info.skipped] == [1]


def test_labels_outside_their_class_names_are_refused(tmp_path) -> None:
    from datarax.dataset import write_dataset
    from datarax.errors import ConfigError

    names = {"label": ["a", "b"]}
    with pytest.raises(ConversionError, match=r"row 1, field 'label': the label 2 is outside its "
                                              r"2 class names \(0..1, or -1 for no label\)"):
        write_dataset([{"label": 1}, {"label": 2}], tmp_path / "a", class_names=names)
    info, _ = write_dataset([{"label": 0}, {"label": -1}], tmp_path / "b", class_names=names)
    assert read_dataset(tmp_path / "b")["label"].tolist() == [0, -1]  # -1: no label (HF's)
    with pytest.raises(ConfigError, match=r"class_names names the field 'label', which holds str "
                                          r"utf8 values; class names go with integer labels"):
        write_dataset([{"label": "a"}], tmp_path / "c", class_names=names)


def test_a_csv_row_longer_than_a_read_block_is_read(tmp_path) -> None:
    text = "word " * 300_000  # 1.5 MB: longer than pyarrow's 1 MB block
    (tmp_path / "t.csv").write_text(f'id,t\n1,"{text}"\n2,short\n')
    convert(str(tmp_path / "t.csv"), tmp_path / "d")
    assert list(read_dataset(tmp_path / "d")["t"]) == [text, "short"]


@pytest.mark.parametrize("name, text", [("t.tsv", "a\tb\n1\tx, y\n"),
                                        ("t.csv", "a;b\n1;x, y\n")])
def test_tab_and_semicolon_separated_files_are_split_by_their_separator(tmp_path, name,
                                                                         text) -> None:
    (tmp_path / name).write_text(text)
    info, _ = convert(str(tmp_path / name), tmp_path / "d")
    assert info.features.names == ("a", "b")
    data = read_dataset(tmp_path / "d")
    assert data["a"].tolist() == [1] and list(data["b"]) == ["x, y"]


def test_the_splits_left_out_are_named(tmp_path, capsys) -> None:
    from datarax.cli.main import main

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.csv").write_text("a\n1\n2\n")
    (tmp_path / "in" / "test.csv").write_text("a\n3\n")
    assert main(["convert", str(tmp_path / "in"), str(tmp_path / "d"), "--no-progress"]) == 0
    assert ("split 'train' of SRC; its other splits (test) were not converted: --split NAME"
            in capsys.readouterr().out)
    info, _ = convert(str(tmp_path / "in"), tmp_path / "e", split="test")
    assert info.num_records == 1 and "other_splits" not in info.extra


def test_a_pandas_data_frame_is_written_row_by_row(tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    from datarax.dataset import write_dataset
    from datarax.errors import ConfigError

    frame = pd.DataFrame({"a": [1, 2**40 + 1], "t": ["x", "é"], "f": [0.5, np.nan]})
    info, _ = write_dataset(frame, tmp_path / "d", shards=2)
    data = read_dataset(tmp_path / "d")
    assert info.features.names == ("a", "t", "f")
    assert data["a"].tolist() == [1, 2**40 + 1] and list(data["t"]) == ["x", "é"]
    np.testing.assert_array_equal(data["f"], np.float32([0.5, np.nan]))
    with pytest.raises(ConfigError, match="got a pandas Series; give a DataFrame"):
        write_dataset(frame["a"], tmp_path / "e")
    with pytest.raises(ConfigError, match=r"got one dict: wrap one record in a list .*columns "
                                          r"\(a dict of equal-length arrays\) as a pandas"):
        write_dataset({"a": np.arange(3), "b": np.arange(3)}, tmp_path / "f")


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_whole_numbers_in_one_file_and_fractions_in_another_make_a_float_column(
        tmp_path, kind) -> None:
    """As within one file: a column of 1, 2 in one file and 1.5 in the next is float32,
    not an int64 field that refuses the next file's 1.5."""
    (tmp_path / "src").mkdir()
    first, second = (('{"x": 1, "t": "a"}\n{"x": 2, "t": "b"}\n', '{"x": 1.5, "t": "c"}\n')
                     if kind == "jsonl" else ("x,t\n1,a\n2,b\n", "x,t\n1.5,c\n"))
    (tmp_path / "src" / f"a.{kind}").write_text(first)
    (tmp_path / "src" / f"b.{kind}").write_text(second)
    info, _ = convert(str(tmp_path / "src"), tmp_path / "out", shards=2)
    assert info.features["x"].dtype == "float32"
    values = read_dataset(tmp_path / "out")
    assert values["x"].tolist() == [1.0, 2.0, 1.5] and values["t"].tolist() == ["a", "b", "c"]

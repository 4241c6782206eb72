"""Values that convert's probes found lost or refused on the way in and back out."""

from __future__ import annotations

import pyarrow as pa
import pytest
import pyarrow.parquet as pq
from dataset_helpers import read_dataset

from datarax.dataset import METADATA_FILE, ConversionError, convert


def test_an_empty_list_in_a_list_of_pairs_column_is_written_as_no_pairs(tmp_path) -> None:
    pairs = [[[1, 2]], [], [[3, 4], [5, 6]]]
    pq.write_table(pa.table({"p": pa.array(pairs, type=pa.list_(pa.list_(pa.int32())))}),
                   tmp_path / "t.parquet")
    info, _ = convert(str(tmp_path / "t.parquet"), tmp_path / "d")
    assert info.features["p"].shape == (None, 2)
    got = read_dataset(tmp_path / "d")["p"]
    assert [g.shape for g in got] == [(1, 2), (0, 2), (2, 2)]
    assert [g.tolist() for g in got] == pairs


def test_a_parquet_file_naming_a_column_twice_is_refused_not_halved(tmp_path) -> None:
    table = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(ConversionError, match=r"t.parquet': it names the column 'a' twice "
                                              r"\(columns 1 and 2\)"):
        convert(str(tmp_path / "t.parquet"), tmp_path / "d")
    assert not (tmp_path / "d" / METADATA_FILE).exists()


def test_a_column_null_in_every_row_says_to_leave_it_out(tmp_path) -> None:
    pq.write_table(pa.table({"a": [1, 2, 3], "n": pa.array([None] * 3, pa.int64())}),
                   tmp_path / "t.parquet")
    with pytest.raises(ConversionError, match=r"row 0 \(the features are inferred from the "
                                              r"first row\): field 'n': no value"):
        convert(str(tmp_path / "t.parquet"), tmp_path / "d")
    with pytest.raises(ConversionError, match=r"t.parquet: field 'n' has no value \(a null or "
                                              r"empty cell\) in all 3 rows.*"
                                              r"drop_columns\(\['n'\]\)"):
        convert(str(tmp_path / "t.parquet"), tmp_path / "d", on_error="skip")


def test_a_ragged_list_of_lists_says_to_pad_not_to_declare_features(tmp_path) -> None:
    pq.write_table(pa.table({"p": pa.array([[[1], [2, 3]]], type=pa.list_(pa.list_(pa.int32())))}),
                   tmp_path / "t.parquet")
    with pytest.raises(ConversionError, match=r"row 0 .*field 'p': not an array") as caught:
        convert(str(tmp_path / "t.parquet"), tmp_path / "d")
    assert str(caught.value).endswith("(pad the inner lists to one length).")

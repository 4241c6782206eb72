"""A pandas Categorical column (a DataFrame, or Parquet written from one) is written as a
Hugging Face ClassLabel is: integer labels, its categories the field's class names."""

from __future__ import annotations

import pytest
from dataset_helpers import read_dataset

from datarax.dataset import convert, write_dataset
from datarax.dataset.writer import ConversionError
from datarax.errors import ConfigError

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def _frame(pets, categories=("cat", "dog", "bird")):
    return pd.DataFrame({"x": list(range(len(pets))),
                         "pet": pd.Categorical(pets, categories=list(categories))})


def test_a_dataframe_category_column_is_written_as_class_labels(tmp_path) -> None:
    info, _ = write_dataset(_frame(["dog", "cat", "dog", "bird", "cat"]), tmp_path / "ds", shards=2)
    field = info.features["pet"]
    assert (field.dtype, field.shape, field.encoding) == ("int64", (), "raw")
    assert field.class_names == ("cat", "dog", "bird")  # every category, unused ones too
    assert read_dataset(tmp_path / "ds")["pet"].tolist() == [1, 0, 1, 2, 0]
    assert read_dataset(tmp_path / "ds")["x"].tolist() == [0, 1, 2, 3, 4]


def test_parquet_of_category_columns_keeps_the_categories_across_files(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _frame(["dog", "cat", "dog"]).to_parquet(src / "a.parquet", row_group_size=2)
    _frame(["cat", "dog"], categories=("dog", "cat")).to_parquet(src / "b.parquet")  # reordered
    info, _ = convert(str(src), tmp_path / "ds", shards=2)
    assert info.features["pet"].class_names == ("cat", "dog", "bird")
    assert read_dataset(tmp_path / "ds")["pet"].tolist() == [1, 0, 1, 0, 1]


def test_a_category_missing_or_unknown_is_named(tmp_path) -> None:
    with pytest.raises(ConversionError, match=r"a pandas DataFrame, row 1, field 'pet': no value"):
        write_dataset(_frame(["dog", None, "cat"]), tmp_path / "a")
    info, _ = write_dataset(_frame(["dog", None, "cat"]), tmp_path / "b", on_error="skip")
    assert read_dataset(tmp_path / "b")["pet"].tolist() == [1, 0]
    assert [s["row"] for s in info.skipped] == [1]
    src = tmp_path / "src"
    src.mkdir()
    _frame(["dog"]).to_parquet(src / "a.parquet")
    _frame(["fish"], categories=("fish",)).to_parquet(src / "b.parquet")
    with pytest.raises(ConversionError, match=r"the category column 'pet' holds 'fish', which is "
                                              r"not one of its categories \(cat, dog, bird, from "
                                              r"its first file\)"):
        convert(str(src), tmp_path / "c")


def test_class_names_given_for_a_category_column_must_not_rename_its_labels(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"numbers its 'pet' labels by its own class names"):
        write_dataset(_frame(["dog"]), tmp_path / "a", class_names={"pet": ["dog", "cat", "bird"]})

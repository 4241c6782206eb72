"""column_encoder: a table slice's records encoded from its columns are the row encoder's
bytes, and any value the row encoder's checks must judge leaves the slice to them."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
from dataset_helpers import read_dataset  # noqa: E402
from PIL import Image  # noqa: E402

from datarax.dataset import convert  # noqa: E402
from datarax.dataset.column_records import column_encoder  # noqa: E402
from datarax.dataset.fields import Features, Field  # noqa: E402
from datarax.dataset.layout import record_encoder  # noqa: E402

CLASSES = ("cat", "dog", "fox")
TEXT = Features((Field("text", "str", (), "utf8"), Field("label", "int64", (), "raw", CLASSES),
                 Field("score", "float32", (), "raw"), Field("note", "str", (), "utf8")))


def png(side: int, seed: int) -> bytes:
    out = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def rows_bytes(features: Features, table) -> list[bytes]:
    encode = record_encoder(features)
    return [encode(row) for row in table.to_pylist()]


def text_table(n: int = 9):
    return pa.table({
        "note": pa.array([f"n{i}" * (i % 4) for i in range(n)], pa.large_string()),
        "label": pa.array([i % 3 - (i == 4) for i in range(n)], pa.int8()),  # -1: no class
        "score": [0.1 * i - 0.3 for i in range(n)],
        "text": [f"row {i} é ✓" for i in range(n)],
    })


def test_text_scalars_and_classes_encode_to_the_row_encoders_bytes() -> None:
    table = text_table()
    encode = column_encoder(TEXT)
    assert encode(table) == rows_bytes(TEXT, table)
    part = table.slice(3, 4)  # a slice: Arrow's buffers start before its first row
    assert encode(part) == rows_bytes(TEXT, part)
    one = Features((TEXT.fields[0], TEXT.fields[1]))
    small = table.select(["label", "text"]).slice(2, 5)
    assert column_encoder(one)(small) == rows_bytes(one, small)
    assert encode(table.slice(0, 0)) == []
    numbers = Features((TEXT.fields[1], TEXT.fields[2]))  # no variable field
    only = table.select(["score", "label"])
    assert column_encoder(numbers)(only) == rows_bytes(numbers, only)


def test_kept_images_and_hf_image_dicts_encode_to_the_row_encoders_bytes() -> None:
    features = Features((Field("image", "uint8", (None, None, 3), "png"),
                         Field("label", "int64", (), "raw", CLASSES)))
    images = [png(4 + i, i) for i in range(5)]
    plain = pa.table({"image": images, "label": [0, 1, 2, 0, 1]})
    hf = pa.table({"image": pa.array([{"bytes": b, "path": None} for b in images]),
                   "label": [2, 1, 0, 2, 1]})
    for table in (plain, hf, hf.slice(1, 3)):
        assert column_encoder(features)(table) == rows_bytes(features, table)
    square = Features((Field("image", "uint8", (5, 5, 3), "png"), features.fields[1]))
    assert column_encoder(square)(plain) is None  # sizes vary: the row checks name the row


@pytest.mark.parametrize("column, values", [
    ("label", [0, None, 1]),  # a null
    ("label", [0, 3, 1]),  # beyond the class names
    ("label", [False, True, True]),  # bools are no class numbers
    ("score", [0.5, float("inf"), 1.0]),
    ("score", [0.5, 1e39, 1.0]),  # finite, but infinite as float32
    ("score", [1, 2, 3]),  # integers for a float field
    ("text", [b"a", b"b", b"c"]),  # bytes for a text field
    ("text", ["a", None, "c"]),
])
def test_a_value_the_checks_must_judge_leaves_the_slice_to_them(column, values) -> None:
    table = pa.table({"text": ["a", "b", "c"], "label": [0, 1, 2], "score": [0.5, 1.0, 2.0],
                      "note": ["x", "y", "z"]})
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    assert column_encoder(TEXT)(table) is None
    assert column_encoder(TEXT)(table.drop_columns(["note"])) is None  # a field missing


def test_a_jsonl_with_a_bad_row_is_written_as_row_by_row_and_names_it(tmp_path) -> None:
    lines = [{"text": f"t{i}", "label": i % 3, "score": i / 7} for i in range(2500)]
    lines[1700]["score"] = 1e39  # beyond float32: the row's slice goes row by row
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    info, summary = convert(str(path), tmp_path / "out", shards=2, on_error="skip")
    assert info.num_records == 2499 and summary.skipped_rows == 1
    assert [(s["row"], s["field"]) for s in info.skipped] == [(1700, "score")]
    data = read_dataset(tmp_path / "out")
    assert data["text"].tolist() == [f"t{i}" for i in range(2500) if i != 1700]
    assert data["score"].tolist() == [np.float32(i / 7) for i in range(2500) if i != 1700]

"""ArrayRecordSourceModule bad input: every error names the file, the record index and the cause."""

from __future__ import annotations

import functools
import os
import pathlib

import numpy as np
import pytest
from flax import nnx
from int_record_files import damaged_copy, write_records

from datarax.core.errors import ConfigError, RecordError
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule


def write(path: pathlib.Path, n: int, width: int = 64, start: int = 0) -> str:
    return write_records(path, (np.full(width, i, np.float32).tobytes()
                                for i in range(start, start + n)))


def decode(record: bytes) -> dict[str, np.ndarray]:
    return {"data": np.frombuffer(record, dtype=np.float32)}


def make(paths, decode_fn=decode, processes=0, **config):
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), paths, decode=decode_fn,
                                   rngs=nnx.Rngs(0), num_threads=2, decode_processes=processes)


make_source = make


def read_all(source, batch_size=8):
    source.seek(0)
    out = []
    while (batch := source.get_batch(batch_size)) is not None:
        out.extend(np.asarray(batch["data"])[:, 0].astype(int).tolist())
    return out


# -------------------------------------------------------------------- opening
def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.array_record")
    with pytest.raises(RecordError) as info:
        make(path)
    assert str(info.value) == (
        f"ArrayRecordSourceModule: the file '{path}' does not exist. Check the path (a glob "
        "pattern such as 'data-*.array_record' is expanded)."
    )
    assert info.value.path == path


def test_missing_file_in_a_list(tmp_path):
    good = write(tmp_path / "a.array_record", 3)
    with pytest.raises(RecordError, match="'.*b.array_record' does not exist"):
        make([good, str(tmp_path / "b.array_record")])


def test_glob_matching_nothing(tmp_path):
    pattern = str(tmp_path / "train-*.array_record")
    with pytest.raises(RecordError) as info:
        make(pattern)
    assert f"the glob pattern '{pattern}' matches no files" in str(info.value)


def test_directory_and_bad_path_types(tmp_path):
    with pytest.raises(RecordError, match="is a directory, not a file") as info:
        make(str(tmp_path))
    assert "image folder" not in str(info.value)
    # an image folder given where its converted dataset belongs says to convert it first
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "0.JPG").write_bytes(b"")
    photos = str(tmp_path / "photos")
    with pytest.raises(RecordError) as info:
        make(photos)
    assert str(info.value).endswith(
        f" It is an image folder: convert it first (datarax.dataset.convert('{photos}', DST), or "
        f"datarax convert {photos} DST), then read DST, with decode=datarax.decode_images(...) "
        "for images of several sizes.")
    # one class folder of it (images, no classes) says which folder to convert
    cat = os.path.join(photos, "cat")
    with pytest.raises(RecordError) as info:
        make(cat)
    assert str(info.value).endswith(
        f" It holds images (0.JPG) but no class folders: convert the image folder it is a class "
        f"of first (datarax convert {photos} DST; images without classes: move them into a "
        f"subfolder, {cat}/<name>, and convert {cat}), then read DST, with "
        "decode=datarax.decode_images(...).")
    with pytest.raises(ConfigError, match="paths is an empty list"):
        make([])
    with pytest.raises(ConfigError, match="paths must be a path, a glob pattern or a list"):
        make(42)


@pytest.mark.parametrize("content, cause", [
    (b"hello world\n" * 100, "ArrayRecord file should be at least 64KB big"),
    (b"", "ArrayRecord file should be at least 64KB big"),
    (b"x" * 70_000, "Failed to read RiegeliPostscript"),
])
def test_not_array_record(tmp_path, content, cause):
    path = tmp_path / "notes.array_record"
    path.write_bytes(content)
    with pytest.raises(RecordError) as info:
        make(str(path))
    message = str(info.value)
    assert message.startswith(f"ArrayRecordSourceModule: '{path}' is not a readable ArrayRecord file (")
    assert cause in message
    assert "truncated" in message and info.value.path == str(path)


def test_truncated_file(tmp_path):
    good = write(tmp_path / "good.array_record", 100)
    data = pathlib.Path(good).read_bytes()
    for cut in (len(data) // 2, len(data) - 10):
        bad = tmp_path / f"cut{cut}.array_record"
        bad.write_bytes(data[:cut])
        with pytest.raises(RecordError) as info:
            make(str(bad))
        assert f"'{bad}' is not a readable ArrayRecord file" in str(info.value)
        assert "truncated" in str(info.value)


# -------------------------------------------------------------------- reading
def test_corrupt_record_names_file_index_and_cause(tmp_path):
    good = write(tmp_path / "a.array_record", 10)
    bad, failing = damaged_copy(write(tmp_path / "b0.array_record", 100, start=10),
                                tmp_path / "b.array_record")
    source = make([good, bad])
    with pytest.raises(RecordError) as info:
        read_all(source)
    err = info.value
    assert (err.path, err.index) == (bad, failing[0])
    assert f"cannot read record {failing[0]} of file '{bad}' (epoch 0): RuntimeError: " in str(err)
    assert "Corrupted" in str(err) and "on_error='skip'" in str(err)
    source.close()


@pytest.mark.parametrize("processes", [0, pytest.param(1, marks=pytest.mark.slow)],
                         ids=["threads", "decode_processes"])
def test_corrupt_records_skipped_counted_and_resumed_exactly(tmp_path, processes):
    good = write(tmp_path / "a.array_record", 10)
    bad, failing = damaged_copy(write(tmp_path / "b0.array_record", 100, start=10),
                                tmp_path / "b.array_record")
    expected = [i for i in range(110) if i - 10 not in failing]
    make = functools.partial(make_source, processes=processes)
    source = make([good, bad], on_error="skip", max_skipped=len(failing))
    assert read_all(source) == expected
    reports = source.skipped_records()
    assert [(r.path, r.index_in_file) for r in reports] == [(bad, i) for i in failing]
    assert all("Corrupted" in r.cause for r in reports)
    assert source.get_state()["skipped"] == len(failing)
    # Resume through a Pipeline from every batch boundary: same records, same count.
    def build():
        return Pipeline(source=make([good, bad], on_error="skip", max_skipped=len(failing)),
                        stages=[], batch_size=16)

    states, batches = [], []
    pipeline = build()
    for batch in pipeline:
        states.append(pipeline.get_state())
        batches.append(np.asarray(batch["data"])[:, 0].astype(int).tolist())
    assert sum(batches, []) == expected and all(len(b) == 16 for b in batches[:-1])
    for k in (0, 2, 3):
        resumed = build()
        resumed.set_state(states[k])
        rest, skipped_at_last_batch = [], None
        for b in resumed:
            rest += np.asarray(b["data"])[:, 0].astype(int).tolist()
            skipped_at_last_batch = resumed.source.get_state()["skipped"]
        assert sum(batches[: k + 1], []) + rest == expected
        assert skipped_at_last_batch == len(failing)
        ended = resumed.source.get_state()  # the pass ended: the next epoch, none skipped
        assert (ended["current_epoch"], ended["current_index"], ended["skipped"]) == (1, 0, 0)
    over = make([good, bad], on_error="skip", max_skipped=len(failing) - 1)
    with pytest.raises(RecordError, match=f"skipped {len(failing)} bad records in epoch 0, over the budget of {len(failing) - 1}"):
        read_all(over)


def test_decode_raising(tmp_path):
    path = write(tmp_path / "a.array_record", 20)

    def fussy(record):
        value = np.frombuffer(record, np.float32)
        if value[0] == 13:
            raise ValueError("unexpected header byte")
        return {"data": value}

    with pytest.raises(RecordError) as info:
        read_all(make(path, fussy))
    assert str(info.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 13 of file '{path}' (epoch 0): "
        "ValueError: unexpected header byte."
    )
    assert (info.value.path, info.value.index) == (path, 13)


def test_decode_returning_wrong_structure(tmp_path):
    path = write(tmp_path / "a.array_record", 5)
    with pytest.raises(RecordError) as info:
        make(path, lambda r: np.frombuffer(r, np.float32)).element_spec()
    assert str(info.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 0 of file '{path}': decode returned "
        "ndarray, expected a dict of arrays"
    )

    def changes_keys(record):
        value = np.frombuffer(record, np.float32)
        return {"data": value} if value[0] < 3 else {"image": value}

    with pytest.raises(RecordError, match=r"record 3 of file .*: decode returned fields \['image'\], "
                       r"the first record \(record 0\) has \['data'\]"):
        read_all(make(path, changes_keys))


def test_record_with_a_different_shape(tmp_path):
    first = write(tmp_path / "a.array_record", 4, width=64)
    second = write(tmp_path / "b.array_record", 4, width=32, start=4)
    with pytest.raises(RecordError) as info:
        read_all(make([first, second]))
    assert str(info.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 0 of file '{second}' (epoch 0): field "
        "'data' decodes to float32(32,), the first record's is float32(64,); every record must "
        "decode to the same shapes and dtypes."
    )
    assert info.value.index == 0 and info.value.path == second


@pytest.mark.parametrize("processes", [0, pytest.param(1, marks=pytest.mark.slow)],
                         ids=["threads", "decode_processes"])
@pytest.mark.parametrize(("first", "other", "fix"), [
    ("str", "bytes", "bytes.decode('utf-8') turns bytes into str"),
    ("bytes", "str", "str.encode('utf-8') turns str into bytes"),
], ids=["str-first", "bytes-first"])
def test_text_field_mixing_str_and_bytes_is_refused(tmp_path, processes, first, other, fix):
    path = write(tmp_path / "a.array_record", 5)

    def decode_text(record):
        i = int(np.frombuffer(record, np.float32)[0])
        kind = first if i != 3 else other
        name = f"r{i}" if kind == "str" else f"r{i}".encode()
        return {"data": np.frombuffer(record, np.float32), "name": name}

    source = make(path, decode_text, processes)
    with pytest.raises(RecordError) as info:
        read_all(source)
    assert str(info.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 3 of file '{path}' (epoch 0): field "
        f"'name' decodes to {other}, the first record's (record 0) is {first}; a text field "
        f"holds {first} in every record: return {first} for it from decode ({fix})."
    )
    assert info.value.index == 3 and info.value.path == path
    source.close()


@pytest.mark.parametrize(("value", "named"), [
    (lambda i: None, "NoneType"),
    (lambda i: {1, 2}, "set"),
    (lambda i: np.array([f"r{i}", None], dtype=object), "a mix of NoneType and str"),
], ids=["none", "object", "str-and-none"])
def test_a_field_neither_numbers_nor_text_is_refused_naming_it(tmp_path, value, named):
    path = write(tmp_path / "a.array_record", 5)

    def decode_other(record):
        i = int(np.frombuffer(record, np.float32)[0])
        return {"data": np.frombuffer(record, np.float32), "caption": value(i)}

    with pytest.raises(RecordError) as info:
        read_all(make(path, decode_other))
    assert str(info.value).startswith(
        f"ArrayRecordSourceModule: cannot read record 0 of file '{path}': field 'caption' "
        f"decodes to {named}, which is neither numbers nor text: return a number, an array "
        "of numbers, or str / bytes (in every record) for it from decode (a missing value: a "
        "placeholder such as '' or -1)."
    )
    # under on_error="skip" such a record is skipped: the fields come from the next one
    source = make(path, lambda r: {"caption": None if r[:4] == bytes(4) else "ok"},
                  on_error="skip")
    source.seek(0)
    assert source.get_batch(8)["caption"].tolist() == ["ok"] * 4
    source.close()


def test_a_text_field_given_none_later_names_none(tmp_path):
    path = write(tmp_path / "a.array_record", 5)

    def decode_caption(record):
        i = int(np.frombuffer(record, np.float32)[0])
        return {"caption": None if i == 3 else f"r{i}"}

    with pytest.raises(RecordError, match=r"record 3 of file .*: field 'caption' decodes to "
                       r"NoneType, the first record's \(record 0\) is str; a text field"):
        read_all(make(path, decode_caption))


def test_text_field_of_one_kind_reads_every_record(tmp_path):
    path = write(tmp_path / "a.array_record", 4)

    def decode_text(record):
        value = np.frombuffer(record, np.float32)
        return {"data": value, "name": f"r{int(value[0])}".encode()}

    source = make(path, decode_text)
    source.seek(0)
    assert source.get_batch(4)["name"].tolist() == [b"r0", b"r1", b"r2", b"r3"]
    source.close()


def test_batches_before_a_bad_record_are_handed_out(tmp_path):
    path = write(tmp_path / "a.array_record", 20)

    def fussy(record):
        value = np.frombuffer(record, np.float32)
        if value[0] == 13:
            raise ValueError("bad")
        return {"data": value}

    source = make(path, fussy)
    source.seek(0)
    assert source.get_batch(6) is not None and source.get_batch(6) is not None
    assert source.get_state()["current_index"] == 12
    with pytest.raises(RecordError, match="record 13"):
        source.get_batch(6)
    assert source.get_state()["current_index"] == 12
    source.close()


def test_file_removed_after_construction(tmp_path):
    path = write(tmp_path / "a.array_record", 5)
    source = make(path)
    os.remove(path)
    with pytest.raises(RecordError, match=f"record 0 of file '{path}'"):
        read_all(source)


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_closing_never_hides_the_error_that_named_the_file(tmp_path, damage):
    first = write(tmp_path / "a.array_record", 400)
    second = write(tmp_path / "b.array_record", 400, start=400)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), [first, second], decode=decode,
                                     num_threads=1, read_ahead=1)
    source.seek(0)
    assert source.get_batch(8) is not None  # the first file's reader is open
    for path in (first, second):
        if damage == "delete":
            os.remove(path)
        else:
            os.truncate(path, 1000)
    with pytest.raises(RecordError) as info:
        with source:  # closes on the way out, while the RecordError propagates
            while source.get_batch(8) is not None:
                pass
    # a deleted file stays readable through the reader that has it open; a truncated
    # one fails there, at the first record that neither the 1,000 bytes left nor the
    # read-ahead (records 8..71, read before or after the truncation: a race) hold
    if damage == "delete":
        assert (info.value.path, info.value.index) == (second, 0)
    else:
        assert info.value.path == first and 8 <= info.value.index <= 72
    assert (f"cannot read record {info.value.index} of file '{info.value.path}'"
            in str(info.value))
    assert info.value.__context__ is None  # nothing raised while closing
    source.close()  # again: nothing to raise


def test_raw_records_of_different_lengths_without_decode_say_to_pass_decode(tmp_path):
    # No decode=: each record is served as its bytes. Records of different lengths are a
    # fine file that needs a decode, not a file to fix; the example the message gives works.
    path = write_records(tmp_path / "raw.array_record", (b"ab" * (i + 1) for i in range(6)))
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path)
    with pytest.raises(RecordError) as info:
        list(Pipeline(source=source, stages=[], batch_size=4))
    message = str(info.value)
    assert message.startswith(f"ArrayRecordSourceModule: cannot batch record 1 of file '{path}': "
                              "field 'record' decodes to uint8(4,), the first record's is uint8(2,)")
    assert ("No decode= was given, so each record is served as its raw bytes (field 'record'), "
            "and records of different lengths cannot be stacked into a batch. The file is fine: "
            "pass decode= to turn a record's bytes into fields of one shape (or text), e.g. "
            "ArrayRecordSourceModule(config, paths, decode=lambda raw: {'text': raw.decode()}); "
            "images of several sizes: decode=datarax.decode_images(...).") in message
    assert "regenerate" not in message
    assert (info.value.path, info.value.index) == (path, 1)
    source.close()
    fixed = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path,
                                    decode=lambda raw: {"text": raw.decode()})
    texts = [t for batch in Pipeline(source=fixed, stages=[], batch_size=4) for t in batch["text"]]
    assert texts == ["ab" * (i + 1) for i in range(6)]
    fixed.close()


def test_a_decode_missing_a_package_stops_the_read_under_skip(tmp_path):
    """An ImportError from ``decode`` (a package this install lacks) is no record's fault:
    raised as it is, even with on_error='skip', instead of skipping every record."""
    path = write(tmp_path / "a.array_record", 8)

    def needs_a_package(record: bytes) -> dict[str, np.ndarray]:
        import no_such_codec_xyz  # noqa: F401

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error="skip"), path,
                                     decode=needs_a_package)
    with pytest.raises(ModuleNotFoundError, match="no_such_codec_xyz"):
        list(Pipeline(source=source, stages=[], batch_size=4))
    assert source.skipped_records() == []
    source.close()


def test_indexing_refuses_a_record_a_pass_would_refuse(tmp_path):
    """``source[i]`` checks record ``i`` against the first record's fields and shapes, as a
    pass does: a record of other fields or another shape is a RecordError naming it, not
    served; a good record reads as before."""
    path = write(tmp_path / "a.array_record", 6)

    def shaped(record):
        value = np.frombuffer(record, np.float32)
        if value[0] == 2:
            return {"other": value}
        return {"data": value[:3] if value[0] == 4 else value}

    source = make(path, shaped)
    assert source[1]["data"][0] == 1 and source[5]["data"].shape == (64,)
    with pytest.raises(RecordError, match=r"record 2 of file .*fields \['other'\]"):
        source[2]
    with pytest.raises(RecordError, match=r"record 4 of file .*float32\(3,\)"):
        source[4]
    source.close()
    skipping = make(path, shaped, on_error="skip")
    assert read_all(skipping) == [0, 1, 3, 5]
    skipping.close()

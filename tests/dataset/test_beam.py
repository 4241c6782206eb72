"""datarax.beam: WriteDataset / convert on Beam's DirectRunner against the local writer."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

from dataset_helpers import png, read_dataset  # noqa: E402

from datarax.beam import WriteDataset, convert_rows, direct_runner  # noqa: E402
from datarax.cli.main import main  # noqa: E402
from datarax.core.errors import ConfigError  # noqa: E402
from datarax.dataset.conversion import convert  # noqa: E402
from datarax.dataset.format import read_metadata  # noqa: E402
from datarax.dataset.writer import PARTIAL_DIR, ConversionError, write_dataset  # noqa: E402

# Beam's DirectRunner engine with two worker processes (never the Prism runner).
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def _records(n: int = 30) -> list[dict]:
    return [{"id": i, "x": np.full((3,), i, np.float32), "name": f"r{i}", "image": png(i),
             "tokens": bytes(range(i % 5))} for i in range(n)]


def _files(dst) -> dict[str, bytes]:
    return {n: open(os.path.join(dst, n), "rb").read() for n in sorted(os.listdir(dst))
            if n.endswith(".array_record")}


def _same_records(a: dict, b: dict, order_a=None, order_b=None) -> None:
    assert list(a) == list(b)
    for name in a:
        xa = a[name] if order_a is None else a[name][order_a]
        xb = b[name] if order_b is None else b[name][order_b]
        assert len(xa) == len(xb), name
        for u, v in zip(xa, xb):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=name)


def _check_convert_matches_local_writer(tmp_path, options: list[str]) -> None:
    records = _records()
    local, _ = write_dataset(records, tmp_path / "local", shards=3)
    info, summary = convert_rows(records, tmp_path / "beam", shards=3, beam_options=options)
    assert summary.records == 30 and summary.shards == 3
    assert _files(tmp_path / "beam") == _files(tmp_path / "local")
    assert info.features == local.features and info.shards == local.shards
    meta = read_metadata(tmp_path / "beam")
    assert meta.features == local.features and meta.shards == local.shards
    assert meta.extra["runner"] == "beam" and meta.skipped == ()
    assert not os.path.exists(tmp_path / "beam" / PARTIAL_DIR)
    _same_records(read_dataset(tmp_path / "beam"), read_dataset(tmp_path / "local"))


def test_convert_on_beam_is_byte_identical_to_the_local_writer(tmp_path) -> None:
    _check_convert_matches_local_writer(tmp_path, ["--runner=DirectRunner"])


@pytest.mark.slow
def test_convert_on_two_beam_worker_processes_is_byte_identical_to_the_local_writer(
        tmp_path) -> None:
    _check_convert_matches_local_writer(tmp_path, MULTI)
    records = [{"x": np.float32([i, i])} for i in range(8)]
    records[5] = {"x": np.float32([1, 2, 3])}
    with pytest.raises(ConversionError) as err:
        write_dataset(records, tmp_path / "local_bad", shards=2)
    with pytest.raises(ConversionError) as beam_err:
        convert_rows(records, tmp_path / "bad", shards=2, beam_options=MULTI)
    assert str(beam_err.value) == str(err.value)  # the worker's message, as the local writer's
    assert not os.path.exists(tmp_path / "bad" / "datarax_dataset.json")


@pytest.mark.slow
def test_keyed_write_in_any_order_reads_back_as_the_local_writer_sorted_by_key(tmp_path) -> None:
    records = _records(40)
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    write_dataset(records, tmp_path / "local", shards=2)
    outs = []
    for name, opts in (("a", MULTI), ("b", [])):
        with beam.Pipeline(runner=direct_runner(),
                           options=beam.options.pipeline_options.PipelineOptions(opts)) as p:
            _ = (p | beam.Create(shuffled if name == "a" else records)
                 | WriteDataset(tmp_path / name, key="id", records_per_shard=15))
        outs.append(read_dataset(tmp_path / name))
        meta = read_metadata(tmp_path / name)
        assert len(meta.shards) == 3 and meta.num_records == 40  # automatic: ceil(40 / 15)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")  # input order does not matter
    local = read_dataset(tmp_path / "local")
    _same_records(outs[0], local, np.argsort(outs[0]["id"], kind="stable"))


def test_bad_records_are_named_or_skipped_as_by_the_local_writer(tmp_path) -> None:
    records = [{"x": np.float32([i, i])} for i in range(8)]
    records[5] = {"x": np.float32([1, 2, 3])}
    with pytest.raises(ConversionError) as local_err:
        write_dataset(records, tmp_path / "local", shards=2)
    with pytest.raises(ConversionError, match=r"row 5, field 'x'.*on_error='skip'") as err:
        convert_rows(records, tmp_path / "a", shards=2)
    assert str(err.value) == str(local_err.value)
    info, summary = convert_rows(records, tmp_path / "b", shards=2, on_error="skip")
    local, _ = write_dataset(records, tmp_path / "c", shards=2, on_error="skip")
    assert summary.skipped_rows == 1 and info.num_records == 7
    assert [s["row"] for s in info.skipped] == [5] and info.skipped[0]["field"] == "x"
    assert info.shards == local.shards and _files(tmp_path / "b") == _files(tmp_path / "c")
    with pytest.raises(ConversionError, match="already holds a finished dataset.*overwrite=True"):
        convert_rows(records, tmp_path / "b", shards=2, on_error="skip")
    with pytest.raises(ConfigError, match="does not resume.*overwrite=True"):
        convert_rows(records, tmp_path / "b", shards=2, resume=True)
    with pytest.raises(ConfigError, match="read once, in order.*runner='local'"):
        convert_rows(iter(records), tmp_path / "d")
    with pytest.raises(ConversionError, match="keys are int, str or bytes"):
        with beam.Pipeline(runner=direct_runner()) as p:
            _ = p | beam.Create([{"k": 1.5}]) | WriteDataset(tmp_path / "e", key=lambda r: r["k"])


@pytest.mark.slow
def test_datarax_convert_runner_beam_passes_beam_options(tmp_path, capsys) -> None:
    np.save(tmp_path / "x.npy", np.arange(20, dtype=np.int64).reshape(10, 2))
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "out"), "--shards", "2",
                 "--runner", "beam", "--no-progress", "--", *MULTI]) == 0
    assert "10 records" in capsys.readouterr().out
    convert(str(tmp_path / "x.npy"), tmp_path / "local", shards=2)
    assert _files(tmp_path / "out") == _files(tmp_path / "local")
    assert read_metadata(tmp_path / "out").extra["source"] == str(tmp_path / "x.npy")


def test_cli_beam_bad_row_is_one_named_line_not_a_beam_traceback(tmp_path, capsys, caplog) -> None:
    (tmp_path / "gap.csv").write_text("a,b\n1,2\n3,\n")
    assert main(["convert", str(tmp_path / "gap.csv"), str(tmp_path / "out"), "--runner", "beam",
                 "--no-progress"]) == 2
    assert "gap.csv, row 1, field 'b': no value" in capsys.readouterr().err
    assert not [r for r in caplog.records if r.name.startswith("apache_beam") and
                r.levelno >= logging.ERROR]
    assert logging.getLogger("apache_beam.runners.common").level == logging.NOTSET  # restored


def test_shard_counts_computed_with_numpy_are_the_same_ints(tmp_path) -> None:
    transform = WriteDataset(tmp_path / "n", shards=np.int64(2), records_per_shard=np.int32(15))
    assert (transform.shards, transform.records_per_shard) == (2, 15)
    assert type(transform.shards) is int and type(transform.records_per_shard) is int
    with pytest.raises(ConfigError, match="WriteDataset shards must be an int >= 1 or None"):
        WriteDataset(tmp_path / "f", shards=np.float64(2))


def test_keyed_records_read_back_in_key_order_and_bad_ones_are_named_by_key(tmp_path) -> None:
    from datarax import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.dataset.placement import ShardPlan

    records = [{"id": i, "a": np.arange(3, dtype=np.int16) + i, "s": f"r{i}"} for i in range(12)]
    records[4] = {**records[4], "extra": 1}
    records[7] = {"id": 7, "a": np.arange(3, dtype=np.int16)}  # no "s"
    with beam.Pipeline(runner=direct_runner()) as p:
        _ = (p | beam.Create(records[::-1])
             | WriteDataset(tmp_path / "k", shards=3, key="id", on_error="skip"))
    meta = read_metadata(tmp_path / "k")
    assert sorted((s["field"], s["error"]) for s in meta.skipped) == [
        ("extra", "the record with key 4: field 'extra' is not in the features ['id', 'a', 's']."),
        ("s", "the record with key 7: field 's': missing (the features name ['id', 'a', 's'])."),
    ]
    kept = [i for i in range(12) if i not in (4, 7)]
    plan = ShardPlan(3, None)
    order = [i for s in range(3) for i in kept if plan.shard_of(i) == s]  # shard, then key
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(num_epochs=1), str(tmp_path / "k"))
    got = [source[i] for i in range(len(source))]
    assert [int(g["id"]) for g in got] == order
    assert [g["s"] for g in got] == [f"r{i}" for i in order]
    np.testing.assert_array_equal(np.stack([g["a"] for g in got]),
                                  np.arange(3, dtype=np.int16) + np.array(order)[:, None])


def test_keyed_write_errors_say_what_the_record_is_and_where_features_come_from() -> None:
    from datarax.dataset.fields import RecordMismatchError
    from datarax.dataset.placement import Keyer
    from datarax.dataset.write_outcome import bad_record_message

    with pytest.raises(ConversionError, match=r"key='id'\): a record is a dict of fields, got int 3"):
        Keyer("id", False)(3)
    with pytest.raises(ConversionError, match=r"no field 'id' \(fields: \['x'\]\); give each"):
        Keyer("id", False)({"x": 1})
    err = RecordMismatchError("field 'a': shape (5,)", field="a", mismatch=True)
    assert "inferred from the record with the smallest key" in bad_record_message("m", err, "record")
    assert "inferred from the first row" in bad_record_message("m", err)

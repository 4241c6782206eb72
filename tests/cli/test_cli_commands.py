"""``datarax inspect / scan / bench`` on small data written here: ArrayRecord files (one
with corrupt chunks), a local Hugging Face json dataset and a ``py:`` file building a
Pipeline. The default run's commands run through ``main(args)`` in this process (what
they print and the exit status they return); test_bad_arguments_are_one_line_and_exit_2
(and some ``-m slow`` tests) run the real entry point, ``python -m datarax``, in a new
process."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest
from cli_helpers import datarax
from hf_files import write_jsonl
from int_record_files import (damaged_copy, read_records, unreadable_records, write_parts,
                              write_records)

from datarax.cli.charts import grid_size

CODECS = '''
import numpy as np

def decode(record):
    """8x8x3 uint8 image of value 10*k, then int32 label k."""
    return {"image": np.frombuffer(record[:192], np.uint8).reshape(8, 8, 3),
            "label": np.frombuffer(record[192:], np.int32)[0]}

def floats(record):
    values = np.frombuffer(record, np.float32)
    if values[0] in (7.0, 42.0):
        raise ValueError(f"value {int(values[0])} is not allowed")
    return {"data": values}
'''

PIPELINES = """
import jax.numpy as jnp
import numpy as np
from flax import nnx
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig

def source():
    return MemorySource(MemorySourceConfig(), {"x": np.arange(100, dtype=np.float32),
                                               "y": np.arange(100, dtype=np.int32) % 7})

def double(element, key=None):
    return element.update_data({"x": (element.data["x"] * 2).astype(jnp.int32)})

def pipeline():
    return Pipeline(source=source(), stages=[ElementOperator(ElementOperatorConfig(), fn=double)],
                    batch_size=10)

def not_a_source():
    return 5

NUMBER = 3
"""


def datarax_in_process(*args: str, cwd: pathlib.Path, capsys, monkeypatch) -> tuple[int, str, str]:
    """``main(args)`` in this process (the parsing and printing of the entry point, without
    the seconds a new interpreter spends importing JAX)."""
    from datarax.cli.main import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder main() makes importable
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def png_size(path: pathlib.Path) -> tuple[int, int]:
    """``(height, width)`` from the PNG header (and the signature checked)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("cli")
    (root / "codecs_cli.py").write_text(CODECS)
    (root / "pipelines_cli.py").write_text(PIPELINES)
    write_parts(root, [range(0, 10), range(10, 20)],  # images: d0 holds k = 0..9, d1 10..19
                lambda k: np.full((8, 8, 3), k * 10, np.uint8).tobytes() + np.int32(k).tobytes(),
                name="d{}.array_record")
    write_records(root / "good.array_record", (np.full(16, i, np.float32).tobytes()
                                               for i in range(100)))
    damaged_copy(root / "good.array_record", root / "corrupt.array_record")
    hf = root / "hfds" / "data"
    write_jsonl(hf / "train.jsonl",
                ({"text": f"review {i} " + "good " * i, "label": i % 3} for i in range(25)))
    write_jsonl(hf / "test.jsonl", ({"text": f"t{i}", "label": i} for i in range(7)))
    write_jsonl(root / "hfbad" / "data" / "train.jsonl",  # records 5 and 13 lack their label
                ({"text": f"r{i}", "label": None if i in (5, 13) else i} for i in range(20)))
    return root


# --------------------------------------------------------------------- inspect
def test_inspect_array_record_glob_with_decode_and_image_grid(data, capsys, monkeypatch):
    grid = data / "grid.png"
    code, out, err = datarax_in_process(
        "inspect",
        str(data / "d*.array_record"),
        "--decode",
        "codecs_cli:decode",
        "--records",
        "2",
        "--grid",
        str(grid),
        cwd=data,
        capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert out.splitlines() == [
        "source: ArrayRecordSourceModule",
        "files: 2",
        f"  {data / 'd0.array_record'}",
        f"  {data / 'd1.array_record'}",
        "records: 20",
        "element spec:",
        "  image: uint8 (8, 8, 3)",
        "  label: int32 ()",
        "first 2 records:",
        "  [0]",
        "    image: uint8 (8, 8, 3) min 0 max 0",
        "    label: int32 0",
        "  [1]",
        "    image: uint8 (8, 8, 3) min 10 max 10",
        "    label: int32 1",
        f"wrote image grid of 'image' (16 records) to {grid}",
    ]
    assert png_size(grid) == grid_size(16, 8, 8) == (266, 266)
    from PIL import Image

    with Image.open(grid) as image:
        pixels = np.asarray(image)
    # 4x4 tiles of 64x64 (8x8 upscaled 8 times) after a 2-pixel border; tile k is gray 10*k.
    for k in range(16):
        row, col = divmod(k, 4)
        top, left = 2 + row * 66, 2 + col * 66
        tile = pixels[top : top + 64, left : left + 64]
        assert (tile == 10 * k).all(), k
    assert (pixels[0] == 255).all() and (pixels[:, 66:68] == 255).all()  # white separators


def test_inspect_raw_records_without_decode_as_json(data, capsys, monkeypatch):
    code, out, err = datarax_in_process(
        "inspect", str(data / "good.array_record"), "--records", "1", "--json", cwd=data,
        capsys=capsys, monkeypatch=monkeypatch,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["records"] == 100 and report["files"] == [str(data / "good.array_record")]
    assert report["element_spec"] == {"num_bytes": "int32 ()", "head": "text ()"}
    assert report["first_records"] == [{"num_bytes": "int32 64", "head": repr("00 " * 15 + "00")}]


@pytest.mark.slow  # heavy; the default run covers this path in lighter tests
def test_inspect_hf_split_counts_the_stream_and_draws_a_histogram(data):
    hist = data / "hist.png"
    result = datarax(
        "inspect",
        f"hf:{data / 'hfds'}:test",
        "--records",
        "2",
        "--grid",
        str(hist),
        "--field",
        "label",
        cwd=data,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "source: HFStreamingSource",
        f"dataset: {data / 'hfds'}",
        "records: 7 (counted by reading the stream)",
        "element spec:",
        "  text: text ()",
        "  label: int32 ()",
        "first 2 records:",
        "  [0]",
        "    text: 't0'",
        "    label: int32 0",
        "  [1]",
        "    text: 't1'",
        "    label: int32 1",
        f"wrote histogram of 'label' (7 records) to {hist}",
    ]
    assert png_size(hist) == (400, 640)


def test_inspect_py_pipeline_shows_records_after_the_stages(data, capsys, monkeypatch):
    code, out, err = datarax_in_process(
        "inspect",
        "py:pipelines_cli.py:pipeline",
        "--json",
        cwd=data,
        capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["pipeline"] is True and report["source"] == "MemorySource"
    assert report["records"] == 100
    assert report["element_spec"] == {"x": "float32 ()", "y": "int32 ()"}
    assert report["pipeline_spec"] == {"x": "int32 ()", "y": "int32 ()"}  # the stage casts x
    assert [r["x"] for r in report["first_records"]] == ["int32 0", "int32 2", "int32 4"]


@pytest.mark.slow  # writes a parquet of PNG images; the ArrayRecord grid test is the fast one
def test_inspect_hf_image_dataset_draws_its_images(tmp_path):
    import io

    datasets = pytest.importorskip("datasets")
    from PIL import Image

    images = []
    for i in range(9):
        out = io.BytesIO()
        Image.fromarray(np.full((6, 6, 3), i * 25, np.uint8)).save(out, format="PNG")
        images.append({"bytes": out.getvalue(), "path": None})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int32")})
    folder = tmp_path / "images" / "data"
    folder.mkdir(parents=True)
    datasets.Dataset.from_dict(
        {"image": images, "label": list(range(9))}, features=features
    ).to_parquet(str(folder / "train-00000-of-00001.parquet"))
    grid = tmp_path / "grid.png"
    result = datarax(
        "inspect", f"hf:{tmp_path / 'images'}", "--grid", str(grid), "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["element_spec"] == {"image": "uint8 (6, 6, 3)", "label": "int32 ()"}
    assert report["grid"] == {
        "kind": "image grid",
        "field": "image",
        "records": 9,
        "height": 206,
        "width": 206,
        "path": str(grid),
    }
    with Image.open(grid) as image:
        pixels = np.asarray(image)
    assert png_size(grid) == grid_size(9, 6, 6) == (206, 206)  # 3x3 tiles of 66 px (6 px x 11)
    for k in range(9):
        row, col = divmod(k, 3)
        top, left = 2 + row * 68, 2 + col * 68
        assert (pixels[top : top + 66, left : left + 66] == 25 * k).all(), k


# ------------------------------------------------------------------------ scan
@pytest.mark.slow  # heavy; the default run covers this path in lighter tests
def test_scan_lists_every_bad_record_with_file_index_and_cause(data):
    corrupt = data / "corrupt.array_record"
    unreadable = unreadable_records(corrupt)
    assert unreadable, "the corruption must hit some records"
    both = str(data / "[cg]*.array_record")  # corrupt.array_record, good.array_record
    result = datarax("scan", both, "--decode", "codecs_cli:floats", "--json", cwd=data)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    expected = [(str(corrupt), i) for i in sorted(set(unreadable) | {7, 42})] + [
        (str(data / "good.array_record"), 7),
        (str(data / "good.array_record"), 42),
    ]
    assert [(r["path"], r["index"]) for r in report["bad_records"]] == expected
    assert report["bad"] == len(expected) and report["read"] == 200
    assert report["good"] == 200 - len(expected) and report["complete"] is True
    causes = {(r["path"], r["index"]): r["cause"] for r in report["bad_records"]}
    assert "value 42 is not allowed" in causes[(str(data / "good.array_record"), 42)]
    assert "Corrupted" in causes[(str(corrupt), unreadable[0])]

    text = datarax("scan", str(corrupt), cwd=data)  # no --decode: only unreadable records
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        f"BAD {corrupt} record {i}" for i in unreadable
    ]
    assert lines[-1] == (
        f"scanned 100 records of {corrupt}: {100 - len(unreadable)} good, {len(unreadable)} bad"
    )


def test_scan_hf_stream_lists_records_that_do_not_convert(
    data, capsys, monkeypatch, hf_offline
):
    target = f"hf:{data / 'hfbad'}"
    code, out, err = datarax_in_process(
        "scan", target, cwd=data, capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 1, err
    lines = out.splitlines()
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in lines[:-1]] == [
        f"BAD {target} record 5",
        f"BAD {target} record 13",
    ]
    assert all("field 'label' is missing a value (None)" in line for line in lines[:-1])
    # the option as the command spells it, not the source's config field (exclude_keys)
    assert all(line.endswith("drop the field (--exclude FIELD).") for line in lines[:-1])
    assert lines[-1] == f"scanned 20 records of {target}: 18 good, 2 bad"


def test_exclude_leaves_out_fields_batches_cannot_hold(tmp_path, capsys, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "ragged").mkdir()
    pq.write_table(
        pa.table({"ids": [[1, 2], [3], [4, 5, 6]], "y": [1, 2, 3]}),
        tmp_path / "ragged" / "train.parquet",
    )
    target = f"hf:{tmp_path / 'ragged'}"
    code, out, err = datarax_in_process(
        "inspect", target, cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 2 and err.strip().endswith("Pad or truncate it first, or drop it (--exclude FIELD).")
    code, out, err = datarax_in_process(
        "scan", target, "--exclude", "ids", cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 0, err
    assert out.splitlines() == [f"scanned 3 records of {target}: 3 good, 0 bad"]
    code, out, err = datarax_in_process(
        "inspect", str(tmp_path / "x.array_record"), "--exclude", "ids", cwd=tmp_path,
        capsys=capsys, monkeypatch=monkeypatch,
    )
    assert code == 2 and err.splitlines() == [
        f"datarax inspect: error: --exclude applies to hf: and tfds: SOURCEs only, not to "
        f"'{tmp_path / 'x.array_record'}'."
    ]


def test_scan_lists_the_documents_a_packed_text_source_skips(tmp_path, capsys, monkeypatch):
    (tmp_path / "docs.jsonl").write_text('{"text": "a b"}\n{"body": "x"}\n{"text": "c"}\n')
    (tmp_path / "text_cli.py").write_text(
        "from datarax.text import JsonlDocuments, PackedTextConfig, PackedTextSource\n"
        "def source():\n"
        "    return PackedTextSource(PackedTextConfig(seq_len=8, on_error='skip'),\n"
        "                            JsonlDocuments('docs.jsonl'), lambda t: [1] * len(t.split()))\n"
    )
    code, out, err = datarax_in_process(
        "scan", "py:text_cli.py:source", cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 1, err
    assert out.splitlines() == [
        "BAD py:text_cli.py:source record 1: docs.jsonl line 2 has no field 'text' (found ['body'])",
        "scanned 2 records of py:text_cli.py:source: 1 good, 1 bad",
    ]


def test_inspect_and_scan_hf_data_with_float_columns(tmp_path, capsys, monkeypatch):
    """JSON numbers and Parquet doubles are float64: the CLI looks at them as float32
    instead of refusing the dataset for want of jax_enable_x64 (an option it has not)."""
    write_jsonl(tmp_path / "scores.jsonl", ({"text": f"t{i}", "score": i / 4} for i in range(5)))
    target = f"hf:{tmp_path / 'scores.jsonl'}"
    code, out, err = datarax_in_process(
        "inspect", target, "--records", "1", "--no-count", cwd=tmp_path, capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert "  score: float32 ()" in out.splitlines()
    assert "    score: float32 0.0" in out.splitlines()
    code, out, err = datarax_in_process(
        "scan", target, cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 0, err
    assert out.splitlines()[-1] == f"scanned 5 records of {target}: 5 good, 0 bad"


@pytest.mark.slow  # a second HF stream start-up; the test above covers scan on hf: by default
def test_scan_clean_sources_exit_zero(data):
    result = datarax("scan", f"hf:{data / 'hfds'}", cwd=data)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"scanned 25 records of hf:{data / 'hfds'}: 25 good, 0 bad"
    ]


# ----------------------------------------------------------------------- bench
def test_bench_reports_rate_breakdown_floor_and_chart(data, capsys, monkeypatch):
    chart = data / "bench.png"
    code, out, err = datarax_in_process(
        "bench",
        "py:pipelines_cli:pipeline",
        "--batches",
        "12",
        "--compare-floor",
        "--png",
        str(chart),
        "--json",
        cwd=data,
        capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["batches"] == 12 and report["records"] == 120 and report["passes_started"] == 2
    assert (
        report["batch_size"] == 10 and report["stages"] == 1 and report["source"] == "MemorySource"
    )
    assert report["batches_per_epoch"] == 10
    stats = report["stats"]
    assert stats["batches"] == 12 and stats["records"] == 120
    assert stats["bottleneck"] == "step"  # an indexed source: everything is the compiled step
    assert report["records_per_s"] > 0 and report["time_to_first_batch_s"] > 0
    assert report["floor"]["records"] == 120 and report["floor"]["records_per_s"] > 0
    assert report["fraction_of_floor"] == pytest.approx(
        report["records_per_s"] / report["floor"]["records_per_s"], rel=1e-3
    )
    assert png_size(chart) == (400, 640)


def test_bench_png_without_matplotlib_is_refused_before_the_run(data, capsys, monkeypatch):
    import datarax.cli.bench

    def measured(*args, **kwargs):
        raise AssertionError("the benchmark ran, and its chart could not be drawn")

    monkeypatch.setattr(datarax.cli.bench, "measure_pipeline", measured)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    chart = data / "never.png"
    code, out, err = datarax_in_process("bench", "py:pipelines_cli:pipeline", "--png",
                                        str(chart), cwd=data, capsys=capsys,
                                        monkeypatch=monkeypatch)
    assert (code, out) == (2, "")
    assert err.strip().splitlines()[-1] == (
        "datarax bench: error: datarax bench --png needs the optional package 'matplotlib', "
        'which is not installed. Install it with: pip install "datarax[cli]"')
    assert not chart.exists()


def test_bench_text_output_names_the_bottleneck(data, capsys, monkeypatch):
    code, out, err = datarax_in_process(
        "bench",
        "py:pipelines_cli.py:source",
        "--epochs",
        "1",
        "--batch-size",
        "25",
        cwd=data,
        capsys=capsys,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "bench py:pipelines_cli.py:source: MemorySource, stages: 0, batch size: 25"
    assert lines[1] == "batches: 4  records: 100  batches per epoch: 4"
    assert lines[-1] == "bottleneck: step"


def test_bench_of_one_batch_says_it_has_no_bottleneck_to_name(data, capsys, monkeypatch):
    code, out, err = datarax_in_process("bench", "py:pipelines_cli.py:source", "--epochs", "1",
                                        "--batch-size", "1000", cwd=data, capsys=capsys,
                                        monkeypatch=monkeypatch)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "batches: 1  records: 100  batches per epoch: 1"
    assert lines[3] == "records/s (after the first batch): n/a (one batch)"
    assert lines[-1] == "bottleneck: n/a (one batch: its time is start-up, compile and wait)"


# ---------------------------------------------------------------------- errors
def test_bad_arguments_are_one_line_and_exit_2(data):
    """The real entry point in a new process (each costs seconds of importing JAX: the
    other commands and errors run through main() in this process)."""
    result = datarax("scan", str(data / "missing.array_record"), cwd=data)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"datarax scan: error: ArrayRecordSourceModule: the file '{data}/missing.array_record' "
        "does not exist. Check the path (a glob pattern such as 'data-*.array_record' is "
        "expanded)."
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["inspect", "s3x:bucket/data"],
            "unknown SOURCE scheme 's3x:' in 's3x:bucket/data'; use an ArrayRecord path, glob or "
            "URL (s3://bucket/data, gs://...), hf:NAME[:SPLIT], tfds:NAME[:SPLIT] or "
            "py:MODULE:FUNCTION.",
        ),
        (
            ["inspect", "py:no_such_module_x:make"],
            "py:no_such_module_x:make: no module named 'no_such_module_x' (run from the folder "
            "that "
            "holds it, set PYTHONPATH, or give the file: path/to/file.py:function).",
        ),
        (
            ["bench", "py:pipelines_cli:nothing"],
            "py:pipelines_cli:nothing: module 'pipelines_cli' has no attribute 'nothing'.",
        ),
        (
            ["inspect", "py:pipelines_cli:NUMBER"],
            "py:pipelines_cli:NUMBER: 'pipelines_cli:NUMBER' is a int, not a function.",
        ),
        (
            ["inspect", "py:pipelines_cli.py:not_a_source"],
            "py:pipelines_cli.py:not_a_source returned int; it must return a datarax source (a "
            "DataSourceModule) or a Pipeline.",
        ),
        (
            ["bench", "py:codecs_cli:decode"],
            "py:codecs_cli:decode: decode() cannot be called without arguments (missing a "
            "required argument: 'record'); SOURCE names a function that takes none and returns "
            "a source or a Pipeline.",
        ),
        (
            ["inspect", "py:missing_file.py:make"],
            "py:missing_file.py:make: the file 'missing_file.py' does not exist.",
        ),
        (
            ["inspect", "py:pipelines_cli"],
            "'py:pipelines_cli' is not py:MODULE:FUNCTION (e.g. py:my_pipelines:train or "
            "py:path/to/file.py:train).",
        ),
        (["inspect", "hf:"], "'hf:' names no dataset; write hf:NAME[:SPLIT]."),
        (
            ["bench", "{data}/good.array_record"],
            "bench times a datarax dataset (a folder written by datarax convert), and "
            "'{data}/good.array_record' has no dataset metadata: give a py:MODULE:FUNCTION that "
            "builds the source with its decode=, or convert the data first.",
        ),
        (
            ["inspect", "{data}/good.array_record", "--decode", "codecs_cli"],
            "--decode 'codecs_cli' is not MODULE:FUNCTION (e.g. my_codecs:decode).",
        ),
        (
            ["inspect", "hf:{data}/hfds", "--decode", "codecs_cli:decode"],
            "--decode applies to ArrayRecord files only, not to a hf: SOURCE.",
        ),
        (
            ["inspect", "hf:{data}/hfds", "--grid", "{data}/x.png", "--field", "text"],
            "--field 'text' is text (); --grid draws numeric fields only.",
        ),
        (
            ["inspect", "hf:{data}/hfds", "--grid", "{data}/x.png", "--field", "nope"],
            "--field 'nope' is not a field of this source; fields: ['label', 'text'].",
        ),
        (["scan", "hf:{data}/hfds", "--exclude", "nope"],
         "HFStreamingSource: --exclude names field(s) ['nope'] that the dataset does not have; "
         "its fields are ['text', 'label']."),
        (["scan", "{data}/good.array_record", "--batch-size", "0"],
         "--batch-size must be >= 1, got 0."),
        (["bench", "py:pipelines_cli:source", "--batch-size", "-2"],
         "--batch-size must be >= 1, got -2."),
        (
            ["bench", "py:pipelines_cli:pipeline", "--batches", "0"],
            "--batches must be >= 1, got 0.",
        ),
        (["bench", "py:pipelines_cli:pipeline", "--epochs", "0"], "--epochs must be >= 1, got 0."),
        (["inspect", "{data}/good.array_record", "--records", "-1"],
         "--records must be >= 0, got -1."),
        (["inspect", "{data}/good.array_record", "--grid-records", "0"],
         "--grid-records must be >= 1, got 0."),
    ],
)
def test_more_bad_arguments_in_process(data, capsys, monkeypatch, args, message):
    monkeypatch.syspath_prepend(str(data))
    code, out, err = datarax_in_process(
        *[a.format(data=data) for a in args], cwd=data, capsys=capsys, monkeypatch=monkeypatch
    )
    assert code == 2 and out == ""
    assert err.splitlines() == [f"datarax {args[0]}: error: {message.format(data=data)}"]
    assert not (data / "x.png").exists()


def test_console_script_lists_the_commands(tmp_path):
    """The `datarax` script pyproject installs (beside this interpreter) runs the same main."""
    import os
    import shutil
    import subprocess
    import sys

    script = pathlib.Path(sys.executable).parent / "datarax"
    if not script.exists():
        script = shutil.which("datarax")
    if script is None:
        pytest.skip("the datarax script is not installed in this environment")
    from cli_helpers import SRC

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [str(script), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "{demo,inspect,scan,convert,bench}" in result.stdout


# ------------------------------------------- a dataset with fields of variable shape
VARLEN_CODECS = '''
import numpy as np
from datarax.dataset import decode_records, read_metadata

FEATURES = read_metadata("varlen_ds").features

def length(record):
    """The number of tokens of a record of varlen_ds."""
    return {"n": np.int32(len(decode_records(FEATURES, [record])["tokens"][0]))}
'''


@pytest.fixture(scope="module")
def varlen_data(tmp_path_factory) -> pathlib.Path:
    """``varlen_ds``: a dataset with a bytes field and token lists of varying length (5
    records in 2 shards); ``badvarlen_ds``: the same with record 1 of shard 0 cut short."""
    from datarax.dataset import Features, Field, write_dataset

    root = tmp_path_factory.mktemp("varlen")
    features = Features((Field("blob", "uint8", (None,), "varlen"),
                         Field("tokens", "int32", (None,), "varlen"),
                         Field("label", "int32", (), "raw"),
                         Field("text", "str", (), "utf8")))
    rows = [{"blob": bytes([i]) * (i + 1), "tokens": np.arange(i + 1, dtype=np.int32) * 10,
             "label": np.int32(i), "text": f"row {i}"} for i in range(5)]
    for name in ("varlen_ds", "badvarlen_ds"):
        write_dataset(rows, root / name, features=features, shards=2)
    shard = root / "badvarlen_ds" / "data-00000-of-00002.array_record"
    records = read_records(shard)
    records[1] = records[1][:3]
    write_records(shard, records)
    (root / "varlen_codecs.py").write_text(VARLEN_CODECS)
    return root


def test_inspect_dataset_with_variable_shapes_shows_metadata_and_records(
        varlen_data, capsys, monkeypatch):
    folder = varlen_data / "varlen_ds"
    code, out, err = datarax_in_process("inspect", str(folder), "--records", "2",
                                        cwd=varlen_data, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0, err
    assert out.splitlines() == [
        "source: ArrayRecordSourceModule",
        "files: 2",
        f"  {folder / 'data-00000-of-00002.array_record'}",
        f"  {folder / 'data-00001-of-00002.array_record'}",
        "records: 5",
        "dataset: 5 records in 2 shards (format version 1), 0 rows skipped at conversion",
        "features:",
        "  blob: uint8 (None,) varlen",
        "  tokens: int32 (None,) varlen",
        "  label: int32 () raw",
        "  text: str () utf8",
        "element spec (no batches: a field has a variable shape, so the reader needs decode=; "
        "records below decoded one by one):",
        "  blob: uint8 (None,) varlen",
        "  tokens: int32 (None,) varlen",
        "  label: int32 ()",
        "  text: text ()",
        "first 2 records:",
        "  [0]",
        "    blob: uint8 (1,) min 0 max 0",
        "    tokens: int32 (1,) min 0 max 0",
        "    label: int32 0",
        "    text: 'row 0'",
        "  [1]",
        "    blob: uint8 (2,) min 1 max 1",
        "    tokens: int32 (2,) min 0 max 10",
        "    label: int32 1",
        "    text: 'row 1'",
    ]


def test_inspect_dataset_with_variable_shapes_as_json_with_a_histogram(
        varlen_data, capsys, monkeypatch):
    grid = varlen_data / "labels.png"
    code, out, err = datarax_in_process(
        "inspect", str(varlen_data / "varlen_ds" / "data-*.array_record"), "--records", "5",
        "--grid", str(grid), "--field", "label", "--json",
        cwd=varlen_data, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0, err
    report = json.loads(out)
    assert report["records"] == 5 and report["metadata"]["records"] == 5
    assert report["metadata"]["features"]["tokens"] == "int32 (None,) varlen"
    assert "field 'blob' has a variable shape" in report["decoded_one_by_one"]
    assert [r["tokens"] for r in report["first_records"]] == [
        f"int32 ({n},) min 0 max {10 * (n - 1)}" for n in range(1, 6)]
    assert [r["label"] for r in report["first_records"]] == [f"int32 {i}" for i in range(5)]
    assert report["grid"] == {"kind": "histogram", "field": "label", "records": 5,
                              "path": str(grid)}  # where --grid wrote it, as the text says
    assert png_size(grid)[0] > 0
    code, _, err = datarax_in_process(
        "inspect", str(varlen_data / "varlen_ds"), "--grid", str(grid), "--field", "tokens",
        cwd=varlen_data, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and "--field 'tokens' is int32 (None,) varlen" in err


def test_scan_and_inspect_name_a_record_that_does_not_match_the_metadata(
        varlen_data, capsys, monkeypatch):
    folder = varlen_data / "badvarlen_ds"
    shard = folder / "data-00000-of-00002.array_record"
    code, out, err = datarax_in_process("scan", str(folder), cwd=varlen_data, capsys=capsys,
                                        monkeypatch=monkeypatch)
    assert code == 1, err
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"BAD {shard} record 1"]
    assert "the record has 3 bytes, shorter than the features' head" in lines[0]
    assert lines[-1] == f"scanned 5 records of {folder}: 4 good, 1 bad"
    code, out, err = datarax_in_process("inspect", str(folder), cwd=varlen_data, capsys=capsys,
                                        monkeypatch=monkeypatch)
    assert code == 2 and out == ""
    assert err.startswith(f"datarax inspect: error: record 1 of '{shard}' does not match its "
                          "dataset's metadata:")


def test_inspect_a_dataset_of_one_shard_and_one_record_counts_in_the_singular(
        tmp_path, capsys, monkeypatch):
    from datarax.dataset import write_dataset

    write_dataset([{"x": np.int32(7)}], tmp_path / "one", shards=1)
    code, out, err = datarax_in_process("inspect", "one", "--records", "1", cwd=tmp_path,
                                        capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0, err
    assert ("dataset: 1 record in 1 shard (format version 1), 0 rows skipped at conversion"
            in out.splitlines())


def test_inspect_dataset_folder_with_decode(varlen_data, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(varlen_data))
    code, out, err = datarax_in_process(
        "inspect", "varlen_ds", "--decode", "varlen_codecs:length", "--records", "5", "--json",
        cwd=varlen_data, capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0, err
    report = json.loads(out)
    assert report["element_spec"] == {"n": "int32 ()"}
    assert [r["n"] for r in report["first_records"]] == [f"int32 {n}" for n in range(1, 6)]
    # relative paths are made absolute when the source is built, so the report names
    # files that stay right after a chdir
    assert report["files"] == [str(varlen_data / f"varlen_ds/data-0000{k}-of-00002.array_record")
                               for k in range(2)]


def test_decode_module_in_the_current_folder_wins_over_a_same_named_imported_module(
    data, tmp_path, capsys, monkeypatch
):
    # docs/cli.md's example: a codecs.py next to the data, --decode codecs:decode; the
    # standard library's codecs (imported by every interpreter) must not shadow it.
    (tmp_path / "codecs.py").write_text(CODECS)
    code, out, err = datarax_in_process(
        "inspect", str(data / "d0.array_record"), "--decode", "codecs:decode", "--records", "1",
        cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch,
    )
    assert (code, err) == (0, "")
    assert "  label: int32 ()" in out.splitlines() and "    label: int32 0" in out.splitlines()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "1"], "--epochs 1: the demo checkpoints in epoch 1 (the second) and "
         "checks the resume against it; give --epochs 2 or more."),
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0."),
        (["--seed", "-1"], "--seed -1: the seed of the split, the shuffle and the model is an "
         "int in [0, 2**32); give one there, e.g. --seed 0."),
    ],
)
def test_demo_refuses_settings_it_cannot_run(tmp_path, capsys, monkeypatch, args, message):
    code, out, err = datarax_in_process(
        "demo", "--no-progress", *args, cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch
    )
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"datarax demo: error: {message}"]


@pytest.mark.parametrize(
    ("command", "status"),
    [
        ("scan", "Exit status: 0 all records good, 1 any bad, 2 a bad argument or input, 130 "
                 "interrupted (Ctrl-C)."),
        ("inspect", "Exit status: 0 done, 2 a bad argument or input (one line on stderr), 130 "
                    "interrupted (Ctrl-C)."),
        ("convert", "Exit status: 0 done, 2 a bad argument or input (one line on stderr), 130 "
                    "interrupted (Ctrl-C; --resume finishes the run)."),
    ],
)
def test_command_help_says_what_it_does_and_its_exit_status(command, status, capsys):
    from datarax.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert status in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["inspect", "data.array_record", "--recods", "3"], "unrecognized arguments: --recods 3"),
        (["scan", "data.array_record", "--", "x"], "unrecognized arguments: -- x"),
    ],
)
def test_an_unknown_option_is_named_with_its_command_and_usage(argv, says, capsys):
    from datarax.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith(f"usage: datarax {argv[0]} ")  # the command's options, not the top's
    assert err.splitlines()[-1] == f"datarax {argv[0]}: error: {says}"


@pytest.mark.parametrize(
    "argv",
    [["inspect", "good.array_record", "--grid", "charts/grid.png"],
     ["bench", "py:nowhere:nothing", "--png", "charts/bench.png"]],
)
def test_a_png_into_a_missing_folder_is_refused_before_the_run(argv, data, capsys, monkeypatch):
    code, out, err = datarax_in_process(*argv, cwd=data, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "")  # before the module is imported or the source read
    assert err == (f"datarax {argv[0]}: error: {argv[2]} charts/{argv[3].split('/')[1]}: the "
                   "folder 'charts' does not exist; create it or give a path in an existing "
                   "folder.\n")


@pytest.mark.parametrize("option", ["--grid", "--png"])
@pytest.mark.parametrize(("path", "says"), [
    ("charts_folder", "that is a folder; give a file path, such as charts_folder/out.png."),
    ("-", "the picture is written to a file, not to stdout; give a file path, such as out.png."),
])
def test_an_output_path_that_is_a_folder_or_stdout_is_refused_before_the_run(
        option, path, says, data, capsys, monkeypatch):
    command = "inspect" if option == "--grid" else "bench"
    (data / "charts_folder").mkdir(exist_ok=True)
    code, out, err = datarax_in_process(command, "py:nowhere:nothing", option, path,
                                        cwd=data, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "")  # before the module is imported
    assert err == f"datarax {command}: error: {option} {path}: {says}\n"
    assert not (data / "-").exists()


def test_a_store_clients_logged_tracebacks_stay_off_stderr(tmp_path, capsys, monkeypatch):
    (tmp_path / "logging_cli.py").write_text(
        "import logging\n"
        "def build():\n"  # where gcsfs would log a request out of retries, with its traceback
        "    shown = logging.getLogger('gcsfs').isEnabledFor(logging.ERROR)\n"
        "    raise OSError(f'cannot read gs://bucket/x (gcsfs errors logged: {shown})')\n")
    code, out, err = datarax_in_process("inspect", "py:logging_cli:build", cwd=tmp_path,
                                        capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out) == (2, "")
    assert err == "datarax inspect: error: cannot read gs://bucket/x (gcsfs errors logged: False)\n"
    import logging

    assert logging.getLogger("gcsfs").level == logging.NOTSET  # as it was before the command


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version

    from datarax.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert (exit_.value.code, capsys.readouterr().out) == (0, f"datarax {version('datarax')}\n")


@pytest.mark.parametrize("command", ["inspect", "scan", "bench"])
def test_an_unquoted_glob_the_shell_expanded_is_refused_saying_to_quote_it(command, capsys):
    from datarax.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main([command, "d0.array_record", "d1.array_record"])  # what the shell made of d*
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"datarax {command}: error: unrecognized arguments: d1.array_record; {command} takes "
        "one SOURCE: quote a glob ('data/*.array_record') so the shell passes it to datarax")


@pytest.mark.parametrize("command", ["inspect", "scan", "bench"])
def test_ctrl_c_ends_with_one_line_and_status_130(command, tmp_path, capsys, monkeypatch):
    (tmp_path / "interrupted_cli.py").write_text(
        "def build():\n    raise KeyboardInterrupt  # Ctrl-C while the source is built\n")
    code, out, err = datarax_in_process(command, "py:interrupted_cli:build", cwd=tmp_path,
                                        capsys=capsys, monkeypatch=monkeypatch)
    assert (code, out, err) == (130, "", f"datarax {command}: interrupted.\n")  # no traceback


def test_bench_of_a_filtered_pipeline_says_why_its_epoch_length_is_unknown(
    tmp_path, capsys, monkeypatch
):
    (tmp_path / "filtered_cli.py").write_text(
        "import numpy as np\n"
        "from datarax.operators import FilterOperator\n"
        "from datarax.pipeline import Pipeline\n"
        "from datarax.sources import MemorySource, MemorySourceConfig\n"
        "def pipeline():\n"
        "    source = MemorySource(MemorySourceConfig(), {'x': np.arange(40, dtype=np.int32)})\n"
        "    keep = FilterOperator(predicate=lambda el: el.data['x'] % 2 == 0)\n"
        "    return Pipeline(source, stages=[keep], batch_size=4)\n"
    )
    code, out, err = datarax_in_process(
        "bench", "py:filtered_cli:pipeline", "--batches", "3",
        cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch,
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == (
        "batches: 3  records: 12  batches per epoch: unknown (a filter: known once read)"
    )


def test_inspect_stopped_by_a_bad_record_points_to_scan(data, capsys, monkeypatch):
    code, out, err = datarax_in_process(
        "inspect", "corrupt.array_record", "--records", "20",
        cwd=data, capsys=capsys, monkeypatch=monkeypatch,
    )
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith(
        f"datarax inspect: error: ArrayRecordSourceModule: cannot read record "
        f"{unreadable_records(data / 'corrupt.array_record')[0]} of file "
        f"'{data / 'corrupt.array_record'}'"
    )
    assert err.endswith(" 'datarax scan corrupt.array_record' lists every bad record.\n")


def test_inspect_of_a_missing_or_unreadable_file_does_not_point_to_scan(
    data, capsys, monkeypatch
):
    # scan cannot open such a file either: the hint is for a bad record inside a file
    (data / "notes.txt").write_text("not an ArrayRecord file")
    for path, says in (("missing.array_record", "does not exist"),
                       ("notes.txt", "is not a readable ArrayRecord file")):
        code, out, err = datarax_in_process(
            "inspect", path, cwd=data, capsys=capsys, monkeypatch=monkeypatch)
        assert (code, out) == (2, "") and len(err.splitlines()) == 1
        assert says in err and "datarax scan" not in err


def test_inspect_and_scan_of_data_convert_reads_say_to_convert_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "reviews.jsonl").write_text('{"text": "good"}\n')
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "a.png").write_bytes(b"")
    for command, path, says in (
        ("inspect", "reviews.jsonl", " It is not ArrayRecord: convert it first (datarax convert "
         "reviews.jsonl DST, then inspect DST), or open it as hf:reviews.jsonl.\n"),
        ("scan", "photos", " It is an image folder: convert it first (datarax.dataset.convert("
         "'photos', DST), or datarax convert photos DST), then read DST, with "
         "decode=datarax.decode_images(...) for images of several sizes.\n"),
    ):
        code, out, err = datarax_in_process(command, path, cwd=tmp_path, capsys=capsys,
                                            monkeypatch=monkeypatch)
        assert (code, out) == (2, "") and len(err.splitlines()) == 1
        assert err.endswith(says), err
    (tmp_path / "shards").mkdir()  # ArrayRecord files of your own, no dataset metadata
    write_records(tmp_path / "shards" / "a.array_record", [b"x"])
    code, _, err = datarax_in_process("inspect", "shards", cwd=tmp_path, capsys=capsys,
                                      monkeypatch=monkeypatch)
    assert code == 2
    assert err.endswith(" It holds ArrayRecord files: give them as a glob, "
                        "'shards/*.array_record'.\n")


def test_inspect_and_scan_of_an_image_or_a_class_folder_say_which_folder_to_convert(
    tmp_path, capsys, monkeypatch
):
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "a.png").write_bytes(b"")
    for split in ("train", "val"):  # root/<split>/<class>/<image>
        (tmp_path / "splits" / split / "cat").mkdir(parents=True)
        (tmp_path / "splits" / split / "cat" / "a.png").write_bytes(b"")
    for command, path, cwd, says in (
        ("inspect", "photos/cat/a.png", tmp_path, " It is an image: convert the image folder it "
         "is in (datarax convert photos DST for photos/<class>/<image>, then inspect DST).\n"),
        ("scan", "photos/cat/", tmp_path, " It holds images (a.png) but no class folders: "
         "convert the image folder it is a class of first (datarax convert photos DST; images "
         "without classes: move them into a subfolder, photos/cat/<name>, and convert "
         "photos/cat/), then read DST, with decode=datarax.decode_images(...).\n"),
        ("inspect", ".", tmp_path / "photos" / "cat", " It holds images (a.png) but no class "
         "folders: convert the image folder it is a class of first (datarax convert .. DST; "
         "images without classes: move them into a subfolder, ./<name>, and convert .), then "
         "read DST, with decode=datarax.decode_images(...).\n"),
        ("scan", "splits", tmp_path, " It is an image folder of splits: convert each split first "
         "(datarax.dataset.convert('splits/train', DST), or datarax convert splits/train DST), "
         "then read DST, with decode=datarax.decode_images(...) for images of several sizes.\n"),
        ("inspect", "photos", tmp_path, " It is an image folder: convert it first "
         "(datarax.dataset.convert('photos', DST), or datarax convert photos DST), then read DST, "
         "with decode=datarax.decode_images(...) for images of several sizes.\n"),
    ):
        code, out, err = datarax_in_process(command, path, cwd=cwd, capsys=capsys,
                                            monkeypatch=monkeypatch)
        assert (code, out) == (2, "") and len(err.splitlines()) == 1
        assert err.endswith(says), err


def test_an_endless_mixture_is_not_read_through(tmp_path, capsys, monkeypatch):
    # counting, scanning or benchmarking a pass of it would never end
    (tmp_path / "endless_mix.py").write_text(
        "import numpy as np\n"
        "from datarax.mixing import MixSource\n"
        "from datarax.sources import MemorySource, MemorySourceConfig\n"
        "def mix():\n"
        "    parts = [MemorySource(MemorySourceConfig(), {'x': np.arange(3) + 10 * k})\n"
        "             for k in range(2)]\n"
        "    return MixSource(parts, [1, 1], mode='sampling')\n"
    )
    endless = "MixSource samples endlessly, mode='sampling' without records_per_epoch"
    code, out, err = datarax_in_process("inspect", "py:endless_mix:mix", "--records", "2",
                                        cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch)
    assert (code, err) == (0, "") and f"records: unknown ({endless})" in out
    assert out.count("    x: int32 ") == 2
    for argv, says in ((["scan"], f"scan reads one pass of every record, and {endless}: give "
                                  "it records_per_epoch= to scan that many draws."),
                       (["bench", "--epochs", "1"], f"--epochs 1: {endless}, so a pass never "
                                                    "ends; time it with --batches.")):
        code, out, err = datarax_in_process(argv[0], "py:endless_mix:mix", *argv[1:],
                                            cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch)
        assert (code, out, err) == (2, "", f"datarax {argv[0]}: error: {says}\n")


def test_output_piped_to_a_reader_that_stops_ends_quietly(data, capsys, monkeypatch):
    class ClosedPipe:  # what `datarax inspect ... | head -2` writes to once head exits
        lines = 0

        def write(self, text):
            self.lines += text.count("\n")
            if self.lines > 2:
                raise BrokenPipeError(32, "Broken pipe")
            return len(text)

        def flush(self):
            pass

    from datarax.cli.main import main

    monkeypatch.chdir(data)
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["inspect", "good.array_record", "--records", "5"]) == 141
    assert capsys.readouterr().err == ""  # no 'error: [Errno 32] Broken pipe' line


def test_scan_and_bench_of_a_padding_pipeline_count_real_records_only(
    tmp_path, capsys, monkeypatch
):
    (tmp_path / "padded_cli.py").write_text(
        "import numpy as np\n"
        "from datarax.pipeline import Pipeline\n"
        "from datarax.sources import MemorySource, MemorySourceConfig\n"
        "def pipeline():\n"
        "    source = MemorySource(MemorySourceConfig(), {'x': np.arange(10, dtype=np.int32)})\n"
        "    return Pipeline(source, stages=[], batch_size=4, pad_remainder=True)\n"
    )
    code, out, err = datarax_in_process(
        "scan", "py:padded_cli:pipeline", cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch
    )
    assert (code, err) == (0, "")  # 3 batches of 4 rows: 10 records and 2 rows of padding
    assert out == "scanned 10 records of py:padded_cli:pipeline: 10 good, 0 bad\n"
    code, out, err = datarax_in_process(
        "bench", "py:padded_cli:pipeline", "--epochs", "2", "--json",
        cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch,
    )
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert (report["batches"], report["records"]) == (6, 20)
    assert (report["stats"]["batches"], report["stats"]["records"]) == (6, 20)

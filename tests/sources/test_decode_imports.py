"""Decode worker processes load neither JAX nor Flax, and serve what threads serve.

A ``decode_processes`` worker only reads, decodes and stacks records; importing JAX and
Flax cost each worker ~1.7 s of CPU at its start (most of a short epoch's gap to a plain
decode loop). The modules a worker loads are checked in a fresh interpreter and inside
a real worker; its batches against threads', across 1 and 2 workers and a resume, and
its 64-bit policy against its parent's ``jax_enable_x64``.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("array_record")
PIL_Image = pytest.importorskip("PIL.Image")
import jax  # noqa: E402
from flax import nnx  # noqa: E402

from datarax import decode_images  # noqa: E402
from datarax.dataset import Features, Field, write_dataset  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402

#: what a worker process imports: its entry module, and the modules of what it receives
#: (the reader's files, an image decoder, the bad-record policy)
WORKER_MODULES = ("datarax.sources.decode_processes", "datarax.sources.chunk_reads",
                  "datarax.sources.image_decoder", "datarax.sources.array_record_files",
                  "datarax.sources.error_policy")
#: evaluated in a process: the JAX and Flax modules it has loaded
LOADED = ("sorted(m for m in __import__('sys').modules "
          "if m.split('.')[0] in ('jax', 'jaxlib', 'flax'))")


def test_the_modules_a_worker_loads_import_neither_jax_nor_flax() -> None:
    code = f"import {', '.join(WORKER_MODULES)}; print({LOADED})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def picture(side: int, seed: int) -> bytes:
    import io

    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    PIL_Image.fromarray((rng.random((side, side + 9, 3)) * 255).astype(np.uint8)).save(
        out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """24 JPEGs of four sizes with an int64 ``id``, in 2 shards."""
    path = str(tmp_path_factory.mktemp("decode_imports") / "ds")
    features = Features((Field("image", "uint8", (None, None, 3), "jpeg"),
                         Field("id", "int64", (), "raw")))
    write_dataset([{"image": picture(30 + 6 * (i % 4), i), "id": np.int64(i)}
                   for i in range(24)], path, features=features, shards=2)
    return path


def source_of(folder: str, **options) -> ArrayRecordSourceModule:
    return ArrayRecordSourceModule(
        ArrayRecordSourceConfig(seed=5, shuffle_files=True), folder,
        decode=decode_images(random_resized_crop=16, seed=3), num_threads=2, **options)


def pipeline(source) -> Pipeline:
    return Pipeline(source=source, stages=[], batch_size=5, rngs=nnx.Rngs(0))


def same(got: list, want: list) -> None:
    assert [b["id"].tolist() for b in got] == [b["id"].tolist() for b in want]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a["image"]), np.asarray(b["image"]))


def jax_libraries(pid: int) -> list[str]:
    """The files of JAX's compiled library (jaxlib) mapped into process ``pid``: every
    process that imported JAX (Flax imports it too) has them."""
    with open(f"/proc/{pid}/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "jaxlib" in line})


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
def test_a_worker_decodes_without_jax_and_follows_its_parents_x64(folder) -> None:
    """The worker serves the whole epoch with no JAX library loaded, and keeps int64
    values as its parent (``jax_enable_x64`` on) does: it used to narrow them to int32
    under its own default and refuse every record as differing from the first."""
    assert jax_libraries(os.getpid())  # the check sees JAX where it is loaded
    before = jax.config.read("jax_enable_x64")
    others = {p.pid for p in multiprocessing.active_children()}
    jax.config.update("jax_enable_x64", True)
    try:
        source = source_of(folder, decode_processes=1)
        try:
            ids = [b["id"] for b in pipeline(source)]
            workers = [p.pid for p in multiprocessing.active_children() if p.pid not in others]
            loaded = [jax_libraries(pid) for pid in workers]
        finally:
            source.close()
    finally:
        jax.config.update("jax_enable_x64", before)
    assert len(workers) == 1 and loaded == [[]]
    assert {np.asarray(i).dtype for i in ids} == {np.dtype(np.int64)}
    assert sorted(int(i) for b in ids for i in np.asarray(b)) == list(range(24))


@pytest.mark.slow  # starts three worker processes; the test above covers the imports
def test_two_then_one_worker_across_a_resume_serve_threads_batches(folder) -> None:
    threads = source_of(folder)
    try:
        whole = list(pipeline(threads))
    finally:
        threads.close()
    two = source_of(folder, decode_processes=2)
    try:
        first = pipeline(two)
        it = iter(first)
        head = [next(it), next(it)]
        state = first.get_state()
    finally:
        two.close()
    one = source_of(folder, decode_processes=1)
    try:
        resumed = pipeline(one)
        resumed.set_state(state)
        rest = list(resumed)
    finally:
        one.close()
    assert len(head) + len(rest) == len(whole) == 5
    same(head + rest, whole)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
def test_a_worker_reports_an_undecodable_image_without_loading_jax(tmp_path) -> None:
    """datarax's errors name ``datarax.core.errors`` as their home; pickling one in a
    worker would import that package, and JAX with it: it travels as its type's name."""
    from int_record_files import write_records

    good = picture(20, 1)
    path = write_records(tmp_path / "jpegs.array_record", (good, good[:60], good, good))
    others = {p.pid for p in multiprocessing.active_children()}
    source = ArrayRecordSourceModule(
        ArrayRecordSourceConfig(on_error="skip"), path, decode=decode_images(resize=8, crop=8),
        num_threads=1, decode_processes=1)
    try:
        served = sum(len(b["image"]) for b in pipeline(source))
        workers = [p.pid for p in multiprocessing.active_children() if p.pid not in others]
        loaded = [jax_libraries(pid) for pid in workers]
        reports = source.skipped_records()
    finally:
        source.close()
    assert served == 3 and len(workers) == 1 and loaded == [[]]
    assert [r.index for r in reports] == [1]
    assert "field 'image': cannot decode the image" in reports[0].cause

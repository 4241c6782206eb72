"""``write_dataset``: records into ArrayRecord shards plus the metadata file.

Shard ``s`` of ``n`` rows holds the contiguous rows ``s*n//shards .. (s+1)*n//shards - 1``
(a one-pass iterable of unknown length goes round-robin); the same records and options
give byte-identical shards and metadata with any number of ``workers``.

Crash safety: a shard is written under ``DST/.datarax-partial/`` and renamed to its final
name only once complete and synced, after its summary was saved beside it; the metadata
file is written last. So a killed process or a full disk never leaves a shard that looks
complete, and ``resume=True`` keeps the finished shards that still hold what the input
gives for their rows (:mod:`datarax.dataset.resume`). ``overwrite=True`` writes the new
dataset beside ``DST`` and swaps it in once complete (:mod:`datarax.dataset.replace`).

Example:
    >>> import numpy as np, tempfile, os
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> info, summary = write_dataset([{"x": np.float32([i, i]), "label": i % 2} for i in range(10)],
    ...                      dst, shards=2)
    >>> info.num_records, [s.records for s in info.shards], sorted(os.listdir(dst))
    (10, [5, 5], ['data-00000-of-00002.array_record', 'data-00001-of-00002.array_record', 'datarax_dataset.json'])
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from datarax.dataset.column_records import column_encoder
from datarax.dataset.fields import Features, RecordMismatchError
from datarax.dataset.layout import record_encoder
from datarax.dataset.lock import folder_lock
from datarax.dataset.metadata import (
    METADATA_FILE,
    PARTIAL_DIR,
    WRITER_OPTIONS,
    DatasetInfo,
    ShardInfo,
    read_metadata,
    shard_info,
    shard_name,
    write_json,
    write_metadata,
)
from datarax.dataset.replace import beside, dataset_entries, remove_folder, swap_in
from datarax.dataset.resume import (
    check_finished_shards,
    finished_shards,
    partial_path,
    prepare_destination,
    run_fingerprint,
    written_with,
)
from datarax.dataset.rows import Rows, as_rows
from datarax.dataset.write_features import name_row_classes, resolve_features
from datarax.dataset.write_outcome import ConversionError, WriteSummary, bad_record_message
from datarax.dataset.write_workers import WorkerPool
from datarax.errors import ConfigError
from datarax.extras import require
from datarax.host.counts import check_count

__all__ = ["PARTIAL_DIR", "ConversionError", "WriteSummary", "write_dataset"]

_PROGRESS_EVERY = 512
_ROWS_A_STEP = 64  # rows written row by row between two counts of progress


@dataclasses.dataclass(frozen=True)
class _Job:
    dst: str
    features: Features
    shards: int
    on_error: str
    bounds: tuple[int, ...] | None  # contiguous ranges; None: round-robin
    replacing: str | None = None  # the folder whose dataset this write (in ``dst``) replaces


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_failed(job: _Job, what: str, err: BaseException) -> ConversionError:
    if job.replacing is not None:
        return ConversionError(
            f"writing {what} of the dataset replacing '{job.replacing}' (in '{job.dst}' beside "
            f"it) failed ({type(err).__name__}: {err}); the dataset in '{job.replacing}' is kept "
            "as it was. Free disk space or fix the destination, then run it again with "
            "overwrite=True (--overwrite).")
    return ConversionError(
        f"writing {what} in '{job.dst}' failed ({type(err).__name__}: {err}). Free disk space or "
        "fix the destination, then run it again with resume=True (--resume): finished shards "
        "are kept, and no unfinished one looks complete.")


class _ShardWriter:
    """One shard being written: temporary file, records, skipped rows."""

    def __init__(self, job: _Job, index: int) -> None:
        self.job = job
        self.name = shard_name(index, job.shards)
        self.tmp = partial_path(job.dst, self.name + ".tmp")
        self.writer = require("array_record.python.array_record_module", extra="arrayrecord",
                              user="write_dataset").ArrayRecordWriter(self.tmp, WRITER_OPTIONS)
        self.records = 0
        self.skipped: list[dict[str, Any]] = []
        self.encode = record_encoder(job.features)

    def add(self, row: int, record: Any, rows: Rows) -> None:
        try:
            data = self.encode(record, row)
        except RecordMismatchError as err:
            message = str(err).replace(f"row {row}", rows.row_name(row), 1)
            if self.job.on_error != "skip":
                raise ConversionError(bad_record_message(f"{rows.description}, {message}", err)) from err
            self.skipped.append({"row": row, "field": err.field, "error": message})
            return
        try:
            self.writer.write(data)
        except (OSError, RuntimeError) as err:  # array_record raises RuntimeError (disk full)
            raise _write_failed(self.job, f"the shard '{self.name}'", err) from err
        self.records += 1

    def add_encoded(self, records: list[bytes]) -> None:
        """Write records already encoded
        (:func:`~datarax.dataset.column_records.column_encoder`)."""
        try:
            collections.deque(map(self.writer.write, records), maxlen=0)  # no Python loop
        except (OSError, RuntimeError) as err:  # array_record raises RuntimeError (disk full)
            raise _write_failed(self.job, f"the shard '{self.name}'", err) from err
        self.records += len(records)

    def finish(self) -> dict[str, Any]:
        try:
            self.writer.close()
            _sync(self.tmp)
            info = shard_info(self.tmp, self.records)
            summary = {"shard": dataclasses.replace(info, file=self.name).to_json(),
                       "skipped": self.skipped}
            write_json(partial_path(self.job.dst, self.name + ".json"), summary)
        except (OSError, RuntimeError) as err:
            raise _write_failed(self.job, f"the shard '{self.name}'", err) from err
        os.replace(self.tmp, os.path.join(self.job.dst, self.name))
        return summary

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(OSError):
            os.remove(self.tmp)


def _write_ranges(job: _Job, rows: Rows, shards: Sequence[int],
                  report: Callable[[str, Any], None]) -> None:
    """Write the contiguous shards ``shards`` (in order), reporting progress and results."""
    assert job.bounds is not None
    for s in shards:
        lo, hi = job.bounds[s], job.bounds[s + 1]
        shard = _ShardWriter(job, s)
        try:
            row, pending = lo, 0
            for count in _write_rows(shard, rows, lo, hi):
                row += count
                pending += count
                if pending >= _PROGRESS_EVERY:
                    report("rows", pending)
                    pending = 0
            if row != hi:
                raise ConversionError(
                    f"{rows.description} ended at row {row}, its length said {job.bounds[-1]}.")
            report("rows", pending)
            report("done", shard.finish())
        except BaseException:
            shard.abort()
            raise


def _write_rows(shard: _ShardWriter, rows: Rows, lo: int, hi: int) -> Iterator[int]:
    """Write rows ``lo..hi-1`` into ``shard``, yielding how many each step wrote (a table's
    slice at a time where its columns encode at once, else row by row)."""
    encode = column_encoder(shard.job.features)
    tables = rows.tables(lo, hi) if encode is not None else None
    if tables is None:
        done = 0
        for record in rows.iter_rows(lo, hi):
            shard.add(lo + done, record, rows)
            done += 1
            if done % _ROWS_A_STEP == 0:
                yield _ROWS_A_STEP
        if done % _ROWS_A_STEP:
            yield done % _ROWS_A_STEP
        return
    for table in tables:
        records = encode(table, rows.image_headers(lo, lo + table.num_rows))
        if records is not None:
            shard.add_encoded(records)
        else:
            for row, record in enumerate(table.to_pylist(), lo):
                shard.add(row, record, rows)
        lo += table.num_rows
        yield table.num_rows


def _write_round_robin(job: _Job, rows: Rows, report: Callable[[str, Any], None]) -> int:
    writers = [_ShardWriter(job, s) for s in range(job.shards)]
    try:
        row = 0
        for row, record in enumerate(rows.iter_rows(0, None)):
            writers[row % job.shards].add(row, record, rows)
            if row % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
                report("rows", _PROGRESS_EVERY)
        total = row + 1 if writers else 0
        report("rows", total % _PROGRESS_EVERY)
        for w in writers:
            report("done", w.finish())
        return total
    except BaseException:
        for w in writers:
            w.abort()
        raise




def refuse_url_destination(dst: Any, where: str) -> None:
    """A ConfigError when ``dst`` is a URL: the local writer writes local folders only."""
    from datarax.storage.urls import is_remote  # (a worker process need not import storage)

    if is_remote(dst):
        raise ConfigError(
            f"{where} writes a local folder, and '{os.fspath(dst)}' is a URL. Write the dataset "
            "to a local folder and copy it to the store (e.g. `aws s3 cp --recursive`, `gcloud "
            "storage cp -r`), or convert on Apache Beam, which writes to a bucket: "
            "convert(..., runner='beam') (datarax convert SRC DST --runner beam).")


def write_dataset(
    records: Any,
    dst: str | os.PathLike[str],
    *,
    features: Features | None = None,
    shards: int = 1,
    workers: int = 1,
    on_error: str = "raise",
    resume: bool = False,
    overwrite: bool = False,
    class_names: Mapping[str, Sequence[str]] | None = None,
    progress: bool = False,
    extra: Mapping[str, Any] | None = None,
    pool: WorkerPool | None = None,
) -> tuple[DatasetInfo, WriteSummary]:
    """Write ``records`` as a self-describing ArrayRecord dataset in folder ``dst``; returns
    the :class:`~datarax.dataset.metadata.DatasetInfo` written and a :class:`WriteSummary`.

    Args:
        records: a sequence or iterable of dicts (numpy arrays, numbers, ``str``,
            ``bytes``, images), a Hugging Face ``Dataset`` split, a TFDS data source, a
            datarax source, or a :class:`~datarax.dataset.rows.Rows`.
        dst: the dataset folder (created).
        features: the :class:`~datarax.dataset.fields.Features`; default: inferred from
            the first record and the source's schema (class names, text).
        shards: number of shard files.
        workers: processes writing shards in parallel (random-access records only).
        on_error: ``"raise"`` stops at a record that does not match the features, naming
            its row and field; ``"skip"`` leaves it out and lists it in the metadata.
        resume: finish an interrupted write (finished shards are kept).
        overwrite: replace a dataset already in ``dst`` (else it is refused): the new one
            is written beside ``dst`` and replaces it once complete, so a write that fails
            keeps the old one (:mod:`datarax.dataset.replace`).
        class_names: class names per label field (stored in the metadata).
        progress: show a progress bar (``tqdm``).
        extra: JSON stored under the metadata's ``extra``.
        pool: a :class:`~datarax.dataset.write_workers.WorkerPool` of ``workers`` processes
            started before ``records`` were opened (the caller ends it).

    Raises:
        ConfigError: ``dst`` is a URL (``s3://``, ``gs://`` ...): this writer writes a local
            folder (:func:`~datarax.dataset.conversion.convert` with ``runner="beam"``
            writes to a bucket).
    """
    refuse_url_destination(dst, "write_dataset")
    with (folder_lock(dst, error=ConversionError, what="this write"),  # one writer per folder
          contextlib.ExitStack() as stack):
        started = time.perf_counter()
        from datarax.storage.urls import expand_user  # (not in a worker process)

        dst = expand_user(dst)  # '~/ds' is the home folder's
        shards = check_count(shards, "write_dataset shards", 1)  # NumPy ints too
        workers = check_count(workers, "write_dataset workers", 1)
        if on_error not in ("raise", "skip"):
            raise ConfigError(
                f"write_dataset on_error must be 'raise' or 'skip', got {on_error!r}.")
        rows = as_rows(records)
        name_row_classes(rows, features, class_names)  # before a worker gets the rows
        if workers > 1 and not rows.random_access:
            raise ConfigError(
                f"write_dataset workers={workers} needs records every process can read by row "
                f"(a list, a Hugging Face Dataset, files), not {rows.description}; use workers=1.")
        n = rows.length
        if workers > 1 and n is not None and shards > 1 and pool is not None:
            pool.send_rows(rows)  # started by the caller: they start as it opened the rows
        elif workers > 1 and n is not None and shards > 1:  # started now: they start as we work
            pool = stack.enter_context(WorkerPool(min(workers, shards), rows))
        else:
            pool = None
        if pool is not None and rows.probes_rows:  # what the hints read of every row, shared
            rows.use_probes(pool.probe(rows, shards))
        feats = resolve_features(rows, features, class_names=class_names, skip=on_error == "skip")
        bounds = tuple(s * n // shards for s in range(shards + 1)) if n is not None else None
        fingerprint, parts = run_fingerprint(feats, shards, bounds, on_error, rows)
        target = dst
        if overwrite and not resume and dataset_entries(dst):  # kept until the new one is done
            target = beside(dst)
            remove_folder(target)  # left by a write killed while replacing that dataset
        job = _Job(target, feats, shards, on_error, bounds, None if target == dst else dst)
        if pool is not None and target != dst:
            pool.after_failure = (f"The dataset in '{dst}' is kept as it was: after fixing the "
                                  "cause, run it again with overwrite=True (--overwrite).")
        try:
            info, resumed = _write(job, rows, fingerprint, parts, resume=resume,
                                   overwrite=overwrite, workers=workers, progress=progress,
                                   pool=pool, extra=extra)
            if target != dst:
                try:
                    swap_in(target, dst)
                except OSError as err:
                    raise ConversionError(
                        f"moving the new dataset from '{target}' into '{dst}' failed "
                        f"({type(err).__name__}: {err}); the dataset in '{dst}' is kept as it "
                        "was. Fix the destination, then run it again with overwrite=True "
                        "(--overwrite).") from err
        except BaseException:
            if target != dst:  # the old dataset is untouched: nothing to resume
                if pool is not None:
                    pool.stop()  # no worker writes into the folder as it goes
                remove_folder(target)
            raise
        return info, WriteSummary(info.num_records, sum(s.bytes for s in info.shards), shards,
                                  resumed, len(info.skipped), time.perf_counter() - started)


def _write(job: _Job, rows: Rows, fingerprint: str, parts: Mapping[str, Any], *, resume: bool,
           overwrite: bool, workers: int, progress: bool, pool: WorkerPool | None,
           extra: Mapping[str, Any] | None) -> tuple[DatasetInfo, int]:
    """Write ``rows`` into ``job.dst``; the metadata and the finished shards kept."""
    dst, shards, bounds, n = job.dst, job.shards, job.bounds, rows.length
    if prepare_destination(dst, fingerprint, parts, resume=resume, overwrite=overwrite):
        return read_metadata(dst), shards
    done = finished_shards(dst, shards) if bounds is not None else {}
    if done:  # resumed: the finished shards must hold what their rows give now
        _check_resumed(job, rows, done, workers, progress)
    todo = [s for s in range(shards) if s not in done]
    results = dict(done)
    bar = _progress_bar(progress, n, sum(bounds[s + 1] - bounds[s] for s in done) if bounds else 0)

    def report(kind: str, value: Any) -> None:
        if kind == "rows":
            if bar is not None:
                bar.update(value)
        elif kind == "done":
            index = int(value["shard"]["file"].split("-")[1])
            results[index] = value

    try:
        if bounds is None:
            _write_round_robin(job, rows, report)
        elif pool is None or len(todo) <= 1:
            _write_ranges(job, rows, todo, report)
        else:
            pool.write(_write_ranges, job, rows, todo, report)
    except ConversionError as err:
        if not results and isinstance(err.__cause__, RecordMismatchError):
            # a bad row before any shard was finished: nothing to resume, DST left as it was
            shutil.rmtree(os.path.join(dst, PARTIAL_DIR), ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    shard_list = tuple(ShardInfo(**results[s]["shard"]) for s in range(shards))
    skipped = tuple(item for s in range(shards) for item in results[s]["skipped"])
    info = DatasetInfo(job.features, shard_list, skipped,
                       {**dict(extra or {}), "fingerprint": fingerprint,
                        "written_with": written_with(parts)})
    try:
        write_metadata(dst, info)
    except OSError as err:
        raise _write_failed(job, f"the metadata file {METADATA_FILE}", err) from err
    shutil.rmtree(os.path.join(dst, PARTIAL_DIR), ignore_errors=True)
    return info, len(done)


def _progress_bar(progress: bool, total: int | None, initial: int, desc: str = "writing") -> Any:
    if not progress:
        return None
    tqdm = require("tqdm", extra="convert", user="write_dataset(progress=True)")
    scale = total is None or total >= 10_000  # '12.0/30.0' for small counts otherwise
    return tqdm.tqdm(total=total, initial=initial, unit=" records", unit_scale=scale,
                     dynamic_ncols=True, desc=desc)


def _check_resumed(job: _Job, rows: Rows, done: Mapping[int, Any], workers: int,
                   progress: bool) -> None:
    """:func:`~datarax.dataset.resume.check_finished_shards`, with its own progress bar."""
    assert job.bounds is not None
    bar = _progress_bar(progress, sum(job.bounds[s + 1] - job.bounds[s] for s in done), 0,
                        desc="checking the finished shards")
    try:
        check_finished_shards(job.dst, rows, job.features, job.bounds, job.on_error, done,
                              None if bar is None else bar.update, workers=workers)
    finally:
        if bar is not None:
            bar.close()


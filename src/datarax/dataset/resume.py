"""Resuming an interrupted write: the run file, and the check of the shards it finished.

A write keeps ``DST/.datarax-partial/run.json`` (:data:`RUN_FILE`): its fingerprint and
what it was made of. ``resume=True`` keeps a finished shard only when it still holds what
the input gives for its rows (:func:`check_finished_shards` re-encodes them and compares,
before anything is written), so an input edited between the runs is refused, naming the
first shard it changed, while a fix to a row of an unfinished shard resumes.

:func:`prepare_destination`: a partial folder without a run file is started again; a run
file of other options with no finished shard is replaced; a finished dataset is kept when
written from the same input and options, else refused naming each difference.

Example:
    >>> import tempfile, os
    >>> from datarax.dataset.writer import write_dataset
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> os.makedirs(os.path.join(dst, PARTIAL_DIR))  # killed before its run file was written
    >>> info, summary = write_dataset([{"x": i} for i in range(4)], dst, shards=2, resume=True)
    >>> info.num_records, summary.shards_resumed
    (4, 0)
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from datarax.dataset.fields import Features, RecordMismatchError
from datarax.dataset.layout import record_encoder
from datarax.dataset.metadata import METADATA_FILE, PARTIAL_DIR, shard_name, write_json
from datarax.dataset.replace import dataset_entries
from datarax.dataset.rows import Rows
from datarax.dataset.write_outcome import ConversionError
from datarax.errors import ConfigError
from datarax.extras import require
from datarax.host.counts import count_words

__all__ = ["RUN_FILE", "check_finished_shards", "finished_run", "finished_shards", "partial_path",
           "prepare_destination", "run_fingerprint", "written_with"]

RUN_FILE = "run.json"
_CHUNK = 256  # shard records read at a time by the check
_READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"  # one pass, in order, this thread
#: what may differ between an interrupted write and its resume (the check covers it)
_MAY_CHANGE = ("on_error",)


def partial_path(dst: str, name: str) -> str:
    """The path of ``name`` in the partial folder of the write into ``dst``."""
    return os.path.join(dst, PARTIAL_DIR, name)


def run_fingerprint(features: Features, shards: int, bounds: tuple[int, ...] | None,
                    on_error: str, rows: Rows) -> tuple[str, dict[str, Any]]:
    """The fingerprint of a write (the metadata's ``extra["fingerprint"]``) and its parts."""
    parts = {"features": features.to_json(), "shards": shards,
             "bounds": list(bounds) if bounds is not None else None, "on_error": on_error,
             "rows": rows.length, "source": rows.description}
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return digest, parts


def _remove(dst: str, names: list[str]) -> None:
    for name in names:
        path = os.path.join(dst, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def _read_run(dst: str) -> dict[str, Any] | None:
    try:
        with open(partial_path(dst, RUN_FILE), encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def prepare_destination(dst: str, fingerprint: str, parts: Mapping[str, Any], *, resume: bool,
                        overwrite: bool) -> bool:
    """Make ``dst`` ready for a write of ``fingerprint`` (see the module docstring); True
    when a finished dataset of the same fingerprint is there (nothing to write)."""
    if resume and overwrite:
        raise ConfigError("write_dataset: pass resume=True (--resume) or overwrite=True "
                          "(--overwrite), not both: resume keeps the finished shards, overwrite "
                          "replaces them.")
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise ConversionError(
            f"'{dst}' is a file; the destination is the folder the dataset is written into "
            "(created when missing). Pick another path.")
    os.makedirs(dst, exist_ok=True)
    ours = dataset_entries(dst)
    saved = _read_run(dst) if PARTIAL_DIR in ours else None
    if overwrite or (ours == [PARTIAL_DIR] and saved is None):
        _remove(dst, ours)  # replaced, or a write killed before its run file: nothing written
        ours = []
    if ours and not resume:
        state = "a finished dataset" if METADATA_FILE in ours else "an unfinished conversion"
        raise ConversionError(
            f"'{dst}' already holds {state}. Pass resume=True (--resume) to finish or keep it, "
            "or overwrite=True (--overwrite) to replace it.")
    if METADATA_FILE in ours and PARTIAL_DIR not in ours:
        with open(os.path.join(dst, METADATA_FILE), encoding="utf-8") as f:
            meta = json.load(f)
        if meta.get("extra", {}).get("fingerprint") == fingerprint:
            return True
        differs = _differences(finished_run(meta, parts), fingerprint, parts, may_change=()) or [
            "its source or on_error may differ: written by an older datarax, it does not "
            "record them"]
        raise ConversionError(
            f"'{dst}' holds a finished dataset written from other records or options ("
            f"{'; '.join(differs)}). Run it with the input and options it was written with (the "
            "values 'then') to keep it as it is, pass overwrite=True (--overwrite) to replace it, or write into "
            "another folder.")
    if ours:
        done = any(n.endswith(".array_record") for n in ours)  # shards finished, of any count
        if saved is None and any(n != PARTIAL_DIR for n in ours):
            raise ConversionError(
                f"'{dst}' holds shards of an unfinished conversion but no record of what they "
                f"were written from ({PARTIAL_DIR}/{RUN_FILE} is missing or damaged), so they "
                "cannot be resumed; pass overwrite=True (--overwrite) to write it again.")
        differs = _differences(saved or {}, fingerprint, parts)
        if differs and done:
            raise ConversionError(
                f"'{dst}' holds an unfinished conversion of other records or options ("
                f"{'; '.join(differs)}); resume it with the input and options it was started "
                "with, or pass overwrite=True (--overwrite) to write it again.")
        if differs:  # no shard was finished: nothing to keep
            _remove(dst, ours)
        elif METADATA_FILE in ours:
            os.remove(os.path.join(dst, METADATA_FILE))
    os.makedirs(os.path.join(dst, PARTIAL_DIR), exist_ok=True)
    write_json(partial_path(dst, RUN_FILE), {"fingerprint": fingerprint, "parts": dict(parts)})
    return False


def written_with(parts: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished dataset's metadata keeps of its run (``extra["written_with"]``): the
    parts of its fingerprint that the rest of the metadata does not hold."""
    return {key: parts[key] for key in ("source", "rows", "shards", "on_error")}


def finished_run(meta: Mapping[str, Any], parts: Mapping[str, Any]) -> dict[str, Any]:
    """The saved run of a finished dataset's metadata ``meta`` (as the run file holds it),
    to compare with this run's ``parts`` (older metadata: what its shards tell, this run's
    value for the rest)."""
    extra = meta.get("extra") if isinstance(meta.get("extra"), Mapping) else {}
    kept = extra.get("written_with")
    if isinstance(kept, Mapping):
        old = dict(kept)
    else:
        shards = meta.get("shards") if isinstance(meta.get("shards"), list) else []
        skipped = meta.get("skipped") if isinstance(meta.get("skipped"), list) else []
        old = {"shards": len(shards) or parts["shards"],
               "on_error": "skip" if skipped else parts["on_error"]}
        if parts["rows"] is not None:
            old["rows"] = sum(int(s.get("records", 0)) for s in shards if isinstance(s, Mapping)
                              ) + len(skipped)
    old = {**parts, **old, "features": meta.get("features")}
    if old["rows"] == parts["rows"] and old["shards"] == parts["shards"]:
        old["bounds"] = parts["bounds"]  # the same rows in the same shards
    return {"fingerprint": extra.get("fingerprint"), "parts": old}


def _differences(saved: Mapping[str, Any], fingerprint: str, parts: Mapping[str, Any],
                 may_change: tuple[str, ...] = _MAY_CHANGE) -> list[str]:
    """What differs between the saved run and this one, in words (empty: nothing that matters)."""
    old = saved.get("parts")
    if not isinstance(old, Mapping):
        return ([] if saved.get("fingerprint") == fingerprint
                else ["the features, shards, row count or source differ"])
    out = []
    if "on_error" not in may_change and old.get("on_error") != parts["on_error"]:
        out.append(f"on_error={old.get('on_error')!r} (--on-error {old.get('on_error')}) then, "
                   f"{parts['on_error']!r} now")
    if old.get("source") != parts["source"]:
        out.append(f"the source was {old.get('source')!r}, now {parts['source']!r}")
    if old.get("rows") != parts["rows"]:
        out.append(f"the input had {old.get('rows')} rows, now {parts['rows']}")
    if old.get("shards") != parts["shards"]:
        out.append(f"shards={old.get('shards')} (--shards {old.get('shards')}) then, "
                   f"{parts['shards']} now")
    if old.get("features") != parts["features"]:
        out.append(_feature_difference(old.get("features") or [], parts["features"]))
    if not out and any(old.get(k) != parts[k] for k in parts if k not in may_change):
        out.append("the shard bounds differ")
    return out


def _feature_difference(old: list[Any], new: list[Any]) -> str:
    before = {f.get("name"): f for f in old if isinstance(f, Mapping)}
    after = {f["name"]: f for f in new}
    if list(before) != list(after):
        return f"the fields were {list(before)}, now {list(after)}"
    name = next(n for n in after if before[n] != after[n])
    return f"the features of field '{name}' were {_field(before[name])}, now {_field(after[name])}"


def _field(spec: Mapping[str, Any]) -> str:
    shape = tuple(spec.get("shape") or ())
    names = f", {len(spec['class_names'])} class names" if spec.get("class_names") else ""
    return f"{spec.get('dtype')} {shape} {spec.get('encoding')}{names}"


def finished_shards(dst: str, shards: int) -> dict[int, dict[str, Any]]:
    """The summaries of the shards of ``dst`` a write finished, by shard index."""
    done = {}
    for s in range(shards):
        name = shard_name(s, shards)
        summary = partial_path(dst, name + ".json")
        if os.path.isfile(os.path.join(dst, name)) and os.path.isfile(summary):
            with open(summary, encoding="utf-8") as f:
                done[s] = json.load(f)
    return done


class _Changed(Exception):
    """Why a finished shard is not what its rows give now, and what to do."""

    def __init__(self, why: str, remedy: str | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.remedy = remedy


def check_finished_shards(dst: str, rows: Rows, features: Features, bounds: tuple[int, ...],
                          on_error: str, done: Mapping[int, Mapping[str, Any]],
                          report: Callable[[int], None] | None = None, *,
                          workers: int = 1) -> None:
    """Refuse to resume when a finished shard no longer holds what ``rows`` gives for its
    rows. ``report(n)`` is called as ``n`` more rows are checked; with ``workers > 1``
    (random-access rows) shards are checked in that many spawned processes.

    Raises:
        ConversionError: naming the first such shard and row, and what to do.
    """
    order = sorted(done)
    jobs = [(dst, rows, features, bounds, on_error, s, list(done[s].get("skipped", [])))
            for s in order]
    if workers > 1 and rows.random_access and len(order) > 1:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(workers, len(order)),
                                                    mp_context=context) as pool:
            futures = [pool.submit(_shard_change, *job) for job in jobs]
            for s, future in zip(order, futures, strict=True):
                changed = future.result()
                if changed is not None:
                    pool.shutdown(cancel_futures=True)
                    raise _refusal(dst, rows, bounds, s, *changed)
                if report is not None:
                    report(bounds[s + 1] - bounds[s])
        return
    for s, job in zip(order, jobs, strict=True):
        changed = _shard_change(*job, report=report)
        if changed is not None:
            raise _refusal(dst, rows, bounds, s, *changed)


def _shard_change(dst: str, rows: Rows, features: Features, bounds: tuple[int, ...],
                  on_error: str, s: int, skipped: list[Mapping[str, Any]],
                  report: Callable[[int], None] | None = None) -> tuple[str, str | None] | None:
    """Why shard ``s`` no longer holds what its rows give, and what to do; None when it does."""
    reader_of = require("array_record.python.array_record_module", extra="arrayrecord",
                        user="write_dataset(resume=True)").ArrayRecordReader
    reader = reader_of(os.path.join(dst, shard_name(s, len(bounds) - 1)), _READER_OPTIONS)
    try:
        _check_shard(reader, rows, features, bounds[s], bounds[s + 1], on_error, skipped, report)
    except _Changed as changed:
        return changed.why, changed.remedy
    finally:
        reader.close()
    return None


def _refusal(dst: str, rows: Rows, bounds: tuple[int, ...], s: int, why: str,
             remedy: str | None) -> ConversionError:
    remedy = remedy or ("Restore the input as it was when that shard was written and resume, "
                        "or pass overwrite=True (--overwrite) to convert it again from the start")
    return ConversionError(
        f"'{dst}' holds an unfinished conversion whose finished shard "
        f"'{shard_name(s, len(bounds) - 1)}' (rows {bounds[s]}..{bounds[s + 1] - 1}) no longer "
        f"matches {rows.description}: {why}. The input changed since that shard was written (or "
        f"the shard did), and resuming would mix records of the two. {remedy}.")


def _check_shard(reader: Any, rows: Rows, features: Features, lo: int, hi: int, on_error: str,
                 skipped: list[Mapping[str, Any]], report: Callable[[int], None] | None) -> None:
    """Raise :class:`_Changed` at the first row that differs from the shard."""
    held = reader.num_records()
    skips = {int(item["row"]): item.get("field") for item in skipped}
    at, chunk, start = 0, [], 0  # next shard record; records read ahead, from ``start``
    row = lo
    encode = record_encoder(features)
    for record in rows.iter_rows(lo, hi):
        try:
            data: bytes | None = encode(record, row)
        except RecordMismatchError as err:
            data = None
            if row not in skips:
                raise _Changed(f"{rows.row_name(row)} was written, and now does not match the "
                               f"features ({err})") from None
            if on_error != "skip":
                raise _Changed(
                    f"{rows.row_name(row)} was left out (on_error='skip' then), and "
                    "on_error='raise' now stops at it", "Resume with on_error='skip' (--on-error "
                    "skip), or pass overwrite=True (--overwrite) to convert it again") from None
            if skips[row] != err.field:
                raise _Changed(f"{rows.row_name(row)} was left out for its field "
                               f"'{skips[row]}', now for '{err.field}'") from None
        if data is not None:
            if row in skips:
                raise _Changed(f"{rows.row_name(row)} was left out (it did not match the "
                               "features), and now is a good record")
            if at - start >= len(chunk):
                start, chunk = at, (reader.read(at, min(held, at + _CHUNK)) if at < held else [])
            if at >= held or chunk[at - start] != data:
                raise _Changed(f"{rows.row_name(row)} gives another record than the shard holds")
            at += 1
        row += 1
        if report is not None and (row - lo) % 512 == 0:
            report(512)
    if row != hi:
        raise _Changed(f"the input now ends at row {row}")
    if at != held:
        raise _Changed(f"the shard holds {count_words(held, 'record')}, its rows give {at}")
    if report is not None:
        report((row - lo) % 512)

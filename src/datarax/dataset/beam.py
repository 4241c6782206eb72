"""Apache Beam: write a PCollection of records as a self-describing ArrayRecord dataset.

:class:`WriteDataset` is a ``PTransform`` writing records (dicts, as for
:func:`~datarax.dataset.writer.write_dataset`) in the same format and with the same crash
safety (shards renamed into place when complete, the metadata file last), placed
deterministically whatever order the runner delivers them in
(:mod:`datarax.dataset.placement`). Files go through Beam's ``FileSystems``, so ``DST``
may be a local folder or a ``gs://`` / ``s3://`` / ``hdfs://`` path the runner can write.
:func:`convert_rows` runs a whole conversion (``convert(..., runner="beam")``).

Example:
    >>> import apache_beam as beam, numpy as np, os, tempfile
    >>> from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    >>> dst = os.path.join(tempfile.mkdtemp(), "ds")
    >>> with beam.Pipeline(runner=FnApiRunner()) as p:
    ...     _ = (p | beam.Create([{"id": i, "x": np.float32([i, i])} for i in range(10)])
    ...            | WriteDataset(dst, shards=2, key="id"))
    >>> from datarax.dataset.metadata import read_metadata
    >>> info = read_metadata(dst)
    >>> info.num_records, len(info.shards), sorted(os.listdir(dst))[-1]
    (10, 2, 'datarax_dataset.json')
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from datarax.dataset.fields import Features, RecordMismatchError
from datarax.dataset.layout import encode_record
from datarax.dataset.lock import folder_lock
from datarax.dataset.metadata import (
    METADATA_FILE,
    PARTIAL_DIR,
    WRITER_OPTIONS,
    DatasetInfo,
    ShardInfo,
    shard_info,
    shard_name,
    write_metadata,
)
from datarax.dataset.placement import (
    RECORDS_PER_SHARD,
    Keyer,
    ShardPlan,
    automatic_shards,
    key_order,
    make_plan,
    record_digest,
)
from datarax.dataset.rows import Rows, as_rows
from datarax.dataset.write_features import name_row_classes, resolve_features
from datarax.dataset.write_outcome import ConversionError, WriteSummary, bad_record_message
from datarax.errors import ConfigError
from datarax.extras import require
from datarax.host.counts import check_count
from datarax.storage.urls import expand_user

beam = require("apache_beam", extra="beam", user="datarax.beam")
from apache_beam.io.filesystem import CompressionTypes  # noqa: E402
from apache_beam.io.filesystems import FileSystems  # noqa: E402

__all__ = ["RECORDS_PER_SHARD", "WriteDataset", "convert_rows", "direct_runner", "record_digest"]

_COPY_CHUNK = 1 << 22
#: rows a worker of convert_rows reads at a time
ROWS_PER_READ = 1000
_RAW = CompressionTypes.UNCOMPRESSED


def _infer(smallest: list[Any], class_names: Mapping[str, Sequence[str]] | None) -> Features:
    """The features of the ``(key, record)`` with the smallest key."""
    if not smallest:
        raise ConversionError("WriteDataset got no records; nothing to write.")
    key, record = smallest[0]
    try:
        return resolve_features([record], None, class_names=class_names)
    except ConversionError as err:
        raise ConversionError(f"the record with key {key!r}: {err}") from err


class _Encode(beam.DoFn):
    """``(key, record) -> (shard, (key, bytes | None, skipped | None))``."""

    def __init__(self, on_error: str, numbered: bool, rows: Rows | None) -> None:
        self.on_error = on_error
        self.numbered = numbered
        self.rows = rows

    def process(self, item: tuple[Any, Any], features: Features, plan: ShardPlan) -> Iterator[Any]:
        key, record = item
        shard = plan.shard_of(key)
        row = key if self.numbered else None
        try:
            data = encode_record(features, record, row=row)
        except RecordMismatchError as err:
            message = str(err)  # as the local writer words it, in errors and in the metadata
            where = message
            if self.rows is not None and row is not None:
                message = message.replace(f"row {row}", self.rows.row_name(row), 1)
                where = f"{self.rows.description}, {message}"
            elif row is None:  # a bytes key (a content digest, by default) in hex
                shown = "0x" + key.hex() if isinstance(key, bytes) else repr(key)
                message = where = f"the record with key {shown}: {message}"
            if self.on_error != "skip":
                raise ConversionError(bad_record_message(
                    where, err, "row" if self.numbered else "record")) from err
            yield shard, (key, None, {"row": row, "field": err.field, "error": message})
            return
        yield shard, (key, data, None)


def _publish(local: str, dst: str, name: str) -> None:
    """Copy the local file to ``dst/name`` (a temporary name, then renamed)."""
    tmp = FileSystems.join(dst, PARTIAL_DIR, f"{name}.{uuid.uuid4().hex}.tmp")
    with open(local, "rb") as src, FileSystems.create(tmp, compression_type=_RAW) as out:
        while chunk := src.read(_COPY_CHUNK):
            out.write(chunk)
    FileSystems.rename([tmp], [FileSystems.join(dst, name)])


class _WriteShard(beam.DoFn):
    """``(shard, items) -> {"index", "shard", "skipped"}``: one finished shard file."""

    def __init__(self, dst: str, numbered: bool) -> None:
        self.dst = dst
        self.numbered = numbered

    def process(self, group: tuple[int, Iterable[Any]], plan: ShardPlan) -> Iterator[dict[str, Any]]:
        index, values = group
        items = sorted((v for v in values if v is not None),
                       key=lambda v: (key_order(v[0]), v[1] or b""))
        if self.numbered:
            assert plan.bounds is not None
            lo, hi = plan.bounds[index], plan.bounds[index + 1]
            rows = [v[0] for v in items]
            if rows != list(range(lo, hi)):
                seen = set()
                repeated = next((r for r in rows if r in seen or seen.add(r)), None)
                raise ConversionError(
                    f"WriteDataset(numbered=True): shard {index} holds rows {lo}..{hi - 1}, got "
                    + (f"row {repeated} twice" if repeated is not None else f"{len(rows)} of them")
                    + "; each row number 0..n-1 must come exactly once.")
        name = shard_name(index, plan.shards)
        writer_class = require("array_record.python.array_record_module", extra="arrayrecord",
                               user="datarax.beam.WriteDataset").ArrayRecordWriter
        with tempfile.TemporaryDirectory(prefix="datarax-beam-", ignore_cleanup_errors=True) as tmp:
            local = os.path.join(tmp, name)
            writer = writer_class(local, WRITER_OPTIONS)
            count = 0
            for _, data, _ in items:
                if data is not None:
                    writer.write(data)
                    count += 1
            writer.close()
            info = shard_info(local, count)
            _publish(local, self.dst, name)
        yield {"index": index, "shard": info.to_json(),
               "skipped": [v[2] for v in items if v[2] is not None]}


def _finish(results: list[dict[str, Any]], dst: str, features: Features, plan: ShardPlan,
            extra: Mapping[str, Any]) -> DatasetInfo:
    """Check every shard came once, then write the metadata (last) and drop the partials."""
    by_index = {r["index"]: r for r in results}
    if sorted(by_index) != list(range(plan.shards)) or len(results) != plan.shards:
        raise ConversionError(
            f"WriteDataset: expected shards 0..{plan.shards - 1} once each, got "
            f"{sorted(r['index'] for r in results)}; no metadata written.")
    ordered = [by_index[s] for s in range(plan.shards)]
    info = DatasetInfo(features, tuple(ShardInfo(**r["shard"]) for r in ordered),
                       tuple(item for r in ordered for item in r["skipped"]), dict(extra))
    with tempfile.TemporaryDirectory(prefix="datarax-beam-", ignore_cleanup_errors=True) as tmp:
        _publish(write_metadata(tmp, info), dst, METADATA_FILE)
    partial = FileSystems.join(dst, PARTIAL_DIR)
    if FileSystems.exists(partial):
        FileSystems.delete([partial])
    return info


def _prepare(dst: str, overwrite: bool) -> None:
    """Refuse a ``dst`` holding a dataset (or a partial one) unless ``overwrite``."""
    ours = [FileSystems.join(dst, METADATA_FILE), FileSystems.join(dst, PARTIAL_DIR)]
    found = [p for p in ours if FileSystems.exists(p)]
    shards = [m.path for r in FileSystems.match([FileSystems.join(dst, "data-*.array_record")])
              for m in r.metadata_list]
    if (found or shards) and not overwrite:
        state = ("a finished dataset" if FileSystems.exists(ours[0])
                 else "an unfinished conversion")
        raise ConversionError(
            f"'{dst}' already holds {state}. Pass overwrite=True (--overwrite) to replace it.")
    if found or shards:
        FileSystems.delete(found + shards)
    if not FileSystems.exists(dst):
        FileSystems.mkdirs(dst)


class WriteDataset(beam.PTransform):
    """Write a PCollection of records as a self-describing ArrayRecord dataset in ``dst``.

    Args:
        dst: the dataset folder (any path Beam's ``FileSystems`` writes).
        features: default: inferred from the record with the smallest key.
        shards: number of shard files; ``None``: one per ``records_per_shard`` records,
            at most 1,024.
        key: a record's stable key (placement and order in its shard): a field name, a
            function of the record (``int``, ``str`` or ``bytes``), or ``None`` for
            :func:`record_digest`.
        numbered: elements are ``(row, record)``, rows ``0 .. n-1``, placed as
            ``write_dataset`` places them (byte-identical shards).
        rows: the :class:`~datarax.dataset.rows.Rows` the rows come from (named in errors).

    ``on_error``, ``overwrite``, ``class_names`` and ``extra`` are as for ``write_dataset``.

    The output is a PCollection of the one :class:`~datarax.dataset.metadata.DatasetInfo`
    written. ``dst`` is checked (or cleared) when the transform is applied to its input.
    """

    def __init__(self, dst: str | os.PathLike[str], *, features: Features | None = None,
                 shards: int | None = None,
                 key: str | Callable[[Mapping[str, Any]], Any] | None = None,
                 numbered: bool = False, on_error: str = "raise", overwrite: bool = False,
                 class_names: Mapping[str, Sequence[str]] | None = None,
                 extra: Mapping[str, Any] | None = None,
                 records_per_shard: int = RECORDS_PER_SHARD, rows: Rows | None = None) -> None:
        super().__init__()
        if shards is not None:  # NumPy ints too
            shards = check_count(shards, "WriteDataset shards", 1, " or None")
        records_per_shard = check_count(records_per_shard, "WriteDataset records_per_shard", 1)
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"WriteDataset on_error must be 'raise' or 'skip', got {on_error!r}.")
        if features is not None and not isinstance(features, Features):
            raise ConfigError(
                f"WriteDataset features must be a datarax.dataset.Features, got "
                f"{type(features).__name__}.")
        if numbered and key is not None:
            raise ConfigError("WriteDataset: numbered=True places records by row; drop key=.")
        json.dumps(dict(extra or {}))  # JSON, or the error now rather than at the end
        self.dst = expand_user(dst)  # a local '~/ds' is the home folder's
        self.features = features
        self.shards = shards
        self.key = key
        self.numbered = numbered
        self.on_error = on_error
        self.overwrite = overwrite
        self.class_names = dict(class_names) if class_names else None
        self.extra = dict(extra or {})
        self.records_per_shard = records_per_shard
        self.rows = rows

    def expand(self, records: Any) -> Any:
        _prepare(self.dst, self.overwrite)
        p = records.pipeline
        keyed = records | "Key" >> beam.Map(Keyer(self.key, self.numbered))
        if self.features is not None:
            feats = resolve_features([{}], self.features, class_names=self.class_names)
            features = p | "Features" >> beam.Create([feats])
        else:
            smallest = beam.combiners.Top.Smallest(1, key=lambda item: key_order(item[0]))
            features = (keyed | "Smallest" >> smallest
                        | "Infer" >> beam.Map(_infer, self.class_names))
        if self.numbered or self.shards is None:
            count = keyed | "Count" >> beam.combiners.Count.Globally()
            plan = count | "Plan" >> beam.Map(make_plan, self.shards, self.numbered,
                                              self.records_per_shard)
        else:
            plan = p | "Plan" >> beam.Create([ShardPlan(self.shards, None)])
        encoded = keyed | "Encode" >> beam.ParDo(
            _Encode(self.on_error, self.numbered, self.rows),
            beam.pvalue.AsSingleton(features), beam.pvalue.AsSingleton(plan))
        every = plan | "EveryShard" >> beam.FlatMap(lambda pl: [(s, None) for s in range(pl.shards)])
        written = ((encoded, every) | "Join" >> beam.Flatten()
                   | "ByShard" >> beam.GroupByKey()
                   | "WriteShards" >> beam.ParDo(_WriteShard(self.dst, self.numbered),
                                                 beam.pvalue.AsSingleton(plan)))
        return (written | "Shards" >> beam.combiners.ToList()
                | "Metadata" >> beam.Map(_finish, self.dst, beam.pvalue.AsSingleton(features),
                                         beam.pvalue.AsSingleton(plan), self.extra))


def direct_runner() -> Any:
    """Beam's DirectRunner engine for this machine (``FnApiRunner``); unlike
    ``DirectRunner`` by name, it never tries to download the Prism runner."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return FnApiRunner()


def _read_chunk(bounds: tuple[int, int], rows: Rows) -> Iterator[tuple[int, Any]]:
    lo, hi = bounds
    row = lo
    for record in rows.iter_rows(lo, hi):
        yield row, record
        row += 1
    if row != hi:
        raise ConversionError(f"{rows.description} ended at row {row}, its length said {hi} or more.")


def _beam_error(err: BaseException) -> Exception:
    """The runner's failure as datarax's own error and message."""
    text = str(err)
    kind = type(err) if isinstance(err, (ConversionError, ConfigError)) else None
    for cls in (ConversionError, ConfigError):
        marker = f"{cls.__name__}: "
        if kind is None and marker in text:
            kind = cls
            text = text[text.rindex(marker) + len(marker):].strip().splitlines()[0]
    if kind is None:
        return ConversionError(f"the Beam pipeline failed: {type(err).__name__}: {text}")
    return kind(text.split(" [while running")[0])


def convert_rows(
    records: Any,
    dst: str | os.PathLike[str],
    *,
    features: Features | None = None,
    shards: int | None = None,
    on_error: str = "raise",
    resume: bool = False,
    overwrite: bool = False,
    class_names: Mapping[str, Sequence[str]] | None = None,
    extra: Mapping[str, Any] | None = None,
    beam_options: Sequence[str] = (),
) -> tuple[DatasetInfo, WriteSummary]:
    """Convert random-access ``records`` (as for :func:`~datarax.dataset.writer.write_dataset`)
    into a dataset in ``dst`` on Apache Beam.

    The shards are byte-identical to ``write_dataset``'s with the same ``features`` and
    ``shards``. ``beam_options`` are Beam pipeline options; with no runner, or
    ``--runner=DirectRunner``, it runs here on :func:`direct_runner`. ``resume=True`` is a
    ConfigError (Beam runners retry failed work themselves), as are records that cannot be
    read by row.
    """
    with folder_lock(dst, error=ConversionError, what="this conversion"):  # one writer per folder
        from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

        started = time.perf_counter()
        if resume:
            raise ConfigError(
                "convert with runner='beam' does not resume: the Beam runner retries failed work "
                "itself. Run it again with overwrite=True (--overwrite), or use runner='local'.")
        rows = as_rows(records)
        if not rows.random_access or rows.length is None:
            raise ConfigError(
                f"convert with runner='beam' reads rows in parallel workers, which "
                f"{rows.description} does not allow (it is read once, in order); use "
                "runner='local'.")
        dst = expand_user(dst)
        name_row_classes(rows, features, class_names)
        feats = resolve_features(rows, features, class_names=class_names, skip=on_error == "skip")
        n = rows.length
        if n == 0:
            raise ConversionError(f"{rows.description} holds no records; nothing to write.")
        count = shards if shards is not None else automatic_shards(n, RECORDS_PER_SHARD)
        chunks = [(lo, min(n, lo + ROWS_PER_READ)) for lo in range(0, n, ROWS_PER_READ)]
        options = PipelineOptions(list(beam_options))
        runner_name = options.view_as(StandardOptions).runner
        runner = direct_runner() if runner_name in (None, "DirectRunner", "direct") else None
        try:
            with beam.Pipeline(runner=runner, options=options) as p:
                _ = (p | "Chunks" >> beam.Create(chunks)
                     | "Spread" >> beam.Reshuffle()
                     | "Read" >> beam.FlatMap(_read_chunk, rows)
                     | "Write" >> WriteDataset(dst, features=feats, shards=count, numbered=True,
                                               on_error=on_error, overwrite=overwrite,
                                               extra={**dict(extra or {}), "runner": "beam"},
                                               rows=rows))
        except Exception as err:  # noqa: BLE001 - the runner wraps worker errors in its own types
            raise _beam_error(err) from err
        with FileSystems.open(FileSystems.join(dst, METADATA_FILE), compression_type=_RAW) as f:
            info = DatasetInfo.from_json(json.load(io.TextIOWrapper(f, encoding="utf-8")),
                                         where=FileSystems.join(dst, METADATA_FILE))
        return info, WriteSummary(info.num_records, sum(s.bytes for s in info.shards),
                                  len(info.shards), 0, len(info.skipped),
                                  time.perf_counter() - started)

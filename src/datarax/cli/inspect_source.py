"""``datarax inspect SOURCE``: the source, its files, record count, element spec and first
records; ``--grid`` draws a field as an image grid or a histogram."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from datarax.cli.targets import Target, endless_reason, length_of
from datarax.core.batch import batch_length, record_at
from datarax.core.errors import ConfigError
from datarax.core.spec import TextSpec, field_spec
from datarax.dataset.metadata import FORMAT_VERSION, DatasetInfo
from datarax.host.counts import count_words

EXCERPT = 60


def describe_spec(spec: Any) -> str:
    """``uint8 (8, 8, 3)`` for an array field, ``text ()`` for a text field.

    Example:
        >>> import jax, numpy as np
        >>> describe_spec(jax.ShapeDtypeStruct((8, 8, 3), np.uint8))
        'uint8 (8, 8, 3)'
    """
    if isinstance(spec, str):  # already described (a field of variable shape)
        return spec
    if isinstance(spec, TextSpec):
        return f"text {tuple(spec.shape)}"
    if isinstance(spec, jax.ShapeDtypeStruct):
        return f"{np.dtype(spec.dtype).name} {tuple(spec.shape)}"
    return repr(spec)


def describe_value(value: Any) -> str:
    """One record's field: dtype, shape, min and max of an array; a text excerpt.

    Example:
        >>> describe_value(np.array([[0, 3], [7, 1]], np.uint8))
        'uint8 (2, 2) min 0 max 7'
        >>> describe_value(np.int32(4))
        'int32 4'
        >>> describe_value("a fine film")
        "'a fine film'"
    """
    if isinstance(field_spec(value), TextSpec):
        return _describe_text(value)
    array = np.asarray(value)
    if array.ndim == 0:
        return f"{array.dtype.name} {array.item()}"
    if array.size == 0:
        return f"{array.dtype.name} {array.shape} empty"
    return f"{array.dtype.name} {array.shape} min {array.min()} max {array.max()}"


def _describe_text(value: Any) -> str:
    """An excerpt of one string (``str``, ``bytes``, a 0-d text array) or of several."""
    if np.ndim(value):
        return repr(np.asarray(value).tolist())[:EXCERPT]
    text = value.item() if isinstance(value, np.ndarray) else value
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)  # np.str_ too
    excerpt = text if len(text) <= EXCERPT else text[: EXCERPT - 3] + "..."
    return repr(excerpt) + ("" if len(text) <= EXCERPT else f" ({len(text)} chars)")


def host_batches(target: Target, batch_size: int) -> Iterator[dict[str, Any]]:
    """One epoch of host batches: the ``py:`` pipeline's, or a stage-less one's."""
    from datarax.pipeline import Pipeline

    pipeline = target.pipeline
    if pipeline is None:
        pipeline = Pipeline(source=target.source, stages=[], batch_size=batch_size)
    for batch in pipeline:
        yield {k: (v if isinstance(v, list) else np.asarray(v)) for k, v in batch.items()}


def records_in(batch: dict[str, Any], pipeline: Any = None) -> int:
    """Real records of ``batch``: those marked ``valid`` under ``pad_remainder``, else all.

    Example:
        >>> records_in({"x": np.zeros(4)})
        4
    """
    plan = getattr(pipeline, "plan", None)
    if getattr(plan, "pad_remainder", False) and "valid" in batch:
        return int(np.sum(np.asarray(batch["valid"])))
    return batch_length(batch)


def features_spec(features: Any) -> dict[str, Any]:
    """A dataset's per-record spec from its metadata (variable shapes described in words).

    Example:
        >>> from datarax.dataset import Features, Field
        >>> spec = features_spec(Features((Field("ids", "int32", (None,), "varlen"),
        ...                                Field("label", "int32", (), "raw"))))
        >>> {k: describe_spec(v) for k, v in spec.items()}
        {'ids': 'int32 (None,) varlen', 'label': 'int32 ()'}
    """
    out: dict[str, Any] = {}
    for f in features.fields:
        if f.encoding == "utf8":
            out[f.name] = TextSpec(tuple(d for d in f.shape if d is not None))
        elif None in f.shape:
            out[f.name] = f"{f.dtype} {f.shape} {f.encoding}"
        else:
            out[f.name] = jax.ShapeDtypeStruct(tuple(int(d) for d in f.shape), np.dtype(f.dtype))
    return out


def decode_one_by_one(source: Any, features: Any, n: int) -> list[dict[str, Any]]:
    """The first ``n`` records of a dataset source, each decoded alone."""
    from datarax.cli.targets import decode_alone
    from datarax.core.errors import RecordError

    out = []
    for index, raw in enumerate(_read_first(source, n)):
        try:
            out.append(decode_alone(features, raw))
        except RecordError as err:
            path, within = source.locate(index)
            raise RecordError(f"record {within} of '{path}' does not match its dataset's "
                              f"metadata: {err}", path=path, index=within) from err
    return out


def _read_first(source: Any, n: int) -> list[bytes]:
    """The raw records ``0 .. n-1``; an unreadable one is a RecordError naming it."""
    from datarax.core.errors import RecordError
    from datarax.sources.decoded_records import describe_cause
    from datarax.sources.skip_ledger import record_place

    try:
        return source.read_records(list(range(n))) if n else []
    except RecordError:
        raise
    except Exception:  # noqa: BLE001 - find the record (the read of all of them failed)
        pass
    out = []
    for index in range(n):
        try:
            out.extend(source.read_records([index]))
        except RecordError:
            raise
        except Exception as err:  # noqa: BLE001 - the reader's own error, named by record
            path, within = source.locate(index)
            raise RecordError(
                f"{type(source).__name__}: cannot read {record_place(path, within)}: "
                f"{describe_cause(err)}. Fix or regenerate the file.",
                path=path, index=within) from err
    return out


def run_inspect(
    target: Target,
    *,
    records: int = 3,
    grid: str | None = None,
    field: str | None = None,
    grid_records: int = 16,
    count: bool = True,
    as_json: bool = False,
) -> int:
    """Print the report (text, or one JSON object) and write the grid; exit status 0."""
    if records < 0:
        raise ConfigError(f"--records must be >= 0, got {records}.")
    if grid_records < 1:
        raise ConfigError(f"--grid-records must be >= 1, got {grid_records}.")
    source = target.source
    info = getattr(source, "dataset_info", None)
    if not isinstance(info, DatasetInfo):
        info = target.info
    # a dataset the batch decoder refuses (a field of variable shape): read record by record
    features = info.features if target.per_record is not None and info is not None else None
    one_by_one = features is not None
    spec = features_spec(features) if features is not None else source.element_spec()
    if grid is not None and not one_by_one:  # one by one: chosen once images are padded
        field = _grid_field(spec, field)
    length = length_of(source)
    endless = endless_reason(source)
    count = count and endless is None  # a pass that never ends is not counted
    wanted = max(records, grid_records if grid is not None else 0)
    first: list[dict[str, Any]] = []
    seen = 0
    if features is not None:  # no batch for this dataset: its first records, one at a time
        first = decode_one_by_one(source, features, min(wanted, length or 0))
    else:
        for batch in host_batches(
            target, batch_size=max(1, min(wanted or 1, 256)) if length is not None else 256
        ):
            n = batch_length(batch)
            first.extend(record_at(batch, i) for i in range(min(n, wanted - len(first))))
            seen += n
            if len(first) >= wanted and (length is not None or not count):
                break
    counted = length is None and count
    report: dict[str, Any] = {
        "source": type(source).__name__,
        "target": target.spec,
        "pipeline": target.pipeline is not None,
        target.where_label: list(target.where),
        "records": length if length is not None else (seen if counted else None),
        "records_counted_by_reading": counted,
        "element_spec": {k: describe_spec(v) for k, v in spec.items()},
    }
    if one_by_one:
        report["decoded_one_by_one"] = target.per_record
    batch_spec = getattr(target.pipeline, "element_spec", None)
    if callable(batch_spec):  # a Pipeline says what its stages hand out, without reading
        report["pipeline_spec"] = {k: describe_spec(v) for k, v in batch_spec().items()}
    order = list(report.get("pipeline_spec", report["element_spec"]))  # fields in spec order
    report["first_records"] = [
        {k: _with_class_name(info, k, record[k], describe_value(record[k]))
         for k in _in_order(record, order)}
        for record in first[:records]
    ]
    if info is not None:  # a datarax dataset: what its metadata says
        report["metadata"] = dataset_summary(info)
    picture = None
    if grid is not None:
        drawn, drawn_spec = _padded_images(first, spec, features) if one_by_one else (first, spec)
        if one_by_one:
            field = _grid_field(drawn_spec, field)
        picture = _write_picture(drawn, drawn_spec, field, grid, info)
        report["grid"] = {**picture, "path": grid}
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"source: {report['source']}" + (" (from a Pipeline)" if report["pipeline"] else ""))
    if target.where_label == "files" and target.where:
        print(f"files: {len(target.where)}")
        for path in target.where:
            print(f"  {path}")
    elif target.where:
        print(f"{target.where_label}: {target.where[0]}")
    if report["records"] is None:
        print(f"records: unknown ({endless or 'a stream; run without --no-count to count it'})")
    else:
        how = " (counted by reading the stream)" if counted else ""
        print(f"records: {report['records']}{how}")
    if "metadata" in report:
        meta = report["metadata"]
        print(f"dataset: {count_words(meta['records'], 'record')} in "
              f"{count_words(meta['shards'], 'shard')} (format version {meta['format_version']}), "
              f"{count_words(meta['skipped'], 'row')} skipped at conversion")
        _print_fields("features:", meta["features"])
    _print_fields("element spec (no batches: a field has a variable shape, so the reader needs "
                  "decode=; records below decoded one by one):" if one_by_one else "element spec:",
                  report["element_spec"])
    if "pipeline_spec" in report:
        _print_fields("after the stages:", report["pipeline_spec"])
    if report["first_records"]:
        print(f"first {count_words(len(report['first_records']), 'record')}:")
        for i, record in enumerate(report["first_records"]):
            print(f"  [{i}]")
            for name, text in record.items():
                print(f"    {name}: {text}")
    if picture is not None:
        captions = f", captioned by '{picture['captions']}'" if picture.get("captions") else ""
        print(
            f"wrote {picture['kind']} of '{picture['field']}' "
            f"({count_words(picture['records'], 'record')}{captions}) to {grid}"
        )
    return 0


def _print_fields(title: str, fields: dict[str, str]) -> None:
    print(title)
    for name, text in fields.items():
        print(f"  {name}: {text}")


def _with_class_name(info: Any, name: str, value: Any, text: str) -> str:
    """``text`` with the class name of a label ``value`` when the metadata names classes."""
    names = info.features[name].class_names if info is not None and name in info.features else None
    value = np.asarray(value)
    if names and value.ndim == 0 and value.dtype.kind in "iu" and 0 <= int(value) < len(names):
        return f"{text} ({names[int(value)]})"
    return text


def _padded_images(first: list[dict[str, Any]], spec: dict[str, Any],
                   features: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``first`` and ``spec`` with each image field of several sizes padded (bottom, right)
    to its largest image, all shrunk by one factor to fit a grid's tile."""
    varied = [f for f in features.fields if f.encoding in ("png", "jpeg") and None in f.shape]
    if not varied or not first:
        return first, spec
    from datarax.cli.charts import MAX_TILE, shrunk

    first, spec = [dict(r) for r in first], dict(spec)
    for f in varied:
        height = max(np.shape(r[f.name])[0] for r in first)
        width = max(np.shape(r[f.name])[1] for r in first)
        factor = min(1.0, MAX_TILE / max(height, width))
        if factor < 1.0:
            height, width = max(1, round(height * factor)), max(1, round(width * factor))
        for r in first:
            image = shrunk(np.asarray(r[f.name]), factor)
            padded = np.zeros((height, width, *image.shape[2:]), image.dtype)
            padded[:image.shape[0], :image.shape[1]] = image
            r[f.name] = padded
        spec[f.name] = jax.ShapeDtypeStruct((height, width, *f.shape[2:]), np.dtype(f.dtype))
    return first, spec


def _in_order(record: dict[str, Any], order: list[str]) -> list[str]:
    """The record's fields: those of ``order`` first, in that order, then the rest sorted."""
    return [k for k in order if k in record] + sorted(k for k in record if k not in order)


def _grid_field(spec: dict[str, Any], field: str | None) -> str:
    numeric = {
        k: v
        for k, v in spec.items()
        if isinstance(v, jax.ShapeDtypeStruct) and np.dtype(v.dtype).kind in "uifb"
    }
    if field is not None:
        if field not in spec:
            raise ConfigError(
                f"--field '{field}' is not a field of this source; fields: {sorted(spec)}."
            )
        if field not in numeric:
            raise ConfigError(
                f"--field '{field}' is {describe_spec(spec[field])}; "
                "--grid draws numeric fields only."
            )
        return field
    from datarax.cli.charts import is_image_field

    for name, s in numeric.items():
        if is_image_field(s.shape, s.dtype):
            return name
    if numeric:
        return next(iter(numeric))
    raise ConfigError(f"--grid needs a numeric field, and this source has none: {sorted(spec)}.")


def dataset_summary(info: Any) -> dict[str, Any]:
    """A datarax dataset's metadata for the report: features, counts, class names."""
    features = {}
    for f in info.features.fields:
        text = f"{f.dtype} {f.shape} {f.encoding}"
        if f.class_names is not None:
            text += f", {len(f.class_names)} classes: " + ", ".join(f.class_names[:10]) + (
                ", ..." if len(f.class_names) > 10 else "")
            empty = info.extra.get("empty_classes") if f.name == "label" else None
            if empty:  # an image folder's class folders that held no image
                text += f"; without records: {', '.join(empty[:10])}" + (
                    ", ..." if len(empty) > 10 else "")
        features[f.name] = text
    return {"records": info.num_records, "shards": len(info.shards),
            "format_version": FORMAT_VERSION, "skipped": len(info.skipped),
            "features": features}


def caption_field(info: Any, first: list[dict[str, Any]]) -> str | None:
    """The first field with class names that the records hold as integers, or None."""
    if info is None or not first:
        return None
    for f in info.features.fields:
        if f.class_names and f.name in first[0] and np.asarray(first[0][f.name]).ndim == 0:
            return f.name
    return None


def _write_picture(
    first: list[dict[str, Any]], spec: dict[str, Any], field: str, path: str,
    info: Any = None,
) -> dict[str, Any]:
    from datarax.cli import charts

    if not first:
        raise ConfigError("--grid: the source handed out no records to draw.")
    values = np.stack([np.asarray(r[field]) for r in first])
    s = spec[field]
    if not charts.is_image_field(s.shape, s.dtype):
        charts.write_histogram(values, field, path)
        return {"kind": "histogram", "field": field, "records": len(first)}
    label = caption_field(info, first) if values.dtype == np.uint8 else None
    captions = None
    if label is not None:
        names = info.features[label].class_names
        captions = [names[k] if 0 <= (k := int(np.asarray(r[label]))) < len(names) else str(k)
                    for r in first]
    height, width = charts.write_image_grid(values, path, captions)
    picture = {"kind": "image grid", "field": field, "records": len(first), "height": height,
               "width": width}
    if captions is not None:
        picture.update(captions=label, caption_texts=captions)
    return picture

"""Opening a TFDS split for random access (``tfds.data_source``), and the errors that
name what is wrong: unknown dataset or split, not prepared (or offline), prepared only
as TFRecord."""

from __future__ import annotations

import importlib.util
from typing import Any

from datarax.core.errors import DataraxError, RecordError
from datarax.core.extras import missing_extra, require
from datarax.sources._dataset_config import empty_split
from datarax.sources.tfds.config import TFDSConfig
from datarax.sources.tfds.download import (
    check_download_reachable,
    is_network_error,
    offline_error,
)


#: modules TFDS imports lazily that the ``tfds`` extra installs (pyproject.toml).
TFDS_EXTRA_MODULES = ("tensorflow_datasets", "array_record", "importlib_resources", "PIL")


def tfds_module(where: str) -> Any:
    return require("tensorflow_datasets", extra="tfds", user=where)


def tensorflow_installed() -> bool:
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


class TFRecordOnly(Exception):
    """The split exists only as TFRecord files (no random access)."""


def open_builder(tfds: Any, config: TFDSConfig, where: str) -> Any:
    try:
        return tfds.builder(config.name, data_dir=config.data_dir)
    except tfds.core.registered.DatasetNotFoundError as err:
        raise _unknown_name(config, where) from err


def _unknown_name(config: TFDSConfig, where: str) -> DataraxError:
    place = f" or in data_dir={config.data_dir!r}" if config.data_dir else ""
    return DataraxError(
        f"{where}: TFDS has no dataset named {config.name!r} (not in its catalog{place}). "
        "Check the spelling (see tfds.list_builders()), or pass data_dir= pointing at the "
        "folder holding the prepared dataset."
    )


def open_data_source(config: TFDSConfig, where: str) -> tuple[Any, Any]:
    """``(random-access data source, DatasetInfo)`` of the configured split."""
    tfds = tfds_module(where)
    kwargs: dict[str, Any] = {
        "split": config.split,
        "data_dir": config.data_dir,
        "download": config.download,
    }
    if config.download:
        kwargs["download_and_prepare_kwargs"] = {"file_format": "array_record"}
        check_download_reachable(open_builder(tfds, config, where), config, where)
    try:
        source = tfds.data_source(config.name, **kwargs)
    except tfds.core.registered.DatasetNotFoundError as err:
        raise _unknown_name(config, where) from err
    except NotImplementedError as err:
        if not config.download and not open_builder(tfds, config, where).is_prepared():
            raise not_prepared(config, where) from err
        raise TFRecordOnly(str(err)) from err
    except (ValueError, KeyError) as err:
        if "split" in str(err).lower():
            raise unknown_split(tfds, config, where) from err
        if _split_is_empty(tfds, config, where):
            raise empty_split(config, where) from err
        if "slice" in str(err).lower():  # TFDS refuses a slice reaching past the split
            raise DataraxError(
                f"{where}: cannot slice split {config.split!r} of dataset {config.name!r}: "
                f"{err} TFDS slices must lie within the split: end the slice at its size "
                "or before (or use percent slices, e.g. 'train[:80%]')."
            ) from err
        raise
    except AssertionError as err:  # TFDS asserts on data missing with download=False
        raise DataraxError(
            f"{where}: dataset {config.name!r} is not prepared in data_dir="
            f"{config.data_dir!r} and download=False: {err}"
        ) from err
    except ImportError as err:  # a package TFDS imports lazily, which the extra installs
        if (err.name or "").split(".")[0] not in TFDS_EXTRA_MODULES:
            raise
        raise missing_extra(
            err.name.split(".")[0], extra="tfds", user=where, via="tensorflow_datasets"
        ) from err
    except Exception as err:
        if config.download and is_network_error(err):
            raise offline_error(config, where, None, err) from err
        raise
    try:
        len(source)
    except ValueError as err:  # a slice that ends before it starts ('train[4:2]')
        raise empty_split(config, where) from err
    info = open_builder(tfds, config, where).info
    check_image_decoding(tfds, info.features, where)
    return source, info


def check_image_decoding(tfds: Any, features: Any, where: str) -> None:
    """TFDS decodes Image (and Video) features of a data source with Pillow or OpenCV;
    with neither installed, say so now (Pillow, from the ``tfds`` extra) rather than
    fail each record as if it were bad."""
    pending, has_images = [features], False
    while pending and not has_images:
        feature = pending.pop()
        has_images = isinstance(feature, tfds.features.Image)
        pending.extend(feature.values() if isinstance(feature, tfds.features.FeaturesDict)
                       else [feature.feature] if isinstance(feature, tfds.features.Sequence)
                       else [])
    if has_images and not any(importlib.util.find_spec(m) for m in ("PIL", "cv2")):
        raise missing_extra("PIL", extra="tfds", user=where, via="tensorflow_datasets")


def not_prepared(config: TFDSConfig, where: str) -> DataraxError:
    """The dataset has no prepared copy where it was looked for (``download=False``)."""
    place = f"data_dir={config.data_dir!r}" if config.data_dir else "the default data_dir"
    return DataraxError(
        f"{where}: dataset {config.name!r} is not prepared in {place}, and download=False "
        "reads only what is prepared. Point data_dir= at the folder holding it, or prepare "
        f"it there (tfds.builder({config.name!r}).download_and_prepare("
        "file_format='array_record'))."
    )


def _split_is_empty(tfds: Any, config: TFDSConfig, where: str) -> bool:
    try:
        return int(open_builder(tfds, config, where).info.splits[config.split].num_examples) == 0
    except Exception:
        return False


def unknown_split(tfds: Any, config: TFDSConfig, where: str) -> DataraxError:
    info = open_builder(tfds, config, where).info
    names = sorted(str(s) for s in info.splits.keys())
    if not names and not config.download:  # no split at all: nothing prepared there
        return not_prepared(config, where)
    return DataraxError(
        f"{where}: split {config.split!r} is not in dataset {config.name!r}; its splits "
        f"are {names}."
    )


def tfrecord_message(config: TFDSConfig, where: str, *, eager: bool) -> str:
    convert = (
        f"convert it to ArrayRecord, which datarax reads without TensorFlow (`tfds "
        f"convert_format --dataset_dir=<data_dir>/{config.name}/<version> "
        "--out_file_format=array_record`), or prepare it afresh with "
        f"tfds.builder({config.name!r}).download_and_prepare(file_format='array_record')"
    )
    prepared = f"{where}: dataset {config.name!r} is prepared only as TFRecord, which has no "
    if not tensorflow_installed():
        return (
            f"{prepared}random access and needs TensorFlow to read, and TensorFlow is not "
            f"installed. Either {convert}, or install TensorFlow (pip install tensorflow)"
            + (" so TFDSEagerSource can read TFRecord." if eager else " and use TFDSEagerSource.")
        )
    return (f"{prepared}random access. Either {convert}, or use TFDSEagerSource, which reads "
            "TFRecord through TensorFlow.")


def record_error(err: RecordError, config: TFDSConfig, where: str, hint: str = "") -> RecordError:
    """The reader's error, worded for a TFDS split (``hint``: what to do, if anything)."""
    cause = err.__cause__
    if cause is None or isinstance(cause, DataraxError):  # our own wording: no type name
        detail = str(cause if cause is not None else err)
    else:
        detail = f"{type(cause).__name__}: {cause}"
    return RecordError(
        f"{where}: cannot read record {err.index} of split {config.split!r} of dataset "
        f"{config.name!r}: {detail.rstrip('.')}.{hint}",
        path=err.path,
        index=err.index,
    )


SKIP_HINT = (
    " To drop bad records instead, construct the source with on_error='skip' (they are "
    "counted and reported)."
)

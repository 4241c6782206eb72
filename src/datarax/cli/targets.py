"""What a ``SOURCE`` argument of the command line names, opened as a datarax source.

The scheme decides (``hf:``, ``tfds:``, ``py:``; see docs/cli.md); anything without one,
``scheme://`` URLs included, is ArrayRecord.

Example:
    >>> split_spec("hf:stanfordnlp/sst2:train[:10%]")
    ('hf', 'stanfordnlp/sst2', 'train[:10%]')
    >>> split_spec("data/train-*.array_record")
    ('arrayrecord', 'data/train-*.array_record', None)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from datarax.core.data_source import DataSourceModule
from datarax.core.errors import ConfigError
from datarax.storage.urls import is_remote

SCHEMES = ("hf", "tfds", "py")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(?!//)")


@dataclasses.dataclass
class Target:
    """An opened ``SOURCE`` (a context manager closing the source)."""

    spec: str
    kind: str
    source: DataSourceModule
    pipeline: Any | None = None
    where: list[str] = dataclasses.field(default_factory=list)
    where_label: str = "files"
    info: Any | None = None  # a datarax dataset's DatasetInfo, when SOURCE names one
    per_record: str | None = None  # why a dataset's batch decoder refused it (see open_target)

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.source.close()


def as_cli_options(message: str) -> str:
    """``message`` with config spellings (``exclude_keys``, ``decode_images(field)``) as options.

    Example:
        >>> as_cli_options("drop it (exclude_keys=('tokens',)).")
        'drop it (--exclude tokens).'
    """
    message = re.sub(r"Pass its image field: decode_images\('([^']*)', \.\.\.\)",
                     r"Pass --field \1", message)
    message = message.replace("Pass one of its image fields", "Pass --field with one of its image "
                              "fields").replace(" as decode_images' first argument", "")
    message = re.sub(r"\(exclude_keys=\(\s*'([^']*)',?\s*\)\)", r"(--exclude \1)", message)
    message = message.replace("(exclude_keys)", "(--exclude FIELD)")
    message = message.replace("include_keys/exclude_keys leave", "--exclude leaves")
    return message.replace("exclude_keys names", "--exclude names")


def convert_hint(spec: str) -> str:
    """What to do with a SOURCE that names data ``convert`` reads; ``""`` otherwise.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "reviews.jsonl")
        >>> open(path, "w").close()
        >>> convert_hint(path) == (f" It is not ArrayRecord: convert it first (datarax convert "
        ...                        f"{path} DST, then inspect DST), or open it as hf:{path}.")
        True
        >>> convert_hint("missing.jsonl")
        ''
    """
    path = spec.rstrip("/")
    if is_remote(path) or ":" in path or not (os.path.isdir(path) or os.path.isfile(path)):
        return ""
    from datarax.dataset.metadata import METADATA_FILE

    from datarax.dataset.conversion import TABLE_SUFFIXES
    from datarax.dataset.image_folder import IMAGE_SUFFIXES, is_class_folder

    lower = path.lower()

    def up(levels: int) -> str:
        folder = os.path.abspath(path)
        for _ in range(levels):
            folder = os.path.dirname(folder)
        return folder if os.path.isabs(path) else os.path.relpath(folder)

    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, METADATA_FILE)) or not os.listdir(path):
            return ""  # a dataset (its own error says what is wrong), or nothing to convert
        names = os.listdir(path)
        if any(n.endswith(".array_record") for n in names):
            return f" It holds ArrayRecord files: give them as a glob, '{path}/*.array_record'."
        if any(n.lower().endswith(IMAGE_SUFFIXES) for n in names) and not any(
                is_class_folder(path, n) for n in names):  # one class of an image folder
            return (f" It holds images but no class folders: convert the image folder it is a "
                    f"class of (datarax convert {up(1)} DST, then inspect DST).")
    elif lower.endswith(IMAGE_SUFFIXES):
        return (f" It is an image: convert the image folder it is in (datarax convert {up(2)} DST "
                f"for {up(2)}/<class>/<image>, then inspect DST).")
    elif not lower.endswith((*TABLE_SUFFIXES, ".npy", ".npz")):
        return ""
    also = f", or open it as hf:{path}" if lower.endswith(tuple(TABLE_SUFFIXES)) else ""
    return (f" It is not ArrayRecord: convert it first (datarax convert {path} DST, then "
            f"inspect DST){also}.")


def split_spec(spec: str) -> tuple[str, str, str | None]:
    """``(kind, name, split)`` of a SOURCE argument (no file is touched)."""
    match = _SCHEME.match(spec)
    if match is None or len(match.group(1)) == 1:  # no scheme (a Windows drive letter is a path)
        if not spec:
            raise ConfigError(
                "SOURCE is empty; give an ArrayRecord path or glob, hf:, tfds: or py:."
            )
        return "arrayrecord", spec, None
    scheme, rest = match.group(1).lower(), spec[match.end() :]
    if scheme not in SCHEMES:
        raise ConfigError(
            f"unknown SOURCE scheme '{match.group(1)}:' in '{spec}'; use an ArrayRecord path, "
            "glob or URL (s3://bucket/data, gs://...), hf:NAME[:SPLIT], tfds:NAME[:SPLIT] or "
            "py:MODULE:FUNCTION."
        )
    if scheme == "py":
        module, sep, function = rest.rpartition(":")
        if not sep or not module or not function.isidentifier():
            raise ConfigError(
                f"'{spec}' is not py:MODULE:FUNCTION (e.g. py:my_pipelines:train or "
                "py:path/to/file.py:train)."
            )
        return "py", module, function
    name, split = _name_and_split(rest)
    if not name:
        raise ConfigError(f"'{spec}' names no dataset; write {scheme}:NAME[:SPLIT].")
    return scheme, name, split


def _name_and_split(rest: str) -> tuple[str, str | None]:
    """Split ``NAME[:SPLIT]`` at the last ``:`` outside brackets and not of a ``://``."""
    depth = 0
    for i in range(len(rest) - 1, -1, -1):
        char = rest[i]
        if char == "]":
            depth += 1
        elif char == "[":
            depth -= 1
        elif char == ":" and depth == 0 and not rest.startswith("//", i + 1):
            return rest[:i], rest[i + 1 :] or None
    return rest, None


def load_callable(reference: str, *, what: str) -> Callable[..., Any]:
    """The function named by ``module:function`` or ``path/to/file.py:function``."""
    module_name, sep, function = reference.rpartition(":")
    if not sep or not module_name or not function.isidentifier():
        raise ConfigError(f"{what} '{reference}' is not MODULE:FUNCTION (e.g. my_codecs:decode).")
    module = _import(module_name, what=what)
    fn = getattr(module, function, None)
    if fn is None:
        raise ConfigError(f"{what}: module '{module_name}' has no attribute '{function}'.")
    if not callable(fn):
        raise ConfigError(
            f"{what}: '{module_name}:{function}' is a {type(fn).__name__}, not a function."
        )
    return fn


def _import(module_name: str, *, what: str) -> Any:
    local = os.path.join(os.getcwd(), module_name + ".py")
    loaded = getattr(sys.modules.get(module_name), "__file__", None)
    if os.path.isfile(local) and loaded is not None and loaded != local:
        module_name = local  # not an imported module of that name (codecs, io, ...)
    if module_name.endswith(".py") or os.sep in module_name:
        from datarax.storage.urls import expand_user

        module_name = expand_user(module_name)
        if not os.path.isfile(module_name):
            raise ConfigError(f"{what}: the file '{module_name}' does not exist.")
        name = "_datarax_cli_" + re.sub(
            r"\W", "_", os.path.splitext(os.path.basename(module_name))[0]
        )
        spec = importlib.util.spec_from_file_location(name, module_name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            raise ConfigError(
                f"{what}: no module named '{module_name}' (run from the folder that holds it, "
                "set PYTHONPATH, or give the file: path/to/file.py:function)."
            ) from err
        raise


def raw_record_summary(record: bytes) -> dict[str, Any]:
    """The CLI's decoder when no ``--decode`` is given: size and first bytes of a record.

    Example:
        >>> fields = raw_record_summary(b"hello")
        >>> int(fields["num_bytes"]), fields["head"]
        (5, '68 65 6c 6c 6f')
    """
    return {"num_bytes": np.int32(len(record)), "head": bytes(record[:16]).hex(" ")}


def decode_alone(features: Any, record: bytes) -> dict[str, Any]:
    """One dataset record's fields, decoded per ``features``."""
    from datarax.dataset.layout import decode_records

    return {name: column[0] for name, column in decode_records(features, [record]).items()}


def checked_summary(features: Any, record: bytes) -> dict[str, Any]:
    """:func:`raw_record_summary` of a dataset record that decodes per ``features``."""
    decode_alone(features, record)
    return raw_record_summary(record)


def image_options(args: Any) -> dict[str, Any] | None:
    """The :func:`datarax.decode_images` options the command line gave, or None.

    Example:
        >>> import argparse
        >>> image_options(argparse.Namespace(resize="256", crop=224, field=None))
        {'field': None, 'resize': 256, 'crop': 224, 'random_resized_crop': None}
    """
    from datarax.dataset.resized_rows import parse_resize

    resize, crop = getattr(args, "resize", None), getattr(args, "crop", None)
    random_crop = getattr(args, "random_resized_crop", None)
    if resize is None and crop is None and random_crop is None:
        return None
    size = None if resize is None else parse_resize(resize)
    if isinstance(size, int) and crop is None and random_crop is None:
        raise ConfigError(
            f"--resize {size} alone keeps each image's aspect ratio, so the sizes vary; add "
            f"--crop (e.g. --crop {size}), or give --resize {size}x{size}.")
    if random_crop is not None and (resize is not None or crop is not None):
        raise ConfigError("--random-resized-crop cuts and resizes in one step: give it alone, "
                          "or --resize N --crop C.")
    return {"field": getattr(args, "field", None),
            "resize": size, "crop": crop,
            "random_resized_crop": random_crop}


def dataset_info(name: str) -> Any | None:
    """The metadata of the datarax dataset ``name`` names, or None."""
    from datarax.dataset.metadata import find_dataset, read_metadata

    folder = find_dataset(name)
    if folder is not None:
        return read_metadata(folder)
    if is_remote(name):
        from datarax.dataset.reading import remote_dataset

        return remote_dataset(name)[1]
    return None


def open_target(
    spec: str,
    *,
    decode: str | None = None,
    data_dir: str | None = None,
    skip_bad: bool = False,
    exclude: list[str] | None = None,
    images: dict[str, Any] | None = None,
) -> Target:
    """Open ``spec`` as a :class:`Target`; ``skip_bad``: skip bad records (a ``py:`` source
    keeps its policy); ``exclude``: fields an ``hf:`` / ``tfds:`` source leaves out;
    ``images``: :func:`image_options`."""
    kind, name, split = split_spec(spec)
    if images is not None and (kind != "arrayrecord" or decode is not None):
        raise ConfigError(
            "--resize / --crop / --random-resized-crop decode the images of ArrayRecord files "
            "(a datarax dataset) with datarax.decode_images"
            + (", in place of --decode: give one or the other." if decode is not None
               else f", not of a {kind}: SOURCE."))
    if exclude and kind not in ("hf", "tfds"):
        raise ConfigError(f"--exclude applies to hf: and tfds: SOURCEs only, not to '{spec}'.")
    if decode is not None and kind != "arrayrecord":
        raise ConfigError(f"--decode applies to ArrayRecord files only, not to a {kind}: SOURCE.")
    if data_dir is not None and kind != "tfds":
        raise ConfigError(f"--data-dir applies to tfds: SOURCE only, not to '{spec}'.")
    policy: dict[str, Any] = {"on_error": "skip"} if skip_bad else {}
    if exclude:
        policy["exclude_keys"] = tuple(exclude)
    if kind == "arrayrecord":
        from datarax.dataset.reading import DatasetDecoder
        from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule, decode_images

        fn = load_callable(decode, what="--decode") if decode is not None else raw_record_summary
        info, refused = dataset_info(name) if decode is None else None, None
        if images is not None:  # decode_images, by default of the dataset's first image field
            options = dict(images)
            field = options.pop("field", None)
            if field is None:
                field = next((f.name for f in (info.features.fields if info is not None else ())
                              if f.encoding in ("png", "jpeg")), "image")
            fn = decode_images(field, **options)
        elif info is not None:  # a datarax dataset: its metadata says how to decode
            fn = None
            try:
                DatasetDecoder(info.features)
            except ConfigError as err:  # a field of variable shape: records checked one by one
                refused = str(err)
                fn = functools.partial(checked_summary, info.features)
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(num_epochs=1, **policy), name, decode=fn
        )
        return Target(spec, kind, source, where=source.paths, info=info, per_record=refused)
    if kind in ("hf", "tfds"):
        import datarax.sources as sources

        # float64 shown as float32: a look at the data should not need jax_enable_x64
        common = {"name": name, "split": split or "train", "cast_float64": True, **policy}
        if kind == "hf":
            source = sources.HFStreamingSource(sources.HFStreamingConfig(**common))
            return Target(spec, kind, source, where=[name], where_label="dataset")
        source = sources.TFDSStreamingSource(
            sources.TFDSStreamingConfig(data_dir=data_dir, download=False, **common))
        return Target(spec, kind, source, where=[data_dir or "(default)"], where_label="data_dir")
    assert split is not None
    return _open_py(spec, name, split)


def _open_py(spec: str, module: str, function: str) -> Target:
    from datarax.pipeline import Pipeline

    fn = load_callable(f"{module}:{function}", what=spec)
    try:
        inspect.signature(fn).bind()
    except TypeError as err:
        raise ConfigError(
            f"{spec}: {function}() cannot be called without arguments ({err}); SOURCE names "
            "a function that takes none and returns a source or a Pipeline."
        ) from err
    except ValueError:  # no signature to check (a builtin): call it and see
        pass
    made = fn()
    if isinstance(made, Pipeline):
        return Target(spec, "py", made.source, pipeline=made, where=_paths_of(made.source))
    if isinstance(made, DataSourceModule):
        return Target(spec, "py", made, where=_paths_of(made))
    raise ConfigError(
        f"{spec} returned {type(made).__name__}; it must return a datarax source "
        "(a DataSourceModule) or a Pipeline."
    )


def _paths_of(source: DataSourceModule) -> list[str]:
    paths = getattr(source, "paths", None)
    return list(paths) if isinstance(paths, (list, tuple)) else []


def endless_reason(source: Any) -> str | None:
    """Why every pass of ``source`` is endless, or None.

    Example:
        >>> import numpy as np
        >>> from datarax.mixing import MixSource
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> parts = [MemorySource(MemorySourceConfig(), {"x": np.arange(3)}) for _ in range(2)]
        >>> endless_reason(MixSource(parts, [1, 1], mode="sampling"))
        "MixSource samples endlessly, mode='sampling' without records_per_epoch"
    """
    config = getattr(source, "config", None)
    if getattr(config, "mode", None) == "sampling" and getattr(
            config, "records_per_epoch", 0) is None:
        return (f"{type(source).__name__} samples endlessly, mode='sampling' without "
                "records_per_epoch")
    return None


def length_of(obj: Any) -> int | None:
    """``len(obj)`` when it is known, else None (a stream)."""
    try:
        return int(len(obj))
    except (TypeError, NotImplementedError):
        return None

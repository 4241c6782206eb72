"""``DatasetConfig``: the fields every dataset-backed source config shares, checked once.

The Hugging Face and TFDS configs (eager and streaming) derive from it and add only
what is theirs (``data_files``; ``download``; the streaming options). Every field is
validated here, in one place, with one wording.

Example:
    >>> from datarax.sources.hf import HFEagerConfig
    >>> config = HFEagerConfig(name="my_folder", include_keys={"label", "image"})
    >>> config.include_keys  # a set is stored sorted, so configs compare and hash stably
    ('image', 'label')
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from datarax.core.config import StructuralConfig, check_bool, check_seed
from datarax.core.errors import ConfigError, DataraxError
from datarax.sources._columns import normalize_keys
from datarax.sources.source_call import (
    MISSING, check_config_given, config_keyword, source_config,
)


@dataclass(frozen=True)
class DatasetConfig(StructuralConfig):
    """Fields shared by the dataset-backed source configs (HF and TFDS, eager and streaming).

    Attributes:
        name: which dataset (its meaning and whether it may be None is the subclass's).
        split: split name with optional slicing, e.g. ``"train[:80%]"``.
        data_dir: where the dataset lives (the subclass says exactly what it means); a
            ``str`` or any ``os.PathLike`` (``pathlib.Path``), stored as ``str``.
        include_keys / exclude_keys: names of the fields to keep / drop, any iterable of
            ``str`` (a list, tuple or set); unknown names are refused when the source opens.
        shuffle, seed: serve records in a seeded order, new each epoch (``seed + epoch``).
        cast_float64: cast float64 fields to float32 while ``jax_enable_x64`` is off
            (else they are refused; see :mod:`datarax.core.dtypes`).
        track_metadata, num_epochs: as in :class:`~datarax.sources.MemorySourceConfig`.
    """

    name: str | None = None
    split: str = "train"
    data_dir: str | None = None
    include_keys: tuple[str, ...] | None = None
    exclude_keys: tuple[str, ...] | None = None
    shuffle: bool = False
    seed: int = 42
    cast_float64: bool = False
    track_metadata: bool = False
    num_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        cls = type(self).__name__
        if not isinstance(self.split, str) or not self.split.strip():
            raise ConfigError(
                f"{cls}.split must be a non-empty str such as 'train', got {self.split!r}."
            )
        object.__setattr__(self, "data_dir", local_path(self.data_dir))
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            raise ConfigError(
                f"{cls}.data_dir must be a str, a pathlib.Path or None, got {self.data_dir!r}.")
        normalize_keys(self, "include_keys")
        normalize_keys(self, "exclude_keys")
        check_bool(self, "shuffle")
        check_seed(self, "seed")
        check_bool(self, "cast_float64")
        check_bool(self, "track_metadata")


def dataset_config_and_name(source: Any, config: Any, extra: tuple[Any, ...], name: str | None,
                            settings: dict[str, Any], *, example: str) -> tuple[Any, str | None]:
    """``(config, module name)`` of a dataset-backed source class ``source`` called with
    ``config`` (maybe ``MISSING``; positional-only, so ``config=`` arrives in
    ``settings``), further positional arguments ``extra`` (refused), ``name=`` and
    keyword ``settings`` (:func:`~datarax.sources.source_call.config_keyword`).

    In the keyword form (no config) ``name=`` is the dataset's name, as in the config and
    in ``from_hf`` / ``from_tfds``, and the module keeps its class's name; beside a
    config, ``name=`` names the module. Neither a config nor a keyword, or a config of
    another type (:func:`check_config_type`), is refused, the call that works naming the
    dataset ``example``.

    Example:
        >>> from datarax.sources import HFEagerSource
        >>> config, name = dataset_config_and_name(HFEagerSource, MISSING, (), "imdb",
        ...                                        {"split": "test"}, example="imdb")
        >>> type(config).__name__, config.name, config.split, name
        ('HFEagerConfig', 'imdb', 'test', None)
    """
    where, expected = source.__name__, source.config_class
    config = config_keyword(where, config, MISSING, extra, settings, data_name=None, forms=(
        f"{where}({expected.__name__}(name={example!r})), {where}(config={expected.__name__}("
        f"name={example!r})) or {where}(name={example!r}, split=...) (settings as keywords)"))
    if config is MISSING and (settings or name is not None):
        if name is not None:
            settings = {"name": name, **settings}
        return source_config(source, MISSING, settings), None
    check_config_given(where, config, expected, f"{where}({expected.__name__}(name="
                       f"{example!r})) or {where}(name={example!r})")
    config = source_config(source, config, settings)
    check_config_type(where, config, expected)
    return config, name


def local_path(value: Any) -> Any:
    """``value`` as ``str`` where it is an ``os.PathLike`` naming a local path
    (``os.fspath``); anything else unchanged (the caller checks it).

    Example:
        >>> import pathlib
        >>> local_path(pathlib.PurePosixPath("data/train")), local_path(None)
        ('data/train', None)
    """
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        return path if isinstance(path, str) else value
    return value


def check_config_type(source: str, config: Any, expected: type) -> None:
    """Refuse a config of the wrong type for ``source``, naming the one it needs.

    Example:
        >>> from datarax.sources.hf import HFEagerConfig, HFStreamingConfig
        >>> check_config_type("HFEagerSource", HFStreamingConfig(name="x"), HFEagerConfig)
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: HFEagerSource needs an HFEagerConfig, got HFStreamingConfig.
    """
    if not isinstance(config, expected):
        article = "an" if expected.__name__[:1] in "AEFHILMNORSX" else "a"
        got = type(config).__name__
        if isinstance(config, str):  # the dataset's name where the config goes
            got = f"str {config!r}. Call {source}({expected.__name__}(name={config!r}))"
        raise ConfigError(f"{source} needs {article} {expected.__name__}, got {got}."
                          + hf_dataset_hint(config))


def hf_dataset_hint(value: Any) -> str:
    """For a Hugging Face ``datasets`` object given where a dataset's name or a config
    goes, the ways to read it (a sentence that starts with a space); else ``""``.

    Example:
        >>> hf_dataset_hint("imdb")
        ''
    """
    if (type(value).__module__ or "").split(".")[0] != "datasets":
        return ""
    return (" A datasets object is not read from memory here: pass its columns to "
            "MemorySource(MemorySourceConfig(), ds.with_format('numpy')[:]), or save it "
            "with ds.save_to_disk(folder) and pass name=folder.")


def empty_split(config: Any, where: str) -> DataraxError:
    """The error for a split (or slice) of ``config.name`` that holds no records."""
    return DataraxError(
        f"{where}: split {config.split!r} of dataset {config.name!r} holds no records; "
        "pick a split (or slice) that has some."
    )


#: ``from_hf`` and ``from_tfds`` pick the eager source for splits of at most this many
#: bytes (declared, or of the split's files).
EAGER_MAX_BYTES = 256 * 2**20


def streaming_choice(where: str, streaming: Any, eager_class: type, config_class: type,
                     options: Any) -> bool | None:
    """What a factory (``from_hf``, ``from_tfds``) called with ``streaming`` and keyword
    ``options`` builds: True (streaming asked, or a streaming-only option given: a field
    of ``config_class`` that ``eager_class`` lacks), False (eager asked), None (the
    split's size decides).

    Raises:
        ConfigError: ``streaming`` not True, False or None; an option ``config_class``
            (the streaming config: every field of either mode) has no field for; a
            streaming-only option with ``streaming=False``.
    """
    if streaming not in (None, True, False):
        raise ConfigError(f"{where} streaming must be True, False or None, got {streaming!r}.")
    known = {f.name for f in fields(config_class)} - {"name", "split", "streaming"}
    stream_only = known - {f.name for f in fields(eager_class)}
    unknown = sorted(set(options) - known)
    if unknown:
        refused = config_class.refused_options.get(unknown[0])
        raise ConfigError(
            f"{where} got unknown option(s) {unknown}; the config options are "
            f"{sorted(known)}." + (f" {refused}" if refused else "")
        )
    given = sorted(stream_only & set(options))
    if streaming is False and given:
        raise ConfigError(
            f"{where}: {given} apply only to streaming "
            f"({config_class.__name__.replace('Config', 'Source')}); drop them or pass "
            "streaming=True."
        )
    return True if given else streaming


def factory_config(where: str | None, config_class: type, settings: dict[str, Any]) -> Any:
    """``config_class(**settings)``, built by the factory ``where`` (``from_hf``,
    ``from_tfds``) called without ``streaming=``: a setting it refuses is named as the
    factory's, not as a config the caller never named (``from_hf seed must be >= 0, got
    -1.``). ``where`` None: the caller chose the mode, so the config is named.

    Example:
        >>> from datarax.sources.hf import HFStreamingConfig
        >>> factory_config("from_hf", HFStreamingConfig, {"name": "imdb", "seed": -1})
        Traceback (most recent call last):
        ...
        datarax.core.errors.ConfigError: from_hf seed must be >= 0, got -1.
    """
    try:
        return config_class(**settings)
    except ConfigError as err:
        message, named = str(err), config_class.__name__
        if where is None or not message.startswith((named + ".", named + " ", named + ":")):
            raise
        rest = message[len(named):]  # ".seed must ...", " needs ...", ": on_error must ..."
        raise ConfigError(where + (" " + rest[1:] if rest[0] == "." else rest)) from None

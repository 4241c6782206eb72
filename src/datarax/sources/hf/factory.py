"""``from_hf``: pick the eager or the streaming source for a split, from what the
dataset declares (its split's size), before building exactly one of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flax import nnx

from datarax.sources._dataset_config import EAGER_MAX_BYTES, factory_config, streaming_choice
from datarax.sources.hf.config import HFEagerConfig, HFStreamingConfig
from datarax.sources.hf.eager import HFEagerSource
from datarax.sources.hf.locate import split_bytes
from datarax.sources.hf.remote import remote_files
from datarax.sources.hf.streaming import HFStreamingSource, open_stream
from datarax.storage import ShardCache


def from_hf(
    name: str | None,
    split: str = "train",
    *,
    streaming: bool | None = None,
    rngs: nnx.Rngs | None = None,
    cache: ShardCache | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **config: Any,
) -> HFEagerSource | HFStreamingSource:
    """An HF source for ``name``/``split``: eager or streaming.

    ``streaming=True`` / ``False`` chooses explicitly and always wins. With
    ``streaming=None`` the split is loaded eagerly (:class:`HFEagerSource`) when its size
    is known and at most :data:`EAGER_MAX_BYTES` (256 MiB) — the size the dataset
    declares for the split, else the bytes of its local files (listed remote files for
    URLs) — and no streaming-only option (``chunk_size``, ``shuffle_buffer_size``,
    ``on_error``, ``max_skipped``, ``max_skipped_fraction``) is given; otherwise it is
    streamed. Text fields do not matter: an eager source keeps them on the host.

    ``config`` holds further config fields (``shuffle``, ``seed``, ``include_keys``,
    ``data_files``, ...). ``name`` / ``data_files`` may be URLs (``s3://...``), read
    through the shard cache ``cache`` with the filesystem's ``storage_options`` (see
    :class:`HFStreamingSource`).

    Example:
        >>> from flax import nnx
        >>> from datarax.sources import from_hf
        >>> source = from_hf("stanfordnlp/sst2", "train", streaming=True, rngs=nnx.Rngs(0))  # doctest: +SKIP
    """
    where = None if streaming is not None else "from_hf"  # the mode (its config) unnamed
    streaming = streaming_choice("from_hf", streaming, HFEagerConfig, HFStreamingConfig, config)
    remote: dict[str, Any] = {"cache": cache, "storage_options": storage_options}
    settings = {"name": name, "split": split, **config}
    if streaming is None:
        probe = factory_config(where, HFStreamingConfig, settings)
        streaming = not _fits_eager(probe, storage_options)
    if streaming:
        return HFStreamingSource(factory_config(where, HFStreamingConfig, settings), rngs=rngs,
                                 **remote)
    return HFEagerSource(factory_config(where, HFEagerConfig, settings), rngs=rngs, **remote)


def _fits_eager(config: HFStreamingConfig,
                storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether the split's size is known and small enough to load eagerly (remote
    files are listed for their sizes, not fetched)."""
    files = remote_files(config, "from_hf", storage_options=storage_options)
    if files is not None:
        return sum(o.size for o in files.objects) <= EAGER_MAX_BYTES
    dataset, _, _ = open_stream(config, "from_hf")
    size = split_bytes(config, dataset)
    return size is not None and size <= EAGER_MAX_BYTES

"""``from_hf``: pick the eager or the streaming source for a split."""

from __future__ import annotations

from typing import Any

from flax import nnx

from datarax.core.errors import ConfigError
from datarax.core.spec import TextSpec
from datarax.sources.hf.config import HFEagerConfig, HFStreamingConfig
from datarax.sources.hf.eager import HFEagerSource
from datarax.sources.hf.locate import split_bytes
from datarax.sources.hf.streaming import HFStreamingSource


#: ``from_hf`` picks the eager source for splits known to be at most this many bytes.
EAGER_MAX_BYTES = 256 * 2**20


_STREAM_ONLY = {"chunk_size", "shuffle_buffer_size", "on_error", "max_skipped", "max_skipped_fraction"}


def from_hf(
    name: str | None,
    split: str = "train",
    *,
    streaming: bool | None = None,
    rngs: nnx.Rngs | None = None,
    **config: Any,
) -> HFEagerSource | HFStreamingSource:
    """An HF source for ``name``/``split``: eager or streaming.

    ``streaming=True`` / ``False`` chooses explicitly and always wins. With
    ``streaming=None`` the split is streamed unless all of these hold, in which case
    it is loaded eagerly (:class:`HFEagerSource`):

    * its size is known and at most :data:`EAGER_MAX_BYTES` (256 MiB): the size the
      dataset declares for the split, else the bytes of its local files;
    * none of the kept fields is text (text cannot live on the device);
    * no streaming-only option (``chunk_size``, ``shuffle_buffer_size``, ``on_error``,
      ``max_skipped``, ``max_skipped_fraction``) is given.

    ``config`` holds further config fields (``shuffle``, ``seed``, ``include_keys``,
    ``data_files``, ...).

    Example:
        >>> from flax import nnx
        >>> from datarax.sources import from_hf
        >>> source = from_hf("stanfordnlp/sst2", "train", streaming=True, rngs=nnx.Rngs(0))  # doctest: +SKIP
    """
    if streaming not in (None, True, False):
        raise ConfigError(f"from_hf streaming must be True, False or None, got {streaming!r}.")
    if streaming is False:
        return HFEagerSource(HFEagerConfig(name=name, split=split, **config), rngs=rngs)
    stream = HFStreamingSource(HFStreamingConfig(name=name, split=split, **config), rngs=rngs)
    if streaming is True or _STREAM_ONLY & set(config):
        return stream
    if any(isinstance(s, TextSpec) for s in stream.element_spec().values()):
        return stream
    size = split_bytes(stream.config, stream._dataset)
    if size is None or size > EAGER_MAX_BYTES:
        return stream
    return HFEagerSource(HFEagerConfig(name=name, split=split, **config), rngs=rngs)

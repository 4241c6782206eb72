"""``HFStreamingSource``: a Hugging Face ``IterableDataset`` read chunk by chunk.

Also how the stream is opened: the split sliced as asked, its fields chosen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from flax import nnx

from datarax.core.spec import TextSpec
from datarax.core.errors import DataraxError
from datarax.core.stream import StreamSource
from datarax.sources._columns import select_keys, spec_of_columns
from datarax.sources._dataset_config import (
    dataset_config_and_name,
    empty_split,
)
from datarax.sources.hf.arrow import table_to_columns
from datarax.sources.hf.config import HFStreamingConfig
from datarax.sources.hf.locate import known_length, opened_split, split_names
from datarax.sources.hf.remote import local_config, remote_files
from datarax.sources.hf.stream_reader import (
    StreamReader,
    first_good_record,
    record_error,
    unreadable,
)
from datarax.sources.read_ahead import SessionCursor
from datarax.sources.skip_ledger import SkipCounts, SkippedRecord
from datarax.sources.source_call import MISSING
from datarax.storage import ShardCache
from datarax.typing import Batch


class HFStreamingSource(SkipCounts, StreamSource):
    """A Hugging Face ``IterableDataset`` read chunk by chunk on the host.

    One pass per ``for batch in pipeline``, memory bounded by ``chunk_size`` (+
    ``shuffle_buffer_size``), text fields as lists of ``str``, exact mid-epoch resume.
    A record's stable index is its position in the pass's (shuffled) stream. With
    ``on_error="skip"`` bad records are dropped within the budget, reported by
    :meth:`skipped_records` and counted in the state (``"skipped"``). ``name`` /
    ``data_files`` may be URLs, fetched once into the shard cache (``cache``) with the
    filesystem's ``storage_options`` and held until :meth:`close`.

    Example:
        >>> from flax import nnx
        >>> from datarax.sources import HFStreamingSource, HFStreamingConfig
        >>> config = HFStreamingConfig(name="stanfordnlp/sst2", split="train", streaming=True)
        >>> source = HFStreamingSource(config, rngs=nnx.Rngs(0))  # doctest: +SKIP
        >>> source.element_spec()["sentence"]  # doctest: +SKIP
        TextSpec(shape=())
    """

    config: HFStreamingConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    config_class = HFStreamingConfig
    # copy.deepcopy: the split is shared (each reader opens its own pass), the reader rebuilt
    rebuilt_on_copy: ClassVar[tuple[str, ...]] = ("_dataset", "_reader")

    def __init__(
        self,
        config: HFStreamingConfig = MISSING,
        /,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        cache: ShardCache | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        config, name = dataset_config_and_name(type(self), config, extra, name, settings,
                                               example="imdb")
        super().__init__(config, rngs=rngs, name=name)
        where = "HFStreamingSource"
        files = remote_files(config, where, cache=cache, storage_options=storage_options)
        self._remote = nnx.static(files)
        try:
            read = config if files is None else local_config(config, files)
            dataset, keys, by_shard = open_stream(read, where)
        except BaseException:
            if files is not None:
                files.release()
            raise
        self._dataset = nnx.static(dataset)
        try:
            first = next(iter(dataset.with_format("arrow").iter(
                batch_size=min(config.chunk_size, 64))), None)
        except DataraxError:
            raise
        except Exception as err:  # a data file datasets cannot read
            raise unreadable(config, 0, 0, err) from err
        if first is None or first.num_rows == 0:
            raise empty_split(config, where)
        features = dataset.features
        policy = config.error_policy()
        try:
            columns = table_to_columns(first, keys, config, where, features=features)
        except Exception as err:  # e.g. an image that does not decode
            if policy.skips:
                columns = first_good_record(first, keys, config, where, features)
            elif isinstance(err, DataraxError):
                raise
            else:
                raise record_error(first, keys, config, features, 0, 0, err) from err
        spec = spec_of_columns(columns)
        self._spec = nnx.static(tuple(spec.items()))  # hashable static structure
        length = known_length(dataset, split_names(config.split)[0]) if by_shard else None
        self._init_skips()  # this pass, before the position
        self._reader = nnx.static(
            StreamReader(self, dataset, tuple(keys), by_shard, policy, length)
        )

    # ------------------------------------------------------------- contract
    def length_or_reason(self) -> str:
        return ("it streams the split, read forward only. For a source with a length, load "
                "the split whole: from_hf(..., streaming=False) (HFEagerSource); for the "
                "split's size alone, read the dataset's info (load_dataset_builder(name)"
                ".info.splits[split].num_examples).")

    def element_spec(self) -> dict[str, Any]:
        """Fields, per-record shapes and dtypes (text: ``TextSpec``), from the first chunk."""
        return dict(self._spec)

    def known_spec(self) -> dict[str, Any]:
        """The spec (for ``repr``): known without reading further."""
        return self.element_spec()

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next batch of the current pass (None at its end)."""
        return self.get_batch_with_indices(batch_size)[0]

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """The next records of the pass (this shard's) and their positions in its stream,
        handed out at once: a reading session from the position (the open stream kept
        where it stands there; a pipeline's read-ahead ended)."""
        with self._reader.sessions.lock:
            return self.batch_cursor().take(batch_size)

    def batch_cursor(self) -> SessionCursor:
        """Batches from the current position, read ahead without moving it: a
        pipeline's read-ahead thread peeks them and its consumer commits each one it
        hands out, moving the position and skip count
        (:class:`~datarax.sources.read_ahead.SessionCursor`). Ends any earlier reading
        session."""
        reader = self._reader
        self._hold()
        session = reader.start(self.epoch, self.index, self._skips())
        return SessionCursor(self, reader, session, present=self._batch_of)

    def _hold(self) -> None:
        """Remote files: hold the cached copies again after :meth:`close` (fetched
        again, the same verified bytes, if the cache evicted them meanwhile)."""
        if self._remote is not None:
            self._remote.local_paths()

    def stats(self) -> dict[str, Any] | None:
        """For remote files ``{"storage": ...}``: downloads, cache hits, retries ...
        (:meth:`datarax.storage.RemoteShards.stats`); None for local files."""
        return None if self._remote is None else {"storage": self._remote.stats()}

    def _batch_of(self, columns: dict[str, np.ndarray]) -> Batch:
        # one str per record: a list; fixed-size lists of text: the object array itself
        # (which fields are text: the spec's, from the first chunk; each chunk was checked)
        spec = self.element_spec()
        return {
            k: (v.tolist() if isinstance(spec.get(k), TextSpec) and v.ndim == 1 else v)
            for k, v in columns.items()
        }

    def skipped_records(self) -> list[SkippedRecord]:
        """Records dropped under ``on_error="skip"`` so far: pass, position (this process's
        records of the pass), ``index`` (position in the pass's stream) and cause."""
        return self._reader.skipped_records()

    def rebuild_after_copy(self, memo: dict[int, Any]) -> None:
        """A copy's own reader (``copy.deepcopy``): it opens the pass at the position."""
        self._reader = nnx.static(self._reader.for_source(self))

    def restart(self, epoch: int) -> None:
        """Begin pass ``epoch``: the stream is re-opened on the next read."""
        self._reader.stop()

    def _moved(self) -> None:
        """The position was set from outside: re-open (and fast-forward) on the next read."""
        self._reader.stop()
        self._skips_at_start()

    def _exhausted(self) -> bool:
        """Direct iteration (``for record in source``) over a finished source restarts it."""
        return self._reader.ended and self._last_direct_pass()

    def close_epoch(self) -> None:
        """Release the open stream (the position is kept; reading re-opens and skips)."""
        self._reader.stop()

    def close(self) -> None:
        """Release the open stream (and let the shard cache evict remote files)."""
        self._reader.stop()
        if self._remote is not None:
            self._remote.release()

    def get_state(self) -> dict[str, Any]:
        """``current_index`` (records of the pass handed out or skipped) and
        ``current_epoch``; with ``on_error="skip"`` also ``skipped`` (records skipped
        before ``current_index``)."""
        state = super().get_state()
        if self.config.on_error == "skip":
            state["skipped"] = self._skips()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue at ``state``: the pass is re-opened and the records it covers
        (handed out or skipped) are passed over unread. A state without
        ``"skipped"`` counts no skips."""
        self._resume(*self._checked_skips(state, where="HFStreamingSource"))


def open_stream(config: HFStreamingConfig, where: str) -> tuple[Any, list[str], bool]:
    """The split (sliced as asked) as one ``IterableDataset``, the fields to keep, and
    whether its shards (files) can be read one by one (unsliced, one split)."""
    dataset, by_shard = opened_split(config, where, streaming=True)
    columns = list(dataset.column_names or [])
    if not columns:
        first = next(iter(dataset.with_format("arrow").iter(batch_size=1)), None)
        if first is None:
            raise empty_split(config, where)
        columns = list(first.column_names)
    keys = select_keys(columns, config.include_keys, config.exclude_keys, where=where)
    return dataset, keys, by_shard

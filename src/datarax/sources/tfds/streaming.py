"""``TFDSStreamingSource``: a TFDS split read by index on host threads."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from flax import nnx

from datarax.core.errors import DataraxError, RecordError
from datarax.sources._dataset_config import (
    dataset_config_and_name,
    empty_split,
)
from datarax.sources.host_reader import HostReader
from datarax.sources.random_access import RandomAccessSource
from datarax.sources.source_call import MISSING
from datarax.sources.tfds.config import TFDSStreamingConfig
from datarax.sources.tfds.features import Decoder
from datarax.sources.tfds.opening import (
    SKIP_HINT,
    TFRecordOnly,
    open_data_source,
    record_error,
    tfrecord_message,
)
from datarax.typing import Batch


class TFDSStreamingSource(RandomAccessSource):
    """A TFDS split read by index on host threads (``tfds.data_source``, no TensorFlow).

    With ``shuffle=True`` pass ``e`` follows the Feistel permutation keyed by
    ``seed + e`` (the order :class:`TFDSEagerSource` serves); memory is bounded by the
    read-ahead; resume is exact. With ``on_error="skip"`` a record that cannot be read or
    decoded is dropped and counted (:meth:`skipped_records`, state ``"skipped"``)
    within the ``max_skipped`` / ``max_skipped_fraction`` budget.

    Example:
        >>> from datarax.sources import TFDSStreamingSource, TFDSStreamingConfig
        >>> source = TFDSStreamingSource(TFDSStreamingConfig(name="mnist", split="test"))  # doctest: +SKIP
        >>> source.get_batch(4)["label"].shape  # doctest: +SKIP
        (4,)
    """

    config: TFDSStreamingConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    config_class = TFDSStreamingConfig

    def __init__(
        self,
        config: TFDSStreamingConfig = MISSING,
        /,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        config, name = dataset_config_and_name(type(self), config, extra, name, settings,
                                               example="mnist")
        super().__init__(config, rngs=rngs, name=name)
        where = "TFDSStreamingSource"
        try:
            data, info = open_data_source(config, where)
        except TFRecordOnly:
            raise DataraxError(tfrecord_message(config, where, eager=False)) from None
        length = len(data)
        if length == 0:
            raise empty_split(config, where)
        decoder = Decoder(info, config, where)
        self._decoder = nnx.static(decoder)
        self._use_reader(functools.partial(
            HostReader,
            data,
            decoder,
            num_threads=config.num_threads,
            read_ahead=config.read_ahead,
            policy=config.error_policy(),
            name=where,
        ))
        self._length = length

    def __len__(self) -> int:
        return self._length

    def read_records(self, indices: Sequence[int]) -> list[Any]:
        """Raw records at stable ``indices``, as the reader reads them: what
        ``source[i]`` decodes."""
        self._check_open()
        data = self.host_reader.data
        return [data[int(i)] for i in indices]

    def decode(self, raw: Any) -> Mapping[str, Any]:
        """One raw record through the split's feature decoder (the batches' decode)."""
        return self._decoder(raw)

    def _reword_error(self, err: RecordError) -> RecordError:
        where, config = "TFDSStreamingSource", self.config
        if err.__cause__ is None:  # the skip budget ran out; the reader's message says so
            message = str(err).removeprefix(f"{where}: ")
            return RecordError(
                f"{where}: split {config.split!r} of dataset {config.name!r}: {message}",
                path=err.path,
                index=err.index,
            )
        # a field of varying shape fails most records: skipping them is no fix
        hint = self._decoder.varying_hint(err.__cause__) or SKIP_HINT
        return record_error(err, config, where, hint)

    def _host_columns(self, columns: dict[str, Any]) -> Batch:
        text = self._decoder.text  # the Text features, found once from the dataset's info
        return {k: (v.tolist() if k in text else v) for k, v in columns.items()}

"""What ``Pipeline(...)`` refuses when it is built: its arguments, stages and source
checked, each refusal naming the argument and what to pass instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from datarax.core.data_source import DataSourceModule, skipping_setting
from datarax.core.lengths import length_or_none
from datarax.core.errors import ConfigError, SourceContractError, callable_name, refused_call
from datarax.core.operator import OperatorModule, refuse_rng_state
from datarax.core.reading import Reading, reading_of
from datarax.host.counts import check_count, count_words, python_ints
from datarax.pipeline.plan import filter_position

_INT32_MAX = 2**31 - 1  # rows a padded batch can hold


def check_arguments(
    source: Any,
    stages: Any,
    batch_size: Any,
    prefetch: Any,
    shard_index: Any,
    shard_count: Any,
    *,
    drop_remainder: Any,
    check_finite: Any,
    sharding: Any,
    pad_remainder: Any,
) -> tuple[int, int, Any, Any, Reading]:
    """``(batch_size, prefetch, shard_index, shard_count, reading)`` checked, with the
    stages and the source; the shard defaults to this process's."""
    if not isinstance(source, DataSourceModule):
        raise SourceContractError(
            f"Pipeline source must be a DataSourceModule (e.g. MemorySource), got "
            f"{type(source).__name__}. Wrap in-memory data with "
            "MemorySource(MemorySourceConfig(), data)."
        )
    if getattr(source, "datarax_position", None) is None:  # set by DataSourceModule.__init__
        raise SourceContractError(
            f"Pipeline source {type(source).__name__} was built without "
            "DataSourceModule.__init__, which gives a source its position: call "
            "super().__init__(config, rngs=rngs, name=name) first in its __init__."
        )
    batch_size, prefetch, shard_index, shard_count = python_ints(
        (batch_size, prefetch, shard_index, shard_count))
    batch_size = check_count(batch_size, "Pipeline batch_size", 1)
    for label, value in (("drop_remainder", drop_remainder), ("check_finite", check_finite),
                         ("pad_remainder", pad_remainder)):
        if not isinstance(value, (bool, np.bool_)):
            raise ConfigError(
                f"Pipeline {label} must be a bool, got {type(value).__name__}."
            )
    prefetch = check_count(prefetch, "Pipeline prefetch", 0)
    _check_stages(stages)
    reading = reading_of(source)
    _check_source(source, reading)
    if pad_remainder and (drop_remainder or sharding is not None):
        raise ConfigError(
            "Pipeline pad_remainder=True pads the short last batch; it cannot be "
            "combined with " + ("drop_remainder=True, which drops it." if drop_remainder
            else "sharding=: build the pipeline without sharding= and place its padded "
            "batches with datarax.sharding.global_batches(pipeline, mesh).")
        )
    if pad_remainder and batch_size > _INT32_MAX:
        raise ConfigError(
            f"Pipeline pad_remainder=True pads each epoch's last batch to batch_size="
            f"{batch_size} rows, more than 2**31 - 1: no batch of that many rows can be "
            "made. Give the batch size the model takes (padding fills it up to that), or "
            "pad_remainder=False for one unpadded batch of the whole epoch."
        )
    count = jax.process_count() if shard_count is None else shard_count
    index = jax.process_index() if shard_index is None else shard_index
    _check_shard(index, count, shard_index is None, shard_count is None)
    if pad_remainder and isinstance(count, int) and count > 1:
        _check_padded_shards(source, stages, count, reading)
    return batch_size, prefetch, index, count, reading


def check_share(
    source: DataSourceModule, count: Any, batch_size: int, drop_remainder: bool
) -> int | None:
    """This shard's records per epoch, refused where no process, or no batch, is served."""
    size = source.epoch_size()
    if size == 0 and isinstance(count, int) and count > 1:
        raise ConfigError(
            f"Pipeline shard_count={count} over {type(source).__name__}'s "
            f"{count_words(len(source), 'record')}: each process's share is {len(source)} // "
            f"{count} = 0 "
            "records, so no process would serve any. Pass pad_remainder=True (every "
            "record served once, the extra slots as padding rows marked by 'valid'), "
            "use fewer processes, or more records."
        )
    if drop_remainder and size is not None and size < batch_size:
        raise no_batch_error(source, size, batch_size, count)
    return size


def no_batch_error(source: DataSourceModule, size: int, batch_size: int, count: Any,
                   skipped: int = 0) -> ConfigError:
    """The error for an epoch of ``size`` records (``skipped`` of them bad), fewer than
    ``batch_size`` with drop_remainder=True."""
    in_shard = " in this shard" if isinstance(count, int) and count > 1 else ""
    bad = f" ({skipped} more skipped as bad)" if skipped else ""
    return ConfigError(
        f"Pipeline batch_size={batch_size} with drop_remainder=True would serve no "
        f"batch: an epoch of {type(source).__name__} holds {count_words(size - skipped, 'record')}"
        f"{in_shard}{bad}. Lower batch_size or set drop_remainder=False."
    )


def _check_shard(index: Any, count: Any, index_default: bool, count_default: bool) -> None:
    """Refuse a shard that is not ``0 <= shard_index < shard_count``, naming defaults."""
    check_count(count, "Pipeline shard_count", 1, " (the number of processes reading the data)")
    if index_default and not count_default and count != jax.process_count():
        raise ConfigError(
            f"Pipeline shard_count={count} without shard_index: the share would default "
            f"to jax.process_index() = {index}, but jax.process_count() = "
            f"{jax.process_count()}, so some shares would never be read. Pass shard_index= "
            "(this reader's share) as well."
        )
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < count:
        return
    given = (f"shard_count defaulted to jax.process_count() = {count}; pass shard_count= "
             "as well" if count_default else f"shard_count={count}")
    if index_default:
        given = f"shard_index defaulted to jax.process_index() = {index}; {given}"
    raise ConfigError(
        f"Pipeline shard_index must be an int with 0 <= shard_index < shard_count "
        f"(this process's share), got shard_index={index!r} ({given})."
    )


def _check_stages(stages: Any) -> None:
    if isinstance(stages, (OperatorModule, str)) or not isinstance(stages, Sequence):
        raise SourceContractError(
            f"Pipeline stages must be a list of operators, got {type(stages).__name__}; "
            + ("give stages=[] for none." if stages is None else
               "wrap a single stage in a list: stages=[op]." if isinstance(stages, OperatorModule)
               or callable(stages) else "give them as a list: stages=list(...).")
        )
    for i, stage in enumerate(stages):
        if isinstance(stage, type) and issubclass(stage, (OperatorModule, DataSourceModule)):
            raise SourceContractError(
                f"Pipeline stage {i} is the class {stage.__name__}, not an operator: build "
                f"it first, e.g. {stage.__name__}(...) with its settings."
            )
        if isinstance(stage, DataSourceModule) or not callable(stage) and not isinstance(
            stage, OperatorModule
        ):
            raise SourceContractError(
                f"Pipeline stage {i} is {type(stage).__name__}, which is neither an "
                "operator module (e.g. ElementOperator) nor a callable taking and "
                "returning a batch dict."
            )
        if not isinstance(stage, OperatorModule):
            _check_batch_function(stage, i)
        refuse_rng_state(stage, f"Pipeline stage {i}")


def _check_batch_function(stage: Callable[..., Any], i: int) -> None:
    """Refuse a plain-callable stage that cannot be called as ``fn(batch)``."""
    refused = refused_call(stage, {})
    if refused is not None:
        err = refused[1]
        name = callable_name(stage)
        raise ConfigError(
            f"Pipeline stage {i} ({name}) is a plain callable, which the pipeline calls "
            f"with the batch dict alone, fn(batch), but {name} cannot take that "
            f"({err}). A function of one record and its key, fn(element, key), goes in "
            "an operator: ElementOperator(ElementOperatorConfig(stochastic=True), fn=fn) "
            "(stochastic=False when it ignores the key)."
        )


def _check_source(source: DataSourceModule, reading: Reading) -> None:
    if reading.forward_only and type(source).element_spec is DataSourceModule.element_spec:
        raise SourceContractError(
            f"{type(source).__name__} implements get_batch but not element_spec(); a "
            "streaming source must declare what its batches carry (a dict of "
            "jax.ShapeDtypeStruct per record, or TextSpec for strings) so Pipeline can "
            "check every batch."
        )
    if reading.compiled:
        n = length_or_none(source)
        if n is None:
            raise SourceContractError(
                f"{type(source).__name__} implements get_batch_at but not __len__; an "
                "indexed source must say how many records one epoch holds."
            )
        if n == 0:
            raise ConfigError(f"Pipeline source {type(source).__name__} holds no records.")


def _check_padded_shards(
    source: DataSourceModule, stages: Sequence[Any], count: int, reading: Reading
) -> None:
    """Refuse ``pad_remainder`` over several shards whose batch counts are not known ahead."""
    if reading.forward_only or length_or_none(source) is None:
        raise ConfigError(
            f"Pipeline pad_remainder=True with shard_count={count}: "
            f"{type(source).__name__} is a stream (read in rounds, its length unknown ahead), so the shards "
            "cannot be given the same number of batches. Pad on one process, or use a "
            "source of known length."
        )
    skipping = skipping_setting(source)
    if skipping:
        raise ConfigError(
            f"Pipeline pad_remainder=True with shard_count={count} over "
            f"{type(source).__name__} with {skipping}='skip': the records a shard skips "
            "as bad are known only once they are read, so the shards cannot be given the "
            "same number of batches. Pad on one process, or read with on_error='raise' "
            "(after fixing or removing the bad records)."
        )
    if filter_position(list(stages)) is not None:
        raise ConfigError(
            f"Pipeline pad_remainder=True with shard_count={count} and a FilterOperator: "
            "how many records each shard keeps is known only once they are read, so the "
            "shards cannot be given the same number of batches. Filter on one process, "
            "or pad without the filter and mask by the predicate in the evaluation step."
        )

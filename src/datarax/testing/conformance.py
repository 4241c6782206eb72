"""The source conformance checks: one table of sources, every row through every check.

A :class:`SourceRow` builds a pipeline over a small dataset; each check raises
``AssertionError`` naming what broke.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> def make(shard_index=0, shard_count=1, stages=()):
    ...     src = MemorySource(MemorySourceConfig(shuffle=True, seed=3),
    ...                        {"x": np.arange(9, dtype=np.int32)})
    ...     return Pipeline(source=src, stages=list(stages), batch_size=4, rngs=nnx.Rngs(0),
    ...                     shard_index=shard_index, shard_count=shard_count)
    >>> row = SourceRow("memory", make, 9, lambda b: b["x"].tolist(), shuffled=True)
    >>> check_epochs(row, num_epochs=2)
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Sequence

import numpy as np

from datarax.core.spec import TextSpec, flatten_fields, validate_batch
from datarax.errors import SpecMismatchError
from datarax.host.counts import count_words
from datarax.testing.resume_checks import (  # the resume clauses live there
    check_direct_read_live,
    check_nnx_state_small,
    check_restore_live,
    check_resume,
    key_points,
    orbax_round_trip,
)
from datarax.testing.source_row import Level, SourceRow, run_epochs
from datarax.typing import Batch

__all__ = [
    "Level", "SourceRow", "check_close_releases_threads", "check_direct_read_live",
    "check_epochs", "check_kind",
    "check_nnx_state_small", "check_restore_live", "check_resume", "check_shards",
    "check_spec", "key_points", "orbax_round_trip", "run_epochs",
]


# ------------------------------------------------------------------ epochs
def _ids(row: SourceRow, batches: Sequence[Batch]) -> list[int]:
    return [int(i) for batch in batches for i in row.record_ids(batch)]


def check_epochs(row: SourceRow, num_epochs: int = 3) -> None:
    """Each of ``num_epochs`` loops in a row serves every record exactly once."""
    with row.built() as pipeline:
        epochs = run_epochs(pipeline, num_epochs)
    everything = list(range(row.num_records))
    orders = []
    for epoch, batches in enumerate(epochs):
        ids = _ids(row, batches)
        if sorted(ids) != everything:
            missing = sorted(set(everything) - set(ids))
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise AssertionError(
                f"{row.name}: epoch {epoch} served {count_words(len(ids), 'record')}, expected "
                "each of "
                f"{row.num_records} once (missing {missing}, repeated {repeated})"
            )
        orders.append(ids)
    if row.shuffled:
        for epoch in range(1, num_epochs):
            if orders[epoch] == orders[epoch - 1]:
                raise AssertionError(
                    f"{row.name}: epochs {epoch - 1} and {epoch} came in the same order "
                    f"{orders[epoch]}; a shuffled source reshuffles every epoch"
                )


# ------------------------------------------------------------------- shards
def check_shards(row: SourceRow, count: int = 3) -> None:
    """Shares ``0 .. count-1`` of an epoch: disjoint, equally long (``n // count``
    records, the documented remainder left out), each record at most once."""
    shares = []
    for index in range(count):
        with row.built(shard_index=index, shard_count=count) as pipeline:
            shares.append(_ids(row, run_epochs(pipeline, 1)[0]))
    share = row.num_records // count
    seen: dict[int, int] = {}
    for index, ids in enumerate(shares):
        if len(ids) != share:
            raise AssertionError(
                f"{row.name}: shard {index} of {count} served {count_words(len(ids), 'record')}, "
                "expected "
                f"{share} (shares {[len(s) for s in shares]})"
            )
        for i in ids:
            if not 0 <= i < row.num_records:
                raise AssertionError(
                    f"{row.name}: shard {index} served record {i}, not in the dataset"
                )
            if i in seen:
                raise AssertionError(
                    f"{row.name}: record {i} served by shard {seen[i]} and shard {index}"
                    if seen[i] != index
                    else f"{row.name}: shard {index} served record {i} twice"
                )
            seen[i] = index


# --------------------------------------------------------------------- spec
def check_spec(row: SourceRow) -> None:
    """Every batch of an epoch matches ``source.element_spec()``, text fields holding ``str``."""
    with row.built() as pipeline:
        spec = pipeline.source.element_spec()
        step = -1
        for step, batch in enumerate(pipeline):
            where = f"{row.name}: batch {step}"
            try:
                validate_batch(batch, spec, where=where)
            except SpecMismatchError as err:
                raise AssertionError(str(err)) from None
            values = flatten_fields(batch)
            for name, field in flatten_fields(spec).items():
                texts = list(values[name]) if isinstance(field, TextSpec) else []
                if not all(isinstance(v, str) for v in np.ravel(np.asarray(texts, object))):
                    raise AssertionError(f"{where}, field '{name}': text declared, got {texts!r}")
        if step < 0:
            raise AssertionError(f"{row.name}: the first epoch gave no batch to check")


def check_kind(row: SourceRow) -> None:
    """The source declares the kind the row expects (``source.kind``)."""
    from datarax.core.data_source import SourceKind

    with row.built() as pipeline:
        kind = pipeline.source.kind
        if kind is not SourceKind[row.kind]:
            raise AssertionError(
                f"{row.name}: source.kind is {kind!r}, expected SourceKind.{row.kind}"
            )


# ------------------------------------------------------------------ threads
def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before]


def _settle(before: set[threading.Thread], timeout: float = 60.0) -> None:
    # a long timeout: a loaded machine may keep an ending thread waiting for seconds
    deadline = time.monotonic() + timeout
    while _new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.01)


def check_close_releases_threads(row: SourceRow, *, wait_s: float = 60.0) -> None:
    """Breaking out mid-epoch, then closing the iterator and the source, leaves no
    thread behind (a first round lets libraries start the threads they keep).

    ``wait_s``: how long ending threads may take to end (long, for a loaded machine); a
    thread still alive then is a leak, so a leaking source fails only after ``wait_s``."""

    def one_round() -> None:
        with row.built() as pipeline:
            iterator = iter(pipeline)
            if next(iterator, None) is None:
                raise AssertionError(f"{row.name}: the first epoch gave no batch")
            iterator.close()

    one_round()
    gc.collect()
    before = set(threading.enumerate())
    one_round()
    gc.collect()
    _settle(before, wait_s)
    left = _new_threads(before)
    if left:
        names = sorted(t.name for t in left)
        raise AssertionError(
            f"{row.name}: {count_words(len(left), 'thread')} still alive {wait_s:g} s after "
            f"closing the iterator and the source (left: {names}); the source's close() "
            "must stop and join the threads it started"
        )

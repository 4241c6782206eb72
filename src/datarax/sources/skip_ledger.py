"""The one bad-record ledger of every reading source: policy, budget, skip counts, reports.

:class:`SkipCounts` is the source's side: the ``skipped`` count its state carries, given
and taken whole as ``skip_state()`` (how a parent keeps a child's counts). A reader that
reads ahead meets a bad record before the consumer does, so the ledger keeps two moments
apart: :meth:`SkipLedger.pull` records it and checks the epoch's budget at once;
:meth:`SkipLedger.commit` counts it as skipped once the consumer's position passes it.
Invariant: ``skipped`` is the number of bad records below the last committed position,
whatever the read-ahead, so a reader restarted with ``begin(epoch, skipped=...)`` counts
none twice. Going back over passed positions counts their bad records in ``skipped``
again but not in ``reports`` or ``total``.

Example:
    >>> ledger = SkipLedger(ErrorPolicy("skip", max_skipped=1), name="MySource")
    >>> ledger.begin(epoch=0)
    >>> ledger.pull(SkippedRecord(0, 5, 5, None, 5, "bad bytes"), epoch_size=100)
    >>> ledger.skipped, ledger.commit(3), ledger.skipped   # not reached yet
    (0, None, 0)
    >>> ledger.commit(6); ledger.skipped, [r.position for r in ledger.reports]
    (1, [5])
    >>> ledger.pull(SkippedRecord(0, 9, 9, None, 9, "bad bytes"), epoch_size=100)
    Traceback (most recent call last):
    ...
    datarax.core.errors.RecordError: MySource: skipped 2 bad records in epoch 0, over the budget of 1 (max_skipped=1, max_skipped_fraction=None of 100 records). Latest: record 9: bad bytes. Raise the skip budget or fix the data.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.errors import RecordError
from datarax.core.position import saved_count
from datarax.host.counts import count_words
from datarax.host.dtypes import NarrowingError
from datarax.sources.decoded_records import SKIP_ADVICE, describe_cause, structure_hint
# the policy itself imports no JAX or Flax (decode worker processes receive it)
from datarax.sources.error_policy import ON_ERROR_CHOICES, ErrorPolicy
from datarax.sources.open_readers import FileChangedError
from datarax.storage.errors import RemoteObjectError

__all__ = [
    "ON_ERROR_CHOICES",
    "MAX_REPORTS",
    "ErrorPolicy",
    "SkippedRecord",
    "SkipLedger",
    "SkipCounts",
    "LedgerReads",
    "bad_record_error",
    "out_of_files",
    "record_place",
    "SKIP_ADVICE",
    "add_on_error_advice",
]

MAX_REPORTS = 10_000


def record_place(path: str | None, index_in_file: int) -> str:
    """Where a record is, as messages name it: ``record 7`` (a source without files) or
    ``record 7 of file 'x.array_record'``."""
    if path is None:
        return f"record {index_in_file}"
    return f"record {index_in_file} of file '{path}'"


def add_on_error_advice(config_name: str) -> str:
    """How to skip bad records with a source whose config (``config_name``) has no
    ``on_error`` field: add one (the skip advice of such a source's messages)."""
    return (f"give {config_name} an on_error field (mix in "
            "datarax.sources.random_access.BadRecordFields) and construct the source with "
            "on_error='skip'")


def out_of_files(cause: BaseException) -> bool:
    """Whether ``cause`` is the process running out of file descriptors (``EMFILE``):
    not the record's fault, so never skipped (``on_error="skip"``) but raised.

    Example:
        >>> import errno
        >>> out_of_files(OSError(errno.EMFILE, "Too many open files")), out_of_files(OSError())
        (True, False)
    """
    return isinstance(cause, OSError) and cause.errno == errno.EMFILE


def bad_record_error(name: str, place: tuple[str | None, int], cause: BaseException, *,
                     skipping: bool, epoch: int | None = None,
                     skip_advice: str = SKIP_ADVICE) -> RecordError:
    """The :class:`RecordError` of source ``name``'s record at ``place`` (``(path,
    index in file)``) failing with ``cause``: where it is, what went wrong and what to do
    (``skipping``: the source skips bad records already, so only the data can be fixed;
    ``skip_advice``: how to skip them, :func:`add_on_error_advice` for a config without
    ``on_error``).

    Example:
        >>> str(bad_record_error("MySource", ("a.bin", 3), ValueError("bad"), skipping=True))
        "MySource: cannot read record 3 of file 'a.bin': ValueError: bad. Fix or regenerate the file, or the decode if it is what raised."
    """
    path, in_file = place
    detail = describe_cause(cause)
    when = "" if epoch is None else f" (epoch {epoch})"
    if isinstance(cause, (RemoteObjectError, FileChangedError)):  # its text says what to do
        hint = ""
    elif out_of_files(cause):  # not the file's fault
        hint = ("The file is fine: the process has as many files open as its limit allows "
                "(ulimit -n); raise the limit (e.g. ulimit -n 8192 in the shell that starts "
                "the program) or close the sources you are done with.")
    elif skipping:  # skipping already (no record of the first few decodes)
        hint = "Fix or regenerate the file, or the decode if it is what raised."
    elif isinstance(cause, NarrowingError):  # a setting to change, not a broken file
        hint = (f"The record is otherwise readable: do as above, or {skip_advice} "
                "to drop such records (they are counted and reported).")
    else:  # records that differ from the first: the decode's to fix, not the file
        hint = structure_hint(cause, skip_advice) or (
            "Fix or regenerate the file (or the decode, if it is what raised), or "
            f"{skip_advice} to drop bad records (they are counted and reported).")
    message = f"{name}: cannot read {record_place(path, in_file)}{when}: {detail}. {hint}".rstrip()
    if isinstance(cause, RemoteObjectError):  # still the store's error: except clauses catch it
        err: RecordError = RemoteObjectError(message, url=cause.url, index=in_file)
    elif isinstance(cause, FileChangedError):  # ... and still a changed file's
        err = FileChangedError(message, path=path, index=in_file)
    else:
        err = RecordError(message, path=path, index=in_file)
    err.__cause__ = cause
    return err


@dataclasses.dataclass(frozen=True)
class SkippedRecord:
    """One record dropped under ``on_error="skip"``: where it is and why.

    ``position``: its position in the epoch (this shard's order); ``index``: its stable
    record index; ``path`` / ``index_in_file``: where it is stored (``path`` None when
    the source has no files); ``cause``: what was wrong, as text.
    """

    epoch: int
    position: int
    index: int
    path: str | None
    index_in_file: int
    cause: str

    @property
    def where(self) -> str:
        """``record 7`` or ``record 7 of file 'x.array_record'``."""
        return record_place(self.path, self.index_in_file)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SkipLedger:
    """Bad records of one reader: pulled ahead, committed as the consumer passes them.

    Args:
        policy: the :class:`ErrorPolicy` (budgets).
        name: how errors name the source (``"ArrayRecordSourceModule"``).
    """

    def __init__(self, policy: ErrorPolicy, name: str) -> None:
        self.policy = policy
        self.name = name
        self.reports: list[SkippedRecord] = []  # the first MAX_REPORTS committed skips
        self.total = 0  # every distinct committed skip since the ledger was made
        # Positions already reported, per epoch: one closed range per reading session
        # that committed a skip. A session reads its positions in order, so every bad
        # record between the first and last one it committed was committed by it.
        self._seen: dict[int, list[list[int]]] = {}
        self._span: list[int] | None = None  # [first, last] this session committed
        self._span_epoch = 0
        self.begin(0)

    def begin(self, epoch: int, skipped: int = 0) -> None:
        """Start (or resume) ``epoch`` with ``skipped`` records already skipped before
        the position it resumes at (from a saved state)."""
        self.epoch = int(epoch)
        self.skipped = int(skipped)  # committed skips this epoch
        self._pulled = int(skipped)  # committed + pending (the budget counts these)
        self._pending: collections.deque[SkippedRecord] = collections.deque()
        self._span = None
        for old in [e for e in self._seen if e < self.epoch - 1]:  # keep this and the last
            del self._seen[old]

    @property
    def pulled(self) -> int:
        """Skips this epoch, committed or still pending (what the budget counts)."""
        return self._pulled

    def drop_pending(self) -> None:
        """Forget skips read ahead but not reached (the read-ahead was discarded)."""
        self._pulled -= len(self._pending)
        self._pending.clear()

    def pull(self, record: SkippedRecord, *, epoch_size: int | None) -> None:
        """A bad record met ahead of the consumer; raises once the budget is exceeded.

        Records must be pulled in position order.
        """
        self._pending.append(record)
        self._pulled += 1
        budget = self.policy.budget(epoch_size)
        if budget is not None and self._pulled > budget:
            raise self.over_budget(self._pulled, budget, epoch_size, record)

    def commit(self, position: int) -> None:
        """The consumer has passed every position below ``position``: count the bad
        records there as skipped and report them."""
        while self._pending and self._pending[0].position < position:
            record = self._pending.popleft()
            self.skipped += 1
            if self._reported(record):
                continue
            self.total += 1
            if len(self.reports) < MAX_REPORTS:
                self.reports.append(record)

    def _reported(self, record: SkippedRecord) -> bool:
        """Whether an earlier session committed ``record`` (same epoch and position);
        notes it as committed by this session either way."""
        spans = self._seen.setdefault(record.epoch, [])
        seen = any(first <= record.position <= last for first, last in spans)
        if self._span is None or self._span_epoch != record.epoch:
            self._span, self._span_epoch = [record.position, record.position], record.epoch
            spans.append(self._span)
        self._span[1] = record.position
        return seen

    def check_pass_end(self, records: int) -> None:
        """At the end of a pass of unknown size: check ``max_skipped_fraction`` against
        the ``records`` (handed out and skipped) the pass turned out to hold."""
        if self.policy.max_skipped_fraction is None:
            return
        budget = self.policy.budget(records)
        assert budget is not None
        if self._pulled > budget:  # pending ones too: a reader may check before handing out
            pending = self._pending[-1] if self._pending else None
            latest = pending or (self.reports[-1] if self.reports else None)
            raise self.over_budget(self._pulled, budget, records, latest)

    def over_budget(
        self, count: int, budget: int, epoch_size: int | None, latest: SkippedRecord | None
    ) -> RecordError:
        """The error for ``count`` skips over ``budget``, naming the latest bad record."""
        policy = self.policy
        of = f" of {count_words(epoch_size, 'record')}" if epoch_size is not None else ""
        last = (
            f"{latest.where}: {latest.cause.rstrip('.')}"
            if latest is not None
            else "(not reported)"
        )
        return RecordError(
            f"{self.name}: skipped {count} bad records in epoch {self.epoch}, over the budget "
            f"of {budget} (max_skipped={policy.max_skipped}, max_skipped_fraction="
            f"{policy.max_skipped_fraction}{of}). Latest: {last}. Raise the skip budget or "
            "fix the data.",
            path=latest.path if latest is not None else None,
            index=latest.index_in_file if latest is not None else None,
        )


class LedgerReads:
    """Mixin of a reader keeping the bad records it passes in a :class:`SkipLedger`
    (``ledger``): what it skipped, read off the ledger."""

    ledger: SkipLedger

    @property
    def skipped(self) -> int:
        """Records skipped at positions below the reader's ``position`` this pass."""
        return self.ledger.skipped

    def skipped_records(self) -> list[SkippedRecord]:
        """Reports of records skipped so far (first ``MAX_REPORTS``), in order."""
        return list(self.ledger.reports)


class SkipCounts:
    """Mixin of a source that skips bad records: ``skipped``, the records of the current
    epoch skipped before the position (an ``nnx.Variable``: the ``"skipped"`` of the
    source's state, which a pipeline puts back after a failed batch); zero at an
    epoch's start. The source's reader keeps the :class:`SkipLedger` the count follows.
    """

    skipped: nnx.Variable[Any]

    def _init_skips(self) -> None:
        """Make the count (zero); in ``__init__``."""
        self.skipped = nnx.Variable(np.asarray(0, np.int64))

    def _skips(self) -> int:
        return int(self.skipped.get_raw_value())  # read per batch: no copy of the value

    def _set_skips(self, count: int) -> None:
        self.skipped.set_value(np.asarray(count, np.int64))

    def skip_state(self) -> dict[str, Any]:
        """What this source skipped as bad this epoch before its position, as its state
        carries it: ``{"skipped": n}``; a source built from others adds its children's
        counts. A failed batch puts it back, a parent keeps a child's, and
        :meth:`restore_skip_state` takes it back.

        Example:
            >>> import os, tempfile
            >>> from datarax.sources import NpySource, NpySourceConfig
            >>> path = os.path.join(tempfile.mkdtemp(), "x.npy"); np.save(path, np.arange(5))
            >>> source = NpySource(NpySourceConfig(paths=path, on_error="skip"))
            >>> source.seek(0, 3); source.restore_skip_state({"skipped": 1})
            >>> source.skip_state(), source.close()
            ({'skipped': 1}, None)
        """
        return {"skipped": self._skips()}

    def restore_skip_state(self, state: Mapping[str, Any]) -> None:
        """Take back the counts :meth:`skip_state` gave, at the position the source was
        moved to (``seek``) first."""
        self._set_skips(state["skipped"])

    def _skips_at_start(self) -> None:
        """The position was set from outside (``_moved``): at an epoch's start nothing
        is skipped yet."""
        if self.index == 0:  # type: ignore[attr-defined]
            self._set_skips(0)

    def _checked_skips(
        self, state: Any, *, where: str, length: int | None = None
    ) -> tuple[int, int, int]:
        """``(epoch, index, skipped)`` of a saved ``state``, checked against this source's
        position (epoch and index) and settings (as ``check_state``); ``"skipped"``
        (absent: 0) must be an int in ``[0, index]``: a source cannot have skipped more
        records than it passed."""
        epoch, index = self.datarax_position.check_state(  # type: ignore[attr-defined]
            state, length=length, where=where,
            settings=self._saved_settings(restoring=True),  # type: ignore[attr-defined]
        )
        skipped = saved_count(state, "skipped", where, default=0, at_most=index,
                              meaning=f"records skipped as bad before position {index}")
        return epoch, index, skipped

    def _resume(self, epoch: int, index: int, skipped: int) -> None:
        """Stand at ``index`` of pass ``epoch`` with ``skipped`` records skipped before."""
        self.seek(epoch, index)  # type: ignore[attr-defined]
        self._set_skips(skipped)


def skipped_in_epoch(source: Any) -> int:
    """Records of ``source``'s current epoch skipped as bad (``on_error="skip"``) before
    its position; 0 for a source that skips none."""
    return source._skips() if isinstance(source, SkipCounts) else 0

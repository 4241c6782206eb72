"""One pass of a host source: read → check → stages → placement, here or read ahead.

:class:`HostPass` turns a host source's NumPy batches into what the pipeline yields:
checked against ``element_spec()``, staged, checked for NaN/inf when asked, and placed.
:meth:`HostPass.produce` reads them through a cursor (peeked, then committed by the
consumer as it hands each out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, head_rows
from datarax.core.cursor import ReadAheadCursor
from datarax.core.dtypes import TEXT_KINDS, is_host_leaf, text_as_list
from datarax.core.errors import SpecMismatchError
from datarax.core.keys import draw, step_indices
from datarax.core.lengths import wide_stable_indices
from datarax.core.operator import all_per_record
from datarax.core.owned import owned_device_put_all
from datarax.core.spec import (
    TextSpec,
    checked_batch,
    checked_spec,
    first_nonfinite,
    flatten_fields,
    record_bytes,
)
from datarax.core.stages import apply_stages
from datarax.pipeline.devices import place_batch, stage_context, stage_device
from datarax.pipeline.pass_spec import PassSpec
from datarax.pipeline.plan import PassContext
from datarax.pipeline.steps import pass_constants, stage_step
from datarax.typing import Batch

#: (position after the batch, the batch or None where drop_remainder drops it)
AheadItem = tuple[int, Batch | None]
#: batches ready at the source are taken in one go, up to these limits: one device copy
#: call and one wake-up for them
AHEAD_GROUP_BATCHES = 16
AHEAD_GROUP_BYTES = 16 << 20



def padded_rows(array: Any, size: int) -> np.ndarray:
    """``array`` (a host field of a short batch) with its last row repeated up to
    ``size`` rows."""
    array = np.asarray(array)
    return np.concatenate([array, np.repeat(array[-1:], size - len(array), axis=0)])


def padded_size(batch_size: int, source: Any) -> int:
    """The rows a short batch of ``source`` is padded to: ``batch_size``, or an epoch's
    records where fewer."""
    size = source.epoch_size()
    return batch_size if size is None else min(batch_size, max(size, 1))


def text_as_lists(batch: Batch, spec: Any) -> Batch:
    """``batch`` with the ``spec``'s text fields as lists (:func:`text_as_list`).

    Example:
        >>> spec = {"word": TextSpec(), "x": jax.ShapeDtypeStruct((), np.int64)}
        >>> text_as_lists({"word": np.array(["a", "b"]), "x": np.arange(2)}, spec)["word"]
        ['a', 'b']
    """
    return jax.tree.map(lambda s, v: text_as_list(v) if isinstance(s, TextSpec) else v,
                        spec, batch)


def number_arrays(batch: Batch) -> bool:
    """Whether ``batch`` is a flat dict of NumPy arrays of numbers.

    >>> number_arrays({"x": np.zeros(2)}), number_arrays({"w": np.array(["a"])})
    (True, False)
    """
    return type(batch) is dict and all(
        type(v) is np.ndarray and v.dtype.kind not in TEXT_KINDS for v in batch.values())


def has_list_leaf(batch: Batch) -> bool:
    """Whether a (nested) dict ``batch`` has a list field (text as lists, or numbers).

    >>> has_list_leaf({"x": np.arange(2)}), has_list_leaf({"m": {"w": ["a", "b"]}})
    (False, True)
    """
    return any(isinstance(v, list) for v in flatten_fields(batch).values())


def check_finite(source: Any, epoch: int, batch: Batch, stable: Callable[[], Any], at: int,
                 filtered: bool = False) -> None:
    """Raise naming the first record of ``batch`` (from epoch position ``at``) holding NaN
    or inf; ``stable()`` gives stable indices (``filtered``: rows are not ``at + row``)."""
    found = first_nonfinite(batch)
    if found is None:
        return
    field, row = found
    index = int(np.asarray(stable())[row])
    where = (f"the record with stable index {index} (row {row} of a filtered batch read "
             f"from position {at} of epoch {epoch} on)" if filtered else
             f"the record at position {at + row} of epoch {epoch} (stable index {index})")
    # imported on the error's path only
    from datarax.sources.random_access import RandomAccessSource
    from datarax.sources.skip_ledger import record_place

    if isinstance(source, RandomAccessSource):  # records in files: name the file too
        path, in_file = source.locate(index)
        if path is not None:
            where += f", {record_place(path, in_file)},"
    raise SpecMismatchError(
        f"{type(source).__name__}: field '{field}' of {where} holds "
        "NaN or inf (check_finite=True). Fix or filter that record in the source or "
        "the stage that produced it.",
        fields=[field],
    )


class HostPass:
    """The batches of pass ``epoch`` of a pipeline's host source; see the module."""

    def __init__(self, context: PassContext, epoch: int, filtered: bool = False) -> None:
        self.context = context
        self.source = context.source
        self.plan = context.plan
        self.stats = context.stats
        self.epoch = epoch
        self.batch_size = self.plan.batch_size
        # rows a short batch is padded to; a stream: its largest batch so far this pass
        self.sized = self.source.epoch_size() is not None
        self.padded = padded_size(self.batch_size, self.source) if self.sized else 0
        self.filtered = filtered  # the batches hold a FilterOperator's kept records
        self.wide = wide_stable_indices(self.source)
        self._stage_graph: tuple[Any, Any, Any] | None = None
        self.stages = list(context.stages)  # fixed for the pass (split once, see below)
        plan = self.plan
        # placed here (sharded, or staged on the host): no device copy after
        self.places = plan.placement is not None or bool(self.stages and plan.stages_on == "host")
        # the spec and what checking asks of it: read once a group of batches
        self.pass_spec = PassSpec(self.source)

    def _checked(self, batch: Batch, indices: Any, position: int) -> tuple[Batch, bool, bool]:
        """``batch`` checked, staged, checked for NaN/inf and placed on the mesh; then
        whether it still needs its device copy, and whether it is plain (exactly the
        spec's number arrays, in JAX's order: no host leaf to ask about)."""
        source, answers, stages = self.source, self.pass_spec, self.stages
        spec = answers.spec
        with self.stats.timer("validate"):
            plain = checked_batch(
                batch, spec, answers.fields, self.batch_size,
                where=f"{type(source).__name__} batch at record {position} of epoch {self.epoch}")
        if plain is None:  # passed the full check: text fields as lists, maybe list leaves
            batch = text_as_lists(batch, spec)
        else:
            batch = plain
        if stages:
            host = plain is None and (answers.text or has_list_leaf(batch))
            with self.stats.timer("stages"):
                batch = self._run_stages(stages, batch, np.asarray(indices), host)
        if self.plan.check_finite:  # on this process's rows, before they join a mesh
            check_finite(source, self.epoch, batch, lambda: indices, position, self.filtered)
        if self.places:
            return place_batch(self.plan, self.stats, batch, position, self.epoch), False, False
        return batch, not stages, plain is not None

    def _to_device(self, batches: list[Batch], plain: bool = False) -> list[Batch]:
        """The device copies of ``batches`` (host leaves stay), made by one call;
        ``plain``: each is a plain batch (:meth:`_checked`), its fields in JAX's order."""
        with self.stats.timer("transfer"):
            if plain:  # the fields are copied as they stand
                placed = iter(owned_device_put_all([v for b in batches for v in b.values()]))
                return [{k: next(placed) for k in b} for b in batches]
            if all(map(number_arrays, batches)):  # no host leaf: each field is copied
                placed = iter(owned_device_put_all([b[k] for b in batches for k in sorted(b)]))
                return [{k: next(placed) for k in sorted(b)} for b in batches]  # JAX's order
            flat = [jax.tree.flatten(b, is_leaf=is_host_leaf) for b in batches]
            arrays = [leaf for leaves, _ in flat for leaf in leaves if not is_host_leaf(leaf)]
            placed = iter(owned_device_put_all(arrays))
            return [
                jax.tree.unflatten(tree, [v if is_host_leaf(v) else next(placed) for v in leaves])
                for leaves, tree in flat
            ]

    def _run_stages(self, stages: list[Any], batch: Batch, indices: np.ndarray,
                    host: bool) -> Batch:
        """``stages`` over ``batch``: record by record on the host where it has ``host``
        leaves (text), else in the pass's compiled step."""
        epoch = np.int32(self.epoch)
        device = stage_device(self.plan)
        if host:
            with stage_context(self.plan):
                key = self.context.key_pair()
                if device is not None:
                    key = pass_constants(key, device=device)[0]
                return apply_stages(stages, batch, jnp.asarray(self._step_indices(indices)),
                                    epoch, draw(*key))
        if self._stage_graph is None:  # split and placed once per pass, not per batch
            graphdef, state = nnx.split(stages)
            self._stage_graph = (graphdef, *pass_constants(state, self.context.key_pair(),
                                                           device=device))
        graphdef, state, key = self._stage_graph
        count = len(indices)
        if not self.sized:
            self.padded = max(self.padded, count)
        if 0 < count < self.padded and all_per_record(stages):
            # a short batch runs padded and is cut after: one compiled step per epoch
            batch = jax.tree.map(lambda v: padded_rows(v, self.padded), batch)
            indices = padded_rows(indices, self.padded)
            out = stage_step(graphdef)(state, batch, self._step_indices(indices), epoch, key)
            return jax.tree.map(lambda v: head_rows(v, count), out)
        return stage_step(graphdef)(state, batch, self._step_indices(indices), epoch, key)

    def _step_indices(self, indices: np.ndarray) -> np.ndarray:
        """What the stages' step takes for ``indices`` (see :func:`step_indices`)."""
        return step_indices(indices, self.wide, self.source)

    # ------------------------------------------------------------------ batches
    def produce(self, cursor: ReadAheadCursor,
                group: bool = True) -> Callable[[], list[AheadItem] | None]:
        """A ``produce`` for the read-ahead worker (or the loop's thread): the next batch
        peeked from ``cursor`` and prepared, with ``group`` the ready batches after it
        too (not after the pass's first); None at the end. An error after a group's
        first batch is raised by the next call."""
        position = self.source.index
        held: list[BaseException] = []  # an error met after a group's first batch
        limit = 0  # batches of a group: set when the cursor first says more are ready
        first = 0  # the end of the pass's first batch, once made

        def group_limit() -> int:
            batch_bytes = max(record_bytes(checked_spec(self.source)) * self.batch_size, 1)
            return max(1, min(AHEAD_GROUP_BATCHES, AHEAD_GROUP_BYTES // batch_bytes))

        def produce() -> list[AheadItem] | None:
            nonlocal position, limit, first
            if held:
                raise held.pop()
            items: list[AheadItem] = []
            copies: list[int] = []  # the items whose batches still need their device copy
            plain = True  # and every one of them is plain
            spec_read = False  # the spec is read once a group (x64 may switch between)
            try:
                while True:
                    with self.stats.timer("read"):
                        read = cursor.peek(self.batch_size)
                    if read is None:
                        break
                    columns, indices, end = read
                    batch = None
                    if batch_length(columns) == self.batch_size or not self.plan.drop_remainder:
                        if not spec_read:
                            self.pass_spec.read()
                            spec_read = True
                        batch, copy, plain_one = self._checked(dict(columns), indices, position)
                        if copy:
                            copies.append(len(items))
                            plain = plain and plain_one
                    first = first or end
                    position = end
                    items.append((end, batch))
                    if (batch is None or not group or first == end
                            or not cursor.ready(self.batch_size)):
                        break
                    limit = limit or group_limit()
                    if len(items) >= limit:
                        break
            except Exception as err:  # noqa: BLE001 - after the batches before it
                if not items:
                    raise
                held.append(err)
            if not items:
                return None
            if copies:
                placed = self._to_device([items[i][1] for i in copies], plain)  # type: ignore[misc]
                for i, batch in zip(copies, placed):
                    items[i] = (items[i][0], batch)
            return items

        return produce


"""``Pipeline``: a source, a list of stages and a batch size, iterated epoch by epoch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

import datarax.pipeline.state as state_format
from datarax.core.data_source import DataSourceModule, check_contract
from datarax.core.errors import ConfigError
from datarax.core.keys import default_key, reserve_draw, seed_key
from datarax.core.operator import OperatorModule, warn_unseeded
from datarax.core.signature import InitSignature
from datarax.core.source_copy import deepcopy_module
from datarax.pipeline.arguments import check_arguments, check_share
from datarax.pipeline.compile_ahead import compile_ahead
from datarax.pipeline.devices import (
    check_processes_agree,
    check_stages_on,
    placement_for,
    refusal_shared,
)
from datarax.host.counts import check_count
from datarax.pipeline.epochs import EmptyPasses, Repeat, Take
from datarax.pipeline.filtered import check_filter
from datarax.pipeline.fused import scan_pipeline
from datarax.pipeline.iterator import PipelineIterator, output_spec, traced_call
from datarax.pipeline.plan import PassContext, PipelinePlan, PipelineSession, filter_position
from datarax.core.stage_digest import remember_sources
from datarax.typing import Batch, IntLike


class Pipeline(nnx.Module):
    """Batches of JAX arrays from a source through a list of stages.

    Every ``iter(pipeline)`` is one pass over the source: each record once, the last
    batch short or dropped (``drop_remainder=True``). Indexed sources run as one
    compiled step per batch; host and stream sources are read and checked on the host.

    The source owns the position (``pipeline.epoch``, ``pipeline.position``).
    ``iter(pipeline)`` starts the next pass, or continues the one a restore (``set_state``,
    ``source.set_state``, ``nnx.update``) left; an ended pass moves the position to the
    next epoch's start (docs/reliability.md, "Epoch ends"). One iterator per pipeline is
    live: a new ``iter`` ends the previous one, which then raises
    :class:`~datarax.core.errors.StaleIteratorError`.

    Args:
        source: a :class:`~datarax.core.data_source.DataSourceModule`.
        stages: operators or plain callables mapping a batch dict to a batch dict, in order.
        batch_size: records per batch (>= 1).
        rngs: base key of stochastic stages built without their own ``rngs``. Defaults to
            ``nnx.Rngs(0)``, with a warning naming those stages.
        seed: an int in [0, 2**32) instead of ``rngs``: the batches of
            ``rngs=nnx.Rngs(seed)``, with no device work.
        drop_remainder: drop the short last batch of each epoch.
        prefetch: batches prepared ahead on a worker thread (for random-access host
            sources up to 8 more, at most 8 MiB, may wait placed); 0 prepares each on the
            loop's thread. The position counts only batches handed out.
        shard_index, shard_count: this process's share of every epoch; default
            ``jax.process_index()`` of ``jax.process_count()``. Shares are disjoint, equally
            long blocks of the epoch's order; the last ``len(source) % shard_count``
            positions are left out (``pad_remainder``: shares rounded up with padding
            rows instead). More processes than records is refused unless ``pad_remainder``.
        check_finite: refuse batches holding NaN or inf in a floating field, naming the
            field and record (copies each batch to the host: a debugging aid).
        sharding: a ``NamedSharding`` or ``(Mesh, PartitionSpec)``: batches come out as
            global ``jax.Array``s split over the spec's first entry (docs/devices.md).
            Not part of the saved state.
        pad_remainder: pad each epoch's short last batch to ``batch_size`` and add a
            boolean ``"valid"`` field (False on padding rows): one shape, each record
            counted once, the same number of batches on every shard (docs/filtering.md).
        stages_on: where the compiled step runs: ``"device"`` (default) or ``"host"``
            (the host CPU; batches then move to the default device or ``sharding``).
            Float stages agree within docs/devices.md's tolerance. Not part of the saved
            state; ``scan`` needs ``"device"``.

    A ``FilterOperator`` stage makes the pipeline hand out full batches of the records it
    keeps (docs/filtering.md); ``len()`` is then unknown.

    Example:
        >>> import numpy as np
        >>> from flax import nnx
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
        >>> p = Pipeline(source=src, stages=[], batch_size=2, rngs=nnx.Rngs(0))
        >>> len(p), [b["x"].tolist() for b in p]
        (3, [[0, 1], [2, 3], [4]])
        >>> p.epoch, p.position  # the pass ended: the position is epoch 1's start
        (1, 0)
    """
    __signature__ = InitSignature()  # inspect.signature / help(): __init__'s parameters

    def __init__(
        self,
        source: DataSourceModule,
        stages: Sequence[OperatorModule | Callable[[Batch], Batch]] = (),
        batch_size: IntLike = 32,
        rngs: nnx.Rngs | None = None,
        drop_remainder: bool = False,
        *,
        prefetch: IntLike = 2,
        shard_index: IntLike | None = None,
        shard_count: IntLike | None = None,
        check_finite: bool = False,
        sharding: Any = None,
        pad_remainder: bool = False,
        seed: IntLike | None = None,
        stages_on: str = "device",
    ) -> None:
        with refusal_shared(sharding):  # else the other processes wait for this one
            if seed is not None and rngs is not None:
                raise ConfigError(
                    "Pipeline got both rngs= and seed=; give one: seed=0 stands for "
                    "rngs=nnx.Rngs(0)."
                )
            seeded = None if seed is None else seed_key(seed, "Pipeline")
            batch_size, prefetch, index, count, reading = check_arguments(
                source, stages, batch_size, prefetch, shard_index, shard_count,
                drop_remainder=drop_remainder, check_finite=check_finite, sharding=sharding,
                pad_remainder=pad_remainder,
            )
            try:
                source.set_shard(index, count, padded=pad_remainder)
            except ValueError as err:
                raise ConfigError(f"Pipeline: {err}") from err
            stages_on = check_stages_on(stages_on)
            size = check_share(source, count, batch_size, drop_remainder)
            placement = None if sharding is None else placement_for(
                sharding, batch_size, None if drop_remainder else size
            )
            self.source = source
            self.stages = nnx.List(list(stages))
            remember_sources(stages)
            self.plan = PipelinePlan(batch_size, drop_remainder, prefetch, check_finite, placement,
                                     pad_remainder, stages_on, reading)
            # Unseeded stages fold_in(key, stage position) in-step: no device work here.
            if seeded is not None:
                key, draws = seeded
            elif rngs is not None:
                key, draws = reserve_draw(rngs, "default", "Pipeline")
            else:
                key, draws = default_key(), np.asarray(0, np.uint32)
                warn_unseeded(stages)
            self.key = nnx.Variable(key)
            self.key_count = nnx.Variable(draws)
            self.__held = PipelineSession(self.__anchor())
            self.__held.share = (source.shard.index, source.shard.count, source.shard.padded)
        check_processes_agree(self._context())
        at = filter_position(list(stages))
        if at is not None:
            check_filter(source, list(stages), at, self._spec_after, self.plan)
        compile_ahead(self._context(), at)  # the first pass's programs, on a thread

    __deepcopy__ = deepcopy_module  # an independent copy, as nnx.clone (core/source_copy.py)

    def __repr__(self) -> str:
        stages = ", ".join(type(s).__name__ for s in getattr(self, "stages", ()))
        plan = getattr(self, "plan", None)
        return (f"Pipeline(batch_size={getattr(plan, 'batch_size', '?')}, stages=[{stages}], "
                f"source={getattr(self, 'source', None)!r})")

    def __anchor(self) -> Any:
        return self.source.datarax_position.index_var

    @property
    def __session(self) -> PipelineSession:
        """This pipeline's bookkeeping, tied to the source's position Variable: a merge of
        a live state shares it; a clone or a saved state's merge gets its own."""
        session = self.__held
        if session.anchor is not self.__anchor():
            session = self.__held = PipelineSession(self.__anchor())
        return session

    def _spec_after(self, stages: list[Any]) -> Any:
        """Per-record spec after ``stages`` (abstract), for build-time checks."""
        return output_spec(dataclasses.replace(self._context(), stages=stages))

    @property
    def filtered(self) -> bool:
        """Whether a ``FilterOperator`` decides which records an epoch hands out."""
        return filter_position(list(self.stages)) is not None

    def _iterator(self, epoch: int, resume_at: int | None) -> PipelineIterator:
        return PipelineIterator(self._context(), epoch, resume_at)

    @classmethod
    def from_dag(
        cls,
        source: DataSourceModule,
        nodes: dict[str, OperatorModule | Callable[[Batch], Batch]],
        edges: dict[str, Sequence[str]],
        sink: str,
        batch_size: IntLike = 32,
        rngs: nnx.Rngs | None = None,
        **options: Any,
    ) -> Pipeline:
        """A Pipeline whose one stage is the graph ``nodes`` wired by ``edges``.

        ``edges[name]`` lists node ``name``'s predecessors (``"source"``: the source's
        batch); ``sink``'s output is handed out. ``options`` are the other ``Pipeline``
        arguments. See :class:`~datarax.dag.DagOperator`.

        Example:
            >>> import numpy as np
            >>> from datarax.dag import Merge, SelectFields
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)})
            >>> p = Pipeline.from_dag(src, nodes={"a": SelectFields("x"), "m": Merge()},
            ...                       edges={"a": ["source"], "m": ["a"]}, sink="m", batch_size=3)
            >>> batch = next(iter(p)); sorted(batch), batch["a_x"].tolist()
            (['a_x'], [0, 1, 2])
        """
        from datarax.dag import DagOperator

        if "stages" in options:
            raise ConfigError(
                "Pipeline.from_dag makes the graph the pipeline's one stage and takes no "
                "stages=; for stages before or after the graph (a FilterOperator, say), build "
                "Pipeline(source, stages=[..., DagOperator(nodes, edges, sink), ...])."
            )
        graph = DagOperator(nodes, edges, sink)
        return cls(source=source, stages=[graph], batch_size=batch_size, rngs=rngs, **options)

    # ------------------------------------------------------------- description
    @property
    def batch_size(self) -> int:
        return self.plan.batch_size

    @property
    def drop_remainder(self) -> bool:
        return self.plan.drop_remainder

    @property
    def stages_on(self) -> str:
        """Where the compiled step runs: ``"device"`` or ``"host"``."""
        return self.plan.stages_on

    @property
    def epoch(self) -> int:
        """The pass the source stands in (read from the source)."""
        return self.source.epoch

    @property
    def position(self) -> int:
        """Records of that pass handed out (read from the source)."""
        return self.source.index

    def __len__(self) -> int:
        """Batches in one epoch of this shard; ``TypeError`` for a stream or a filtered
        epoch. Skipped bad records (``on_error="skip"``) are counted."""
        return self.plan.batches(self._context().epoch_size(
            "len(Pipeline)", "len(Pipeline) is unknown for a filtered epoch"))

    def element_spec(self) -> Any:
        """Per-record structure of the batches handed out, computed abstractly (nothing
        read). With text fields the stages run untraced on the host, so this is the
        source's spec."""
        spec = output_spec(self._context())
        if self.plan.pad_remainder:
            spec = {**spec, "valid": jax.ShapeDtypeStruct((), np.bool_)}
        return spec

    def _context(self) -> PassContext:
        """What a pass reads of this pipeline (see :mod:`datarax.pipeline.plan`)."""
        return PassContext(self.plan, self.source, self.stages, self.key, self.key_count,
                           self.__session)

    def peek(self) -> Batch:
        """The first batch the next ``for batch in pipeline`` would hand out, without
        moving the position. After ``step()`` or inside a loop that is the next pass's
        first batch, not the live iterator's next one (``next(iterator)``, ``step()``)."""
        source, session = self.source, self.__session
        epoch, index = source.epoch, source.index
        previous, left = session.live, session.left
        was_left_here = session.next_pass(source)[1] is None
        empties = EmptyPasses(source, "peek()")
        try:
            while True:  # a restored pass may have nothing left: then the next (counted too)
                with session.stats.uncounted(), self._iterator(
                        *session.next_pass(source)) as iterator:
                    batch = next(iterator, None)
                if batch is not None:
                    return batch
                empties.ended(True)
        finally:
            source.seek(epoch, index)
            session.live, session.left = previous, left
            if was_left_here:  # the seek back counts as a restore; keep "left here" true
                session.note_left(source)

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, Any]:
        """Per-stage seconds, counts and the slowest steady-state stage since construction
        or :meth:`reset_stats`; a source's own counters under ``"source"``.
        See :mod:`datarax.pipeline.stats`."""
        source_stats = self.source.stats() if self.plan.reading.reports_stats else None
        return self.__session.stats.as_dict(source_stats)

    def reset_stats(self) -> None:
        """Zero the pipeline's counts and timers (a source's own counters keep counting)."""
        self.__session.stats.reset()

    # ------------------------------------------------------------ fingerprints
    def stages_fingerprint(self) -> str:
        """A short, stable digest of the stages (part of a saved state's settings)."""
        return state_format.stages_fingerprint(self.stages)

    def rng_fingerprint(self) -> str:
        """A short digest of every key the pipeline and its stages draw from."""
        return state_format.rng_fingerprint(self._context())

    def key_pair(self) -> tuple[Any, Any]:
        """``(key, count)``: the pipeline key is ``fold_in(key, count)`` (made in-step)."""
        return self.key.get_value(), self.key_count.get_value()

    # --------------------------------------------------------------- iteration
    def __iter__(self) -> PipelineIterator:
        """Start the next pass (or continue the one a restore left the source in)."""
        check_contract(self.source)
        session = self.__session
        epoch, resume_at = session.next_pass(self.source)
        live = session.live_iterator()
        if live is not None:  # end it before the new pass moves the source
            live.supersede()
        iterator = self._iterator(epoch, resume_at)
        session.adopt(iterator)
        return iterator

    # ------------------------------------------------------ parts of passes
    def take(self, batches: int) -> Take:
        """An iterator over at most ``batches`` batches of the next pass; its
        ``get_state`` / ``set_state`` resume exactly.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(9, dtype=np.int32)})
            >>> p = Pipeline(source=src, batch_size=2)
            >>> [b["x"].tolist() for b in p.take(2)]
            [[0, 1], [2, 3]]
        """
        return Take(self, batches, self._context())

    def skip(self, batches: int) -> PipelineIterator:
        """The next pass's iterator, ``batches`` batches in (sought directly where
        possible, else read and dropped). The state resumes after the skipped records.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
            >>> [b["x"].tolist() for b in Pipeline(source=src, batch_size=2).skip(1)]
            [[2, 3], [4]]
        """
        batches = check_count(batches, "Pipeline.skip", 0)
        source, session = self.source, self.__session
        epoch, at = session.next_pass(source)
        size = source.epoch_size()
        if (self.plan.reading.compiled and not self.filtered and size is not None
                and session.resplit(epoch) is None):
            at = at or 0
            source.seek(epoch, min(at + batches * self.batch_size, self.plan.end(size, at)))
            iterator = iter(self)
            if batches:  # as if handed out: a loop left now ends the pass
                session.note_left(source)
            return iterator
        iterator = iter(self)
        with session.stats.uncounted():
            for _ in range(batches):
                if next(iterator, None) is None:
                    break
        return iterator

    def repeat(self, epochs: int | None = None) -> Repeat:
        """One iterator over ``epochs`` passes in a row (``None``: without end), each a new
        epoch; its ``get_state`` / ``set_state`` resume exactly. Two empty passes in a
        row end it.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)})
            >>> [b["x"].tolist() for b in Pipeline(source=src, batch_size=2).repeat(2)]
            [[0, 1], [2], [0, 1], [2]]
        """
        return Repeat(self, epochs, self._context())

    # ----------------------------------------------------------- fused steps
    def step(self) -> Batch:
        """The next batch of the live pass, else of the next pass (calls go on across
        epochs); the position moves as with ``next(iter(pipeline))``.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySource, MemorySourceConfig
            >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(3, dtype=np.int32)})
            >>> p = Pipeline(source=src, batch_size=2)
            >>> [p.step()["x"].tolist() for _ in range(3)], p.epoch
            ([[0, 1], [2], [0, 1]], 1)
        """
        try:
            return self.__step()
        except Exception as err:
            refusal = traced_call("Pipeline.step()")
            if refusal is None:
                raise
            self.__session.drop_reuse()
            raise refusal from err

    def __step(self) -> Batch:
        live = self.__session.live_iterator()
        empties = EmptyPasses(self.source, "step()")
        while True:  # the live pass may have just ended: then new passes
            whole = False
            if live is None or live.exhausted:
                live = iter(self)
                self.__session.stepper = live  # keep it alive between calls
                whole = self.position == 0  # not the rest of a restored pass
            try:
                return next(live)
            except StopIteration:
                live = None
            empties.ended(whole)

    def scan(
        self, train_step: Callable[..., Any], length: int, modules: Any = ()
    ) -> Any:
        """Run ``length`` data + train steps as one compiled program (``jax.lax.scan``).

        Each step calls ``train_step(*modules, batch)`` on the next full batch (as
        :meth:`step`); NNX state the modules change is carried and written back. Returns
        ``train_step``'s outputs stacked on a new leading axis. The position moves past
        the batches; a scan that raises moves nothing. Indexed sources only; with
        ``sharding=``, one process only. See :mod:`datarax.pipeline.fused`.
        """
        if self.filtered:
            raise ConfigError(
                "Pipeline.scan runs a fixed number of batches at positions known before it "
                "starts; a FilterOperator's batches end where the kept records run out. "
                "Loop over the pipeline (or call step()) instead."
            )
        return scan_pipeline(self._context(), train_step, length, modules)

    # ------------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """State of the source's position: restore it with :meth:`set_state` to continue."""
        return state_format.get_state(self._context())

    def set_state(self, state: dict[str, Any]) -> None:
        """Make the next ``iter(pipeline)`` continue exactly where ``state`` was taken
        (a state of another process count: docs/reliability.md)."""
        state_format.restore(self._context(), state)

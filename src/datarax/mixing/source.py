"""``MixSource``: several sources mixed by weight, usable wherever a source is.

Record ``g`` comes from the source and draw :class:`~datarax.mixing.schedule.MixSchedule`
assigns it, a pure function of ``(weights, seed, g)``; how draws pick records in modes
``"epoch"`` and ``"sampling"`` is in docs/graphs.md ("Mixing sources by weight"). Each
source serves its weight's share of an epoch whatever its size: below, ``a`` serves 160
records an epoch (its pass, then 60 of its next) and ``b`` 40 (a pass takes 2.5 epochs).

State is the position plus, per child read by passes (a stream, or a source that skips
bad records), the draw its current pass began at; every other child's position is
derived, so a resume is a seek. A record's stable index is ``draw * num_sources + source``.

Example:
    >>> import numpy as np
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> a = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
    >>> b = MemorySource(MemorySourceConfig(), {"x": np.arange(100, 102, dtype=np.int32)})
    >>> mix = MixSource({"a": a, "b": b}, weights={"a": 2, "b": 1}, seed=0)
    >>> len(mix), sorted(int(e["x"]) for e in mix)
    (6, [0, 1, 2, 3, 100, 101])
    >>> a = MemorySource(MemorySourceConfig(), {"x": np.arange(100, dtype=np.int32)})
    >>> b = MemorySource(MemorySourceConfig(), {"x": np.arange(1000, 1100, dtype=np.int32)})
    >>> mix = MixSource({"a": a, "b": b}, weights={"a": 0.8, "b": 0.2})
    >>> for epoch in range(3):  # records: total, of a; b's first and last two
    ...     mix.seek(epoch, 0)
    ...     x = mix.get_batch_with_indices(len(mix))[0]["x"]
    ...     from_b = x[x >= 1000].tolist()
    ...     print(len(x), len(x) - len(from_b), from_b[:2], from_b[-2:])
    200 160 [1000, 1001] [1038, 1039]
    200 160 [1040, 1041] [1078, 1079]
    200 160 [1080, 1081] [1018, 1019]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import numpy as np
from flax import nnx

from datarax.core.batch import gather_rows
from datarax.core.children import ChildSources, check_no_config, child_settings
from datarax.core.config import StructuralConfig, check_seed
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.lengths import LengthIfKnown
from datarax.core.errors import ConfigError, StateError
from datarax.core.position import saved_counts
from datarax.core.reading import ReadMode, compiles_whole, kind_for, reading_of
from datarax.core.spec import checked_spec
from datarax.host.counts import check_count, count_words, python_ints
from datarax.mixing.checks import check_children, check_compiled_keys
from datarax.mixing.child_reads import ChildReads, interleave
from datarax.mixing.sampling import sampled_records
from datarax.mixing.schedule import MixSchedule, as_number
from datarax.typing import Batch

MODES = ("epoch", "sampling")


@dataclass(frozen=True)
class MixSourceConfig(StructuralConfig):
    """Configuration of :class:`MixSource`.

    Attributes:
        names: the sources' names, in order.
        weights: relative weight of each source (> 0), in the order of ``names``.
        mode: ``"epoch"`` (each source's records once per its own epoch) or
            ``"sampling"`` (with replacement).
        seed: decides the interleaving (and, sampling, the records drawn).
        records_per_epoch: records in one mixture epoch, each source serving its
            weight's share of them whatever its size; None: the sum of the sources'
            epoch sizes (``"epoch"``) or endless (``"sampling"``).
    """

    names: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    mode: str = "epoch"
    seed: int = 0
    records_per_epoch: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seed(self, "seed")
        if self.mode not in MODES:
            raise ConfigError(f"MixSource mode must be one of {list(MODES)}, got {self.mode!r}.")
        if not self.names:  # upstream's MixDataSourcesConfig(...) form, ported as it is
            raise ConfigError(
                "MixSource mixes 2 or more sources; this MixSourceConfig names none. "
                "MixSource builds its config from the sources: pass them there, "
                "MixSource([a, b], [0.7, 0.3], mode='epoch', seed=0), not a config."
            )
        if len(self.names) != len(self.weights):
            raise ConfigError(
                f"MixSource got {count_words(len(self.names), 'source')} and "
                f"{count_words(len(self.weights), 'weight')}; "
                "give one weight per source."
            )
        if len(self.names) < 2:
            raise ConfigError(f"MixSource mixes 2 or more sources, got {len(self.names)}.")
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"MixSource source names must be distinct, got {list(self.names)}.")
        if self.records_per_epoch is not None:  # a NumPy integer kept as the same int
            object.__setattr__(self, "records_per_epoch", check_count(
                self.records_per_epoch, "MixSource records_per_epoch", 1, " or None"))


class MixSource(LengthIfKnown, ChildSources, DataSourceModule):
    """Records of several sources interleaved by weight; see the module docstring.

    Args:
        sources: a dict ``{name: source}`` or a list (named ``source0``, ``source1`` ...);
            2 or more distinct sources with the same element spec.
        weights: relative weights, a dict by name, or a list or 1-D array (NumPy or JAX) in
            the sources' order.
        mode, seed, records_per_epoch: as in :class:`MixSourceConfig`.

    Raises:
        ConfigError: bad weights, mode, names or counts.
        SpecMismatchError: two sources disagree on a field.
        SourceContractError: a source that cannot be mixed (in sampling mode a stream or
            a source that skips bad records; one source given twice).
    """

    kind: ClassVar[SourceKind | None] = SourceKind.HOST

    def __init__(
        self,
        sources: Mapping[str, DataSourceModule] | Sequence[DataSourceModule],
        weights: Mapping[str, float] | Sequence[float] | np.ndarray,
        *extra: Any,
        mode: str = "epoch",
        seed: int = 0,
        records_per_epoch: int | None = None,
        name: str | None = None,
    ) -> None:
        if any(isinstance(v, MixSourceConfig) for v in (sources, weights, *extra)):
            raise ConfigError(
                "MixSource takes the sources and their weights, not a MixSourceConfig (it "
                "builds its config from them): MixSource([a, b], [0.7, 0.3], mode='epoch', "
                "seed=0), or by name, MixSource({'a': a, 'b': b}, {'a': 0.7, 'b': 0.3})."
            )
        check_no_config("MixSource", (sources, weights), extra,
                        takes="the sources and their weights",
                        call="MixSource([a, b], [0.7, 0.3], mode='epoch', seed=0)")
        if isinstance(sources, Mapping):
            names, children = [str(k) for k in sources], list(sources.values())
        elif isinstance(sources, Sequence) and not isinstance(sources, (str, bytes)):
            names, children = [f"source{i}" for i in range(len(sources))], list(sources)
        else:
            raise ConfigError(
                f"MixSource sources must be a dict {{name: source}} or a list, got "
                f"{type(sources).__name__}."
            )
        if not isinstance(weights, (Mapping, np.ndarray)) and hasattr(weights, "__array__"):
            weights = np.asarray(weights)  # a JAX array: read as the NumPy array it holds
        if isinstance(weights, Mapping):
            if set(map(str, weights)) != set(names):
                raise ConfigError(
                    f"MixSource weights name {sorted(map(str, weights))} but the sources are "
                    f"{sorted(names)}; give one weight per source."
                )
            by_name = {str(k): w for k, w in weights.items()}  # names are str(key)
            weight_list = [by_name[n] for n in names]
        elif isinstance(weights, np.ndarray) and weights.ndim == 1:
            weight_list = weights.tolist()
        elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
            weight_list = list(weights)
        elif isinstance(weights, np.ndarray):
            raise ConfigError(
                f"MixSource weights must be one weight per source, got an array of shape "
                f"{weights.shape}; pass a 1-D array, a list or a dict by name."
            )
        else:
            raise ConfigError(
                f"MixSource weights must be a dict by name, a list or a 1-D array, got "
                f"{type(weights).__name__}."
            )
        weight_list = [as_number(w) for w in weight_list]
        records_per_epoch = python_ints(records_per_epoch)
        config = MixSourceConfig(
            names=tuple(names),
            weights=tuple(float(w) if _is_number(w) else w for w in weight_list),
            mode=mode,
            seed=seed,
            records_per_epoch=records_per_epoch,
        )
        super().__init__(config, name=name)
        check_children(names, children, mode)
        self.schedule = nnx.static(MixSchedule(weight_list, seed, names))
        self.sources = nnx.List(children)
        lengths = [c.epoch_size() for c in children]
        if records_per_epoch is None and mode == "epoch":
            unknown = [n for n, length in zip(names, lengths) if length is None]
            if unknown:
                raise ConfigError(
                    f"MixSource cannot size an epoch: {unknown} do not know their length "
                    "(streams). Pass records_per_epoch=..."
                )
            records_per_epoch = int(sum(lengths))  # type: ignore[arg-type]
        self.__length = records_per_epoch
        self.__lengths = tuple(lengths)
        # per child read by passes: (epoch, first draw) of the pass it is in
        self.stream_passes = nnx.Variable(np.zeros((len(children), 2), np.int64))
        self.__reads = ChildReads(names, children, seed)
        if records_per_epoch is not None and compiles_whole(children):
            self.kind = kind_for(ReadMode.COMPILED)  # the whole mixture compiles into the step

    # ------------------------------------------------------------ description
    @property
    def names(self) -> tuple[str, ...]:
        return self.config.names

    def length_or_reason(self) -> int | str:
        return "it samples endlessly (mode='sampling')" if self.__length is None else self.__length

    def element_spec(self) -> dict[str, Any]:
        return dict(checked_spec(self.sources[0]))

    def stable_index_span(self) -> None:
        """None: stable indices count draws across passes, past any length."""
        return None

    def locate(self, record: int, epoch: int | None = None) -> tuple[str, int]:
        """``(source name, draw of that source)`` of record ``record`` of epoch ``epoch``
        (default: the current one) in this shard; ``IndexError`` for one out of range."""
        size = self.epoch_size()
        if (
            isinstance(record, bool)
            or not isinstance(record, (int, np.integer))
            or record < 0
            or (size is not None and record >= size)
        ):
            span = f"0 .. {size - 1}" if size is not None else "0 or more"
            raise IndexError(
                f"MixSource.locate: record {record!r} is not a record of the epoch; "
                f"records are numbered {span} in this shard."
            )
        if epoch is not None and (
            isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0
        ):
            raise IndexError(f"MixSource.locate: epoch must be an int >= 0, got {epoch!r}.")
        owner, draws = self.schedule.owners_and_draws(self._global(epoch, record), 1)
        return self.names[int(owner[0])], int(draws[0])

    def _global(self, epoch: int | None, index: int) -> int:
        epoch = self.epoch if epoch is None else epoch
        lo = self.shard.bounds(self.__length)[0] if self.__length is not None else 0
        return epoch * (self.__length or 0) + lo + index

    # ------------------------------------------------------- indexed (compiled)
    def _children(self) -> Any:
        return self.sources

    def _child_names(self) -> tuple[str, ...]:
        return self.names

    def reads_by_position(self) -> bool:
        """True when every source's records depend on their positions alone."""
        return all(reading_of(c).reads_by_position for c in self.sources)

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """``draw * num_sources + source`` of each record (traceable)."""
        check_compiled_keys(self.schedule, self.names, self.__length)
        owners, draws = self.schedule.owners_and_draws_jnp(start, size)
        return draws * len(self.sources) + owners

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        return self.get_batch_and_indices_at(start, size, key)[0]

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """Records ``start .. start + size - 1`` of the mixture, all sources indexed (traceable)."""
        jnp = jax.numpy
        check_compiled_keys(self.schedule, self.names, self.__length)
        owners, draws = self.schedule.owners_and_draws_jnp(start, size)
        indices = draws * len(self.sources) + owners
        if self.config.mode == "sampling":
            return self._sampled_batch_at(owners, draws, size), indices
        # each source's draws in the batch are consecutive: read each source's run (a
        # static length), lay the runs end to end and pick every record by one gather
        runs = np.minimum(self.schedule.max_counts(size), size).tolist()
        sources = jnp.arange(len(self.sources), dtype=owners.dtype)
        mine = owners[None, :] == sources[:, None]
        none = jnp.iinfo(draws.dtype).max
        firsts = jnp.min(jnp.where(mine, draws[None, :], none), axis=1)
        firsts = jnp.where(firsts == none, 0, firsts)  # a source absent from the batch
        offsets = jnp.asarray(np.cumsum([0, *runs[:-1]]), draws.dtype)
        at = draws + (offsets - firsts)[owners]
        parts = [child.get_batch_at(firsts[i], runs[i]) for i, child in enumerate(self.sources)]
        out = jax.tree.map(lambda *columns: gather_rows(jnp.concatenate(columns), at), *parts)
        return out, indices

    def _sampled_batch_at(self, owners: Any, draws: Any, size: int) -> Batch:
        """Sampling mode, traced: each record read alone."""
        jnp = jax.numpy
        out: Batch | None = None
        for i, child in enumerate(self.sources):
            mine = owners == i
            records = sampled_records(self.config.seed, i, draws, self.__lengths[i], xp=jnp)
            part = jax.vmap(lambda r, c=child: c.get_batch_at(r, 1))(records)
            picked = {k: v[:, 0] for k, v in part.items()}
            if out is None:
                out = picked
            else:
                out = {
                    k: jnp.where(mine.reshape((size,) + (1,) * (v.ndim - 1)), picked[k], v)
                    for k, v in out.items()
                }
        assert out is not None
        return out

    # ------------------------------------------------------------------ reads
    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """The next ``batch_size`` records of this mixture epoch and their stable indices."""
        batch_size = check_count(batch_size, f"{type(self).__name__} batch_size", 1)
        size = self.epoch_size()
        index = self.index
        if size is not None and index >= size:
            return None, None
        count = batch_size if size is None else min(batch_size, size - index)
        owners, draws = self.schedule.owners_and_draws(self._global(None, index), count)
        parts: dict[int, Batch] = {}
        for i in np.unique(owners).tolist():
            mine = draws[owners == i]
            try:
                parts[i] = self.__reads.read(i, self.sources[i], self.config.mode, mine,
                                             self.stream_passes)
            except Exception as err:
                err.add_note(
                    f"raised reading MixSource source '{self.names[i]}' "
                    f"({type(self.sources[i]).__name__}), its draws {int(mine[0])} .. "
                    f"{int(mine[-1])}"
                )
                raise
        self.datarax_position.advance(count)
        return interleave(parts, owners, self.element_spec()), draws * len(self.sources) + owners

    # ------------------------------------------------------------------ state
    def order_settings(self) -> dict[str, Any]:
        """Mode, weights (as whole units per schedule period: 4:2 and 2:1 are both
        ``[2, 1]``), seed, records per epoch, then each source's type, length and own
        settings under ``children[i].``."""
        out: dict[str, Any] = {
            "mode": self.config.mode,
            "weights": self.schedule.units.tolist(),
            "seed": self.config.seed,
            "records_per_epoch": self.__length,
        }
        for i, child in enumerate(self.sources):
            out.update(child_settings(f"children[{i}].", child, self.__lengths[i]))
        return out

    def get_state(self) -> dict[str, Any]:
        """The position, per child read by passes ``[pass epoch, first draw]``, and the
        :meth:`order_settings` a restore must match."""
        state = super().get_state()
        passes = self.stream_passes.get_value()
        state["stream_passes"] = {
            self.names[i]: [int(passes[i, 0]), int(passes[i, 1])]
            for i, by_pass in enumerate(self.__reads.by_pass)
            if by_pass
        }
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue after the last record the saved mixture handed out (a ``StateError``
        names the first of :meth:`order_settings` that differs)."""
        saved = state.get("stream_passes", {}) if isinstance(state, dict) else {}
        by_pass = [n for n, b in zip(self.names, self.__reads.by_pass) if b]
        if isinstance(saved, dict) and saved and sorted(map(str, saved)) != sorted(by_pass):
            raise StateError(
                f"MixSource state 'stream_passes' names the sources read by passes "
                f"{sorted(map(str, saved))}, but this mixture's are {sorted(by_pass)}: the "
                "state was saved by a mixture whose sources are named otherwise. Restore it "
                "into a mixture built with the same source names.",
                field="stream_passes",
            )  # (before the position is restored: the refused state moves nothing)
        super().set_state(state)
        updated = np.zeros((len(self.sources), 2), np.int64)
        for i, by_pass in enumerate(self.__reads.by_pass):
            if not by_pass:
                continue
            value = saved.get(self.names[i]) if isinstance(saved, dict) else None
            updated[i] = saved_counts(value, "stream_passes", "MixSource", 2,
                                      f"pass epoch, first draw of source '{self.names[i]}'")
        self.stream_passes.set_value(updated)
        self.__reads.forget_streams()


# ---------------------------------------------------------------------- helpers
def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))

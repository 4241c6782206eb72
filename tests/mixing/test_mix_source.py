"""MixSource: epoch and sampling modes, kinds mixed, resume, proportions, errors."""

import copy
from dataclasses import dataclass

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.lengths import length_or_none
from datarax.core.errors import ConfigError, SourceContractError, SpecMismatchError, StateError
from datarax.mixing import MixSource, MixSourceConfig
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import (
    ConcatSource,
    MemorySource,
    MemorySourceConfig,
    RandomAccessSource,
)
from datarax.testing import check_resume_exact

import bad_rows
from number_sources import NumberStream, numbers
from source_reads import flat


def memory(lo, hi, shuffle=True, seed=3):
    return numbers(lo, hi, shuffle=shuffle, seed=seed, field="id")


@dataclass(frozen=True)
class RowsConfig(StructuralConfig):
    shuffle: bool = True
    seed: int = 1
    on_error: str = "raise"


class Rows(RandomAccessSource):
    def __init__(self, lo, hi, config=RowsConfig()):
        super().__init__(config, num_threads=2)
        self.rows = np.arange(lo, hi, dtype=np.int32)

    def __len__(self):
        return len(self.rows)

    def read_records(self, indices):
        return [{"id": self.rows[i]} for i in indices]


def ids_of(pipeline, epochs=1):
    return [[int(i) for b in pipeline for i in np.asarray(b["id"])] for _ in range(epochs)]


def read(mix, count, chunk=1000):
    out = []
    while len(out) < count:
        batch, _ = mix.get_batch_with_indices(min(chunk, count - len(out)))
        out.extend(np.asarray(batch["id"]).tolist())
    return np.asarray(out)


def test_epoch_mode_visits_each_source_once_per_its_own_epoch():
    # weights not proportional to sizes: a (5 records) runs 4 of its epochs while c runs 1
    mix = MixSource({"a": memory(0, 5), "b": Rows(100, 108), "c": NumberStream(200, 210, field="id")},
                    weights={"a": 0.5, "b": 0.3, "c": 0.2}, seed=4, records_per_epoch=50)
    (ids,) = ids_of(Pipeline(mix, [], batch_size=7))
    assert len(ids) == 50
    parts = {"a": [i for i in ids if i < 100], "b": [i for i in ids if 100 <= i < 200],
             "c": [i for i in ids if i >= 200]}
    assert [len(p) for p in parts.values()] == [25, 15, 10]
    for name, lo, n in (("a", 0, 5), ("b", 100, 8), ("c", 200, 10)):
        seq = parts[name]
        for start in range(0, len(seq) - n + 1, n):  # every whole pass of the source
            assert sorted(seq[start : start + n]) == list(range(lo, lo + n)), (name, seq)
    assert len(set(parts["b"][8:])) == 7  # b's second pass, partly served: no repeats
    mix.close()


def test_default_epoch_is_the_sources_sizes_and_serves_each_record_once():
    mix = MixSource([memory(0, 6), memory(10, 13, seed=5)], weights=[2, 1], seed=0)
    pipeline = Pipeline(mix, [], batch_size=4)
    first, second = ids_of(pipeline, 2)
    assert len(mix) == 9
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4, 5, 10, 11, 12]
    assert first != second  # the children reshuffle every epoch


def test_interleaving_follows_the_seed():
    def order(seed):
        mix = MixSource([memory(0, 6, shuffle=False), memory(10, 16, shuffle=False)], [1, 1],
                        seed=seed)
        return ids_of(Pipeline(mix, [], batch_size=12))[0]

    assert order(0) == order(0)
    assert len({tuple(order(s)) for s in range(6)}) > 1
    assert [i for i in order(3) if i < 10] == [0, 1, 2, 3, 4, 5]  # each source's own order


def test_realised_proportions_in_every_window_of_10000_through_the_source():
    # The shares are the mixture's schedule, whatever order each child serves its records
    # in: unshuffled children (shuffled, each of their ~400 epochs here draws a permutation).
    mix = MixSource({"a": memory(0, 97, shuffle=False),
                     "b": Rows(1000, 1061, RowsConfig(shuffle=False)),
                     "c": memory(2000, 2043, shuffle=False)},
                    weights={"a": 0.5, "b": 0.3, "c": 0.2}, seed=9, records_per_epoch=10**6)
    ids = read(mix, 30_000, chunk=2500)
    owner = np.searchsorted([1000, 2000], ids, side="right")
    one_hot = np.eye(3, dtype=np.int64)[owner]
    prefix = np.concatenate([np.zeros((1, 3), np.int64), np.cumsum(one_hot, 0)])
    shares = (prefix[10_000:] - prefix[:-10_000]) / 10_000
    assert np.abs(shares - [0.5, 0.3, 0.2]).max() <= 0.002  # well inside 1% of each weight
    mix.close()


@pytest.mark.slow
def test_sampling_mode_draws_with_replacement_endlessly_and_deterministically():
    def make():
        return MixSource({"a": memory(0, 50), "b": Rows(100, 150)}, {"a": 3, "b": 1},
                         mode="sampling", seed=7)

    mix = make()
    ids = read(mix, 400, chunk=64)
    assert length_or_none(mix) is None and mix.epoch_size() is None
    a = ids[ids < 100]
    assert len(a) == 300 and len(ids) - len(a) == 100
    assert len(set(a.tolist())) < len(a)  # with replacement: repeats inside one pass of 50
    assert set(a.tolist()) <= set(range(50)) and set(ids[ids >= 100].tolist()) <= set(range(100, 150))
    again = make()
    assert read(again, 400, chunk=37).tolist() == ids.tolist()  # batch size does not matter
    resumed = make()
    resumed.set_state({"current_index": 123, "current_epoch": 0, "stream_passes": {}})
    assert read(resumed, 277, chunk=50).tolist() == ids[123:].tolist()
    for m in (mix, again, resumed):
        m.close()


def test_sampling_pipeline_keeps_going_past_the_sources_sizes():
    mix = MixSource([memory(0, 3), memory(10, 13)], [1, 1], mode="sampling", seed=0)
    pipeline = Pipeline(mix, [], batch_size=4)
    iterator = iter(pipeline)
    batches = [next(iterator) for _ in range(5)]  # 20 records from 6: an endless pass
    assert sum(len(b["id"]) for b in batches) == 20
    with pytest.raises(TypeError, match=r"^len\(Pipeline\) is unknown: MixSource has no "
                       r"length: it samples endlessly \(mode='sampling'\)\.$"):
        len(pipeline)


def test_source_state_resumes_exactly_with_every_kind():
    def make():
        mix = MixSource({"m": memory(0, 6), "h": Rows(10, 14), "s": NumberStream(20, 25, field="id")},
                        weights=[3, 2, 2], seed=5, records_per_epoch=21)
        return Pipeline(mix, [], batch_size=4)

    reference = make()
    expected = ids_of(reference, 3)
    flat = [i for e in expected for i in e]
    for point in (0, 5, 9, 21, 30):
        head = make()
        it = iter(head)
        got = []
        while len(got) < point:  # whole batches: got may pass the point
            batch = next(it, None)
            if batch is None:
                it = iter(head)
                continue
            got.extend(np.asarray(batch["id"]).tolist())
        state = head.source.get_state()
        head.source.close()
        fresh = make()
        fresh.source.set_state(state)
        rest = [i for e in ids_of(fresh, 3 - state["current_epoch"]) for i in e]
        assert got + rest[: len(flat) - len(got)] == flat, point
        fresh.source.close()
    reference.source.close()


def test_stream_child_is_not_replayed_between_mixture_epochs():
    stream = NumberStream(20, 24, field="id")
    mix = MixSource({"m": memory(0, 4), "s": stream}, [1, 1], records_per_epoch=8)
    ids_of(Pipeline(mix, [], batch_size=3), 3)
    assert stream.opened == 3  # one open per pass of the stream, none for re-reading


def test_a_mixture_moved_back_from_outside_reads_its_stream_again_from_pass_0():
    """A concatenation's state holds no mixture stream_passes: restoring an earlier one
    into the same pipeline moves the mixture back before its stream's pass (a StateError,
    'going back to draw 4 would need its earlier pass', before); a seek alike."""

    def mix():
        return MixSource({"m": memory(0, 6), "s": NumberStream(20, 24, field="id")}, [6, 4],
                         seed=5, records_per_epoch=10)

    pipeline = Pipeline(ConcatSource([mix(), memory(100, 103)]), [], batch_size=4)
    states, epochs = [], []
    for _ in range(3):  # the stream ends a pass in every epoch
        epochs.append([])
        for batch in pipeline:
            epochs[-1].append([int(i) for i in np.asarray(batch["id"])])
            states.append((len(epochs) - 1, len(epochs[-1]), pipeline.get_state()))
    for epoch, cut, state in (states[5], states[1]):  # the same pipeline, moved back
        pipeline.set_state(state)
        assert [[int(i) for i in np.asarray(b["id"])] for b in pipeline] == epochs[epoch][cut:]
    source = mix()
    source.seek(2, 0)
    source.get_batch_with_indices(10)  # the stream in its pass 2
    source.seek(0, 3)
    assert source.get_batch_with_indices(7)[0]["id"].tolist() == flat(epochs[0])[3:10]


def test_per_record_randomness_is_the_same_at_any_batch_size():
    def noise(element, key):
        return element.update_data({"noise": jax.random.uniform(key, ())})

    def run(batch_size):
        mix = MixSource([memory(0, 7), memory(10, 12)], [2, 1], seed=3, records_per_epoch=15)
        stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=noise)
        p = Pipeline(mix, [stage], batch_size=batch_size, rngs=nnx.Rngs(0))
        out = [(int(i), float(n)) for b in p for i, n in zip(b["id"], b["noise"])]
        return out

    a, b = run(2), run(5)
    assert a == b and len({n for _, n in a}) == 15  # every appearance its own draw


def test_check_resume_exact_through_a_mixture():
    def make():
        mix = MixSource({"m": memory(0, 5), "h": Rows(10, 13)}, [0.6, 0.4], seed=2,
                        records_per_epoch=10)
        return Pipeline(mix, [], batch_size=3)

    for level in ("pipeline", "iterator"):
        report = check_resume_exact(make, range(9), num_epochs=2, level=level,
                                    close=lambda p: p.source.close())
        assert report.num_records == 20 and report.batches_per_epoch == (4, 4)



def test_a_state_of_a_stream_source_named_otherwise_is_refused_naming_both():
    def mix(stream_name):
        return MixSource({"m": memory(0, 3), stream_name: NumberStream(0, 3, field="id")},
                         [1, 1], records_per_epoch=6)

    saved, refused = mix("s"), mix("t")
    saved.get_batch_with_indices(3)
    with pytest.raises(StateError, match=r"^MixSource state 'stream_passes' names the sources "
                       r"read by passes \['s'\], but this mixture's are \['t'\]: .* same source "
                       r"names\.$"):
        refused.set_state(saved.get_state())
    assert refused.datarax_position.where() == (0, 0)  # the refused state moved nothing

def test_locate_names_the_source_and_draw():
    mix = MixSource({"a": memory(0, 4, shuffle=False), "b": memory(10, 14, shuffle=False)},
                    [1, 1], seed=0)
    batch, indices = mix.get_batch_with_indices(8)
    for k, value in enumerate(np.asarray(batch["id"]).tolist()):
        name, draw = mix.locate(k, epoch=0)
        assert (name, draw) == (("a", value) if value < 10 else ("b", value - 10))
        assert int(indices[k]) == draw * 2 + (0 if name == "a" else 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((8,), "record 8 is not a record of the epoch; records are numbered 0 .. 7"),
        ((-1,), "record -1 is not a record of the epoch; records are numbered 0 .. 7"),
        ((0, -1), "epoch must be an int >= 0, got -1"),
    ],
)
def test_locate_refuses_a_record_outside_the_epoch(args, message):
    mix = MixSource({"a": memory(0, 4, shuffle=False), "b": memory(10, 14, shuffle=False)},
                    [1, 1], seed=0)
    with pytest.raises(IndexError, match=message.replace(".", r"\.")):
        mix.locate(*args)


# ------------------------------------------------------------------ refusals
def test_spec_mismatch_names_the_field_and_the_sources():
    other = MemorySource(MemorySourceConfig(), {"id": np.arange(3, dtype=np.float32)})
    with pytest.raises(SpecMismatchError) as err:
        MixSource({"a": memory(0, 3), "b": other}, [1, 1])
    assert str(err.value) == (
        "MixSource: field 'id' is int32() in source 'a' but float32() in source 'b'; cast or "
        "reshape one of them (e.g. with an operator) before mixing."
    )
    assert err.value.fields == ["id"]
    extra = MemorySource(MemorySourceConfig(), {"id": np.arange(3, dtype=np.int32),
                                                "y": np.zeros(3, np.int32)})
    with pytest.raises(SpecMismatchError, match="field 'y' is in source 'b' but not in source 'a'"):
        MixSource({"a": memory(0, 3), "b": extra}, [1, 1])


def test_text_of_str_and_text_of_bytes_are_not_mixed():
    """Both are text of one shape; mixed, a batch would hold str and bytes side by side."""
    def source(values):
        return MemorySource(MemorySourceConfig(), {"id": np.arange(2, dtype=np.int32),
                                                   "t": np.array(values, dtype=object)})

    with pytest.raises(SpecMismatchError) as err:
        MixSource({"a": source(["x", "y"]), "b": source([b"x", b"y"])}, [1, 1])
    assert str(err.value) == (
        "MixSource: field 't' is text of str in source 'a' but of bytes in source 'b'; decode "
        "the bytes (value.decode('utf-8'), e.g. with an operator) before mixing.")
    assert err.value.fields == ["t"]
    mixed = MixSource({"a": source(["x", "y"]), "b": source(["z", "w"])}, [1, 1])
    assert sorted(t for b in Pipeline(source=mixed, batch_size=4) for t in b["t"]) == [
        "w", "x", "y", "z"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(weights=[1]), ConfigError, "MixSource got 2 sources and 1 weight"),
        (dict(weights={"a": 1, "c": 1}), ConfigError, "weights name ['a', 'c'] but the sources are ['a', 'b']"),
        (dict(weights=[1, 0]), ConfigError, "weight of 'b' must be a finite number > 0, got 0"),
        (dict(weights=[1, 1], mode="random"), ConfigError, "mode must be one of ['epoch', 'sampling']"),
        (dict(weights=[1, 1], records_per_epoch=0), ConfigError, "records_per_epoch must be an int >= 1"),
        (dict(weights=[1, 1], seed=-1), ConfigError, "seed must be >= 0"),
    ],
)
def test_bad_configuration_is_refused(kwargs, error, message):
    with pytest.raises(error) as err:
        MixSource({"a": memory(0, 3), "b": memory(5, 8)}, **kwargs)
    assert message in str(err.value)


def test_a_config_built_without_sources_says_to_pass_the_sources_to_mix_source():
    """Upstream's form, a config first, ported as it is: the config names no sources."""
    with pytest.raises(ConfigError) as err:
        MixSourceConfig(weights=(0.7, 0.3))
    assert "this MixSourceConfig names none" in str(err.value)
    assert "MixSource([a, b], [0.7, 0.3], mode='epoch', seed=0)" in str(err.value)


def test_sources_that_cannot_mix_are_refused():
    with pytest.raises(ConfigError, match=r"mixes 2 or more sources, got 1"):
        MixSource([memory(0, 3)], [1])
    same = memory(0, 3)
    with pytest.raises(SourceContractError, match="'source0' and 'source1' are the same object"):
        MixSource([same, same], [1, 1])
    with pytest.raises(SourceContractError, match="'source1' is a stream; sampling with replacement"):
        MixSource([memory(0, 3), NumberStream(0, 3, field="id")], [1, 1], mode="sampling")
    with pytest.raises(ConfigError, match=r"\['source1'\] do not know their length"):
        MixSource([memory(0, 3), NumberStream(0, 3, field="id")], [1, 1])
    skipping = Rows(0, 3, RowsConfig(on_error="skip"))
    with pytest.raises(SourceContractError, match="'source1' skips bad records .* sampling"):
        MixSource([memory(0, 3), skipping], [1, 1], mode="sampling")
    # a part of a source that skips: a sampled draw would go unserved
    parts = ConcatSource([bad_rows.Rows(bad_rows.RowsConfig(on_error="skip"), 4, bad={1}),
                          bad_rows.Rows(bad_rows.RowsConfig(), 4)])
    with pytest.raises(SourceContractError, match=r"MixSource source 'source1' skips bad records "
                       r"\(parts\[0\]\.on_error='skip'\); sampling with replacement"):
        MixSource([memory(0, 3), parts], [1, 1], mode="sampling")
    with pytest.raises(SourceContractError, match="'source1' is int, not a data source"):
        MixSource([memory(0, 3), 5], [1, 1])
    sharded = memory(0, 4)
    sharded.set_shard(0, 2)
    with pytest.raises(SourceContractError, match=r"MixSource source 'source0' is sharded \(share 0 of 2\); "
                       r"shard the mixture \(the Pipeline does\), not its sources"):
        MixSource([sharded, memory(0, 3)], [1, 1])


def test_tampered_state_is_refused():
    mix = MixSource({"m": memory(0, 3), "s": NumberStream(0, 3, field="id")}, [1, 1], records_per_epoch=6)
    with pytest.raises(StateError, match=r"'stream_passes' must be a list of 2 ints >= 0 \(pass "
                       r"epoch, first draw of source 's'\), got None"):
        mix.set_state({"current_index": 1, "current_epoch": 0})
    with pytest.raises(StateError, match=r"'current_index' must be an int in \[0, 6\] \(records "
                       r"handed out of a pass of 6\), got 9"):
        mix.set_state({"current_index": 9, "current_epoch": 0, "stream_passes": {"s": [0, 0]}})


# ------------------------------------------------------- the compiled path
@pytest.mark.parametrize("mode", ["epoch", pytest.param("sampling", marks=pytest.mark.slow)])
def test_all_indexed_mixture_compiles_and_matches_the_host_read(mode):
    def make():
        return MixSource({"a": memory(0, 7), "b": memory(100, 104, seed=9), "c": memory(200, 211)},
                         {"a": 0.5, "b": 0.3, "c": 0.2}, mode=mode, seed=6, records_per_epoch=40)

    compiled = make()
    assert compiled.kind.value == "indexed"
    batches = [next(iter(Pipeline(compiled, [], batch_size=8)))]
    pipeline = Pipeline(make(), [], batch_size=8)
    got = [int(i) for e in range(2) for b in pipeline for i in np.asarray(b["id"])]
    host = make()  # the same mixture read record by record through the host method
    want = read(host, 40, chunk=13).tolist()
    host.seek(1, 0)
    want += read(host, 40, chunk=7).tolist()
    assert got == want
    assert [int(i) for i in np.asarray(batches[0]["id"])] == want[:8]
    assert MixSource([memory(0, 3), Rows(5, 8)], [1, 1]).kind.value == "host"
    assert MixSource([memory(0, 3), memory(5, 8)], [1, 1], mode="sampling").kind.value == "host"


def test_a_mixture_of_mixtures_serves_every_record_once_per_epoch():
    inner = MixSource([memory(0, 4), memory(10, 14)], [1, 1], seed=1)
    outer = MixSource({"inner": inner, "c": memory(100, 108)}, [1, 1], seed=2)
    first, second = ids_of(Pipeline(outer, [], batch_size=5), 2)
    want = [0, 1, 2, 3, 10, 11, 12, 13, *range(100, 108)]
    assert sorted(first) == sorted(second) == want


# ------------------------------------------------- restoring into another mixture
def changed_mixture(weights=(4, 2, 2), seed=5, a_seed=3, b_shuffle=True, b_seed=1, inner_seed=7):
    inner = MixSource([memory(200, 210, seed=inner_seed), memory(300, 306)], [1, 1], seed=1)
    return MixSource({"a": memory(0, 30, seed=a_seed),
                      "b": Rows(100, 120, RowsConfig(shuffle=b_shuffle, seed=b_seed)),
                      "inner": inner}, list(weights), seed=seed)


CHANGES = [
    ({"weights": (1, 1, 1)}, r"weights=\[2, 1, 1\] but this", "weights"),
    ({"seed": 6}, "seed=5 but this", "seed"),
    ({"a_seed": 4}, r"children\[0\].seed=3 but this", "children[0].seed"),
    ({"b_seed": 2}, r"children\[1\].seed=1 but this", "children[1].seed"),
    ({"b_shuffle": False}, r"children\[1\].shuffle=True but this", "children[1].shuffle"),
    ({"inner_seed": 8}, r"children\[2\].children\[0\].seed=7 but", "children[2].children[0].seed"),
]


@pytest.fixture(scope="module")
def saved_after_two_batches():
    """The pipeline, source and nnx states of changed_mixture() two batches in (one
    pipeline for every change below: each test restores copies)."""
    head = Pipeline(changed_mixture(), [], batch_size=8)
    it = iter(head)
    next(it), next(it)
    states = {"pipeline": head.get_state(), "source": head.source.get_state(),
              "nnx": nnx.clone(nnx.state(head))}
    yield states
    head.source.close()


@pytest.mark.parametrize(("change", "message", "field"), CHANGES)
def test_a_state_restored_into_a_changed_mixture_is_refused_naming_the_setting(
        change, message, field, saved_after_two_batches):
    state = copy.deepcopy(saved_after_two_batches["pipeline"])
    source_state = copy.deepcopy(saved_after_two_batches["source"])
    other = changed_mixture(**change)
    with pytest.raises(StateError, match=f"saved with source.{message}") as pipeline_err:
        Pipeline(other, [], batch_size=8).set_state(state)
    assert pipeline_err.value.field == f"source.{field}"
    with pytest.raises(StateError, match=f"MixSource state was saved with {message}") as source_err:
        other.set_state(source_state)
    assert source_err.value.field == field
    other.close()


@pytest.mark.parametrize(("change", "message", "field"), CHANGES)
def test_an_nnx_state_restored_into_a_changed_mixture_is_refused_naming_the_setting(
    change, message, field, saved_after_two_batches
):
    """nnx.update writes the saved position and its settings digest: the next read of
    the position refuses, naming the setting, before any record is served."""
    other = Pipeline(changed_mixture(**change), [], batch_size=8)
    nnx.update(other, nnx.clone(saved_after_two_batches["nnx"]))
    with pytest.raises(StateError, match="MixSource: the position restored into it") as err:
        next(iter(other))
    assert f"{field}=" in str(err.value)
    other.source.close()


@pytest.mark.parametrize("weights", [(2, 1, 1), (0.4, 0.2, 0.2)])
def test_equivalent_weights_continue_exactly(weights):
    reference = Pipeline(changed_mixture(), [], batch_size=8)
    flat = [i for epoch in ids_of(reference, 2) for i in epoch]
    head = Pipeline(changed_mixture(), [], batch_size=8)
    it = iter(head)
    got = [int(i) for _ in range(5) for i in next(it)["id"]]
    from datarax.testing.resume import restore_level

    saved = {"pipeline": head.get_state(), "source": head.source.get_state(),
             "nnx": nnx.clone(nnx.state(head))}
    for restore, state in saved.items():
        resumed = Pipeline(changed_mixture(weights=weights), [], batch_size=8)
        restore_level(restore, resumed, state)
        rest = [i for epoch in ids_of(resumed, 2) for i in epoch]
        assert got + rest[: len(flat) - len(got)] == flat, restore
        resumed.source.close()
    for p in (reference, head):
        p.source.close()


def test_unequal_weights_and_sizes_epoch_covers_what_the_docs_say():
    # docs/graphs.md's example: two sources of 100 records weighted 0.8/0.2. A mixture
    # epoch is 200 records (the sum of the sizes), 160 from "web" and 40 from "books".
    mix = MixSource({"web": memory(0, 100, seed=1), "books": memory(1000, 1100, seed=2)},
                    weights={"web": 0.8, "books": 0.2}, seed=0)
    pipeline = Pipeline(mix, [], batch_size=20)
    books_seen, rows = set(), []
    for _ in range(3):
        ids = np.asarray(ids_of(pipeline)[0])
        web, books = ids[ids < 1000], ids[ids >= 1000]
        books_seen |= set(books.tolist())
        rows.append((len(ids), len(web), len(set(web.tolist())), len(books), len(books_seen)))
    assert rows == [(200, 160, 100, 40, 40), (200, 160, 100, 40, 80), (200, 160, 95, 40, 100)]


def test_numpy_weights_and_records_per_epoch_are_taken_like_python_numbers():
    sizes = np.array([20, 10])
    mix = MixSource({"a": memory(0, 20), "b": memory(100, 110)}, weights=sizes / sizes.sum(),
                    records_per_epoch=np.int64(sizes.sum()))
    same = MixSource({"a": memory(0, 20), "b": memory(100, 110)}, weights=[2, 1],
                     records_per_epoch=30)
    ids = [int(i) for b in Pipeline(source=mix, stages=[], batch_size=8) for i in b["id"]]
    assert len(mix) == 30
    assert ids == [int(i) for b in Pipeline(source=same, stages=[], batch_size=8) for i in b["id"]]
    assert mix.order_settings() == same.order_settings()
    with pytest.raises(ConfigError, match="one weight per source"):
        MixSource([memory(0, 5), memory(10, 15)], weights=np.ones((2, 1)))


@pytest.mark.parametrize("weights", [
    jax.numpy.asarray([2.0, 1.0]),  # refused before: "a list or a 1-D array, got ArrayImpl"
    [jax.numpy.float32(2), jax.numpy.float32(1)],
    {"source0": np.array(2.0), "source1": 1},
])
def test_jax_arrays_and_0d_arrays_as_weights_are_taken_like_python_numbers(weights):
    mix = MixSource([memory(0, 20), memory(100, 110)], weights=weights)
    same = MixSource([memory(0, 20), memory(100, 110)], weights=[2, 1])
    assert mix.config.weights == (2.0, 1.0)
    assert mix.get_batch_with_indices(30)[0]["id"].tolist() == (
        same.get_batch_with_indices(30)[0]["id"].tolist())
    with pytest.raises(ConfigError, match="weight of 'source0' must be a number, got array"):
        MixSource([memory(0, 5), memory(10, 15)], weights=[np.array([1.0]), 1])


def test_sources_and_weights_keyed_by_numbers_mix_as_keyed_by_their_names():
    """Keys that are not strings (0, 1) name the sources as str(key); the weights keyed
    the same way are found by them (they raised a bare KeyError: '0')."""
    by_number = MixSource({0: memory(0, 20), 1: memory(100, 110)}, weights={0: 2, 1: 1})
    by_name = MixSource({"0": memory(0, 20), "1": memory(100, 110)}, weights={"0": 2, "1": 1})
    ids = [int(i) for b in Pipeline(source=by_number, stages=[], batch_size=8) for i in b["id"]]
    assert len(ids) == 30 and sorted(ids) == list(range(20)) + list(range(100, 110))
    assert ids == [int(i) for b in Pipeline(source=by_name, stages=[], batch_size=8)
                   for i in b["id"]]


def test_an_error_reading_a_source_says_which_source_of_the_mixture_raised_it():
    class Once(NumberStream):
        def restart(self, epoch):  # does not rewind: the second pass is empty
            if not self.opened:
                super().restart(epoch)

    mix = MixSource({"books": memory(0, 10), "captions": Once(100, 103, field="id")},
                    weights=[1, 1], records_per_epoch=16)
    with pytest.raises(SourceContractError, match="none in pass 1") as caught:
        list(Pipeline(source=mix, stages=[], batch_size=4))
    assert "reading MixSource source 'captions'" in "\n".join(getattr(caught.value, "__notes__", []))


def test_close_epoch_stops_each_host_childs_read_ahead_and_keeps_the_positions():
    rows = Rows(100, 140)
    mix = MixSource({"a": memory(0, 40), "b": rows}, {"a": 1, "b": 1})
    batch, _ = mix.get_batch_with_indices(8)
    assert rows.host_reader.active  # reading ahead of the mixture's position
    before = (mix.index, rows.index)
    mix.close_epoch()  # the memory child has nothing to stop: it is passed over
    assert not rows.host_reader.active and (mix.index, rows.index) == before
    nxt, _ = mix.get_batch_with_indices(8)
    fresh = MixSource({"a": memory(0, 40), "b": Rows(100, 140)}, {"a": 1, "b": 1})
    assert [np.asarray(b["id"]).tolist() for b in (batch, nxt)] == [
        np.asarray(fresh.get_batch_with_indices(8)[0]["id"]).tolist() for _ in range(2)]


def _wide_mix(weights: dict[str, int], per_epoch: int) -> MixSource:
    sources = {k: MemorySource(MemorySourceConfig(), data={"x": np.arange(8, dtype=np.int32)})
               for k in weights}
    return MixSource(sources, weights=weights, records_per_epoch=per_epoch, seed=0)


def test_a_compiled_epoch_whose_stable_indices_span_past_2_to_the_32_is_refused() -> None:
    # index = draw * 3 + source: 'a' drawn ~98% of 2**31 - 1 times spans ~6.3e9 indices,
    # and a compiled step keys on 32 bits, so records 2**32 apart would share a key
    mix = _wide_mix({"a": 98, "b": 1, "c": 1}, 2**31 - 1)
    with pytest.raises(ConfigError, match=r"draws 'a' up to 2104533975 times.*"
                       r"spans 6313601925 indices, past 2\*\*32.*"
                       r"no source is drawn more than 1431655765 times"):
        next(iter(Pipeline(source=mix, stages=[], batch_size=4, seed=0)))
    # equal weights over two: 2**30 draws each, 2**31 indices: read
    fine = _wide_mix({"a": 1, "b": 1}, 2**31 - 1)
    assert fine.record_indices_at(0, 4).tolist() == [1, 0, 3, 2]
    assert next(iter(Pipeline(source=fine, stages=[], batch_size=4, seed=0)))["x"].tolist() == [
        0, 0, 1, 1]

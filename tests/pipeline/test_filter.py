"""FilterOperator in a Pipeline: full batches of kept records from every kind of source,
exact resume at every boundary, counts in stats(), unknown len, refused predicates."""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.data_source import DataSourceModule
from datarax.core.errors import ConfigError
from datarax.operators import ElementOperator, FilterOperator, FilterOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig, NpySource, NpySourceConfig
from datarax.testing.resume_checks import check_resume
from datarax.testing.source_row import SourceRow


def not_div3(el):
    value = el.data["x"] if "x" in el.data else el.data["data"]  # NpySource: "data"
    return value % 3 != 0


def memory(n=20, **config):
    return MemorySource(MemorySourceConfig(**config), {"x": np.arange(n, dtype=np.int32)})


def xs(pipeline):
    return [np.asarray(b["x"] if "x" in b else b["data"]).tolist() for b in pipeline]


def test_full_batches_of_kept_records_and_the_counts():
    p = Pipeline(memory(20), stages=[FilterOperator(predicate=not_div3)], batch_size=4)
    kept = [x for x in range(20) if x % 3]
    assert xs(p) == [kept[i:i + 4] for i in range(0, 13, 4)]
    assert (p.epoch, p.position) == (1, 0)
    assert p.stats()["filter"] == {"kept": 13, "dropped": 7}
    with pytest.raises(TypeError, match="filtered epoch"):
        len(p)
    dropped = Pipeline(memory(20), stages=[FilterOperator(predicate=not_div3)], batch_size=4,
                       drop_remainder=True)
    assert xs(dropped) == [kept[i:i + 4] for i in range(0, 12, 4)]


@pytest.mark.slow
def test_config_form_and_stages_before_and_after_keep_their_keys():
    def noise(el, key):
        return {"y": el.data["x"] + jax.random.randint(key, (), 0, 1000)}

    def make(*stage):
        before = ElementOperator(fn=noise, stochastic=True)
        after = ElementOperator(fn=lambda el, key: {"z": jax.random.randint(key, (), 0, 1000)},
                                stochastic=True)
        return Pipeline(memory(30, shuffle=True, seed=3), stages=[before, *stage, after],
                        batch_size=4, rngs=nnx.Rngs(5))

    keep = FilterOperator(FilterOperatorConfig(), predicate=lambda el: el.data["y"] % 2 == 0)
    plain = [{k: np.asarray(v) for k, v in b.items()} for b in make()]
    filtered = [{k: np.asarray(v) for k, v in b.items()} for b in make(keep)]
    want = {k: np.concatenate([b[k] for b in plain]) for k in ("x", "y", "z")}
    got = {k: np.concatenate([b[k] for b in filtered]) for k in ("x", "y", "z")}
    rows = want["y"] % 2 == 0
    for k in ("x", "y", "z"):  # the same records, each with its own keys' values
        np.testing.assert_array_equal(got[k], want[k][rows])
    assert all(len(b["x"]) == 4 for b in filtered[:-1])


@pytest.mark.parametrize("kind", ["memory", "host"])
def test_adding_a_filter_leaves_the_draws_of_the_other_stages_as_they_are(kind):
    def noise():
        return ElementOperator(fn=lambda el, key: {**el.data, "u": jax.random.uniform(key)},
                               stochastic=True)

    def drawn(*stages):
        if kind == "host":
            source = NpySource(NpySourceConfig(paths=host_file(15), shuffle=True, seed=2))
        else:
            source = memory(15, shuffle=True, seed=2)
        batches = list(Pipeline(source, stages=list(stages), batch_size=4, rngs=nnx.Rngs(1)))
        return {int(x): float(u) for b in batches
                for x, u in zip(np.asarray(b["x" if "x" in b else "data"]), np.asarray(b["u"]))}

    unfiltered = drawn(noise())
    want = {x: u for x, u in unfiltered.items() if x % 3}
    assert drawn(FilterOperator(predicate=not_div3), noise()) == want
    if kind == "memory":  # stages may stand before the filter over an indexed source
        assert drawn(noise(), FilterOperator(predicate=not_div3)) == want


HOST_FOLDER = []  # this module's folder under pytest's temporary root (removed by pytest)


@pytest.fixture(autouse=True, scope="module")
def _host_folder(tmp_path_factory):
    HOST_FOLDER[:] = [tmp_path_factory.mktemp("datarax-filter")]
    yield
    host_file.cache_clear()


@functools.cache
def host_file(n):
    """``arange(n)`` saved once per test module in its own folder: never rewritten while
    an earlier source of the same row may still have it memory-mapped (a rewrite under a
    mapping is a bus error), never shared with another process's tests."""
    path = os.path.join(HOST_FOLDER[0], f"x{n}.npy")
    np.save(path, np.arange(n, dtype=np.int32))
    return path


def row(n, kind, shard=False):
    def make(shard_index=0, shard_count=1, stages=()):
        if kind == "host":
            source = NpySource(NpySourceConfig(paths=host_file(n)))
        else:
            source = memory(n, shuffle=True, seed=1)
        return Pipeline(source, stages=list(stages), batch_size=3, rngs=nnx.Rngs(0),
                        shard_index=shard_index, shard_count=shard_count)

    return SourceRow(f"filter-{kind}", make, n, lambda b: xs([b])[0])


@pytest.mark.parametrize("level", [pytest.param("iterator", marks=pytest.mark.slow), "pipeline",
                                   "source", pytest.param("nnx", marks=pytest.mark.slow)])
def test_resume_at_every_boundary_indexed(level):
    compared = check_resume(row(17, "memory"), level,
                            stages=lambda: [FilterOperator(predicate=not_div3)])
    assert compared > 6


@pytest.mark.parametrize("level", ["pipeline", "source"])
def test_resume_at_every_boundary_host(level):
    compared = check_resume(row(17, "host"), level,
                            stages=lambda: [FilterOperator(predicate=not_div3)])
    assert compared > 6


def test_host_source_same_predicate_same_batches_and_a_python_predicate(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(20, dtype=np.int32))
    host = NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy")))
    compiled = Pipeline(host, stages=[FilterOperator(predicate=not_div3)], batch_size=4)
    indexed = Pipeline(memory(20), stages=[FilterOperator(predicate=not_div3)], batch_size=4)
    assert xs(compiled) == xs(indexed)
    python = FilterOperator(predicate=lambda el: int(el.data["data"]) % 3 != 0, on_host=True)
    assert xs(Pipeline(host, stages=[python], batch_size=4)) == xs(indexed)
    host.close()


class Words(DataSourceModule):
    """A stream of text records."""

    def __init__(self, n):
        from datarax.core.config import StructuralConfig

        super().__init__(StructuralConfig())
        self.n, self.at = n, 0

    def element_spec(self):
        from datarax.core.spec import TextSpec

        return {"word": TextSpec(), "i": jax.ShapeDtypeStruct((), jnp.int32)}

    def restart(self, epoch):
        self.at = 0

    def get_batch(self, batch_size):
        if self.at >= self.n:
            return None
        hi = min(self.at + batch_size, self.n)
        out = {"word": [f"w{i}" for i in range(self.at, hi)],
               "i": np.arange(self.at, hi, dtype=np.int32)}
        self.at = hi
        return out


def test_stream_with_text_filters_on_the_host_and_resumes():
    def make():
        keep = FilterOperator(predicate=lambda el: not el.data["word"].endswith(("1", "2")))
        return Pipeline(Words(14), stages=[keep], batch_size=3)

    whole = [b["word"] for b in make()]
    assert whole == [["w0", "w3", "w4"], ["w5", "w6", "w7"], ["w8", "w9", "w10"], ["w13"]]
    p = make()
    it = iter(p)
    next(it)
    state = p.get_state()
    fresh = make()
    fresh.set_state(state)
    assert [b["word"] for b in fresh] == whole[1:]


def test_every_record_dropped_is_an_empty_epoch_and_step_says_so():
    p = Pipeline(memory(10), stages=[FilterOperator(predicate=lambda el: el.data["x"] < 0)],
                 batch_size=4)
    assert xs(p) == [] and (p.epoch, p.position) == (1, 0)
    with pytest.raises(StopIteration, match="two empty passes"):
        p.step()


@pytest.mark.slow
def test_long_pass_grouped_and_sharded_resume():
    from datarax.pipeline.dispatch import GROUP_MIN_BATCHES

    n = 4 * GROUP_MIN_BATCHES  # each share >= GROUP_MIN_BATCHES batches of 2: grouped steps

    def make():
        return Pipeline(memory(n, shuffle=True, seed=2),
                        stages=[FilterOperator(predicate=lambda el: el.data["x"] % 2 == 0)],
                        batch_size=2, shard_index=1, shard_count=2)

    whole = xs(make())
    share = np.asarray(make().source.record_indices_at(n // 2, n // 2, None)).tolist()
    assert sum(whole, []) == [x for x in share if x % 2 == 0]
    p = make()
    it = iter(p)
    for _ in range(37):
        next(it)
    state = p.get_state()
    fresh = make()
    fresh.set_state(state)
    assert xs(fresh) == whole[37:]


class _ReadsItsOwnWay(MemorySource):
    """The same records as MemorySource, through an overridden read: the pipeline can no
    longer assume records depend on their positions alone, and filters chunk by chunk."""

    def get_batch_at(self, start, size, key=None):
        return super().get_batch_at(start, size, key)


# module-level: the pipelines of one test (pad or not) share their compiled steps
def _x_mod3_is_1(el):
    return el.data["x"] % 3 == 1


def _brighten_by_a_draw(el, key):
    return {"image": el.data["image"] + jax.random.randint(key, (), 0, 9).astype(jnp.uint8)}


# (16, 700) lies between the other two on the same path: with -m slow
@pytest.mark.parametrize("batch_size, n", [(3, 50), pytest.param(16, 700, marks=pytest.mark.slow),
                                           (256, 5000)])
def test_filter_reading_kept_positions_only_equals_reading_every_chunk(batch_size, n):
    """A source whose records depend on their positions alone has only the kept records
    read after the predicate; the batches, their keys and states equal the general path's."""

    def make(cls, pad=False):
        data = {"x": np.arange(n, dtype=np.int32),
                "image": np.arange(n * 6, dtype=np.uint8).reshape(n, 2, 3)}
        source = cls(MemorySourceConfig(shuffle=True, seed=4), data)
        stages = [FilterOperator(predicate=_x_mod3_is_1),
                  ElementOperator(fn=_brighten_by_a_draw, stochastic=True)]
        return Pipeline(source, stages=stages, batch_size=batch_size, rngs=nnx.Rngs(7),
                        pad_remainder=pad)

    for pad in (False, True):
        fast, general = make(MemorySource, pad), make(_ReadsItsOwnWay, pad)
        assert fast.source.reads_by_position() and not general.source.reads_by_position()
        for _ in range(2):  # two epochs: another order, other keys
            a = [{k: np.asarray(v) for k, v in b.items()} for b in fast]
            b = [{k: np.asarray(v) for k, v in b.items()} for b in general]
            assert len(a) == len(b) == -(-len(range(1, n, 3)) // batch_size)
            for x, y in zip(a, b):
                assert x.keys() == y.keys()
                for k in x:
                    np.testing.assert_array_equal(x[k], y[k])
            assert sorted(np.concatenate([x["x"][x.get("valid", np.ones(len(x["x"]), bool))]
                                          for x in a]).tolist()) == list(range(1, n, 3))
            states = [p.get_state() for p in (fast, general)]
            for state in states:
                state["settings"].pop("source")  # the class names differ
            assert states[0] == states[1]

def test_refused_at_build_time_naming_the_stage(tmp_path):
    with pytest.raises(ConfigError, match=r"stage 1 \(FilterOperator 'bad'\).*one boolean"):
        Pipeline(memory(), stages=[ElementOperator(fn=lambda el, key=None: el),
                                   FilterOperator(predicate=lambda el: el.data["x"], name="bad")])
    with pytest.raises(ConfigError, match="all FilterOperators"):
        Pipeline(memory(), stages=[FilterOperator(predicate=not_div3)] * 2)
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.int32))
    host = NpySource(NpySourceConfig(paths=str(tmp_path / "x.npy")))
    with pytest.raises(ConfigError, match="Make the FilterOperator the first stage"):
        Pipeline(host, stages=[lambda b: b, FilterOperator(predicate=not_div3)])
    with pytest.raises(ConfigError, match="on_host=True"):
        Pipeline(memory(), stages=[FilterOperator(predicate=not_div3, on_host=True)])
    with pytest.raises(ConfigError, match="scan"):
        Pipeline(memory(), stages=[FilterOperator(predicate=not_div3)]).scan(lambda b: 0, 2)
    python = FilterOperator(predicate=lambda el: "yes", on_host=True)
    with pytest.raises(ConfigError, match="one boolean per record"):
        next(iter(Pipeline(host, stages=[python], batch_size=2)))
    host.close()

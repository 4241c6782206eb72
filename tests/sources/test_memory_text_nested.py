"""MemorySource text columns (kept on the host), nested fields and the rngs-seeded order."""

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.core.errors import DataraxError, StateError
from datarax.core.spec import TextSpec
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig
from datarax.testing.resume import check_resume_exact

N = 10


def words_source(shuffle=False, seed=3, rngs=None, form="dict"):
    ids = np.arange(N, dtype=np.int32)
    if form == "dict":
        data = {"id": ids, "word": np.array([f"w{i}" for i in range(N)])}
    else:
        data = [{"id": i, "word": f"w{i}"} for i in range(N)]
    return MemorySource(MemorySourceConfig(shuffle=shuffle, seed=seed), data, rngs=rngs)


def served(pipeline):
    return [(int(i), w) for b in pipeline for i, w in zip(np.asarray(b["id"]), b["word"])]


@pytest.mark.parametrize("form", ["dict", "records"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_text_is_gathered_by_the_same_indices_as_the_device_fields(shuffle, form):
    source = words_source(shuffle=shuffle, form=form)
    assert source.element_spec() == {
        "id": jax.ShapeDtypeStruct((), np.int32),
        "word": TextSpec(()),
    }
    assert source.host_data["word"].dtype == object
    pipeline = Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))
    batches = list(pipeline)
    assert [len(b["word"]) for b in batches] == [4, 4, 2]
    assert all(isinstance(b["word"], list) and isinstance(b["id"], jax.Array) for b in batches)
    pairs = served(pipeline)  # a second pass: the next epoch's order
    first = [(int(i), w) for b in batches for i, w in zip(np.asarray(b["id"]), b["word"])]
    for got in (first, pairs):
        assert all(w == f"w{i}" for i, w in got)
        assert sorted(i for i, _ in got) == list(range(N))
    ids = [i for i, _ in first]
    assert (ids != list(range(N))) == shuffle
    assert ([i for i, _ in pairs] != ids) == shuffle  # each epoch its own order


def test_direct_access_and_iteration_carry_text():
    source = words_source(shuffle=True)
    batch = source.get_batch_at(8, 4)  # wraps into the next epoch
    assert batch["word"] == [f"w{i}" for i in np.asarray(batch["id"]).tolist()]
    records = list(source)
    assert [r["word"] for r in records] == [f"w{int(r['id'])}" for r in records]
    assert sorted(int(r["id"]) for r in records) == list(range(N))


def test_shards_cover_text():
    seen = []
    for index in range(2):
        source = words_source(shuffle=True)
        pipeline = Pipeline(
            source=source, stages=[], batch_size=3, rngs=nnx.Rngs(0), shard_index=index,
            shard_count=2,
        )
        pairs = served(pipeline)
        assert len(pairs) == 5 and all(w == f"w{i}" for i, w in pairs)
        seen += [i for i, _ in pairs]
    assert sorted(seen) == list(range(N))


def test_resume_is_exact_with_text():
    def make():
        return Pipeline(source=words_source(shuffle=True), stages=[], batch_size=3, rngs=nnx.Rngs(0))

    report = check_resume_exact(make, [1, 2, 4, 5], num_epochs=2)
    assert report.num_records == 2 * N and report.batches_per_epoch == (4, 4)


def test_operators_receive_text_and_the_seed_extract_fields_example_runs():
    def extract_fields(element, key=None):
        return element.update_data({"text": element.data["word"], "label": element.data["id"]})

    extractor = ElementOperator(ElementOperatorConfig(stochastic=False), fn=extract_fields)
    pipeline = Pipeline(
        source=words_source(shuffle=True), stages=[extractor], batch_size=4, rngs=nnx.Rngs(0)
    )
    batches = list(pipeline)
    labels = [int(x) for b in batches for x in np.asarray(b["label"])]
    assert [t for b in batches for t in b["text"]] == [f"w{i}" for i in labels]
    assert sorted(labels) == list(range(N))


def test_stochastic_stages_get_the_same_per_record_keys_with_text():
    """Stages run on the host when text is present; per-record keys stay the same."""

    def noise(element, key):
        return element.update_data({"r": jax.random.uniform(key)})

    def run(source):
        op = ElementOperator(ElementOperatorConfig(stochastic=True), fn=noise, rngs=nnx.Rngs(5))
        pipeline = Pipeline(source=source, stages=[op], batch_size=4, rngs=nnx.Rngs(0))
        return {
            int(i): float(r) for b in pipeline for i, r in zip(np.asarray(b["id"]), np.asarray(b["r"]))
        }

    numeric = MemorySource(
        MemorySourceConfig(shuffle=True, seed=3), {"id": np.arange(N, dtype=np.int32)}
    )
    assert run(words_source(shuffle=True)) == run(numeric)


def test_nested_fields_from_dicts_and_records():
    ids = np.arange(6, dtype=np.int32)
    as_dict = MemorySource(
        MemorySourceConfig(), {"x": ids * 2, "meta": {"id": ids, "tag": [f"t{i}" for i in range(6)]}}
    )
    as_records = MemorySource(
        MemorySourceConfig(),
        [{"x": 2 * i, "meta": {"id": i, "tag": f"t{i}"}} for i in range(6)],
    )
    for source in (as_dict, as_records):
        assert source.element_spec() == {
            "x": jax.ShapeDtypeStruct((), np.int32),
            "meta": {"id": jax.ShapeDtypeStruct((), np.int32), "tag": TextSpec(())},
        }
        assert source.host_data["meta/tag"].tolist() == [f"t{i}" for i in range(6)]
        batches = list(Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0)))
        assert np.asarray(batches[1]["meta"]["id"]).tolist() == [4, 5]
        assert np.asarray(batches[1]["x"]).tolist() == [8, 10]
        assert batches[1]["meta"]["tag"] == ["t4", "t5"]
        assert list(source)[2] == {"x": 4, "meta": {"id": 2, "tag": "t2"}}


def test_nested_numeric_fields_stay_on_the_compiled_path():
    source = MemorySource(
        MemorySourceConfig(shuffle=True), {"x": np.arange(8.0, dtype=np.float32), "m": {"y": np.arange(8)}}
    )
    assert not source.has_host_fields()
    batch = next(iter(Pipeline(source=source, stages=[], batch_size=8, rngs=nnx.Rngs(0))))
    assert np.asarray(batch["m"]["y"]).tolist() == np.asarray(batch["x"]).astype(int).tolist()
    assert sorted(np.asarray(batch["m"]["y"]).tolist()) == list(range(8))


# ----------------------------------------------------------- rngs seeds the order
def order(source):
    return [int(i) for b in Pipeline(source=source, stages=[], batch_size=N, rngs=nnx.Rngs(0)) for i in np.asarray(b["id"])]


def test_rngs_seeds_the_shuffle_when_given():
    by_rngs = {seed: order(words_source(shuffle=True, rngs=nnx.Rngs(seed))) for seed in (123, 124, 125)}
    assert len({tuple(o) for o in by_rngs.values()}) == 3  # different rngs, different orders
    assert order(words_source(shuffle=True, rngs=nnx.Rngs(123))) == by_rngs[123]
    # With rngs, config.seed does not matter; without rngs, config.seed decides.
    assert order(words_source(shuffle=True, seed=7, rngs=nnx.Rngs(123))) == by_rngs[123]
    assert order(words_source(shuffle=True, seed=7)) == order(words_source(shuffle=True, seed=7))
    assert order(words_source(shuffle=True, seed=7)) != order(words_source(shuffle=True, seed=8))
    # A "shuffle" stream, when the Rngs has one, is the one used.
    assert order(words_source(shuffle=True, rngs=nnx.Rngs(0, shuffle=123))) != order(
        words_source(shuffle=True, rngs=nnx.Rngs(0, shuffle=124))
    )
    # Without shuffle the order is the records' own, rngs or not.
    assert order(words_source(rngs=nnx.Rngs(123))) == list(range(N))


def test_resume_is_exact_with_an_rngs_seeded_order():
    def make():
        source = MemorySource(
            MemorySourceConfig(shuffle=True), {"id": np.arange(N, dtype=np.int32)}, rngs=nnx.Rngs(9)
        )
        return Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))

    report = check_resume_exact(make, [1, 3, 4], num_epochs=2)
    assert report.num_records == 2 * N


def test_the_drawn_seed_is_the_config_seed_and_guards_a_restore():
    def make(seed):
        source = MemorySource(
            MemorySourceConfig(shuffle=True, seed=5), {"id": np.arange(N, dtype=np.int32)},
            rngs=nnx.Rngs(seed),
        )
        return Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))

    drawn = make(9).source.config.seed
    assert drawn == make(9).source.config.seed != 5
    assert drawn == int(jax.random.bits(nnx.Rngs(9).default(), (), np.uint32))
    pipeline = make(9)
    next(iter(pipeline))
    state = pipeline.get_state()
    other = make(10)
    with pytest.raises(StateError) as err:
        other.set_state(state)
    assert str(err.value) == (
        f"Pipeline state was saved with source.seed={drawn} but this pipeline has "
        f"source.seed={other.source.config.seed}; restore it into an identically configured "
        "pipeline."
    )


def test_a_text_only_source_serves_and_resumes():
    def make():
        source = MemorySource(MemorySourceConfig(shuffle=True), {"t": list("abcde")})
        return Pipeline(source=source, stages=[], batch_size=2, rngs=nnx.Rngs(0))

    pipeline = make()
    epochs = [[t for b in pipeline for t in b["t"]] for _ in range(2)]
    assert [sorted(e) for e in epochs] == [list("abcde")] * 2 and epochs[0] != epochs[1]
    report = check_resume_exact(make, [1, 2, 4], num_epochs=2)
    assert report.num_records == 10


def test_a_field_of_several_strings_per_record_reaches_operators_and_comes_back():
    tags = np.array([[f"t{i}", "x"] for i in range(N)], dtype=object)
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1),
                          {"id": np.arange(N, dtype=np.int32), "tags": tags})

    def joined(element, key=None):
        return {"joined": "+".join(element.data["tags"]),
                "count": np.int32(len(element.data["tags"]))}

    batches = list(Pipeline(source=source, stages=[ElementOperator(fn=joined)], batch_size=4))
    ids = [int(i) for b in batches for i in np.asarray(b["id"])]
    assert sorted(ids) == list(range(N))
    assert [j for b in batches for j in b["joined"]] == [f"t{i}+x" for i in ids]
    assert [t.tolist() for b in batches for t in b["tags"]] == [[f"t{i}", "x"] for i in ids]
    assert all(isinstance(b["joined"], list) for b in batches)
    assert [int(c) for b in batches for c in np.asarray(b["count"])] == [2] * N


@pytest.mark.parametrize("form", ["records", "dict"])
def test_records_each_holding_a_list_of_str_are_a_text_field(form):
    """[{"tags": ["t0", "x"]}, ...] (or a dict of such lists) is the same text field as an
    array of str per record, not refused as '<U2 values'."""
    if form == "records":
        data = [{"id": i, "tags": [f"t{i}", "x"]} for i in range(N)]
    else:
        data = {"id": np.arange(N), "tags": [[f"t{i}", "x"] for i in range(N)]}
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=1), data)
    assert source.element_spec()["tags"] == TextSpec((2,))
    batches = list(Pipeline(source=source, stages=[], batch_size=4))
    ids = [int(i) for b in batches for i in np.asarray(b["id"])]
    assert sorted(ids) == list(range(N))
    assert [t.tolist() for b in batches for t in b["tags"]] == [[f"t{i}", "x"] for i in ids]


@pytest.mark.parametrize("data, said", [
    ([{"t": "a"}, {"t": b"b"}], "field 't': record 1 holds bytes, record 0 str"),
    ([{"t": ["a", "b"]}, {"t": ["c", b"d"]}], "field 't': record 1 holds bytes and str, record 0 str"),
    ({"t": ["a", b"b"]}, "field 't': record 1 holds bytes, record 0 str"),
    ([{"t": ["a", 1]}, {"t": ["b", 2]}], "field 't' mixes text with int values \\(1\\)"),
])
def test_a_text_field_of_str_and_bytes_or_numbers_is_refused(data, said):
    with pytest.raises(DataraxError, match=said):
        MemorySource(MemorySourceConfig(), data)


def test_a_text_column_held_in_an_object_array_is_text():
    # dict(dataframe): a pandas column of str is an object array, not a list
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"label": np.arange(5, dtype=np.int32), "name": list("abcde")})
    objects = np.array(list("abcde"), dtype=object)
    for data in (dict(frame), {"label": np.arange(5, dtype=np.int32), "name": objects}):
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=1), data)
        assert source.element_spec()["name"] == TextSpec(())
        batches = list(Pipeline(source=source, stages=[], batch_size=3, seed=0))
        pairs = [(int(x), s) for b in batches for x, s in zip(np.asarray(b["label"]), b["name"])]
        assert sorted(pairs) == list(enumerate("abcde"))
    with pytest.raises(DataraxError, match="field 'mixed' holds object values"):
        MemorySource(MemorySourceConfig(), {"mixed": pd.Series(["a", 1, "c"])})

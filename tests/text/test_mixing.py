"""MixedDocuments: proportions by weight, per-corpus passes, determinism, exact resume."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from flax import nnx
from text_helpers import word_ids

from datarax.core.errors import ConfigError, RecordError, StateError
from datarax.pipeline import Pipeline
from datarax.text import (
    JsonlDocuments,
    MixedDocuments,
    PackedTextConfig,
    PackedTextSource,
    TextTokenizer,
)
from datarax.text.mixing import draw_edges


def _corpus(tag: int, size: int):
    """Corpus ``tag``: document ``i`` of its pass ``e`` is the word ``tag*1e8 + e*1e4 + i``."""
    return lambda epoch: [str(tag * 100_000_000 + epoch * 10_000 + i) for i in range(size)]


def _mix(seed: int = 0, per_epoch: int = 20_000, sizes=(50, 7, 400)) -> MixedDocuments:
    return MixedDocuments(
        {"web": _corpus(1, sizes[0]), "code": _corpus(2, sizes[1]), "books": _corpus(3, sizes[2])},
        {"web": 5, "code": 3, "books": 2},
        documents_per_epoch=per_epoch,
        seed=seed,
    )


def test_proportions_follow_the_weights() -> None:
    docs = [int(d) for d in _mix().read(0, 0)]
    corpus = np.array([d // 100_000_000 for d in docs])
    shares = np.bincount(corpus, minlength=4)[1:] / len(docs)
    np.testing.assert_allclose(shares, [0.5, 0.3, 0.2], atol=0.015)


def test_each_corpus_runs_through_its_own_passes_in_order() -> None:
    mix = _mix(per_epoch=3000)
    docs = [int(d) for d in mix.read(0, 0)] + [int(d) for d in mix.read(1, 0)]
    for tag, size in ((1, 50), (2, 7), (3, 400)):
        mine = [d - tag * 100_000_000 for d in docs if d // 100_000_000 == tag]
        expected = [(k // size) * 10_000 + k % size for k in range(len(mine))]
        assert mine == expected, f"corpus {tag}"
    assert (
        max(d % 100_000_000 // 10_000 for d in docs if d // 100_000_000 == 2) > 100
    )  # small one cycled


def test_same_seed_same_stream_other_seed_another() -> None:
    a, b, c = (list(_mix(seed=s, per_epoch=500).read(0, 0)) for s in (7, 7, 8))
    assert a == b and a != c


@pytest.mark.parametrize(("epoch", "start"), [(0, 1), (0, 333), (1, 0), (1, 499), (3, 250)])
def test_reading_from_any_point_matches_reading_through(epoch: int, start: int) -> None:
    mix = _mix(per_epoch=500)
    through = [list(mix.read(e, 0)) for e in range(epoch + 1)]
    assert list(_mix(per_epoch=500).read(epoch, start)) == through[epoch][start:]
    assert _mix(per_epoch=500).describe(epoch, start).startswith("corpus '")


def test_describe_names_corpus_and_corpus_pass() -> None:
    mix = _mix(per_epoch=500)
    docs = list(mix.read(0, 0))
    index = next(
        i
        for i, d in enumerate(docs)
        if int(d) // 100_000_000 == 2 and int(d) % 100_000_000 >= 10_000
    )
    k = int(docs[index]) % 100_000_000
    assert mix.describe(0, index) == f"corpus 'code' document {k % 10_000} of pass {k // 10_000}"


def test_mixed_packed_source_resumes_exactly_through_a_pipeline() -> None:
    def build() -> Pipeline:
        mix = MixedDocuments(
            {
                "a": lambda e: [
                    " ".join(str(100 * i + j) for j in range(i % 9 + 1)) for i in range(30)
                ],
                "b": lambda e: [
                    " ".join(str(50_000 + 10 * i + j) for j in range(5)) for i in range(4)
                ],
            },
            {"a": 0.7, "b": 0.3},
            documents_per_epoch=120,
            seed=3,
        )
        source = PackedTextSource(
            PackedTextConfig(seq_len=12, open_rows=2, tokenize_block=5), mix, word_ids
        )
        return Pipeline(source, batch_size=3, rngs=nnx.Rngs(0))

    reference = list(build())
    for k in (0, 1, 4, len(reference) - 1):
        it = iter(build())
        for _ in range(k):
            next(it)
        fresh = build()
        fresh.set_state(it.get_state())
        rest = list(iter(fresh))
        assert len(rest) == len(reference) - k
        for x, y in zip(rest, reference[k:]):
            np.testing.assert_array_equal(x["tokens"], y["tokens"])
            np.testing.assert_array_equal(x["segment_ids"], y["segment_ids"])


def test_configuration_errors() -> None:
    c = {"a": lambda: ["x"], "b": lambda: ["y"]}
    with pytest.raises(ConfigError) as err:
        MixedDocuments(c, {"a": 1}, documents_per_epoch=10)
    assert str(err.value) == (
        "MixedDocuments weights name ['a'] but the corpora are ['a', 'b']; give one weight per corpus."
    )
    with pytest.raises(ConfigError) as err:
        MixedDocuments(c, {"a": 0, "b": 0}, documents_per_epoch=10)
    assert str(err.value) == "MixedDocuments weights must not all be 0."
    with pytest.raises(ConfigError) as err:
        MixedDocuments(c, {"a": -1, "b": 1}, documents_per_epoch=10)
    assert (
        str(err.value)
        == "MixedDocuments weight of corpus 'a' must be a finite number >= 0, got -1."
    )
    corpora = {"a": lambda: [], "b": lambda: ["y"]}  # noqa: PIE807
    empty = MixedDocuments(corpora, {"a": 1, "b": 1}, documents_per_epoch=4)
    with pytest.raises(ConfigError) as err:
        list(empty.read(0, 0))
    assert str(err.value) == (
        "MixedDocuments corpus 'a' (FunctionDocuments) holds no documents but has weight 0.5. "
        "Check its reader (an empty file, a function returning []?) or give it weight 0 to "
        "turn it off.")


def test_weights_as_a_list_are_refused_saying_what_they_must_be() -> None:
    c = {"a": lambda: ["x"], "b": lambda: ["y"]}
    with pytest.raises(ConfigError) as err:
        MixedDocuments(c, [0.5, 0.5], documents_per_epoch=10)
    assert str(err.value) == (
        "MixedDocuments weights must be a dict keyed by corpus name, got list [0.5, 0.5]; "
        "e.g. corpora={'web': reader, 'books': reader} and weights={'web': 0.8, 'books': 0.2}."
    )
    with pytest.raises(ConfigError, match="MixedDocuments corpora must be a dict keyed by "):
        MixedDocuments([c["a"], c["b"]], {"a": 1, "b": 1}, documents_per_epoch=10)


def test_numpy_weights_are_numbers() -> None:
    """Weights read from a numpy array (float32, int64) are weights like Python's."""
    c = {"a": lambda: ["x"], "b": lambda: ["y"]}
    numpy = MixedDocuments(c, {"a": np.float32(3), "b": np.int64(1)}, documents_per_epoch=40)
    plain = MixedDocuments(c, {"a": 3, "b": 1}, documents_per_epoch=40)
    assert list(numpy.read(0, 0)) == list(plain.read(0, 0))
    assert numpy.weights.tolist() == [0.75, 0.25]
    zero_d = MixedDocuments(c, {"a": np.array(3.0), "b": jax.numpy.float32(1)},
                            documents_per_epoch=40)  # 0-d arrays: were refused as not numbers
    assert list(zero_d.read(0, 0)) == list(plain.read(0, 0))
    with pytest.raises(ConfigError, match=r"weight of corpus 'a' must be a finite number >= 0, "
                       r"got array\(\[3\.\]\)"):
        MixedDocuments(c, {"a": np.array([3.0]), "b": 1}, documents_per_epoch=40)
    with pytest.raises(ConfigError, match="got np.True_|got True"):
        MixedDocuments(c, {"a": np.bool_(True), "b": 1}, documents_per_epoch=40)


# --------------------------------------------- restoring into other documents
def _jsonl(folder, name: str, tag: int, count: int) -> str:
    path = folder / name
    path.write_text("".join(
        json.dumps({"text": " ".join(str(tag * 1000 + 10 * i + j) for j in range(i % 7 + 1))}) + "\n"
        for i in range(count)))
    return str(path)


def _packed(folder, weights=(4, 2), seed=3, b_file="b.jsonl", eos_id=None) -> PackedTextSource:
    mix = MixedDocuments(
        {"a": JsonlDocuments(_jsonl(folder, "a.jsonl", 1, 30)),
         "b": JsonlDocuments(_jsonl(folder, b_file, 2, 12))},
        dict(zip("ab", weights)), documents_per_epoch=80, seed=seed)
    return PackedTextSource(PackedTextConfig(seq_len=12, open_rows=2), mix,
                            TextTokenizer(word_ids, eos_id=eos_id))


TEXT_CHANGES = [
    ({"weights": (1, 1)}, r"documents.weights=\[0.666666666667, 0.333333333333\] but"),
    ({"seed": 4}, "documents.seed=3 but"),
    ({"b_file": "c.jsonl"}, r"documents.corpora\[1\].files=\['b.jsonl'\] but"),
    ({"eos_id": 0}, "tokenizer.eos_id=None but"),
]


@pytest.mark.parametrize(("change", "message"), TEXT_CHANGES)
def test_a_packed_state_restored_into_other_documents_is_refused_naming_them(
    tmp_path, change, message
) -> None:
    head = Pipeline(_packed(tmp_path), batch_size=3)
    it = iter(head)
    next(it), next(it)
    state = json.loads(json.dumps(head.get_state()))
    with pytest.raises(StateError, match=f"saved with source.{message}"):
        Pipeline(_packed(tmp_path, **change), batch_size=3).set_state(state)
    source_state = json.loads(json.dumps(head.source.get_state()))
    with pytest.raises(StateError, match=f"PackedTextSource state was saved with {message}"):
        _packed(tmp_path, **change).set_state(source_state)


@pytest.mark.parametrize("weights", [(2, 1), (0.4, 0.2)])
def test_packed_documents_with_equivalent_weights_continue_exactly(tmp_path, weights) -> None:
    reference = [b["tokens"] for b in Pipeline(_packed(tmp_path), batch_size=3)]
    head = Pipeline(_packed(tmp_path), batch_size=3)
    it = iter(head)
    for _ in range(4):
        next(it)
    state = json.loads(json.dumps(head.get_state()))
    for level in ("pipeline", "source"):
        resumed = Pipeline(_packed(tmp_path, weights=weights), batch_size=3)
        if level == "pipeline":
            resumed.set_state(state)
        else:
            resumed.source.set_state(state["source"])
        rest = [b["tokens"] for b in resumed]
        assert len(rest) == len(reference) - 4, level
        for x, y in zip(rest, reference[4:]):
            np.testing.assert_array_equal(x, y)


def _half_bad_mix(bad: str = "books") -> MixedDocuments:
    """Web: good documents; books: every document lacks its text (a misspelt field)."""
    web = lambda epoch: [f"{10 + i} {20 + i}" for i in range(50)]
    books = lambda epoch: [b"\xff" for _ in range(30)]
    corpora = {"web": web, "books": books} if bad == "books" else {"web": books, "books": web}
    return MixedDocuments(corpora, {"web": 1, "books": 1}, documents_per_epoch=200, seed=0)


def _half_bad_source(**config) -> PackedTextSource:
    config = {"seq_len": 8, "on_error": "skip", **config}
    return PackedTextSource(PackedTextConfig(**config), _half_bad_mix(), word_ids)


def test_a_corpus_whose_every_document_is_bad_is_an_error_naming_it_not_a_silent_reweighting():
    # Weights 1:1 asked; skipping every 'books' document would serve web only. Once books
    # was drawn 16 times in the pass with none served, the read stops naming it.
    draws = _half_bad_mix().choices(0, 200)
    sixteenth = int(np.flatnonzero(draws == 1)[15])  # the 16th draw of 'books'
    source = _half_bad_source(tokenize_block=4)
    served = [source.get_batch(1)]
    early = source.get_state()
    assert early["corpus_documents"][0] > 0 == early["corpus_documents"][1]  # packed per corpus
    with pytest.raises(RecordError) as err:
        while (batch := source.get_batch(1)) is not None:
            served.append(batch)
    message = str(err.value)
    assert "corpus 'books' of the mixture served none of the 16 documents" in message
    assert "corpus 'books' document" in message and "give it weight 0" in message
    assert 1 < len(served) <= sixteenth  # web's rows before that document were served
    for state in (early, source.get_state()):  # a restore meets the same error
        fresh = _half_bad_source(tokenize_block=4)
        fresh.set_state(json.loads(json.dumps(state)))
        with pytest.raises(RecordError, match="corpus 'books' of the mixture served none"):
            while fresh.get_batch(1) is not None:
                pass


def test_a_corpus_with_some_bad_documents_is_skipped_and_counted_per_corpus() -> None:
    web = lambda epoch: [f"{10 + i} {20 + i}" for i in range(50)]
    books = lambda epoch: [b"\xff" if i % 2 else f"{500 + i}" for i in range(30)]
    mix = MixedDocuments({"web": web, "books": books}, {"web": 1, "books": 1},
                         documents_per_epoch=200, seed=0)
    source = PackedTextSource(PackedTextConfig(seq_len=8, on_error="skip"), mix, word_ids)
    rows = 0
    while (batch := source.get_batch(16)) is not None:
        rows += len(batch["tokens"])
    stats = source.packing_stats()
    drawn = np.bincount(mix.choices(0, 200), minlength=2)
    assert stats["corpus_documents"]["web"] == drawn[0]
    assert stats["corpus_documents"]["books"] + stats["skipped"] == drawn[1]


def test_a_small_corpus_all_bad_is_named_after_its_documents_and_half_bad_is_not() -> None:
    # On one host 3 draws of a 3-document corpus tried them all; on one of two hosts, the
    # draws it sees of a corpus half bad may all be its bad document: only counted there.
    web = lambda epoch: [f"{10 + i}" for i in range(50)]
    mix = lambda small: MixedDocuments({"web": web, "small": small}, {"web": 1, "small": 1},
                                       documents_per_epoch=60, seed=0)
    config = PackedTextConfig(seq_len=8, on_error="skip")
    source = PackedTextSource(config, mix(lambda e: [b"\xff"] * 3), word_ids)
    with pytest.raises(RecordError, match="corpus 'small' of the mixture served none of the 3 "):
        source.get_batch(64)
    for shard in (0, 1):
        half = PackedTextSource(config, mix(lambda e: [b"\xff", "7"]), word_ids)
        pipeline = Pipeline(half, batch_size=64, rngs=nnx.Rngs(0), shard_index=shard,
                            shard_count=2)
        assert sum(len(b["tokens"]) for b in pipeline) > 0


def test_numpy_ints_are_taken_as_the_same_ints() -> None:
    # documents_per_epoch / seed / token ids computed with NumPy
    mix = _mix(seed=np.int64(7), per_epoch=np.int64(500))
    assert list(mix.read(0, 0)) == list(_mix(seed=7, per_epoch=500).read(0, 0))
    tok = TextTokenizer(lambda t: [1, 2, 3, 4], bos_id=np.int64(9), max_tokens=np.int32(3))
    assert tok.encode("x").tolist() == [9, 1, 2]
    with pytest.raises(ConfigError, match="documents_per_epoch must be an int >= 1, got 500.0"):
        _mix(per_epoch=500.0)


def test_a_corpus_of_weight_0_is_never_drawn_even_last() -> None:
    # shares of 1/3 round to a sum just below 1: the sliver [0.999999999999, 1) must not
    # go to the weight-0 corpus after them
    mix = MixedDocuments(
        {n: _corpus(i + 1, 5) for i, n in enumerate("abcz")},
        {"a": 1, "b": 1, "c": 1, "z": 0}, documents_per_epoch=10)
    edges = draw_edges(mix.weights)
    top = np.nextafter(1.0, 0.0)
    assert np.searchsorted(edges, [0.0, top], side="right").tolist() == [0, 2]
    assert edges.tolist()[2:] == [1.0, 1.0]
    first = MixedDocuments({"z": _corpus(1, 5), "a": _corpus(2, 5)}, {"z": 0, "a": 1},
                           documents_per_epoch=50)
    assert {int(d) // 100_000_000 for d in first.read(0, 0)} == {2}


def test_huge_weights_keep_their_ratios() -> None:
    # their sum overflowed to inf: every share was nan and building the mixture raised
    # an IndexError
    corpora = {n: _corpus(i + 1, 5) for i, n in enumerate("abc")}
    huge = MixedDocuments(corpora, {"a": 1e308, "b": 1e308, "c": 0}, documents_per_epoch=40)
    plain = MixedDocuments(corpora, {"a": 1, "b": 1, "c": 0}, documents_per_epoch=40)
    assert huge.weights.tolist() == [0.5, 0.5, 0.0]
    assert list(huge.read(0, 0)) == list(plain.read(0, 0))

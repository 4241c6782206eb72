"""W9: tokenize + pack documents into ``seq_len`` rows — datarax vs Grain vs a plain loop.

Generates ``--docs`` documents of about ``--words`` words each (Zipf-distributed
pseudo-words, so a byte-pair tokenizer splits the rare ones), trains one BPE tokenizer
with Hugging Face ``tokenizers`` on a sample, then times one full pass of each
contender over the same documents with that tokenizer (EOS appended to every
document), 64 rows a batch:

* ``floor``: a plain single-threaded Python loop — ``tokenizer.encode`` per document,
  first-fit into ``--bins`` open rows (the fullest emitted when none fits, as datarax
  does), numpy rows with tokens, segment ids, positions, targets and loss mask;
* ``grain``: ``MapDataset.source(docs).map(encode)`` -> ``FirstFitPackIterDataset``
  (``num_packing_bins=--bins``, no bin shuffling) -> ``.batch(64)`` (tokens, segment
  ids, positions; Grain makes no targets or loss mask);
* ``datarax``: ``Pipeline(PackedTextSource(first_fit, open_rows=--bins))`` — the Rust
  batch encoder over blocks of documents, then the packer; five int32 fields as JAX
  arrays;
* ``datarax-concat``: the same with ``packing="concat"``, for scale.

Same work, verified: every contender must pack exactly the tokens of every document
(count and int64 sum of non-padding token ids agree). Reports tokens/s (non-padding
tokens packed per second of the pass) and packing efficiency (non-padding share of the
rows), with ratios datarax / grain and datarax / floor, from one run.

Run: ``python -m benchmarks.bench_text_packing [--docs 100000] [--json out.json]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

from benchmarks.harness import parser

BATCH = 64


# ----------------------------------------------------------------------- data
def make_documents(count: int, words: int, seed: int = 0) -> list[str]:
    """``count`` documents of ~``words`` words drawn Zipf-like from 30,000 pseudo-words."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = np.array(["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(30_000)])
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    p /= p.sum()
    lengths = np.clip(rng.normal(words, words / 5, count).astype(int), words // 4, 2 * words)
    picks = vocab[rng.choice(len(vocab), int(lengths.sum()), p=p)]
    ends = np.cumsum(lengths)
    return [" ".join(picks[e - n : e]) for e, n in zip(ends, lengths)]


def train_tokenizer(docs: list[str], vocab_size: int = 8192) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[EOS]"], show_progress=False
    )
    tok.train_from_iterator(docs[:3000], trainer)
    return tok


# ------------------------------------------------------------------ contenders
def run_floor(docs: list[str], tok: Any, eos: int, seq_len: int, bins: int):
    """Plain Python: encode one document at a time, first-fit into ``bins`` open rows."""
    arange = np.arange(seq_len, dtype=np.int32)

    def rows_of(closed: list[list[list[int]]]):
        n = len(closed)
        tokens = np.zeros((n, seq_len), np.int32)
        segs = np.zeros((n, seq_len), np.int32)
        pos = np.zeros((n, seq_len), np.int32)
        mask = np.zeros((n, seq_len), np.int32)
        for r, pieces in enumerate(closed):
            at = 0
            for s, ids in enumerate(pieces, 1):
                end = at + len(ids)
                tokens[r, at:end] = ids
                segs[r, at:end] = s
                pos[r, at:end] = arange[: end - at]
                mask[r, at : end - 1] = 1
                at = end
        targets = np.zeros_like(tokens)
        targets[:, :-1] = np.where(mask[:, :-1] == 1, tokens[:, 1:], 0)
        return {
            "tokens": tokens,
            "segment_ids": segs,
            "positions": pos,
            "targets": targets,
            "loss_mask": mask,
        }

    open_rows: list[list[list[int]]] = []
    used: list[int] = []
    closed: list[list[list[int]]] = []
    for doc in docs:
        ids = tok.encode(doc, add_special_tokens=False).ids
        ids.append(eos)
        for start in range(0, len(ids), seq_len):
            piece = ids[start : start + seq_len]
            for i, u in enumerate(used):
                if u + len(piece) <= seq_len:
                    break
            else:
                if len(open_rows) == bins:
                    full = max(range(bins), key=lambda j: (used[j], -j))
                    closed.append(open_rows.pop(full))
                    used.pop(full)
                open_rows.append([])
                used.append(0)
                i = len(open_rows) - 1
            open_rows[i].append(piece)
            used[i] += len(piece)
            if used[i] == seq_len:
                closed.append(open_rows.pop(i))
                used.pop(i)
        while len(closed) >= BATCH:
            yield rows_of(closed[:BATCH])
            del closed[:BATCH]
    closed.extend(open_rows)
    for i in range(0, len(closed), BATCH):
        yield rows_of(closed[i : i + BATCH])


def run_grain(docs: list[str], tok: Any, eos: int, seq_len: int, bins: int):
    import grain
    import grain.experimental as ge

    def encode(text: str) -> dict[str, np.ndarray]:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids.append(eos)
        return {"tokens": np.asarray(ids, np.int32)}

    ds = grain.MapDataset.source(docs).map(encode).to_iter_dataset()
    packed = ge.FirstFitPackIterDataset(
        ds, length_struct={"tokens": seq_len}, num_packing_bins=bins, shuffle_bins=False
    ).batch(BATCH)
    for batch in packed:
        yield {"tokens": batch["tokens"], "segment_ids": batch["tokens_segment_ids"]}


def run_datarax(
    docs: list[str], tok: Any, eos: int, seq_len: int, bins: int, packing: str = "first_fit",
    prefetch: int = 2,
):
    from flax import nnx

    from datarax.pipeline import Pipeline
    from datarax.text import PackedTextConfig, PackedTextSource, TextTokenizer

    config = PackedTextConfig(seq_len=seq_len, packing=packing, open_rows=bins, tokenize_block=1024)
    source = PackedTextSource(config, lambda: docs, TextTokenizer(tok, eos_id=eos))
    yield from Pipeline(source, batch_size=BATCH, prefetch=prefetch, rngs=nnx.Rngs(0))


CONTENDERS = {
    "floor": run_floor,
    "grain": run_grain,
    "datarax": run_datarax,
    "datarax-concat": lambda *a: run_datarax(*a, packing="concat"),
    # rows packed on the loop's thread (no read-ahead), for scale
    "datarax-prefetch0": lambda *a: run_datarax(*a, prefetch=0),
}


def _import_contenders() -> None:
    """Import every contender's libraries before any timing (JAX, Flax, Grain)."""
    import flax.nnx  # noqa: F401
    import grain.experimental  # noqa: F401

    import datarax.pipeline
    import datarax.text  # noqa: F401


def timed_pass(name: str, docs, tok, eos: int, seq_len: int, bins: int) -> dict[str, Any]:
    began = time.perf_counter()
    rows = tokens = 0
    checksum = 0
    for batch in CONTENDERS[name](docs, tok, eos, seq_len, bins):
        t = np.asarray(batch["tokens"])
        real = np.asarray(batch["segment_ids"]) > 0
        rows += t.shape[0]
        tokens += int(real.sum())
        checksum += int(t[real].astype(np.int64).sum())
    seconds = time.perf_counter() - began
    return {
        "seconds": seconds,
        "rows": rows,
        "tokens": tokens,
        "checksum": checksum,
        "tokens_per_s": tokens / seconds,
        "efficiency": tokens / (rows * seq_len),
    }


def overlap_pass(results: dict[str, Any], docs, tok, eos: int, seq_len: int,
                 bins: int) -> dict[str, Any]:
    """A pass of datarax with and without read-ahead where each batch is followed by
    a simulated train step (a wait of twice the data time per batch, as when the loop
    waits for the accelerator): the share of the data time hidden behind the steps."""
    batches = -(-results["datarax"]["rows"] // BATCH)
    wait = 2 * results["datarax"]["seconds"] / batches
    out: dict[str, Any] = {"train_s_per_batch": wait}
    for name, prefetch in (("datarax", 2), ("datarax-prefetch0", 0)):
        began = time.perf_counter()
        for batch in run_datarax(docs, tok, eos, seq_len, bins, prefetch=prefetch):
            np.asarray(batch["tokens"])  # the step takes the batch, then waits
            time.sleep(wait)
        both = time.perf_counter() - began
        data = results[name]["seconds"]
        out[name] = {"seconds": both,
                     "hidden": max(0.0, min(1.0, (data + batches * wait - both) / data))}
    return out


def main(argv: list[str] | None = None) -> int:
    options = parser(__doc__, docs=100_000, words=200, seq_len=512)
    options.add_argument("--bins", type=int, default=8, help="open rows / packing bins")
    options.add_argument("--contenders", default=",".join(CONTENDERS))
    options.add_argument("--json", default=None)
    args = options.parse_args(argv)
    began = time.perf_counter()
    _import_contenders()
    docs = make_documents(args.docs, args.words)
    tok = train_tokenizer(docs)
    eos = tok.token_to_id("[EOS]")
    want_tokens = want_sum = 0
    for enc in tok.encode_batch_fast(docs, add_special_tokens=False):
        want_tokens += len(enc.ids) + 1
        want_sum += sum(enc.ids) + eos
    setup = time.perf_counter() - began
    print(
        f"W9: {args.docs:,} documents, {want_tokens:,} tokens "
        f"({want_tokens / args.docs:.0f} per document), seq_len {args.seq_len}, "
        f"{args.bins} bins; set-up {setup:.1f} s; TOKENIZERS threads: "
        f"{os.environ.get('RAYON_NUM_THREADS', 'default')}",
        flush=True,
    )
    results: dict[str, Any] = {}
    for name in [c.strip() for c in args.contenders.split(",") if c.strip()]:
        r = timed_pass(name, docs, tok, eos, args.seq_len, args.bins)
        r["same_work"] = r["tokens"] == want_tokens and r["checksum"] == want_sum
        results[name] = r
        print(
            f"  {name:15s} {r['tokens_per_s']:>12,.0f} tokens/s  efficiency "
            f"{r['efficiency']:.4f}  {r['rows']:,} rows  {r['seconds']:.1f} s  "
            f"same work: {r['same_work']}",
            flush=True,
        )
    ratios = {}
    for base in ("grain", "floor"):
        for name in results:
            if name.startswith("datarax") and base in results:
                ratios[f"{name} / {base} tokens/s"] = (
                    results[name]["tokens_per_s"] / results[base]["tokens_per_s"]
                )
                ratios[f"{name} / {base} efficiency"] = (
                    results[name]["efficiency"] / results[base]["efficiency"]
                )
    for key, value in ratios.items():
        print(f"  {key}: {value:.2f}x")
    overlap = {}
    if "datarax" in results and "datarax-prefetch0" in results:
        overlap = overlap_pass(results, docs, tok, eos, args.seq_len, args.bins)
        for name, row in overlap.items():
            if isinstance(row, dict):
                print(f"  overlap {name}: {row['seconds']:.2f} s with the train steps, "
                      f"{row['hidden']:.0%} of the data time hidden", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "docs": args.docs,
                    "words": args.words,
                    "seq_len": args.seq_len,
                    "bins": args.bins,
                    "tokens": want_tokens,
                    "results": results,
                    "ratios": ratios,
                    "overlap": overlap,
                    "cpus": os.cpu_count(),
                },
                f,
                indent=2,
            )
    return 0 if all(r["same_work"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

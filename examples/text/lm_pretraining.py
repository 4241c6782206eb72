"""A small language-model pretraining input pipeline, checkpointed and resumed to the token.

1. Writes two local corpora: a JSON Lines file and a Parquet file of generated text.
2. Trains a byte-pair tokenizer on them with Hugging Face ``tokenizers`` (nothing is
   downloaded) and saves it as ``tokenizer.json``.
3. Mixes the corpora by weight (70 / 30), tokenizes with BOS/EOS and packs documents
   into 64-token rows (first-fit) with segment ids, positions, targets and a loss mask.
4. Trains a tiny Flax NNX transformer (attention kept inside each packed document) for
   a few steps, saving model and data position together with Orbax every 3 steps.
5. "Crashes", restores the latest checkpoint into freshly built objects, finishes, and
   checks the result equals an uninterrupted run.

Run: python examples/text/lm_pretraining.py   (needs datarax[tokenizers,hf])
"""

from __future__ import annotations

import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(f'{err}; this example needs: pip install "datarax[tokenizers,hf]"') from err

import datarax.checkpoint
from datarax.pipeline import Pipeline
from datarax.text import (
    JsonlDocuments,
    MixedDocuments,
    PackedTextConfig,
    PackedTextSource,
    ParquetDocuments,
    TextTokenizer,
)

SEQ_LEN, BATCH_SIZE, SAVE_EVERY, TOTAL_STEPS, CRASH_AT = 64, 8, 3, 12, 8
SUBJECTS = ["the", "cat", "a", "dog", "my", "bird", "our", "fox", "some", "owl"]
VERBS = ["sees", "chases", "likes", "finds", "follows", "watches"]
OBJECTS = ["the", "ball", "a", "stick", "the", "moon", "some", "fish", "a", "tree", "the", "river"]


def write_corpora(directory: str) -> tuple[str, str]:
    """Generated sentences: 300 documents in JSON Lines, 200 in Parquet."""
    rng = np.random.default_rng(0)

    def document() -> str:
        sentences = []
        for _ in range(rng.integers(1, 8)):
            s, v = rng.choice(len(SUBJECTS) // 2) * 2, rng.choice(len(VERBS))
            o = rng.choice(len(OBJECTS) // 2) * 2
            sentences.append(
                f"{SUBJECTS[s]} {SUBJECTS[s + 1]} {VERBS[v]} {OBJECTS[o]} {OBJECTS[o + 1]} ."
            )
        return " ".join(sentences)

    jsonl = os.path.join(directory, "web.jsonl")
    with open(jsonl, "w") as f:
        f.writelines(json.dumps({"id": i, "text": document()}) + "\n" for i in range(300))
    parquet = os.path.join(directory, "books.parquet")
    pq.write_table(pa.table({"text": [document() for _ in range(200)]}), parquet, row_group_size=50)
    return jsonl, parquet


def train_tokenizer(directory: str, files: tuple[str, str]) -> str:
    """A 200-token BPE vocabulary learned from the corpora, saved as tokenizer.json."""
    texts = list(JsonlDocuments(files[0]).read(0, 0)) + list(ParquetDocuments(files[1]).read(0, 0))
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[BOS]", "[EOS]"], show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    path = os.path.join(directory, "tokenizer.json")
    tokenizer.save(path)
    return path


def build_pipeline(files: tuple[str, str], tokenizer_path: str) -> Pipeline:
    """Mixed corpora -> BOS/EOS token ids -> packed 64-token rows, 8 rows a batch."""
    hf = Tokenizer.from_file(tokenizer_path)
    tokenizer = TextTokenizer(hf, bos_id=hf.token_to_id("[BOS]"), eos_id=hf.token_to_id("[EOS]"))
    documents = MixedDocuments(
        {"web": JsonlDocuments(files[0]), "books": ParquetDocuments(files[1])},
        {"web": 0.7, "books": 0.3},
        documents_per_epoch=400,
        seed=0,
    )
    config = PackedTextConfig(seq_len=SEQ_LEN, packing="first_fit", open_rows=8, pad_id=0)
    source = PackedTextSource(config, documents, tokenizer)
    return Pipeline(source, batch_size=BATCH_SIZE, rngs=nnx.Rngs(0), drop_remainder=True)


class TinyLM(nnx.Module):
    """One pre-norm transformer block; attention stays inside each packed document."""

    def __init__(self, vocab: int, dim: int = 32, heads: int = 2, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.position = nnx.Embed(SEQ_LEN, dim, rngs=rngs)
        self.norm1 = nnx.LayerNorm(dim, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(heads, dim, decode=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(dim, rngs=rngs)
        self.mlp_in = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.mlp_out = nnx.Linear(4 * dim, dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, rngs=rngs)

    def __call__(self, tokens, segment_ids, positions):
        x = self.embed(tokens) + self.position(positions)
        same_document = segment_ids[:, :, None] == segment_ids[:, None, :]
        causal = jnp.tril(jnp.ones((SEQ_LEN, SEQ_LEN), bool))
        mask = (same_document & causal & (segment_ids[:, :, None] > 0))[:, None]
        x = x + self.attention(self.norm1(x), mask=mask)
        x = x + self.mlp_out(jax.nn.gelu(self.mlp_in(self.norm2(x))))
        return self.head(x)


@nnx.jit
def train_step(model, optimizer, batch):
    def loss_fn(m):
        logits = m(batch["tokens"], batch["segment_ids"], batch["positions"])
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
        mask = batch["loss_mask"].astype(jnp.float32)
        return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def train(checkpoints: str, files, tokenizer_path: str, stop_at: int | None = None):
    """Train to TOTAL_STEPS, resuming from the latest checkpoint in ``checkpoints``."""
    pipeline = build_pipeline(files, tokenizer_path)
    model = TinyLM(Tokenizer.from_file(tokenizer_path).get_vocab_size(), rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)
    options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=SAVE_EVERY)
    with ocp.CheckpointManager(checkpoints, options=options) as manager:
        step, loss = 0, float("nan")
        if manager.latest_step() is not None:
            restored = datarax.checkpoint.restore(
                manager,
                None,
                pipeline,
                train=ocp.args.StandardRestore(nnx.state((model, optimizer))),
            )
            nnx.update((model, optimizer), restored.train)
            step = manager.latest_step()
            print(
                f"resumed at step {step}: {pipeline.get_state()['position']} rows into "
                f"pass {pipeline.get_state()['epoch']}"
            )
        while step < TOTAL_STEPS:
            for batch in pipeline:
                loss = float(train_step(model, optimizer, batch))
                step += 1
                datarax.checkpoint.save(
                    manager,
                    step,
                    pipeline,
                    train=ocp.args.StandardSave(nnx.state((model, optimizer))),
                )
                if step in (stop_at, TOTAL_STEPS):
                    break
            if step == stop_at:
                print(f"crash at step {step} (loss {loss:.3f})")
                return model
        manager.wait_until_finished()
        stats = pipeline.source.packing_stats()
        print(
            f"step {step}: loss {loss:.3f}; packing efficiency {stats['efficiency']:.1%} "
            f"({stats['documents']} documents into {stats['rows']} rows this pass)"
        )
    return model


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        files = write_corpora(work)
        tokenizer_path = train_tokenizer(work, files)
        preempted, clean = os.path.join(work, "preempted"), os.path.join(work, "clean")
        train(preempted, files, tokenizer_path, stop_at=CRASH_AT)  # last save at step 6
        resumed = train(preempted, files, tokenizer_path)
        reference = train(clean, files, tokenizer_path)
        same = all(
            np.array_equal(a, b)
            for a, b in zip(
                jax.tree.leaves(nnx.state(resumed)), jax.tree.leaves(nnx.state(reference))
            )
        )
        print("resumed run matches the uninterrupted run:", same)
        assert same


if __name__ == "__main__":
    main()

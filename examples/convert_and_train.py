"""From a Hugging Face-style Parquet file to training, through a converted dataset.

1. Writes scikit-learn's digits as a Parquet file the way ``datasets`` does (a PNG
   ``Image`` column and a ``ClassLabel`` with names).
2. Converts it with ``datarax.dataset.convert`` (the same as ``datarax convert SRC DST``)
   into 4 ArrayRecord shards plus their metadata.
3. Trains the ``datarax demo`` classifier from the folder — no ``decode`` written: the
   metadata says the fields, and the images are decoded from PNG by the source.
4. Saves the pipeline state midway through epoch 1, builds a fresh pipeline, restores
   it, and checks that it serves exactly the batches the uninterrupted run did.

Run: ``python examples/convert_and_train.py`` (needs ``datarax[convert,hf,demo]``; writes into
the current folder).
"""

from __future__ import annotations

import io
import json

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

try:
    import datasets
    from PIL import Image
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(f'{err}; this example needs: pip install "datarax[convert,hf,demo]"') from err

from datarax.cli.demo import Classifier, load_digits_split, normalize_images
from datarax.dataset import convert
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
BATCH = 64


def write_parquet(path: str) -> None:
    """The training split as Parquet written by Hugging Face ``datasets``."""
    train, _ = load_digits_split(seed=0)
    pngs = []
    for image in train["image"]:
        buffer = io.BytesIO()
        Image.fromarray(image[:, :, 0]).save(buffer, format="PNG")
        pngs.append({"bytes": buffer.getvalue(), "path": None})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})
    datasets.Dataset.from_dict({"image": pngs, "label": train["label"].tolist()},
                               features=features).to_parquet(path)


def build_pipeline(folder: str) -> Pipeline:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(shuffle_files=True, seed=0), folder)
    return Pipeline(source=source, stages=[], batch_size=BATCH, rngs=nnx.Rngs(0),
                    drop_remainder=True)


def main() -> None:
    write_parquet("digits.parquet")
    # overwrite: a second run replaces the folder (an existing dataset is refused otherwise)
    info, summary = convert("digits.parquet", "digits_ds", shards=4, overwrite=True)
    label = info.features["label"]
    print(f"converted: {summary.records} records in {summary.shards} shards; "
          f"image {info.features['image'].shape} {info.features['image'].encoding}; "
          f"classes {label.class_names[0]}..{label.class_names[-1]}")

    pipeline = build_pipeline("digits_ds")
    print("element spec:", {k: (v.shape, str(v.dtype)) for k, v in pipeline.source.element_spec().items()})
    model = Classifier(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model: Classifier, optimizer: nnx.Optimizer, image, label):
        def loss_fn(model: Classifier):
            logits = model(image.astype(jnp.float32) / 255.0)
            return optax.softmax_cross_entropy_with_integer_labels(logits, label).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    checkpoint, after = None, []
    for epoch in range(6):
        iterator = iter(pipeline)
        for step, batch in enumerate(iterator):
            train_step(model, optimizer, batch["image"], batch["label"])
            if epoch == 1 and step == 5:
                checkpoint = json.dumps(iterator.get_state())
            elif epoch == 1 and checkpoint is not None:
                after.append((np.asarray(batch["image"]), np.asarray(batch["label"])))

    resumed = iter(build_pipeline("digits_ds"))
    resumed.set_state(json.loads(checkpoint))
    replay = [(np.asarray(b["image"]), np.asarray(b["label"])) for b in resumed]
    same = len(replay) == len(after) and all(
        np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(replay, after))
    print(f"resumed mid-epoch after step 5 of epoch 1: {len(replay)} batches replayed")
    print(f"resumed batches identical: {same}")

    _, test = load_digits_split(seed=0)
    accuracy = float((jnp.argmax(model(normalize_images(test["image"])), -1) == test["label"]).mean())
    print(f"test accuracy above 0.8: {accuracy > 0.8}")
    pipeline.source.close()


if __name__ == "__main__":
    main()

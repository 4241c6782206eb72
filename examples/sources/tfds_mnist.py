"""TFDS MNIST + normalizer (the seed's example, unchanged), offline.

By default the example runs inside ``tfds.testing.mock_data``, which serves generated
MNIST-shaped records (28x28x1 uint8 images, int64 labels) through ``tfds.data_source``
— the random-access path TFDSEagerSource reads — so nothing is downloaded. Run with
``--real`` to load the real MNIST (downloaded and prepared as ArrayRecord into
``~/tensorflow_datasets`` on first use).

Needs ``pip install "datarax[tfds]"`` and, to build the mock data or prepare MNIST,
TensorFlow (``pip install tensorflow-cpu``; datarax reads prepared TFDS data without it).
"""

import contextlib
import importlib.util
import sys

try:
    import tensorflow_datasets as tfds
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(f'{err}; this example needs: pip install "datarax[tfds]"') from err

if "--real" not in sys.argv and importlib.util.find_spec("tensorflow") is None:
    # TFDS builds its mock (and prepares the real MNIST) with TensorFlow; datarax reads without it.
    raise SystemExit('tfds.testing.mock_data needs TensorFlow: pip install tensorflow-cpu')
offline = (
    contextlib.nullcontext() if "--real" in sys.argv else tfds.testing.mock_data(num_examples=256)
)

with offline:
    # ---- the seed's example, unchanged ---------------------------------------------
    from datarax.pipeline import Pipeline
    from datarax.sources import TFDSEagerSource, TFDSEagerConfig
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from flax import nnx

    # Load MNIST from TensorFlow Datasets
    config = TFDSEagerConfig(name="mnist", split="train")
    train_source = TFDSEagerSource(config)

    # Define normalization as an operator
    def normalize(element, key=None):
        img = element.data["image"]
        # Normalize to [0, 1] range
        return element.update_data({"image": img / 255.0})

    normalizer = ElementOperator(
        ElementOperatorConfig(stochastic=False),
        fn=normalize
    )

    # Create training pipeline
    train_pipeline = (
        Pipeline(source=train_source, stages=[normalizer], batch_size=32, rngs=nnx.Rngs(0)))

    # Iterate
    for i, batch in enumerate(train_pipeline):
        # Train model
        print(f"Batch {i}: {batch['image'].shape}")
        if i >= 2:
            break

    # The best-practice line: shuffle on the config alone (Feistel permutation, O(1) memory)
    shuffled = TFDSEagerSource(TFDSEagerConfig(name="mnist", split="train", shuffle=True, seed=42))
    print("first shuffled records:", shuffled.record_indices_at(0, 5).tolist())

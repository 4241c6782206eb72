"""An image-classification input pipeline: ArrayRecord of PNGs -> decode -> augment -> mixup.

The example writes its own data: 600 small PNG-encoded images (a coloured disc whose
colour is the class) in two ArrayRecord files. The pipeline decodes each record on
the host, then runs random resized crop, flip, colour jitter, normalize and mixup
inside the compiled step, each record drawing from its own key; a mid-epoch state
restores exactly. Needs: pip install "datarax[arrayrecord,image]".
"""

import io
import json
import os
import tempfile

import numpy as np
from flax import nnx

try:
    from array_record.python.array_record_module import ArrayRecordWriter
    from PIL import Image
except ModuleNotFoundError as err:  # an optional package
    raise SystemExit(
        f'{err}; this example needs: pip install "datarax[arrayrecord,image]"'
    ) from err

from datarax.operators import BatchMixOperator, ProbabilisticOperator
from datarax.operators import image as I
from datarax.pipeline import Pipeline
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

NUM_CLASSES, SIZE, CROP = 3, 40, 32
COLOURS = np.array([[220, 40, 40], [40, 180, 60], [40, 70, 220]], np.uint8)


def write_dataset(folder: str, records: int = 600) -> list[str]:
    """Two ArrayRecord files of records: label byte + PNG bytes."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    paths = []
    for part in range(2):
        path = os.path.join(folder, f"shapes-{part}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for i in range(part, records, 2):
            label = i % NUM_CLASSES
            image = rng.integers(0, 60, (SIZE, SIZE, 3), dtype=np.uint8)
            cy, cx, r = rng.integers(12, 28, 2).tolist() + [int(rng.integers(6, 12))]
            image[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = COLOURS[label]
            png = io.BytesIO()
            Image.fromarray(image).save(png, format="PNG")
            writer.write(bytes([label]) + png.getvalue())
        writer.close()
        paths.append(path)
    return paths


def decode(record: bytes) -> dict[str, np.ndarray]:
    """One record -> a uint8 HWC image and its int32 label (runs on the host)."""
    image = np.asarray(Image.open(io.BytesIO(record[1:])).convert("RGB"))
    return {"image": image, "label": np.int32(record[0])}


def build(paths: list[str]) -> Pipeline:
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=0), paths, decode=decode)
    stages = [
        I.RandomResizedCrop(CROP, scale=(0.5, 1.0)),
        I.HorizontalFlip(0.5),
        ProbabilisticOperator(I.Brightness((-0.2, 0.2)), probability=0.8),
        I.Contrast((0.8, 1.2)),
        I.Saturation((0.7, 1.3)),
        I.Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25]),
        BatchMixOperator(mode="mixup", alpha=0.2, num_classes=NUM_CLASSES),
    ]
    return Pipeline(source=source, stages=stages, batch_size=64, rngs=nnx.Rngs(0))


folder = tempfile.mkdtemp(prefix="datarax_vision_")
paths = write_dataset(folder)
pipeline = build(paths)
iterator = iter(pipeline)
first = next(iterator)
print("batch:", {k: (tuple(v.shape), str(v.dtype)) for k, v in first.items()})
print("soft labels sum to 1:", bool(np.allclose(np.asarray(first["label"]).sum(axis=1), 1.0)))

# Save mid-epoch, rebuild everything, restore: the next batches are identical.
next(iterator)
state = json.dumps(iterator.get_state())
expected = [np.asarray(next(iterator)["image"]) for _ in range(2)]
resumed = build(paths)
resumed.set_state(json.loads(state))
again = iter(resumed)
same = all(np.array_equal(e, np.asarray(next(again)["image"])) for e in expected)
print("resumed batches identical:", same)

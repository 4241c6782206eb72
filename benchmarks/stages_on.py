"""Where stages run: ``stages_on="device"`` against ``"host"``, on this machine's accelerator.

``python -m benchmarks.stages_on [--tiny] [--out results/stages_on_tpu_v5e.json]``

For W1 (shuffle, /255, per-record flip over 32x32 uint8 images), W7 (random resized
crop, flip, brightness, contrast, normalize over 96x96 images) and W2's ArrayRecord
files through W1's stages (a host source), each placement:

* ``data_share`` — the data's share of the chip's time beside a training step of
  chained matmuls sized to ``train_ms`` (``benchmarks.on_chip``'s measure):
  ``(both - train) / both``, batches taken with ``pipeline.step()`` in the same loop;
* ``data_alone_ms`` — ms per batch of ``step()`` alone;
* ``values`` — the first batches of an epoch from both placements compared: the label
  field (integers) must be identical, the image field's largest absolute and relative
  differences are reported (float ops on two backends).

On a CPU-only machine both placements are the CPU: the script only checks itself (no
training step, no share).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from benchmarks.harness import emit, sized_parser
from benchmarks.on_chip import _ms_per_call, _share

SIZES = {
    "tiny": {"records": 1024, "batch": 64, "steps": 8, "reps": 1, "train_ms": 1.0, "compare": 4,
             "ar_records": 1024},
    "full": {"records": 20_000, "batch": 256, "steps": 100, "reps": 3, "train_ms": 5.0,
             "compare": 16, "ar_records": 50_000},
}


def w1_pipeline(images: np.ndarray, batch: int, stages_on: str) -> Any:
    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": np.arange(len(images), dtype=np.int32)})
    ops = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
           ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)]
    return Pipeline(source=source, stages=ops, batch_size=batch, seed=0, stages_on=stages_on)


def w7_pipeline(images: np.ndarray, batch: int, stages_on: str) -> Any:
    from benchmarks.augment_data import BRIGHTNESS, CONTRAST, MEAN, OUT, RATIO, SCALE, STD
    from datarax.operators import image as I
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    stages = [I.Normalize([0.0] * 3, [1.0] * 3),
              I.RandomResizedCrop(OUT, scale=SCALE, ratio=RATIO), I.HorizontalFlip(0.5),
              I.Brightness(BRIGHTNESS), I.Contrast(CONTRAST),
              I.Normalize(MEAN.tolist(), STD.tolist())]
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": np.arange(len(images), dtype=np.int32)})
    return Pipeline(source=source, stages=stages, batch_size=batch, seed=0, stages_on=stages_on)


def array_record_pipeline(paths: list[str], batch: int, stages_on: str) -> Any:
    """W1's stages over W2's ArrayRecord files (a host source: read and decoded on the
    host, record by record), as ``benchmarks.device_check``'s host pipeline."""
    from benchmarks import bench_array_record as w2
    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    def decode(record: bytes) -> dict[str, np.ndarray]:
        image = np.frombuffer(record, dtype=np.uint8).reshape(w2.RECORD_SHAPE)
        return {"image": image, "label": np.int32(image[0, 0, 0])}

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=0, shuffle_files=True),
                                     paths, decode=decode)
    ops = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
           ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)]
    return Pipeline(source=source, stages=ops, batch_size=batch, seed=0, stages_on=stages_on)


def compare(make: Any, batches: int) -> dict[str, Any]:
    """The first ``batches`` batches of both placements, side by side."""
    device, host = make("device"), make("host")
    labels_equal, worst_abs, worst_rel = True, 0.0, 0.0
    for _ in range(batches):
        a, b = device.step(), host.step()
        labels_equal &= bool(np.array_equal(np.asarray(a["label"]), np.asarray(b["label"])))
        x, y = np.asarray(a["image"], np.float64), np.asarray(b["image"], np.float64)
        diff = np.abs(x - y)
        worst_abs = max(worst_abs, float(diff.max()))
        worst_rel = max(worst_rel, float((diff / np.maximum(np.abs(x), 1e-6)).max()))
    last = host.step()["image"]
    return {"labels_identical": labels_equal, "image_max_abs_diff": worst_abs,
            "image_max_rel_diff": worst_rel,
            "host_batches_on": sorted(str(d) for d in last.devices())}


def run(size: str) -> dict[str, Any]:
    s = SIZES[size]
    from benchmarks.augment_data import make_data

    rng = np.random.default_rng(0)
    w1_images = rng.integers(0, 256, (s["records"], 32, 32, 3), dtype=np.uint8)
    w7_images, _ = make_data(max(s["records"] // 2, 512))
    from benchmarks import bench_array_record as w2

    paths = w2.make_files(s["ar_records"], 4)
    w2.warm(paths)
    features = {"w1": 32 * 32 * 3, "w7": 64 * 64 * 3, "array_record": 32 * 32 * 3}
    makers = {"w1": lambda on: w1_pipeline(w1_images, s["batch"], on),
              "w7": lambda on: w7_pipeline(w7_images, s["batch"], on),
              "array_record": lambda on: array_record_pipeline(paths, s["batch"], on)}
    report: dict[str, Any] = {"size": size, "backend": jax.default_backend(),
                              "devices": [str(d) for d in jax.devices()]}
    for name, make in makers.items():
        entry: dict[str, Any] = {"values": compare(make, s["compare"])}
        for on in ("device", "host"):
            pipeline = make(on)
            share: dict[str, Any] = {"data_share": None}  # on a CPU: no chip to share
            if jax.default_backend() != "cpu":
                share = _share(lambda p=pipeline: p, s["batch"], features[name], s["steps"],
                               s["reps"], s["train_ms"])
            share["data_alone_ms"] = _ms_per_call(pipeline.step, s["steps"], s["reps"])
            entry[on] = share
        report[name] = entry
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = sized_parser(__doc__).parse_args(argv)
    report = run("tiny" if args.tiny else "full")
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()

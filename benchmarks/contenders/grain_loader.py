"""Grain: per-record map/random_map, batched, thread prefetch or mp_prefetch workers."""

from __future__ import annotations

from collections.abc import Iterator

import grain
import numpy as np


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {"grain": version("grain")}


class _Records:
    """Random access to (image, label) records of in-memory arrays."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return {"image": self.images[index], "label": self.labels[index]}


def _normalize(record: dict) -> dict:
    return {"image": record["image"].astype(np.float32) / np.float32(255), "label": record["label"]}


def _flip(record: dict, rng: np.random.Generator) -> dict:
    if rng.random() < 0.5:
        return {"image": record["image"][:, ::-1], "label": record["label"]}
    return record


def _parse_absl_flags() -> None:
    """mp_prefetch reads absl flags; outside an absl app they must be marked parsed."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def vision_epoch(
    images: np.ndarray, labels: np.ndarray, spec, workers: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    dataset = (
        grain.MapDataset.source(_Records(images, labels))
        .shuffle(seed=spec.seed)
        .map(_normalize)
        .random_map(_flip, seed=spec.seed)
        .batch(spec.batch_size)
    )
    loader = dataset.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
    if workers:
        _parse_absl_flags()
        loader = loader.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)
        )
    for batch in loader:
        yield np.asarray(batch["image"]), np.asarray(batch["label"])

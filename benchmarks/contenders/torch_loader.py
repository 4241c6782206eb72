"""PyTorch: a map-style Dataset per record, DataLoader(shuffle=True, num_workers=0|2)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def versions() -> dict[str, str]:
    return {"torch": torch.__version__}


class _Vision(Dataset):
    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int):
        image = self.images[index].float() / 255.0
        if torch.rand(()) < 0.5:
            image = image.flip(1)
        return image, self.labels[index]


def vision_epoch(
    images: np.ndarray, labels: np.ndarray, spec, workers: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    torch.manual_seed(spec.seed)
    loader = DataLoader(
        _Vision(images, labels),
        batch_size=spec.batch_size,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(spec.seed),
    )
    for image, label in loader:
        yield image.numpy(), label.numpy()

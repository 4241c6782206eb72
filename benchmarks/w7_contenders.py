"""W7 contenders: the augmentation chain of ``augment_data`` in each library.

Each ``<name>_epoch(images, labels, batch_size, seed)`` yields materialised
``(images float32 (b, 64, 64, 3), labels)`` NumPy batches of one shuffled epoch;
each ``<name>_fixed(images)`` runs the same transform code with ``FIXED`` parameters
for the same-work check. Libraries are imported inside the functions so a worker
loads only its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks.augment_data import (
    BRIGHTNESS, CONTRAST, FIXED, JITTER_BRIGHTNESS, MEAN, OUT, RATIO, SCALE, STD, fixed_box,
    sample_box, transform,
)

Batches = Iterator[tuple[np.ndarray, np.ndarray]]


# -- numpy floor: one thread, no framework ---------------------------------------------
def numpy_epoch(images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int) -> Batches:
    rng = np.random.default_rng(seed)
    order = rng.permutation(images.shape[0])
    size = images.shape[1]
    for start in range(0, order.size, batch_size):
        idx = order[start:start + batch_size]
        out = np.empty((idx.size, OUT, OUT, 3), np.float32)
        for i, r in enumerate(idx):
            out[i] = transform(images[r], sample_box(rng, size, size), rng.random() < 0.5,
                               rng.uniform(*BRIGHTNESS), rng.uniform(*CONTRAST))
        yield out, labels[idx]


def numpy_fixed(images: np.ndarray) -> np.ndarray:
    box = fixed_box(images.shape[1])
    return np.stack([transform(im, box, True, FIXED["brightness"], FIXED["contrast"]) for im in images])


# -- datarax ----------------------------------------------------------------------------
def datarax_stages(size: int, fixed: bool) -> list:
    """The chain as datarax stages, for ``size``x``size`` images."""
    from datarax.operators import image as I

    if fixed:
        geometry = [I.ResizedCrop(OUT, box=fixed_box(size)), I.HorizontalFlip(1.0),
                    I.Brightness(FIXED["brightness"]), I.Contrast(FIXED["contrast"])]
    else:
        geometry = [I.RandomResizedCrop(OUT, scale=SCALE, ratio=RATIO), I.HorizontalFlip(0.5),
                    I.Brightness(BRIGHTNESS), I.Contrast(CONTRAST)]
    return [I.Normalize([0.0] * 3, [1.0] * 3), *geometry,
            I.Normalize(MEAN.tolist(), STD.tolist())]


def _datarax_pipeline(images, labels, batch_size, seed, fixed: bool):
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    stages = datarax_stages(images.shape[1], fixed)
    source = MemorySource(MemorySourceConfig(shuffle=not fixed, seed=seed),
                          {"image": images, "label": labels})
    return Pipeline(source=source, stages=stages, batch_size=batch_size, seed=seed)


def datarax_epoch(images, labels, batch_size, seed) -> Batches:
    import jax

    for batch in _datarax_pipeline(images, labels, batch_size, seed, fixed=False):
        batch = jax.block_until_ready(batch)
        yield np.asarray(batch["image"]), np.asarray(batch["label"])


def datarax_fixed(images: np.ndarray) -> np.ndarray:
    labels = np.arange(images.shape[0], dtype=np.int32)
    pipe = _datarax_pipeline(images, labels, images.shape[0], 0, fixed=True)
    return np.asarray(next(iter(pipe))["image"])


# -- torch: a map-style Dataset, per-record tensor ops, DataLoader ---------------------------
def _torch_transform(image, box, flip, brightness, contrast):
    import torch
    import torch.nn.functional as F

    y, x, h, w = box
    crop = image[y:y + h, x:x + w].permute(2, 0, 1).float().div_(255)[None]
    out = F.interpolate(crop, size=(OUT, OUT), mode="bilinear", antialias=True, align_corners=False)[0]
    if flip:
        out = out.flip(-1)
    out = out + brightness
    mean = out.mean(dim=(1, 2), keepdim=True)
    out = (out - mean) * contrast + mean
    out = (out - torch.from_numpy(MEAN)[:, None, None]) / torch.from_numpy(STD)[:, None, None]
    return out.permute(1, 2, 0)


class _TorchAugment:
    """Dataset: record -> (augmented image, label); its own numpy RNG per worker."""

    def __init__(self, images, labels, seed):
        import torch

        self.images, self.labels = torch.from_numpy(images), torch.from_numpy(labels)
        self.seed, self.rng = seed, None

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, index):
        import torch

        if self.rng is None:
            info = torch.utils.data.get_worker_info()
            self.rng = np.random.default_rng([self.seed, info.id if info else 0])
        rng, size = self.rng, self.images.shape[1]
        image = _torch_transform(self.images[index], sample_box(rng, size, size), rng.random() < 0.5,
                                 float(rng.uniform(*BRIGHTNESS)), float(rng.uniform(*CONTRAST)))
        return image, self.labels[index]


def torch_epoch(images, labels, batch_size, seed, workers: int = 0) -> Batches:
    import torch
    from torch.utils.data import DataLoader

    torch.manual_seed(seed)
    loader = DataLoader(_TorchAugment(images, labels, seed), batch_size=batch_size, shuffle=True,
                        num_workers=workers, generator=torch.Generator().manual_seed(seed))
    for image, label in loader:
        yield image.numpy(), label.numpy()


def torch_fixed(images: np.ndarray) -> np.ndarray:
    import torch

    box = fixed_box(images.shape[1])
    return np.stack([_torch_transform(torch.from_numpy(im), box, True, FIXED["brightness"],
                                      FIXED["contrast"]).numpy() for im in images])


# -- torchvision.transforms.v2: its own transforms on uint8 tensors, DataLoader ------------
def import_torchvision() -> Any:
    """``import torchvision`` against the CPU torch.

    The torchvision wheel on this machine's index is a CUDA build. Its CPU kernels work
    with the CPU torch, but importing it runs ``torchvision._meta_registrations``, which
    registers shape functions for ``torchvision::nms`` and the other compiled ops that
    the CUDA-linked extension failed to define (``operator torchvision::nms does not
    exist``). An empty module in that name's place skips them; the transforms here call
    only torch ops. The empty module is set only if torchvision is not imported yet.
    """
    import sys
    import types

    name = "torchvision._meta_registrations"
    if "torchvision" not in sys.modules and name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
    import torchvision

    return torchvision


def _torchvision_chain() -> Any:
    import torch

    import_torchvision()
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(OUT, scale=SCALE, ratio=RATIO, antialias=True),
        v2.RandomHorizontalFlip(0.5),
        v2.ColorJitter(brightness=JITTER_BRIGHTNESS, contrast=CONTRAST),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN.tolist(), STD.tolist()),
    ])


class _TorchvisionAugment:
    """Dataset: record -> (v2 chain over the uint8 CHW view, label); the chain is built in
    the process that uses it (torch's RNG, which DataLoader seeds per worker)."""

    def __init__(self, images, labels):
        import torch

        self.images, self.labels = torch.from_numpy(images), torch.from_numpy(labels)
        self.chain = None

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, index):
        if self.chain is None:
            self.chain = _torchvision_chain()
        # A CHW view of the HWC record (channels-last strides): torch's uint8 antialiased
        # resize has its fast path for that layout (a contiguous copy, as ToImage makes,
        # ran at ~0.65x per record here).
        image = self.chain(self.images[index].permute(2, 0, 1))
        return image.permute(1, 2, 0), self.labels[index]


def torchvision_epoch(images, labels, batch_size, seed, workers: int = 2) -> Batches:
    import torch
    from torch.utils.data import DataLoader

    import_torchvision()
    torch.manual_seed(seed)
    loader = DataLoader(_TorchvisionAugment(images, labels), batch_size=batch_size, shuffle=True,
                        num_workers=workers, generator=torch.Generator().manual_seed(seed))
    for image, label in loader:
        yield image.numpy(), label.numpy()


def torchvision_fixed(images: np.ndarray) -> np.ndarray:
    """The kernels the v2 transforms call (``v2.functional``), with FIXED parameters."""
    import torch

    import_torchvision()
    from torchvision.transforms.v2 import functional as F

    y, x, h, w = fixed_box(images.shape[1])
    out = []
    for im in images:
        t = F.resized_crop(torch.from_numpy(im).permute(2, 0, 1), y, x, h, w, [OUT, OUT],
                           antialias=True)
        t = F.horizontal_flip(t) if FIXED["flip"] else t
        t = F.adjust_contrast(F.adjust_brightness(t, 1 + FIXED["brightness"]), FIXED["contrast"])
        t = F.normalize(F.to_dtype(t, torch.float32, scale=True), MEAN.tolist(), STD.tolist())
        out.append(t.permute(1, 2, 0).numpy())
    return np.stack(out)


# -- tf.data ------------------------------------------------------------------------------
def _tf_transform(image, box, flip, brightness, contrast):
    import tensorflow as tf

    y, x, h, w = box[0], box[1], box[2], box[3]
    crop = tf.cast(tf.slice(image, tf.stack([y, x, 0]), tf.stack([h, w, 3])), tf.float32) / 255.0
    out = tf.image.resize(crop, (OUT, OUT), method="bilinear", antialias=True)
    out = tf.cond(flip, lambda: tf.image.flip_left_right(out), lambda: out)
    out = tf.image.adjust_contrast(tf.image.adjust_brightness(out, brightness), contrast)
    return (out - MEAN) / STD


def tf_epoch(images, labels, batch_size, seed) -> Batches:
    import tensorflow as tf

    tf.random.set_seed(seed)
    size = images.shape[1]

    def augment(image, label):
        begin, extent, _ = tf.image.sample_distorted_bounding_box(
            (size, size, 3), tf.zeros((0, 0, 4)), area_range=SCALE, aspect_ratio_range=RATIO,
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        box = tf.concat([begin[:2], extent[:2]], 0)
        flip = tf.random.uniform(()) < 0.5
        b = tf.random.uniform((), *BRIGHTNESS)
        c = tf.random.uniform((), *CONTRAST)
        return _tf_transform(image, box, flip, b, c), label

    autotune = tf.data.AUTOTUNE
    dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
               .shuffle(images.shape[0], seed=seed)
               .map(augment, num_parallel_calls=autotune)
               .batch(batch_size, num_parallel_calls=autotune)
               .prefetch(autotune))
    for image, label in dataset:
        yield image.numpy(), label.numpy()


def tf_fixed(images: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    box = tf.constant(fixed_box(images.shape[1]))
    return np.stack([_tf_transform(tf.constant(im), box, tf.constant(True), FIXED["brightness"],
                                   FIXED["contrast"]).numpy() for im in images])


# -- Grain: the numpy transform per record, thread-prefetched ------------------------------
def grain_epoch(images, labels, batch_size, seed, workers: int = 0) -> Batches:
    import grain

    size = images.shape[1]

    class Records:
        def __len__(self):
            return images.shape[0]

        def __getitem__(self, index):
            return {"image": images[index], "label": labels[index]}

    def augment(record: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        image = transform(record["image"], sample_box(rng, size, size), rng.random() < 0.5,
                          rng.uniform(*BRIGHTNESS), rng.uniform(*CONTRAST))
        return {"image": image, "label": record["label"]}

    dataset = (grain.MapDataset.source(Records()).shuffle(seed=seed)
               .random_map(augment, seed=seed).batch(batch_size))
    loader = dataset.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
    if workers:
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        loader = loader.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    for batch in loader:
        yield np.asarray(batch["image"]), np.asarray(batch["label"])


grain_fixed = numpy_fixed  # Grain runs the numpy transform per record

CONTENDERS: dict[str, tuple[Any, Any, dict[str, Any], str, bool]] = {
    # name: (epoch, fixed, options, note, floor)
    "numpy": (numpy_epoch, numpy_fixed, {}, "plain numpy, one thread, record by record", True),
    "datarax": (datarax_epoch, datarax_fixed, {}, "MemorySource + datarax.operators.image "
                "chain in the compiled step; persistent compilation cache warm (a user's "
                "second run)", False),
    "datarax-cold": (datarax_epoch, datarax_fixed, {}, "the same with no compilation cache "
                     "(a user's first run: compiling is inside the epoch time)", False),
    "torch-0": (torch_epoch, torch_fixed, {"workers": 0}, "Dataset of torch ops "
                "(F.interpolate antialias) + DataLoader(num_workers=0)", False),
    "torch-2": (torch_epoch, torch_fixed, {"workers": 2}, "same, DataLoader(num_workers=2)", False),
    "torchvision-v2-0": (torchvision_epoch, torchvision_fixed, {"workers": 0},
                         "torchvision.transforms.v2 (RandomResizedCrop antialias, "
                         "RandomHorizontalFlip, ColorJitter, ToDtype, Normalize) on uint8 "
                         "CHW views + DataLoader(num_workers=0), one torch thread",
                         False),
    "torchvision-v2": (torchvision_epoch, torchvision_fixed, {"workers": 2},
                       "same, DataLoader(num_workers=2)", False),
    "tf.data": (tf_epoch, tf_fixed, {}, "sample_distorted_bounding_box, tf.image, "
                "map/batch/prefetch AUTOTUNE", False),
    "grain": (grain_epoch, grain_fixed, {}, "MapDataset.random_map(numpy chain), 2 read "
              "threads", False),
}
WARM_UP = {"datarax"}  # one untimed run first fills the compilation cache
_ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The floor is single-threaded by definition; Grain parallelises with its own threads
# (BLAS threads on top of them only fight over the cores).
# torchvision in the main process gets one torch thread, its best here: with torch's
# default of one per core, ColorJitter's contrast on a uint8 image (a grey image and its
# mean, split over threads) ran at 283 records/s against 5,007 with one thread, on
# this shared 2-core machine. DataLoader's workers take one thread each on their own.
ENV = {"datarax": {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}, "numpy": _ONE_BLAS_THREAD,
       "grain": _ONE_BLAS_THREAD, "torchvision-v2-0": _ONE_BLAS_THREAD}
REQUIRES = {"numpy": "numpy", "datarax": "dm_pix", "datarax-cold": "dm_pix", "torch-0": "torch", "torch-2": "torch",
            "torchvision-v2-0": "torchvision", "torchvision-v2": "torchvision",
            "tf.data": "tensorflow", "grain": "grain"}
# The reference each contender's fixed-parameter output is checked against: torchvision's
# ColorJitter is run as torchvision defines it (augment_data's module docstring).
COLOR = {"torchvision-v2-0": "torchvision", "torchvision-v2": "torchvision"}

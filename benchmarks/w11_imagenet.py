"""W11: the ImageNet input pipeline, from a folder of JPEGs of every size.

``python -m benchmarks.w11_imagenet [--images 10000] [--work DIR] [--json PATH]``

The data: ``--images`` generated JPEGs (quality 90, each side 300-600 px, as ImageNet's
mostly ~500x375) in 10 class folders, written once into ``--work`` and converted there
with ``datarax convert`` (both kept for the next run). Two workloads, batch 256:

* **train**: RandomResizedCrop(224) + horizontal flip + normalise, shuffled;
* **eval**: resize the shorter side to 256, centre crop 224, normalise, in order.

Contenders, each in a fresh process (``--worker``), one epoch each:

* ``datarax``: the converted dataset, ``decode=datarax.decode_images(...)`` on the
  reader threads (``num_threads`` = cores) or in ``decode_processes`` = cores, the best
  of both; flip and normalise compiled (``image.HorizontalFlip``, ``image.Normalize``)
  on JAX's default device (the accelerator where there is one; ``JAX_PLATFORMS=cpu``
  keeps them on the CPU), the batch ready there counted;
* ``torchvision``: ``ImageFolder`` + ``DataLoader(num_workers=w)``, the best of
  ``w`` in 0, 1, 2 and the core count, with torchvision's transforms (PIL decode);
* ``tfdata``: ``tf.data`` over the files: ``decode_and_crop_jpeg`` of a box drawn by
  ``sample_distorted_bounding_box`` (area 0.08-1, ratio 3/4-4/3) + resize + flip for
  train, ``decode_jpeg`` + resize (shorter side 256) + centre crop for eval, normalised,
  ``map(num_parallel_calls=AUTOTUNE).batch.prefetch(AUTOTUNE)``; its resizes are
  bilinear without antialiasing (``tf.image.resize``'s default);
* ``tfdata-antialias``: the same with ``antialias=True``, the resize torchvision's PIL
  transforms and ``decode_images`` do (not in the default contenders);
* ``grain``: ``grain.MapDataset`` over the image files (a list is a Grain source),
  shuffled, ``random_map`` / ``map`` of the transforms a Grain user writes with PIL
  (decode, torchvision's RandomResizedCrop box drawn from Grain's per-record generator,
  crop + antialiased bilinear resize in one ``Image.resize(box=)``, flip; shorter side
  256 + centre crop for eval), normalised, batched; read with ``num_threads`` = cores
  (``workers`` 0) or in ``mp_prefetch`` worker processes (``workers`` > 0), the best kept;
* ``floor``: a plain loop in as many processes as cores: read each file, decode and
  crop it exactly as ``decode_images`` does (uint8 out, no flip, no normalise, no
  batching), the records counted.

Each gives records/s over the whole epoch (start to the last record, building the
pipeline and worker start-up included) and steady (after the first batch), and the CPU
time the epoch took per record (its worker processes included): on a shared machine,
the cost of the work apart from the waiting for cores.

``--baseline SRC`` also runs ``datarax`` and ``floor`` against another checkout's
``src`` folder (e.g. the previous commit's, ``git archive``-ed), as ``datarax-baseline``
and ``floor-baseline``, in the same run: before and after side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, run_worker, worker_env

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CLASSES = 10
BATCH = 256


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ------------------------------------------------------------------ data
def _write_images(args: tuple[str, int, int, int]) -> None:
    import numpy as np
    from PIL import Image

    root, start, stop, seed = args
    for i in range(start, stop):
        rng = np.random.default_rng((seed, i))
        h, w = (int(v) for v in rng.integers(300, 601, 2))
        # a smooth picture with some fine detail: JPEG sizes near ImageNet's (~100 KB)
        base = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
        image = np.asarray(Image.fromarray(base).resize((w, h), Image.Resampling.BICUBIC), np.int16)
        image = np.clip(image + rng.integers(-24, 25, image.shape), 0, 255).astype(np.uint8)
        folder = os.path.join(root, f"class{i % CLASSES:02d}")
        Image.fromarray(image).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)


def make_folder(work: Path, images: int, seed: int = 0) -> Path:
    """``work/photos-N/classNN/*.jpg``, written once (in as many processes as cores)."""
    from multiprocessing import get_context

    root = work / f"photos-{images}"
    done = root / ".complete"
    if done.exists():
        return root
    for c in range(CLASSES):
        (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
    step = max(1, images // (cores() * 4))
    jobs = [(str(root), s, min(s + step, images), seed) for s in range(0, images, step)]
    with get_context("spawn").Pool(cores()) as pool:
        pool.map(_write_images, jobs)
    done.write_text("ok")
    return root


def make_dataset(work: Path, folder: Path, images: int) -> Path:
    from datarax.dataset import convert

    dst = work / f"dataset-{images}"
    if not (dst / "datarax_dataset.json").exists():
        convert(str(folder), str(dst), workers=min(cores(), 8), overwrite=True,
                shards=min(cores(), 8) * 2)
    return dst


# -------------------------------------------------------------- contenders
def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (user + system)."""
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))


def _timed(batches: Any) -> dict[str, Any]:
    """Consume ``batches`` (each ``(n_records, something to wait for)``), timing them; the
    CPU time they took (worker processes included, once ended) tells the work apart from
    the waiting on a busy machine."""
    cpu0 = _cpu_s()
    t0 = time.perf_counter()
    first = first_cpu = None
    records = first_n = 0
    for n, ready in batches:
        ready()
        records += n
        if first is None:
            first, first_n, first_cpu = time.perf_counter(), n, _cpu_s()
    end = time.perf_counter()
    end_cpu = _cpu_s()
    cpu = end_cpu - cpu0
    steady_cpu = end_cpu - first_cpu if first_cpu is not None and records > first_n else None
    return {"records": records, "epoch_s": end - t0, "first_batch_s": (first or end) - t0,
            "cpu_s": cpu, "cpu_ms_per_record": 1e3 * cpu / max(records, 1),
            # after the first batch: the work a record costs once started (worker processes
            # count only once ended, so this is the reading process's own, its threads'
            # included: meaningful where the work is on threads, not for decode processes)
            "steady_cpu_ms_per_record": (1e3 * steady_cpu / (records - first_n)
                                         if steady_cpu is not None else None),
            "epoch_rate": records / (end - t0),
            "steady_rate": (records - first_n) / (end - first) if first and end > first else None}


def run_datarax(dataset: str, mode: str, processes: int, **_: Any) -> dict[str, Any]:
    def batches():
        import jax
        from flax import nnx

        import datarax
        from datarax.operators import image as I

        jax.devices()  # this process takes the accelerator, if any; its decode workers
        os.environ["JAX_PLATFORMS"] = "cpu"  # (spawned later, inheriting this) never do
        decode = (datarax.decode_images(random_resized_crop=224, seed=0) if mode == "train"
                  else datarax.decode_images(resize=256, crop=224))
        stages = ([I.HorizontalFlip(0.5)] if mode == "train" else []) + [
            I.Normalize(mean=MEAN, std=STD)]
        source = datarax.ArrayRecordSourceModule(
            datarax.ArrayRecordSourceConfig(shuffle_files=mode == "train", seed=0), dataset,
            decode=decode, num_threads=cores(), decode_processes=processes)
        pipeline = datarax.Pipeline(source=source, stages=stages, batch_size=BATCH,
                                    rngs=nnx.Rngs(0))
        try:
            for batch in pipeline:
                yield len(batch["label"]), lambda b=batch: jax.block_until_ready(b["image"])
        finally:
            source.close()

    return _timed(batches())


def run_torchvision(folder: str, mode: str, workers: int, **_: Any) -> dict[str, Any]:
    def batches():
        import torch

        from benchmarks.w7_contenders import import_torchvision

        tv = import_torchvision()
        T = tv.transforms
        transform = (T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                T.ToTensor(), T.Normalize(MEAN, STD)]) if mode == "train" else
                     T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                                T.Normalize(MEAN, STD)]))
        torch.manual_seed(0)
        data = tv.datasets.ImageFolder(folder, transform=transform)
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=mode == "train",
                                             num_workers=workers,
                                             persistent_workers=False)
        for images, labels in loader:
            yield len(labels), lambda: None

    return _timed(batches())


def run_tfdata(folder: str, mode: str, antialias: bool = False, **_: Any) -> dict[str, Any]:
    def batches():
        import tensorflow as tf

        tf.random.set_seed(0)
        files = tf.data.Dataset.list_files(f"{folder}/class*/*.jpg", shuffle=mode == "train",
                                           seed=0)

        def train(path: Any) -> Any:  # RandomResizedCrop(224) as tf's own ops do it
            data = tf.io.read_file(path)
            box = tf.image.sample_distorted_bounding_box(
                tf.image.extract_jpeg_shape(data), tf.zeros([1, 0, 4]),
                area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
                max_attempts=10, use_image_if_no_bounding_boxes=True)
            start, size, _ = box
            window = tf.stack([start[0], start[1], size[0], size[1]])
            image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
            image = tf.image.resize(image, (224, 224), antialias=antialias)
            image = tf.image.random_flip_left_right(image)
            return (image / 255.0 - MEAN) / STD

        def evaluate(path: Any) -> Any:  # Resize(256) (shorter side) + CenterCrop(224)
            image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            shape = tf.cast(tf.shape(image)[:2], tf.float32)
            scale = 256.0 / tf.reduce_min(shape)
            image = tf.image.resize(image, tf.cast(tf.round(shape * scale), tf.int32),
                                    antialias=antialias)
            image = tf.image.resize_with_crop_or_pad(image, 224, 224)
            return (image / 255.0 - MEAN) / STD

        data = files.map(train if mode == "train" else evaluate,
                         num_parallel_calls=tf.data.AUTOTUNE)
        for images in data.batch(BATCH).prefetch(tf.data.AUTOTUNE):
            yield int(images.shape[0]), lambda: None

    return _timed(batches())


def _grain_record(path: str, rng: Any, mode: str) -> dict[str, Any]:
    """One image file as a Grain user writes its transforms (PIL and NumPy)."""
    import math

    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB")
    width, height = image.size
    if mode == "train":  # torchvision's RandomResizedCrop box, then crop + resize at once
        box = None
        for _ in range(10):
            area = width * height * rng.uniform(0.08, 1.0)
            ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= width and 0 < h <= height:
                left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
                box = (left, top, left + w, top + h)
                break
        if box is None:
            side = min(width, height)
            box = ((width - side) // 2, (height - side) // 2,
                   (width + side) // 2, (height + side) // 2)
        pixels = np.asarray(image.resize((224, 224), Image.BILINEAR, box=box))
        if rng.random() < 0.5:
            pixels = pixels[:, ::-1]
    else:  # shorter side 256, centre crop 224
        scale = 256 / min(width, height)
        size = (round(width * scale), round(height * scale))
        image = image.resize(size, Image.BILINEAR)
        left, top = (size[0] - 224) // 2, (size[1] - 224) // 2
        pixels = np.asarray(image.crop((left, top, left + 224, top + 224)))
    image = (pixels.astype(np.float32) / 255.0 - np.asarray(MEAN, np.float32)) / np.asarray(
        STD, np.float32)
    return {"image": image, "label": np.int32(Path(path).parent.name.removeprefix("class"))}


def run_grain(folder: str, mode: str, workers: int, **_: Any) -> dict[str, Any]:
    def batches():
        import functools

        import grain

        files = sorted(str(p) for p in Path(folder).glob("class*/*.jpg"))
        ds = grain.MapDataset.source(files)
        record = functools.partial(_grain_record, mode=mode)
        if mode == "train":
            ds = ds.shuffle(seed=0).random_map(record, seed=0)
        else:
            ds = ds.map(lambda path: record(path, None))
        n = cores()
        it = ds.batch(BATCH).to_iter_dataset(
            grain.ReadOptions(num_threads=n, prefetch_buffer_size=2 * n))
        if workers:
            from absl import flags

            if not flags.FLAGS.is_parsed():  # Grain's worker processes read absl flags
                flags.FLAGS.mark_as_parsed()
            it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        for batch in it:
            yield len(batch["label"]), lambda: None

    return _timed(batches())


def _floor_chunk(args: tuple[list[str], str, int]) -> int:
    import numpy as np

    from datarax.dataset.image_decode import resize_and_crop, resized_crop

    files, mode, start = args
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            data = f.read()
        if mode == "train":
            resized_crop(data, None, (224, 224), rng=np.random.default_rng((0, 0, start + i)))
        else:
            resize_and_crop(data, resize=256, crop=(224, 224))
    return len(files)


def run_floor(folder: str, mode: str, **_: Any) -> dict[str, Any]:
    def batches():
        from multiprocessing import get_context

        files = sorted(str(p) for p in Path(folder).glob("class*/*.jpg"))
        chunks = [(files[s:s + 64], mode, s) for s in range(0, len(files), 64)]
        with get_context("spawn").Pool(cores()) as pool:
            for n in pool.imap_unordered(_floor_chunk, chunks):
                yield n, lambda: None

    return _timed(batches())


def run_tfdata_antialias(folder: str, mode: str, **_: Any) -> dict[str, Any]:
    return run_tfdata(folder, mode, antialias=True)


RUNNERS = {"datarax": run_datarax, "torchvision": run_torchvision, "tfdata": run_tfdata,
           "tfdata-antialias": run_tfdata_antialias, "grain": run_grain, "floor": run_floor}


def worker(args: argparse.Namespace) -> None:
    try:
        result = RUNNERS[args.worker](dataset=args.dataset, folder=args.folder, mode=args.mode,
                                      processes=args.processes, workers=args.workers)
    except Exception as err:  # noqa: BLE001 - reported, not fatal
        result = {"error": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc()[-3000:]}
    Path(args.out).write_text(json.dumps(result))


def run_one(name: str, mode: str, dataset: Path, folder: Path, timeout: float,
            src: Path | None = None, **options: int) -> dict[str, Any]:
    args = ["--worker", name, "--mode", mode, "--dataset", str(dataset), "--folder", str(folder),
            *(f"--{k}={v}" for k, v in options.items())]
    env = worker_env(src=src or ROOT / "src")
    return {**run_worker("benchmarks.w11_imagenet", args, env, timeout=timeout), **options}


def best(results: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in results if "epoch_rate" in r]
    return max(good, key=lambda r: r["steady_rate"] or 0) if good else results[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "datarax-w11")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--contenders", default="datarax,torchvision,tfdata,grain,floor")
    parser.add_argument("--modes", default="train,eval")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--torch-workers", default="0,1,2,cores",
                        help="DataLoader num_workers to try, the best kept")
    parser.add_argument("--baseline", type=Path,
                        help="another checkout's src folder: datarax and floor run on it too")
    parser.add_argument("--worker")
    parser.add_argument("--mode")
    parser.add_argument("--dataset")
    parser.add_argument("--folder")
    parser.add_argument("--out")
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    folder = make_folder(args.work, args.images)
    made = time.perf_counter() - t
    dataset = make_dataset(args.work, folder, args.images)
    n = cores()
    variants = {"datarax": [{"processes": 0}, {"processes": n}],
                "torchvision": [{"workers": w} for w in sorted(
                    {n if w == "cores" else int(w) for w in args.torch_workers.split(",")})],
                "tfdata": [{}], "tfdata-antialias": [{}], "floor": [{}],
                "grain": [{"workers": 0}, {"workers": n}]}
    report: dict[str, Any] = {"images": args.images, "cores": n, "batch_size": BATCH,
                              "folder_bytes": sum(p.stat().st_size for p in folder.rglob("*.jpg")),
                              "made_s": made, "load_before": os.getloadavg(), "runs": {}}
    names = args.contenders.split(",")
    if args.baseline:
        report["baseline"] = str(args.baseline)
        names += [f"{n}-baseline" for n in ("datarax", "floor") if n in names]
    for mode in args.modes.split(","):
        for name in names:
            runs = []
            base = name.removesuffix("-baseline")
            for options in variants[base]:
                result = run_one(base, mode, dataset, folder, args.timeout,
                                 src=args.baseline if name != base else None, **options)
                shown = ("epoch_rate", "steady_rate", "first_batch_s", "cpu_ms_per_record",
                         "steady_cpu_ms_per_record", "error")
                print(mode, name, options, {k: result.get(k) for k in shown}, flush=True)
                runs.append(result)
            report["runs"][f"{mode}/{name}"] = {"best": best(runs), "all": runs}
    report["load_after"] = os.getloadavg()
    for mode in args.modes.split(","):
        for suffix in ("", "-baseline"):
            ours = report["runs"].get(f"{mode}/datarax{suffix}", {}).get("best", {})
            for other in ("torchvision", "tfdata", "tfdata-antialias", "grain",
                          f"floor{suffix}"):
                theirs = report["runs"].get(f"{mode}/{other}", {}).get("best", {})
                for rate in ("epoch_rate", "steady_rate"):
                    if ours.get(rate) and theirs.get(rate):
                        report.setdefault("ratios", {})[
                            f"{mode} {rate} datarax{suffix} vs {other}"] = ours[rate] / theirs[rate]
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text)
    print(json.dumps(report.get("ratios", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

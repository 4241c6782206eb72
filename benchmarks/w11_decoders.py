"""W11's train crop, decoder by decoder: can a JPEG decoder on PyPI decode less than the
whole image, and what does a record cost?

``python -m benchmarks.w11_decoders [--images 400] [--work DIR] [--json PATH]``

The JPEGs are W11's (``benchmarks.w11_imagenet``: quality 90, sides 300-600 px); each
record's box is the one ``decode_images(random_resized_crop=224)`` draws for it in epoch 0
(``random_resized_box`` from the key ``(0, 0, index)``). One process, one thread (the
decoders' own threads off where they have any); CPU ms a record (user + system, best of
3 passes over the images). For each decoder that is installed: its version, what it can
decode less of (a DCT scale, rows, a region), the CPU of decoding each record's box, and
how many of the first 100 boxes hold the same pixels as ``simplejpeg``'s whole decode
(what ``decode_images`` uses). TensorFlow's ``decode_and_crop_jpeg`` (a region decode:
libjpeg-turbo's ``jpeg_crop_scanline`` and ``jpeg_skip_scanlines``) is timed inside
``tf.data`` (graph mode, one thread), as W11's ``tfdata`` contender runs it, beside its
whole ``decode_jpeg`` and its resizes; the same for PIL's antialiased resize that
``decode_images`` runs after the decode.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.w11_imagenet import CLASSES, _write_images


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _timed(fn: Callable[[int], Any], n: int, passes: int = 3) -> float:
    best = float("inf")
    for _ in range(passes):
        start = _cpu_s()
        for i in range(n):
            fn(i)
        best = min(best, (_cpu_s() - start) / n * 1e3)
    return round(best, 3)


def decoders() -> dict[str, tuple[str, str, Any]]:
    """name -> (distribution, what it decodes less of, a factory of ``box(data, path, b)``)."""
    def box(a: np.ndarray, b: tuple[int, int, int, int]) -> np.ndarray:
        return a[b[0]:b[0] + b[2], b[1]:b[1] + b[3]]

    def simplejpeg_box() -> Any:
        import simplejpeg
        return lambda d, p, b: box(simplejpeg.decode_jpeg(d, colorspace="RGB"), b)

    def pillow_box() -> Any:
        import io

        from PIL import Image
        return lambda d, p, b: box(np.asarray(Image.open(io.BytesIO(d)).convert("RGB")), b)

    def pyvips_box() -> Any:  # sequential: rows decoded only down to the box's last one
        import pyvips
        pyvips.cache_set_max(0)
        pyvips.concurrency_set(1)

        def run(d: bytes, p: str, b: tuple[int, int, int, int]) -> np.ndarray:
            image = pyvips.Image.jpegload_buffer(d, access="sequential")
            raw = pyvips.Region.new(image).fetch(b[1], b[0], b[3], b[2])
            return np.frombuffer(raw, np.uint8).reshape(b[2], b[3], 3)
        return run

    def opencv_box() -> Any:
        import cv2
        cv2.setNumThreads(1)
        return lambda d, p, b: box(cv2.imdecode(np.frombuffer(d, np.uint8),
                                                cv2.IMREAD_COLOR_RGB), b)

    def kornia_turbo_box() -> Any:
        import kornia_rs
        return lambda d, p, b: box(kornia_rs.io.decode_image_jpegturbo(d, "rgb"), b)

    def kornia_rust_box() -> Any:
        import kornia_rs
        return lambda d, p, b: box(kornia_rs.io.decode_image_jpeg(d), b)

    def imagecodecs_box() -> Any:
        import imagecodecs
        return lambda d, p, b: box(imagecodecs.jpeg8_decode(d), b)

    def jpeglib_box() -> Any:  # reads a path, not bytes
        import jpeglib
        jpeglib.version.set("turbo210")
        return lambda d, p, b: box(jpeglib.read_spatial(p).spatial, b)

    return {
        "simplejpeg": ("simplejpeg", "DCT scale", simplejpeg_box),
        "pillow": ("pillow", "DCT scale (draft)", pillow_box),
        "pyvips": ("pyvips-binary", "DCT scale (shrink); rows down to the region's last",
                   pyvips_box),
        "opencv": ("opencv-python-headless", "DCT scale (IMREAD_REDUCED_*)", opencv_box),
        "kornia-rs (libjpeg-turbo)": ("kornia-rs", "none", kornia_turbo_box),
        "kornia-rs (Rust decoder)": ("kornia-rs", "none", kornia_rust_box),
        "imagecodecs": ("imagecodecs", "none (shape= is for headerless streams)",
                        imagecodecs_box),
        "jpeglib": ("jpeglib", "none", jpeglib_box),
    }


def tf_rows(datas: list[bytes], boxes: list[tuple[int, int, int, int]]) -> dict[str, float]:
    """CPU ms a record of TensorFlow's decodes and resizes inside tf.data, one thread."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    records = tf.data.Dataset.from_tensor_slices((datas, np.array(boxes, np.int32))).cache()
    for _ in records:
        pass
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.autotune.enabled = False
    crop = tf.io.decode_and_crop_jpeg
    maps = {
        "tf.data loop alone": lambda d, b: b,
        "decode_and_crop_jpeg (the box)": lambda d, b: crop(d, b, channels=3),
        "decode_jpeg (whole)": lambda d, b: tf.io.decode_jpeg(d, channels=3),
        "decode_and_crop_jpeg + resize 224 (bilinear, no antialias: W11's tfdata)":
            lambda d, b: tf.image.resize(crop(d, b, channels=3), (224, 224)),
        "decode_and_crop_jpeg + resize 224 (bilinear, antialias)":
            lambda d, b: tf.image.resize(crop(d, b, channels=3), (224, 224), antialias=True),
    }
    out = {}
    for name, fn in maps.items():
        data = records.map(fn, num_parallel_calls=1).with_options(options)
        best = float("inf")
        for _ in range(3):
            start, n = _cpu_s(), 0
            for _item in data:
                n += 1
            best = min(best, (_cpu_s() - start) / n * 1e3)
        out[name] = round(best, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "w11-decoders"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--no-tf", action="store_true", help="leave TensorFlow out")
    args = parser.parse_args(argv)
    from PIL import Image

    from datarax.dataset.image_decode import image_size, random_resized_box, resized_crop

    root = Path(args.work) / f"photos-{args.images}"
    if not (root / ".complete").exists():
        for c in range(CLASSES):
            (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
        _write_images((str(root), 0, args.images, 0))
        (root / ".complete").write_text("ok")
    paths = sorted(str(p) for p in root.glob("class*/*.jpg"))
    datas = [Path(p).read_bytes() for p in paths]
    boxes = []
    for i, data in enumerate(datas):
        h, w = image_size(data)
        boxes.append(random_resized_box(np.random.default_rng((0, 0, i)), h, w,
                                        (0.08, 1.0), (3 / 4, 4 / 3)))
    sizes = [image_size(d) for d in datas]
    result: dict[str, Any] = {
        "images": len(datas), "mean_kb": round(float(np.mean([len(d) for d in datas])) / 1e3, 1),
        "box_area_share": round(float(np.mean([b[2] * b[3] / (h * w) for b, (h, w)
                                                in zip(boxes, sizes)])), 3),
        "rows_down_to_box_bottom": round(float(np.mean([(b[0] + b[2]) / h for b, (h, _)
                                                        in zip(boxes, sizes)])), 3),
        "decoders": {}}
    n = len(datas)
    reference: list[np.ndarray] = []
    for name, (dist, less, factory) in decoders().items():
        try:
            decode = factory()
        except ImportError:
            result["decoders"][name] = {"installed": False}
            continue
        got = [np.asarray(decode(datas[i], paths[i], boxes[i])) for i in range(min(100, n))]
        if not reference:
            reference = got
        same = sum(g.shape == r.shape and np.array_equal(g, r) for g, r in zip(got, reference))
        row = {"version": _version(dist), "decodes_less": less, "boxes_checked": len(got),
               "boxes_equal": same,
               "box_cpu_ms": _timed(lambda i: decode(datas[i], paths[i], boxes[i]), n)}
        result["decoders"][name] = row
        print(f"{name:28s} {row}", flush=True)
    cut = [np.ascontiguousarray(reference[i]) for i in range(len(reference))]
    result["pil_antialiased_resize_ms"] = _timed(
        lambda i: Image.fromarray(cut[i]).resize((224, 224), Image.Resampling.BILINEAR),
        len(cut))
    result["decode_images_train_kernel_ms"] = _timed(
        lambda i: resized_crop(datas[i], boxes[i], (224, 224)), n)
    print({k: v for k, v in result.items() if k != "decoders"}, flush=True)
    if not args.no_tf and (_version("tensorflow-cpu") or _version("tensorflow")):
        result["tensorflow"] = {"version": _version("tensorflow-cpu") or _version("tensorflow"),
                                "cpu_ms": tf_rows(datas, boxes)}
        print(result["tensorflow"], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

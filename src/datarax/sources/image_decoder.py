"""``decode_images``: a ready ``decode=`` for encoded image fields of any size.

A dataset written by ``datarax convert`` keeps images as their PNG / JPEG bytes; when
sizes vary, a batch needs them cut to one size on the host. :class:`ImageDecoder`
decodes the field (``simplejpeg`` when installed, else Pillow:
:mod:`datarax.dataset.image_decode`) into ``uint8 (height, width, 3)`` with
torchvision's geometry and passes the other fields through as the metadata says, on the
reader threads or the ``decode_processes`` workers. A random crop is drawn from the
record's own key ``(seed, epoch, stable index)``, so it does not depend on batch size,
threads, processes, hosts or resume.

Example:
    >>> import io, os, tempfile
    >>> from PIL import Image
    >>> from datarax import ArrayRecordSourceConfig, ArrayRecordSourceModule, Pipeline
    >>> from datarax.dataset import convert
    >>> root = tempfile.mkdtemp()
    >>> photos, folder = os.path.join(root, "photos"), os.path.join(root, "ds")
    >>> for i in range(6):
    ...     os.makedirs(os.path.join(photos, f"class{i % 2}"), exist_ok=True)  # <class>/<image>
    ...     Image.new("RGB", (420, 300 + 40 * i), (90, 160, 30)).save(
    ...         os.path.join(photos, f"class{i % 2}", f"{i}.jpg"))
    >>> _ = convert(photos, folder)  # JPEGs of six sizes, stored as they are
    >>> source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), folder,
    ...     decode=decode_images("image", random_resized_crop=224))
    >>> batch = next(iter(Pipeline(source=source, stages=[], batch_size=4)))
    >>> batch["image"].shape, batch["image"].dtype, batch["label"].tolist()
    ((4, 224, 224, 3), dtype('uint8'), [0, 0, 0, 1])
    >>> source.close()
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import reprlib
import threading
from typing import Any

import numpy as np

# host-side pieces only, no JAX or Flax: decode worker processes load this module
from datarax.errors import ConfigError, MissingExtraError, RecordError
from datarax.extras import require
from datarax.host.arrays import fresh_aligned, seal
from datarax.host.counts import python_ints
from datarax.host.dtypes import fit_value
from datarax.host.threads import run_behind_consumer
from datarax.dataset.fields import Features, error_text
from datarax.dataset.image_decode import resize_and_crop, resized_crop
from datarax.dataset.image_open import image_named
from datarax.dataset.layout import DATASET_DTYPE_FIX, decode_records
from datarax.sources.decode_processes import in_decode_worker
from datarax.sources.decoded_records import KeyedRecord

__all__ = ["ImageDecoder", "decode_images"]

_IMAGE_ENCODINGS = ("png", "jpeg")


def _pair(name: str, value: Any) -> tuple[int, int] | None:
    """``(height, width)`` from an int (a square) or a pair of ints >= 1; None stays None."""
    if value is None:
        return None
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        h, w = pair
        ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (h, w))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"decode_images: {name} must be an int >= 1 or a (height, width) pair "
                          f"of them, got {value!r}.")
    return int(h), int(w)


def _range(name: str, value: Any, upper: float | None) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        lo = hi = math.nan
    if not (0 < lo <= hi and (upper is None or hi <= upper)):
        bound = f" <= {upper}" if upper is not None else ""
        raise ConfigError(f"decode_images: {name} must be a (low, high) pair with "
                          f"0 < low <= high{bound}, got {value!r}.")
    return lo, hi


@dataclasses.dataclass(frozen=True)
class ImageDecoder:
    """A ``decode=`` that decodes the image field ``field`` to a fixed ``uint8
    (height, width, 3)`` (build it with :func:`decode_images`, which checks the options).

    A source reading a datarax dataset binds it to the dataset's fields
    (:meth:`for_dataset`); unbound (plain ArrayRecord files), each record is the
    encoded image itself.
    """

    #: the fix a 64-bit message names last (read by DecodedRecords too)
    dtype_fix = DATASET_DTYPE_FIX

    field: str
    resize: int | tuple[int, int] | None
    crop: tuple[int, int] | None
    random_resized_crop: tuple[int, int] | None
    scale: tuple[float, float]
    ratio: tuple[float, float]
    seed: int
    draft: bool
    features: Features | None = None

    @property
    def takes_record_keys(self) -> bool:
        """True with a random crop: the reader hands each record's key (its stable index
        and epoch) with its bytes (:class:`~datarax.sources.decoded_records.KeyedRecord`)."""
        return self.random_resized_crop is not None

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """The shape every decoded image has."""
        size = self.random_resized_crop or self.crop or self.resize
        assert isinstance(size, tuple)
        return (size[0], size[1], 3)

    def for_dataset(self, features: Features) -> ImageDecoder:
        """This decoder for records of ``features`` (a dataset's): ``field`` must be one
        of its image fields."""
        images = [f.name for f in features.fields if f.encoding in _IMAGE_ENCODINGS]
        if self.field not in features:
            way = (f"Pass its image field: decode_images('{images[0]}', ...)" if len(images) == 1
                   else f"Pass one of its image fields ({', '.join(images)}) as decode_images' "
                   "first argument" if images else "It has no encoded image field to decode")
            raise ConfigError(
                f"decode_images: the dataset has no field '{self.field}'; its fields are "
                f"{list(features.names)}. {way}.")
        found = features[self.field]
        if found.encoding not in _IMAGE_ENCODINGS:
            raise ConfigError(
                f"decode_images: the dataset's field '{self.field}' is stored as "
                f"{found.encoding} {found.dtype}{found.shape}, not as an encoded image (PNG / "
                f"JPEG); its image fields are {images or 'none'}.")
        return dataclasses.replace(self, features=features)

    def __call__(self, raw: bytes | KeyedRecord) -> dict[str, Any]:
        """One record's fields, the image decoded (``raw``: the record's bytes, or a
        :class:`~datarax.sources.decoded_records.KeyedRecord` for a random crop)."""
        if isinstance(raw, KeyedRecord):
            return self.decode_record(raw.raw, raw.index, raw.epoch)
        if self.takes_record_keys:
            raise ConfigError(
                "decode_images(random_resized_crop=...) draws each record's crop from its "
                "stable index and epoch, which this caller does not give (it passed the "
                "record's bytes alone). Read the records through a source's reader (a "
                "Pipeline or the source itself), or call decoder.decode_record(raw, index, "
                "epoch).")
        return self.decode_record(raw, 0, 0)

    def decode_chunk(self, raws: list[Any]) -> dict[str, np.ndarray]:
        """A chunk of records (bytes, or :class:`KeyedRecord` s for a random crop) as
        columns, the values :meth:`decode_record` gives, each image decoded straight into
        its row of one batch array; on a bad record it raises, and the reader names it
        by decoding record by record."""
        if self.takes_record_keys and not all(isinstance(r, KeyedRecord) for r in raws):
            self(raws[0] if raws else b"")  # the error that says what is missing
        keys = [(r.raw, r.index, r.epoch) if isinstance(r, KeyedRecord) else (r, 0, 0)
                for r in raws]
        if self.features is None:
            columns: dict[str, Any] = {self.field: [bytes(k[0]) for k in keys]}
        else:
            columns = decode_records(self.features, [k[0] for k in keys],
                                     encoded=frozenset((self.field,)))
            columns = {name: fit_value(name, column, cast_float64=False,
                                       drop_hint=DATASET_DTYPE_FIX)
                       if name != self.field and column.dtype.kind in "iu"
                       and column.dtype.itemsize == 8 else column
                       for name, column in columns.items()}
        images = fresh_aligned((len(keys), *self.image_shape), np.uint8)
        blobs = columns[self.field]

        def decode_rows(rows: range) -> None:
            for row in rows:
                self.decode_image(blobs[row], keys[row][1], keys[row][2], out=images[row])

        pool = spread_pool()
        if pool is None or len(keys) <= SPREAD_STEP:
            decode_rows(range(len(keys)))
        else:  # rows in order, spread over the cores (a session's first chunk, alone)
            steps = [range(i, min(i + SPREAD_STEP, len(keys)))
                     for i in range(0, len(keys), SPREAD_STEP)]
            list(pool.map(decode_rows, steps))
        columns[self.field] = seal(images)
        return columns

    def decode_record(self, raw: bytes, index: int, epoch: int = 0) -> dict[str, Any]:
        """The fields of the record ``raw`` whose stable index is ``index``, read in pass
        ``epoch`` (which decide its random crop, if any)."""
        if self.features is None:
            fields: dict[str, Any] = {self.field: bytes(raw)}
        else:
            columns = decode_records(self.features, [raw], encoded=frozenset((self.field,)))
            # 64-bit values as the reader keeps them (a label: int32), so that a chunk's
            # records stack in one step
            fields = {name: fit_value(name, column[0], cast_float64=False,
                                      drop_hint=DATASET_DTYPE_FIX)
                      if column.dtype.kind in "iu" and column.dtype.itemsize == 8 else column[0]
                      for name, column in columns.items()}
        fields[self.field] = self.decode_image(fields[self.field], index, epoch)
        return fields

    def decode_image(self, data: bytes, index: int = 0, epoch: int = 0, *,
                     out: np.ndarray | None = None) -> np.ndarray:
        """The encoded image ``data`` as ``uint8`` :attr:`image_shape` (``index`` and
        ``epoch``: the record's key, for a random crop), written into ``out`` where
        given."""
        try:
            with image_named(f"field '{self.field}' of record {index}"):
                return self._decoded(data, index, epoch, out)
        except MissingExtraError:  # Pillow not installed: no record is to blame
            raise
        except Exception as err:  # noqa: BLE001 - named by field; the reader names the record
            kind = "" if isinstance(data, (bytes, bytearray)) else f" (got {type(data).__name__})"
            raise RecordError(f"field '{self.field}': cannot decode the image{kind} "
                              f"({error_text(err)}).") from err

    def _decoded(self, data: bytes, index: int, epoch: int, out: np.ndarray | None) -> np.ndarray:
        if self.random_resized_crop is not None:
            rng = np.random.default_rng((self.seed, int(epoch), int(index)))
            return resized_crop(data, None, self.random_resized_crop, rng=rng,
                                scale=self.scale, ratio=self.ratio, draft=self.draft, out=out)
        return resize_and_crop(data, resize=self.resize, crop=self.crop, draft=self.draft,
                               out=out)


def decode_images(
    field: str = "image",
    *,
    resize: int | tuple[int, int] | None = None,
    crop: int | tuple[int, int] | None = None,
    random_resized_crop: int | tuple[int, int] | None = None,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    seed: int = 0,
    draft: bool = True,
) -> ImageDecoder:
    """A ``decode=`` that turns the encoded image field ``field`` (PNG / JPEG, any size)
    into ``uint8 (height, width, 3)`` of one size, with torchvision's geometry:

    * ``resize=N`` then ``crop=C`` — eval: the shorter side to ``N`` (``Resize(N)``), then
      the centre ``C`` x ``C`` (``CenterCrop(C)``, zero-padded where smaller);
      ``resize=(h, w)`` resizes to exactly that; ``crop`` alone cuts the centre of the
      image as stored.
    * ``random_resized_crop=S`` — train: torchvision's ``RandomResizedCrop(S, scale,
      ratio)`` (a box of a random share ``scale`` of the area and aspect ratio ``ratio``,
      10 tries, then the centre fallback), resized to ``S`` x ``S``; drawn per record from
      ``(seed, epoch, stable record index)``.

    Every resize is PIL's bilinear (antialiased). ``draft`` (default on) decodes a large
    JPEG at 1/2, 1/4 or 1/8 scale when the box keeps at least the output's pixels, and
    resizes only the part a crop keeps (pixels within a few levels of a full decode);
    ``draft=False`` gives torchvision's values exactly. Other fields pass through as the
    dataset's metadata says. Flips, normalization and the rest run as compiled stages.

    Example:
        >>> import io
        >>> from PIL import Image
        >>> out = io.BytesIO(); Image.new("L", (500, 375), 128).save(out, "PNG")
        >>> decoder = decode_images(resize=256, crop=224)
        >>> image = decoder(out.getvalue())["image"]  # a plain record: the image's bytes
        >>> image.shape, int(image[0, 0, 0])
        ((224, 224, 3), 128)

    Raises:
        ConfigError: no output size (``resize=int`` alone keeps each image's aspect
            ratio, so sizes would vary), a random crop together with ``resize`` /
            ``crop``, or an option out of range.
        MissingExtraError: Pillow is not installed (``pip install "datarax[image]"``).
    """
    if isinstance(field, (bytes, bytearray, memoryview)):  # decode=decode_images, uncalled
        raise ConfigError(
            f"decode_images was given a record ({len(field)} bytes) as its field: it makes the "
            "decode function and is not one itself. Pass decode=datarax.decode_images('image', "
            "resize=256, crop=224) (or random_resized_crop=224); on the command line, "
            "inspect DATASET --resize N --crop C, or a py: target whose function builds it.")
    if not isinstance(field, str) or not field:
        raise ConfigError(
            f"decode_images: field must be a field name (str), got {reprlib.repr(field)}.")
    resize, crop, random_resized_crop, seed = python_ints((resize, crop, random_resized_crop, seed))
    if random_resized_crop is not None and (resize is not None or crop is not None):
        raise ConfigError(
            "decode_images: random_resized_crop= cuts and resizes in one step and cannot be "
            "combined with resize= or crop=; use random_resized_crop=S for training, "
            "resize=N, crop=C for evaluation.")
    if isinstance(resize, int) and not isinstance(resize, bool):
        if resize < 1:
            raise ConfigError("decode_images: resize must be an int >= 1 or a (height, width) "
                              f"pair of them, got {resize}.")
        size: int | tuple[int, int] | None = resize
    else:
        size = _pair("resize", resize)
    if random_resized_crop is None and crop is None and not isinstance(size, tuple):
        raise ConfigError(
            "decode_images needs an output size: a batch holds images of one shape. "
            + (f"resize={resize} alone keeps each image's aspect ratio, so sizes vary; add "
               f"crop= (e.g. crop={resize}), or give resize=(height, width)."
               if size is not None else
               "Give random_resized_crop=S (training), resize=N with crop=C (evaluation), "
               "resize=(height, width) or crop=C."))
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63):
        raise ConfigError(f"decode_images: seed must be an int >= 0, got {seed!r}.")
    require("PIL.Image", extra="image", user="decode_images")  # here, not on a reader thread
    return ImageDecoder(
        field=field, resize=size, crop=_pair("crop", crop),
        random_resized_crop=_pair("random_resized_crop", random_resized_crop),
        scale=_range("scale", scale, 1.0), ratio=_range("ratio", ratio, None),
        seed=seed, draft=bool(draft))


#: rows one decode thread takes at a time where a chunk is spread over the cores
SPREAD_STEP = 16
#: the spread pool and the process that started it (a forked child starts its own:
#: the parent's threads do not exist there)
_SPREAD: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_SPREAD_LOCK = threading.Lock()


def spread_pool() -> concurrent.futures.ThreadPoolExecutor | None:
    """The threads (one a core, shared by this process's decoders) a chunk's images are
    decoded on, so a chunk read alone (a session's first) takes every core; None with
    one core and in a decode worker process (its siblings hold the other cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cores or 1) < 2 or in_decode_worker():
        return None
    pid = os.getpid()
    with _SPREAD_LOCK:
        if pid not in _SPREAD:
            _SPREAD.clear()
            _SPREAD[pid] = concurrent.futures.ThreadPoolExecutor(
                max_workers=cores, thread_name_prefix="datarax-image-decode",
                initializer=run_behind_consumer)
        return _SPREAD[pid]


def bind_to_dataset(decode: Any, features: Features | None) -> Any:
    """``decode`` bound to a dataset's ``features`` where it asks for them (an
    :class:`ImageDecoder`); any other ``decode`` as it is."""
    if features is not None and isinstance(decode, ImageDecoder):
        return decode.for_dataset(features)
    return decode


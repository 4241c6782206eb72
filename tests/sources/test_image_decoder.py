"""decode_images: encoded images of every size decoded to one shape on the host.

Values are checked against a reference decode + resize done here with PIL (torchvision's
geometry written out); the random crop of a record against its own key, the same at any
batch size, worker count and after a resume.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("array_record")
PIL_Image = pytest.importorskip("PIL.Image")
from flax import nnx  # noqa: E402

from datarax import decode_images  # noqa: E402
from datarax.core.errors import ConfigError, RecordError  # noqa: E402
from datarax.dataset import Features, Field, convert, write_dataset  # noqa: E402
from datarax.dataset.image_decode import random_resized_box  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule  # noqa: E402

BILINEAR = PIL_Image.Resampling.BILINEAR
SIZES = [(60, 80), (90, 70), (75, 75), (64, 120), (100, 50), (81, 67)]


def picture(h: int, w: int, seed: int, kind: str = "JPEG") -> bytes:
    """A smooth random picture (so JPEG keeps detail a wrong crop would change)."""
    rng = np.random.default_rng(seed)
    small = PIL_Image.fromarray((rng.random((8, 8, 3)) * 255).astype(np.uint8))
    out = io.BytesIO()
    options = {"quality": 90} if kind == "JPEG" else {}
    small.resize((w, h), BILINEAR).save(out, format=kind, **options)
    return out.getvalue()


def reference(data: bytes, resize: int, crop: int) -> np.ndarray:
    """torchvision's Resize(resize) + CenterCrop(crop) on the PIL image, written out."""
    image = PIL_Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    if w <= h:
        size = (resize, int(resize * h / w))
    else:
        size = (int(resize * w / h), resize)
    image = image.resize(size, BILINEAR)
    top, left = int(round((size[1] - crop) / 2)), int(round((size[0] - crop) / 2))
    return np.asarray(image.crop((left, top, left + crop, top + crop)))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A dataset of 40 JPEGs (six sizes) with an ``id`` per record."""
    root = tmp_path_factory.mktemp("images")
    images = [picture(*SIZES[i % len(SIZES)], seed=i) for i in range(40)]
    features = Features((Field("image", "uint8", (None, None, 3), "jpeg"),
                         Field("id", "int32", (), "raw")))
    folder = str(root / "ds")
    write_dataset([{"image": im, "id": np.int32(i)} for i, im in enumerate(images)], folder,
                  features=features, shards=3)
    return folder, images


def source_of(folder, decode, **options):
    options = {"num_threads": 2, **options}
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=5, shuffle_files=True), folder,
                                   decode=decode, **options)


def by_id(batches) -> dict[int, np.ndarray]:
    return {int(i): np.asarray(im) for b in batches for i, im in zip(b["id"], b["image"])}


def epoch(source, batch_size):
    return list(Pipeline(source=source, stages=[], batch_size=batch_size, rngs=nnx.Rngs(0)))


def test_resize_and_centre_crop_equal_pil_and_batches_have_one_shape(mixed):
    folder, images = mixed
    source = source_of(folder, decode_images("image", resize=40, crop=32, draft=False))
    try:
        batches = epoch(source, 16)
    finally:
        source.close()
    assert [b["image"].shape for b in batches] == [(16, 32, 32, 3), (16, 32, 32, 3), (8, 32, 32, 3)]
    assert all(np.asarray(b["image"]).dtype == np.uint8 for b in batches)
    got = by_id(batches)
    assert sorted(got) == list(range(40))
    for i, image in got.items():  # wide and tall, exact
        np.testing.assert_array_equal(image, reference(images[i], 40, 32), err_msg=f"image {i}")


def test_a_large_jpeg_decodes_at_a_dct_scale_as_pil_draft_does():
    data = picture(480, 640, seed=1)
    decoder = decode_images(resize=64, crop=56)  # 480/4 = 120 >= 64: decoded at 1/4
    got = decoder(data)["image"]
    image = PIL_Image.open(io.BytesIO(data))
    image.draft("RGB", (640 // 4, 480 // 4))
    assert image.size == (160, 120)
    resized = image.convert("RGB").resize((85, 64), BILINEAR, box=(0, 0, 160, 120))
    drafted = np.asarray(resized.crop((14, 4, 70, 60))).astype(int)
    # only the crop's part resized: PIL rounds between its passes a little differently
    assert np.abs(got.astype(int) - drafted).max() <= 1
    full = reference(data, 64, 56).astype(int)  # and close to a whole decode
    assert np.abs(got.astype(int) - full).mean() < 2.0
    whole = decode_images(resize=64, crop=56, draft=False)(data)["image"]
    np.testing.assert_array_equal(whole, full)


@pytest.mark.parametrize("options", [{"resize": 64, "crop": 56},
                                     {"resize": 300, "crop": 256},
                                     {"resize": 64, "crop": 56, "draft": False},
                                     {"random_resized_crop": 40},
                                     {"random_resized_crop": 200}])
def test_pillow_gives_the_same_pixels_where_simplejpeg_is_missing(options, monkeypatch):
    from datarax.dataset import image_decode

    data = picture(480, 640, seed=2)
    decoder = decode_images(**options)
    fast = decoder.decode_record(data, index=5, epoch=1)["image"]
    monkeypatch.setattr(image_decode, "_simplejpeg", lambda: None)
    np.testing.assert_array_equal(decoder.decode_record(data, index=5, epoch=1)["image"], fast)


#: how far the fast path (``draft=True``: DCT-scaled decode, only the crop's part resized)
#: may be from a whole decode + resize + crop: docs/data-in.md's "Decoding images"
TOLERANCE_MEAN, TOLERANCE_MAX = 2.5, 20


def test_the_fast_random_crop_keeps_each_records_box_within_the_tolerance():
    decoder = decode_images(random_resized_crop=64, seed=7)  # boxes >= 128: decoded at 1/2+
    for i in range(6):
        data = picture(480, 640, seed=20 + i)
        got = decoder.decode_record(data, index=i, epoch=1)["image"].astype(int)
        image = PIL_Image.open(io.BytesIO(data)).convert("RGB")  # the box: the record's key
        top, left, h, w = random_resized_box(np.random.default_rng((7, 1, i)), 480, 640,
                                             (0.08, 1.0), (3 / 4, 4 / 3))
        want = np.asarray(image.crop((left, top, left + w, top + h)).resize((64, 64), BILINEAR))
        diff = np.abs(got - want.astype(int))
        assert diff.mean() < TOLERANCE_MEAN and diff.max() <= TOLERANCE_MAX, f"image {i}"


@pytest.mark.parametrize("kind", ["JPEG", "PNG"])
def test_the_fast_centre_crop_is_within_one_level_of_resize_then_crop(kind):
    for i, (h, w) in enumerate(SIZES):  # too small for a DCT scale: the crop-only resize
        data = picture(h, w, seed=i, kind=kind)
        got = decode_images(resize=40, crop=32)(data)["image"].astype(int)
        assert np.abs(got - reference(data, 40, 32).astype(int)).max() <= 1, f"{kind} {h}x{w}"
    data = picture(30, 50, seed=9, kind=kind)  # smaller than the crop: padded, exact
    np.testing.assert_array_equal(decode_images(resize=30, crop=32)(data)["image"],
                                  decode_images(resize=30, crop=32, draft=False)(data)["image"])


def test_a_crop_larger_than_the_image_pads_as_torchvision():
    """CenterCrop pads ``(crop - size) // 2`` zeros before the image, the rest after: a
    7-wide image in a crop of 10 starts at column 1 (round(-1.5) would say 2)."""
    data = picture(9, 7, seed=3, kind="PNG")
    pixels = np.asarray(PIL_Image.open(io.BytesIO(data)).convert("RGB"))
    want = np.zeros((12, 10, 3), np.uint8)  # 9 rows in 12: 1 before; 7 columns in 10: 1 before
    want[1:10, 1:8] = pixels
    for draft in (True, False):
        np.testing.assert_array_equal(decode_images(crop=(12, 10), draft=draft)(data)["image"],
                                      want)


def test_random_resized_crop_is_the_records_own_box_cut_and_resized(mixed):
    folder, images = mixed
    decoder = decode_images(random_resized_crop=24, seed=11, draft=False)
    source = source_of(folder, decoder)
    try:
        got = by_id(epoch(source, 8))
    finally:
        source.close()
    for i in (0, 1, 7, 33):  # id == stable index here (written in order)
        image = PIL_Image.open(io.BytesIO(images[i])).convert("RGB")
        top, left, h, w = random_resized_box(np.random.default_rng((11, 0, i)), image.height,
                                             image.width, (0.08, 1.0), (3 / 4, 4 / 3))
        want = image.crop((left, top, left + w, top + h)).resize((24, 24), BILINEAR)
        np.testing.assert_array_equal(got[i], np.asarray(want), err_msg=f"image {i}")


def test_random_box_follows_scale_and_ratio_and_falls_back_to_the_centre():
    rng = np.random.default_rng(0)
    for _ in range(200):
        top, left, h, w = random_resized_box(rng, 90, 120, (0.08, 1.0), (3 / 4, 4 / 3))
        assert 0 <= top <= 90 - h and 0 <= left <= 120 - w
        assert 0.08 * 0.8 <= h * w / (90 * 120) <= 1.0  # rounding aside
        assert 3 / 4 * 0.85 <= w / h <= 4 / 3 * 1.15
    # no box of 99% of a 100x100 image has ratio >= 3: the centre, at the largest ratio
    assert random_resized_box(rng, 100, 100, (0.99, 1.0), (3.0, 4.0)) == (33, 0, 33, 100)
    # the same fallback as RandomResizedCrop: never an empty box (torchvision's rounding
    # gives 0 rows for a 1x1 image at ratio >= 3)
    assert random_resized_box(rng, 1, 1, (0.99, 1.0), (3.0, 4.0)) == (0, 0, 1, 1)


def test_each_records_crop_is_the_same_at_any_batch_size_and_changes_per_epoch(mixed):
    folder, _ = mixed
    batch_sizes = (1, 7, 32)
    decoder = decode_images(random_resized_crop=24, seed=3)
    runs = []
    for size in batch_sizes:
        source = source_of(folder, decoder)
        try:
            runs.append(by_id(epoch(source, size)))
            if size == batch_sizes[0]:
                second = by_id(epoch(source, size))  # epoch 1
        finally:
            source.close()
    for run in runs[1:]:
        assert run.keys() == runs[0].keys() == set(range(40))
        for i in run:
            np.testing.assert_array_equal(run[i], runs[0][i])
    changed = sum(not np.array_equal(second[i], runs[0][i]) for i in range(40))
    assert changed >= 36  # a new crop each epoch (a few may repeat the fallback box)


def test_two_hosts_shares_hold_the_crops_one_host_gets(mixed):
    folder, _ = mixed
    decoder = decode_images(random_resized_crop=24, seed=3)
    one = source_of(folder, decoder)
    try:
        whole = by_id(epoch(one, 8))
    finally:
        one.close()
    shares = {}
    for index in (0, 1):
        source = source_of(folder, decoder)
        try:
            shares.update(by_id(Pipeline(source=source, stages=[], batch_size=8,
                                         shard_index=index, shard_count=2)))
        finally:
            source.close()
    assert shares.keys() == whole.keys()
    for i in shares:
        np.testing.assert_array_equal(shares[i], whole[i])


def test_a_resumed_epoch_serves_the_same_crops(mixed):
    folder, _ = mixed
    decoder = decode_images(random_resized_crop=24, seed=3)
    whole_source = source_of(folder, decoder)
    try:
        whole = epoch(whole_source, 7)
    finally:
        whole_source.close()
    first_source = source_of(folder, decoder)
    pipeline = Pipeline(source=first_source, stages=[], batch_size=7, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    head = [next(it), next(it), next(it)]
    state = pipeline.get_state()
    first_source.close()
    resumed_source = source_of(folder, decoder)
    try:
        resumed = Pipeline(source=resumed_source, stages=[], batch_size=7, rngs=nnx.Rngs(0))
        resumed.set_state(state)
        rest = list(resumed)
    finally:
        resumed_source.close()
    served = [int(i) for b in head + rest for i in b["id"]]
    assert served == [int(i) for b in whole for i in b["id"]]
    for a, b in zip(head + rest, whole):
        np.testing.assert_array_equal(np.asarray(a["image"]), np.asarray(b["image"]))


def same_batches(runs) -> None:
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for a, b in zip(other, runs[0]):
            np.testing.assert_array_equal(np.asarray(a["id"]), np.asarray(b["id"]))
            np.testing.assert_array_equal(np.asarray(a["image"]), np.asarray(b["image"]))


def served_with(folder, decoder=None, **options):
    source = source_of(folder, decoder or decode_images(random_resized_crop=24, seed=3),
                       **options)
    try:
        return epoch(source, 8)
    finally:
        source.close()


def test_one_or_two_reader_threads_serve_the_same_batches(mixed):
    folder, _ = mixed
    same_batches([served_with(folder, num_threads=1), served_with(folder, num_threads=2)])
    centre = decode_images(resize=40, crop=32)
    same_batches([served_with(folder, centre, num_threads=1),
                  served_with(folder, centre, num_threads=2)])


@pytest.mark.slow  # starts worker processes; the threads test above covers the keys
def test_one_or_two_decode_processes_serve_the_batches_threads_do(mixed):
    folder, _ = mixed
    same_batches([served_with(folder), served_with(folder, decode_processes=1),
                  served_with(folder, decode_processes=2)])


def test_a_chunk_decodes_to_each_records_own_decode(mixed):
    """decode_chunk (the reader's call for a whole chunk) writes every image into one
    batch array, each row what the record alone decodes to."""
    from datarax.sources.decoded_records import KeyedRecord

    _, images = mixed
    for options in ({"random_resized_crop": 24, "seed": 3}, {"resize": 40, "crop": 32}):
        decoder = decode_images(**options)
        columns = decoder.decode_chunk([KeyedRecord(im, i, 2) for i, im in enumerate(images)])
        assert list(columns) == ["image"]
        assert columns["image"].shape == (40, *decoder.image_shape)
        for i, im in enumerate(images):
            np.testing.assert_array_equal(columns["image"][i],
                                          decoder.decode_record(im, i, 2)["image"])


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_decodes_chunks_with_threads_of_its_own(mixed):
    """The decode threads a chunk is spread over do not survive a fork: a child process
    starts its own rather than waiting on its parent's."""
    import os
    import select
    import signal
    import warnings

    _, images = mixed
    decoder = decode_images(resize=40, crop=32)
    want = decoder.decode_chunk(images)["image"]  # the parent's threads, started
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX warns of a fork in a threaded process
        pid = os.fork()
    if pid == 0:  # the child
        try:
            got = decoder.decode_chunk(images)["image"]
            os.write(write, b"same" if np.array_equal(got, want) else b"diff")
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 120)
    answer = os.read(read, 4) if ready else b"hung"
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"same"


@pytest.mark.slow  # starts worker processes
def test_large_decoded_chunks_come_back_from_processes_as_threads_serve_them(mixed):
    """Chunks of 1 MiB and more come back through shared memory: the same batches, no
    file left behind."""
    import glob
    import os

    folder, _ = mixed
    runs = []
    for options in ({}, {"decode_processes": 2}):
        source = source_of(folder, decode_images(random_resized_crop=128, seed=3), **options)
        try:
            runs.append(epoch(source, 32))  # 32 x 128 x 128 x 3 bytes: 1.5 MiB a chunk
        finally:
            source.close()
    same_batches(runs)
    assert glob.glob(f"/dev/shm/datarax-{os.getpid()}-*") == []


def test_a_folder_of_mixed_sizes_converts_and_reads_as_fixed_batches(tmp_path):
    photos = tmp_path / "photos"
    for i, (h, w) in enumerate(SIZES * 2):
        folder = photos / ("cat" if i % 3 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.jpg").write_bytes(picture(h, w, seed=i))
    convert(str(photos), str(tmp_path / "ds"))
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"),
                                     decode=decode_images(resize=36, crop=32))
    try:
        assert source.dataset_info.features["label"].class_names == ("cat", "dog")
        batches = epoch(source, 5)
    finally:
        source.close()
    assert [b["image"].shape for b in batches] == [(5, 32, 32, 3), (5, 32, 32, 3), (2, 32, 32, 3)]
    assert [int(v) for b in batches for v in b["label"]] == [0] * 8 + [1] * 4  # cat/, dog/


def test_plain_array_record_files_of_image_bytes_decode_too(tmp_path):
    from int_record_files import write_records

    images = [picture(*SIZES[i], seed=i, kind="PNG" if i % 2 else "JPEG") for i in range(4)]
    path = write_records(tmp_path / "jpegs.array_record", images)
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path,
                                     decode=decode_images("img", resize=(20, 30), draft=False))
    try:
        (batch,) = epoch(source, 4)
    finally:
        source.close()
    assert list(batch) == ["img"] and batch["img"].shape == (4, 20, 30, 3)
    for i, data in enumerate(images):  # JPEG and PNG records, each as stored
        want = PIL_Image.open(io.BytesIO(data)).convert("RGB").resize((30, 20), BILINEAR)
        np.testing.assert_array_equal(np.asarray(batch["img"][i]), np.asarray(want))


def test_options_that_give_no_fixed_shape_or_clash_are_refused_saying_what_to_do():
    with pytest.raises(ConfigError, match=r"resize=256 alone keeps each image's aspect ratio.*"
                                          r"add crop="):
        decode_images(resize=256)
    with pytest.raises(ConfigError, match="needs an output size"):
        decode_images()
    with pytest.raises(ConfigError, match="cannot be combined with resize= or crop="):
        decode_images(random_resized_crop=224, crop=224)
    with pytest.raises(ConfigError, match=r"scale must be a \(low, high\) pair"):
        decode_images(random_resized_crop=8, scale=(0.5, 0.1))
    with pytest.raises(ConfigError, match="crop must be an int >= 1"):
        decode_images(resize=8, crop=0)
    with pytest.raises(ConfigError, match="draws each record's crop from its stable index"):
        decode_images(random_resized_crop=8)(picture(10, 10, 0))



def test_decode_images_itself_given_as_the_decode_says_to_call_it_not_the_record_bytes():
    # decode=decode_images (uncalled; --decode datarax:decode_images) gets a record's bytes
    record = b"\xff\xd8\xff" + bytes(5000)
    with pytest.raises(ConfigError) as err:
        decode_images(record)
    assert str(err.value) == (
        "decode_images was given a record (5003 bytes) as its field: it makes the decode "
        "function and is not one itself. Pass decode=datarax.decode_images('image', resize=256, "
        "crop=224) (or random_resized_crop=224); on the command line, inspect DATASET --resize N "
        "--crop C, or a py: target whose function builds it.")
    with pytest.raises(ConfigError) as err:
        decode_images(list(range(1000)), resize=8, crop=8)
    assert len(str(err.value)) < 120  # the value shown cut short

def test_a_field_that_is_not_an_image_or_missing_is_refused_naming_the_fields(mixed):
    folder, _ = mixed
    with pytest.raises(ConfigError, match=r"no field 'img'; its fields are \['image', 'id'\]. "
                                          r"Pass its image field: decode_images\('image', "
                                          r"\.\.\.\)\.$"):
        source_of(folder, decode_images("img", resize=8, crop=8))
    two = Features((Field("front", "uint8", (None, None, 3), "jpeg"),
                    Field("back", "uint8", (None, None, 3), "png")))
    with pytest.raises(ConfigError, match=r"no field 'image'; its fields are \['front', 'back'\]. "
                                          r"Pass one of its image fields \(front, back\) as "
                                          r"decode_images' first argument\.$"):
        decode_images(resize=8, crop=8).for_dataset(two)
    with pytest.raises(ConfigError, match=r"field 'id' is stored as raw int32\(\).*its image "
                                          r"fields are \['image'\]"):
        source_of(folder, decode_images("id", resize=8, crop=8))


def test_an_undecodable_image_names_its_file_record_and_field(tmp_path):
    from int_record_files import write_records

    good = picture(20, 20, 0)
    path = write_records(tmp_path / "jpegs.array_record", (good, good[:60], good))  # 2nd cut short
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), path,
                                     decode=decode_images(resize=8, crop=8))
    try:
        with pytest.raises(RecordError, match=r"record 1 of file '.*jpegs\.array_record'.*"
                                              r"field 'image': cannot decode the image"):
            epoch(source, 3)
    finally:
        source.close()


def test_sizes_and_seed_computed_with_numpy_are_the_same_ints(mixed):
    # resize=np.int64(crop * 8 // 7), seed=np.int64(...): NumPy ints are ints
    folder, _ = mixed
    for numpy_made, plain in (
        (decode_images(random_resized_crop=np.int64(24), seed=np.int64(3)),
         decode_images(random_resized_crop=24, seed=3)),
        (decode_images(resize=(np.int64(40), np.int32(30)), crop=np.int64(24)),
         decode_images(resize=(40, 30), crop=24)),
    ):
        got, want = source_of(folder, numpy_made), source_of(folder, plain)
        try:
            a, b = by_id(epoch(got, 16)), by_id(epoch(want, 16))
        finally:
            got.close(), want.close()
        assert a.keys() == b.keys() == set(range(40))
        assert all(np.array_equal(a[i], b[i]) for i in a)
    with pytest.raises(ConfigError, match=r"seed must be an int >= 0, got np.float64\(3.0\)"):
        decode_images(random_resized_crop=24, seed=np.float64(3))

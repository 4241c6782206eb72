"""An image folder's classes: labels given by class names (a split that lacks a class keeps
the labels of the dataset it must match: ``class_names=``, ``features=``, ``--classes-from``),
names sorted alike on every file system, images outside the class folders."""

from __future__ import annotations

import os

import numpy as np
import pytest
from dataset_helpers import png, read_dataset

from datarax.dataset import ConversionError, convert, read_metadata
from datarax.errors import ConfigError

pytest.importorskip("PIL")


def folder(root, classes: str) -> str:
    """``root/<c>/0.png`` for each class letter, the image's first pixel the letter's rank."""
    for c in classes:
        os.makedirs(root / c)
        (root / c / "0.png").write_bytes(png("abcdef".index(c)))
    return str(root)


def test_a_split_missing_a_class_keeps_the_labels_of_the_class_names_given(tmp_path) -> None:
    val = folder(tmp_path / "val", "ac")
    info, _ = convert(val, tmp_path / "by_names", class_names={"label": ["a", "b", "c"]})
    assert info.features["label"].class_names == ("a", "b", "c")
    assert read_dataset(tmp_path / "by_names")["label"].tolist() == [0, 2]
    convert(folder(tmp_path / "train", "abc"), tmp_path / "train_ds")
    # the train split's features: their class names label the folders, in 2 processes too
    info, _ = convert(val, tmp_path / "by_features", shards=2, workers=2,
                      features=read_metadata(tmp_path / "train_ds").features)
    assert info.features["label"].class_names == ("a", "b", "c")
    out = read_dataset(tmp_path / "by_features")
    assert out["label"].tolist() == [0, 2] and out["image"][:, 0, 0, 0].tolist() == [0, 2]


def test_resized_images_keep_the_labels_of_the_class_names_given(tmp_path) -> None:
    val = folder(tmp_path / "val", "bc")
    info, _ = convert(val, tmp_path / "out", resize=2, class_names={"label": ["a", "b", "c"]})
    assert read_dataset(tmp_path / "out")["label"].tolist() == [1, 2]
    assert info.extra["resize"] == 2


def test_a_class_folder_not_among_the_names_given_is_refused(tmp_path) -> None:
    src = folder(tmp_path / "src", "abd")
    with pytest.raises(ConversionError, match=r"has the class folder\(s\) 'd', which are not among "
                                              r"the class names given for 'label' \(a, b, c\)"):
        convert(src, tmp_path / "out", class_names={"label": ["a", "b", "c"]})
    assert not os.path.exists(tmp_path / "out" / "datarax_dataset.json")


@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_non_ascii_class_and_file_names_sort_and_read_alike_composed_or_decomposed(
        tmp_path, form) -> None:
    # macOS stores 'dög' decomposed ('do' + U+0308 + 'g'), Linux as written (composed):
    # the same folder gives the same classes, labels and record order on both
    import unicodedata

    def name(text: str) -> str:
        return unicodedata.normalize(form, text)

    for cls, files in (("dög", ("ä.png", "az.png")), ("dz", ("0.png",))):
        os.makedirs(tmp_path / "src" / name(cls))
        for i, file in enumerate(files):
            (tmp_path / "src" / name(cls) / name(file)).write_bytes(png(10 * len(files) + i))
    info, _ = convert(str(tmp_path / "src"), tmp_path / "out")
    assert info.features["label"].class_names == ("dz", "d\u00f6g")
    out = read_dataset(tmp_path / "out")
    assert out["label"].tolist() == [0, 1, 1]
    assert out["image"][:, 0, 0, 0].tolist() == [10, 21, 20]  # 0.png, then az.png before ä.png
    info, _ = convert(str(tmp_path / "src"), tmp_path / "named",
                      class_names={"label": ["d\u006f\u0308g", "dz"]})  # names given decomposed
    assert read_dataset(tmp_path / "named")["label"].tolist() == [1, 0, 0]


def test_images_beside_the_class_folders_are_refused_not_left_out(tmp_path) -> None:
    src = folder(tmp_path / "src", "ab")
    for i in range(5):
        (tmp_path / "src" / f"loose{i}.png").write_bytes(png(i))
    (tmp_path / "src" / "notes.txt").write_text("kept out: no image")
    with pytest.raises(ConversionError, match=r"holds images beside its class folders \(loose0.png, "
                                              r"loose1.png, loose2.png and 2 more\), which would "
                                              r"belong to no class"):
        convert(src, tmp_path / "out")


def test_a_folder_of_images_without_class_folders_says_how_to_convert_them(tmp_path) -> None:
    src = folder(tmp_path / "photos", "a")
    with pytest.raises(ConversionError) as err:
        convert(os.path.join(src, "a"), tmp_path / "out")
    assert str(err.value).endswith(
        f"For its images: an image folder is ROOT/<class>/<image>; if it is one class of one, "
        f"convert the folder it is in ({src}); for images without classes, move them into one "
        f"subfolder ({src}/a/<name>/) and convert '{src}/a'.")


def test_an_unreadable_image_file_is_a_row_error_named_and_skippable(tmp_path) -> None:
    src = folder(tmp_path / "src", "ab")
    os.symlink(tmp_path / "gone.png", tmp_path / "src" / "a" / "1.png")  # a broken link
    with pytest.raises(ConversionError, match=r"row 1 \(a/1.png\), field 'image': cannot read the "
                                              r"image file \(\[Errno 2\] No such file"):
        convert(src, tmp_path / "out")
    info, _ = convert(src, tmp_path / "skipped", on_error="skip")
    assert [s["row"] for s in info.skipped] == [1] and info.num_records == 2


def test_linked_subfolders_are_followed_once_and_a_link_back_up_never(tmp_path) -> None:
    src = folder(tmp_path / "src", "ab")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "m.png").write_bytes(png(7))
    os.symlink(tmp_path / "more", tmp_path / "src" / "a" / "more")
    os.symlink(tmp_path / "more", tmp_path / "src" / "a" / "same")  # the same folder again
    os.symlink(tmp_path / "src", tmp_path / "src" / "b" / "up")  # a cycle through root
    convert(src, tmp_path / "out")
    out = read_dataset(tmp_path / "out")
    assert out["label"].tolist() == [0, 0, 1]
    assert out["image"][:, 0, 0, 0].tolist() == [0, 7, 1]  # a/0.png, a/more/m.png, b/0.png


def test_a_link_into_another_class_folder_is_not_followed(tmp_path) -> None:
    # each image once, with its own class's label: not again under the class linking to it
    src = folder(tmp_path / "src", "abc")
    os.makedirs(tmp_path / "src" / "b" / "deep")
    (tmp_path / "src" / "b" / "deep" / "d.png").write_bytes(png(5))
    os.symlink(tmp_path / "src" / "b", tmp_path / "src" / "a" / "to_b")
    os.symlink(tmp_path / "src" / "b" / "deep", tmp_path / "src" / "c" / "to_b_deep")
    convert(src, tmp_path / "out")
    out = read_dataset(tmp_path / "out")
    assert out["label"].tolist() == [0, 1, 1, 2]
    assert out["image"][:, 0, 0, 0].tolist() == [0, 1, 5, 2]  # a/0, b/0, b/deep/d, c/0


def test_two_class_folders_that_are_one_folder_are_refused_named(tmp_path) -> None:
    src = folder(tmp_path / "src", "ab")
    os.symlink(tmp_path / "src" / "a", tmp_path / "src" / "c")  # c: a again, another label
    with pytest.raises(ConversionError, match=r"the class folders 'a', 'c' of the image folder "
                                              r"'.*src' are one folder \(links to it\)"):
        convert(src, tmp_path / "out")


def test_a_broken_link_among_the_class_folders_is_refused_named(tmp_path) -> None:
    # a class folder on a drive not mounted would be left out, shifting the later labels
    src = folder(tmp_path / "src", "ac")
    os.symlink(tmp_path / "unmounted" / "b", tmp_path / "src" / "b")
    with pytest.raises(ConversionError, match=r"holds the link 'b' to '.*unmounted/b', which does "
                                              r"not exist: were it a class folder \(on a drive not "
                                              r"mounted\), its images would be left out"):
        convert(src, tmp_path / "out")


def test_an_image_over_pils_pixel_limit_is_a_named_row_not_a_traceback(tmp_path, monkeypatch):
    # a 1-bit PNG's header is read by PIL, whose decompression-bomb guard raised out of
    # the size probe before any row was named
    from PIL import Image

    src = folder(tmp_path / "src", "a")
    Image.new("1", (20, 20)).save(tmp_path / "src" / "a" / "1.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 400 pixels: over twice the limit
    with pytest.raises(ConversionError, match=r"row 1 \(a/1.png\), field 'image': undecodable "
                                              r"image \(DecompressionBombError: Image size \(400 "
                                              r"pixels\) exceeds limit"):
        convert(src, tmp_path / "out")
    info, _ = convert(src, tmp_path / "skipped", on_error="skip")
    assert [s["row"] for s in info.skipped] == [1] and info.num_records == 1


def test_macos_metadata_and_hidden_files_of_a_class_are_no_images(tmp_path) -> None:
    # a zip made on macOS unpacks with __MACOSX/<class>/._<image> and ._<image> beside
    # each image: AppleDouble files with an image's name, no image inside
    src = folder(tmp_path / "src", "a")
    for junk in ("__MACOSX/a/._0.png", "a/._0.png", "a/.thumbnails/t.png"):
        os.makedirs(os.path.dirname(tmp_path / "src" / junk), exist_ok=True)
        (tmp_path / "src" / junk).write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    info, _ = convert(src, tmp_path / "out")
    assert info.features["label"].class_names == ("a",) and info.num_records == 1


def test_netpbm_images_count_as_in_torchvisions_image_folder(tmp_path) -> None:
    from PIL import Image

    src = folder(tmp_path / "src", "a")
    Image.new("RGB", (4, 4), (5, 5, 5)).save(tmp_path / "src" / "a" / "1.ppm")
    Image.new("L", (4, 4), 6).save(tmp_path / "src" / "a" / "2.pgm")
    convert(src, tmp_path / "out")
    assert read_dataset(tmp_path / "out")["image"][:, 0, 0].tolist() == [[0] * 3, [5] * 3, [6] * 3]


def test_class_names_that_would_rename_a_class_label_s_labels_are_refused(tmp_path) -> None:
    # a Hugging Face ClassLabel numbers the labels itself: names given in another order or
    # count (--classes-from a dataset of other classes) would name them wrongly
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"label": datasets.ClassLabel(names=["a", "c"])})
    path = str(tmp_path / "val.parquet")
    datasets.Dataset.from_dict({"label": [0, 1]}, features=features).to_parquet(path)
    saved = str(tmp_path / "saved")
    datasets.Dataset.from_dict({"label": [0, 1]}, features=features).save_to_disk(saved)
    for src in (path, saved):
        with pytest.raises(ConfigError, match=r"numbers its 'label' labels by its own class names "
                                              r"\(a, c\); the class names given \(a, b, c\) would "
                                              r"name them otherwise \('c' would be class 2, not 1\)"):
            convert(src, tmp_path / "out", class_names={"label": ["a", "b", "c"]})
        with pytest.raises(ConfigError, match=r"\(3 names for its 2 classes\)"):
            convert(src, tmp_path / "out", class_names={"label": ["a", "c", "b"]})
        with pytest.raises(ConfigError, match=r"\('a' would be class 1, not 0\)"):
            convert(src, tmp_path / "out", class_names={"label": ["c", "a"]})
    info, _ = convert(path, tmp_path / "renamed", class_names={"label": ["ant", "cat"]})
    assert info.features["label"].class_names == ("ant", "cat")  # a rename: kept
    assert read_dataset(tmp_path / "renamed")["label"].tolist() == [0, 1]


def test_a_folder_that_cannot_be_listed_is_refused_not_left_out(tmp_path, monkeypatch) -> None:
    # a folder without read permission (os.walk would pass over it in silence)
    src = folder(tmp_path / "src", "ab")
    os.makedirs(tmp_path / "src" / "b" / "locked")
    scandir = os.scandir

    def refusing(path="."):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    with pytest.raises(ConversionError, match=r"cannot list the folder '.*b/locked' of the image "
                                              r"folder .*\(PermissionError: Permission denied\); "
                                              r"its images would be left out"):
        convert(src, tmp_path / "out")


def test_two_class_folders_of_one_name_in_two_unicode_forms_are_refused(tmp_path) -> None:
    import unicodedata

    src = folder(tmp_path / "src", "a")
    for form in ("NFC", "NFD"):
        os.makedirs(tmp_path / "src" / unicodedata.normalize(form, "dög"))
        (tmp_path / "src" / unicodedata.normalize(form, "dög") / "0.png").write_bytes(png(1))
    with pytest.raises(ConversionError, match="has two class folders named 'dög' \\(one composed"):
        convert(src, tmp_path / "out")


def test_a_dataset_read_by_its_source_and_converted_again_keeps_its_class_names(tmp_path):
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    convert(folder(tmp_path / "src", "abc"), tmp_path / "ds")
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), str(tmp_path / "ds"))
    try:
        info, _ = convert(source, tmp_path / "again", shards=2)  # re-sharded
    finally:
        source.close()
    assert info.features["label"].class_names == ("a", "b", "c")
    assert read_dataset(tmp_path / "again")["label"].tolist() == [0, 1, 2]


def test_a_folder_of_split_folders_is_refused_not_labelled_by_split(tmp_path) -> None:
    # root/{train,val}/<class>/<image>: the splits would have become the classes
    folder(tmp_path / "root" / "train", "ab")
    folder(tmp_path / "root" / "val", "a")
    root = tmp_path / "root"
    with pytest.raises(ConversionError) as err:
        convert(str(root), tmp_path / "out")
    assert str(err.value) == (
        f"the image folder '{root}' holds only the split folder(s) 'train', 'val', with class "
        "folders inside: its images would be labelled by split, not by class. Convert each split "
        f"on its own: datarax convert {root}/train DST_train; then datarax convert {root}/val "
        "DST_val --classes-from DST_train (--classes-from keeps the same labels where a split "
        "lacks a class).")
    assert not os.path.exists(tmp_path / "out")
    # ImageNet's raw val/ holds its images without classes: still a folder of splits
    (root / "val" / "0.png").write_bytes(png(5))
    with pytest.raises(ConversionError, match="holds only the split folder"):
        convert(str(root), tmp_path / "out")
    # classes that happen to bear split names, their images their own, stay classes
    (root / "train" / "0.png").write_bytes(png(6))
    info, _ = convert(str(root), tmp_path / "classes")
    assert info.features["label"].class_names == ("train", "val")
    assert read_dataset(tmp_path / "classes")["label"].tolist() == [0, 0, 0, 1, 1]


def test_an_empty_class_folder_keeps_its_label_and_is_noted(tmp_path) -> None:
    src = folder(tmp_path / "src", "ac")
    os.makedirs(tmp_path / "src" / "b")  # no image: torchvision's ImageFolder raises
    info, _ = convert(src, tmp_path / "out")
    assert info.features["label"].class_names == ("a", "b", "c")
    assert info.extra["empty_classes"] == ["b"]
    assert read_dataset(tmp_path / "out")["label"].tolist() == [0, 2]
    info, _ = convert(folder(tmp_path / "full", "ab"), tmp_path / "full_ds")
    assert "empty_classes" not in info.extra


def test_files_of_a_class_that_are_no_images_are_counted_by_suffix(tmp_path) -> None:
    # left out as torchvision's ImageFolder leaves them out, but not in silence: an
    # iPhone's .HEIC photos would otherwise go missing unnoticed
    src = folder(tmp_path / "src", "ab")
    for name in ("1.HEIC", "2.heic", "notes.txt", "README", ".DS_Store", "._0.png"):
        (tmp_path / "src" / "b" / name).write_bytes(b"x")
    info, _ = convert(src, tmp_path / "out")
    assert info.num_records == 2
    assert info.extra["files_left_out"] == {"(no suffix)": 1, ".heic": 2, ".txt": 1}


def test_a_table_or_npy_file_inside_an_image_folder_is_refused_not_converted_instead(tmp_path):
    # one stray info.json (or a metadata.csv at the root, an embeddings .npy) made convert
    # read the folder as table files: 1 record written, every image left out in silence
    src = folder(tmp_path / "src", "ab")
    (tmp_path / "src" / "a" / "info.json").write_text('{"x": 1}\n')
    (tmp_path / "src" / "metadata.csv").write_text("file_name,label\na/0.png,0\n")
    with pytest.raises(ConversionError) as err:
        convert(src, tmp_path / "out")
    assert str(err.value) == (
        f"'{src}' holds 2 images (such as a/0.png) and also a/info.json, metadata.csv, which "
        "convert reads as data themselves; convert one kind: move those files out to convert "
        "the images (an image folder: SRC/<class>/<image>), or give them as SRC (datarax convert "
        f"'{src}/a/*.json' DST) to convert them. For a Hugging Face imagefolder with metadata: "
        f"load it with datasets.load_dataset('imagefolder', data_dir='{src}'), save_to_disk("
        "FOLDER), and convert FOLDER.")
    os.remove(tmp_path / "src" / "a" / "info.json")
    os.remove(tmp_path / "src" / "metadata.csv")
    np.save(tmp_path / "src" / "b" / "emb.npy", np.zeros(3))
    with pytest.raises(ConversionError, match=r"and also b/emb.npy, which convert reads"):
        convert(src, tmp_path / "out")
    os.remove(tmp_path / "src" / "b" / "emb.npy")
    # a Hugging Face imagefolder: its images beside the metadata file, no classes
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "0.png").write_bytes(png(3))
    (hf / "metadata.jsonl").write_text('{"file_name": "0.png", "text": "a cat"}\n')
    with pytest.raises(ConversionError, match=r"holds 1 image \(such as 0.png\) and also "
                                              r"metadata.jsonl, .* For a Hugging Face imagefolder"):
        convert(str(hf), tmp_path / "out")
    # hidden folders are no input: an editor's settings leave the images as they are
    os.makedirs(tmp_path / "src" / ".vscode")
    (tmp_path / "src" / ".vscode" / "settings.json").write_text("{}\n")
    info, _ = convert(src, tmp_path / "out")
    assert info.num_records == 2 and info.features["label"].class_names == ("a", "b")


def test_a_class_folder_whose_name_is_not_utf8_is_refused_naming_its_bytes(tmp_path) -> None:
    # Linux gives such a name (a Windows zip's latin-1 'café') as 'caf\udce9': it was
    # stored in the metadata as a lone surrogate, which other JSON readers refuse
    src = folder(tmp_path / "src", "a")
    try:
        os.makedirs(os.fsencode(tmp_path / "src") + b"/caf\xe9")
    except OSError:
        pytest.skip("this file system takes UTF-8 names only")
    (tmp_path / "src" / "caf\udce9" / "0.png").write_bytes(png(1))
    with pytest.raises(ConversionError) as err:
        convert(src, tmp_path / "out")
    assert str(err.value).startswith(f"the class folder b'caf\\xe9' of the image folder '{src}' "
                                     "has a name that is not UTF-8")
    assert str(err.value).endswith("rename it, e.g. to 'café' (convmv -f latin1 -t utf8).")


def test_a_bad_file_whose_name_is_not_utf8_is_named_by_its_bytes_in_the_metadata(tmp_path):
    src = folder(tmp_path / "src", "a")
    try:
        with open(os.fsencode(tmp_path / "src" / "a") + b"/bad\xfe.png", "wb") as f:
            f.write(b"not an image")
    except OSError:
        pytest.skip("this file system takes UTF-8 names only")
    info, _ = convert(src, tmp_path / "out", on_error="skip")
    assert info.skipped[0]["error"].startswith(r"row 1 (a/bad\xfe.png), field 'image': ")
    # no lone surrogate ('\udcfe', which JSON readers other than Python's refuse)
    assert "\\udc" not in (tmp_path / "out" / "datarax_dataset.json").read_text()


def test_open_rows_items_lead_each_record_back_to_its_file(tmp_path) -> None:
    """docs/data-in.md: a class's own images, then its subfolders'; record i is row i, or
    with skipped rows the i-th row not skipped."""
    from datarax.dataset import open_rows

    src = tmp_path / "src"
    for i, rel in enumerate(["a/z.png", "a/sub/b.png", "a/sub/deeper/c.png", "a/y y.png",
                             "b/x.png", "b/bad.png"]):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(b"not an image" if "bad" in rel else png(i))
    items = open_rows(str(src)).items
    assert items == [("a/y y.png", 0), ("a/z.png", 0), ("a/sub/b.png", 0),
                     ("a/sub/deeper/c.png", 0), ("b/bad.png", 1),
                     ("b/x.png", 1)]
    info, _ = convert(str(src), tmp_path / "out", on_error="skip")
    assert [s["row"] for s in info.skipped] == [4]
    kept = [row for row in range(len(items)) if row not in {s["row"] for s in info.skipped}]
    first_pixels = read_dataset(tmp_path / "out")["image"][:, 0, 0, 0].tolist()
    names = ["a/z.png", "a/sub/b.png", "a/sub/deeper/c.png", "a/y y.png", "b/x.png"]
    assert [names[p] for p in first_pixels] == [items[row][0] for row in kept]


def test_numbered_class_folders_sort_as_text_unless_class_names_order_them(tmp_path) -> None:
    src = tmp_path / "src"
    for value, name in enumerate(["1", "2", "10"]):
        (src / name).mkdir(parents=True)
        (src / name / "0.png").write_bytes(png(value))
    info, _ = convert(str(src), tmp_path / "text")
    assert info.features["label"].class_names == ("1", "10", "2")
    info, _ = convert(str(src), tmp_path / "numbers", class_names={"label": ["1", "2", "10"]})
    out = read_dataset(tmp_path / "numbers")
    by_label = dict(zip(out["label"].tolist(), out["image"][:, 0, 0, 0].tolist()))
    assert info.features["label"].class_names == ("1", "2", "10") and by_label == {0: 0, 1: 1, 2: 2}

"""An image folder as rows: ``root/<class>/<image>``, one row ``{"image": <file bytes>,
"label": <class index>}`` per image file, classes ``0..k-1`` in sorted folder order.

Example:
    >>> import os, tempfile
    >>> from PIL import Image
    >>> root = tempfile.mkdtemp()
    >>> for name, size in (("cat", (4, 3)), ("dog", (5, 3))):
    ...     os.mkdir(os.path.join(root, name))
    ...     Image.new("RGB", size).save(os.path.join(root, name, "a.png"))
    >>> rows = ImageFolderRows(root)
    >>> rows.classes, [r["label"] for r in rows.iter_rows(0, None)], rows.hints()["image"]
    (['cat', 'dog'], [0, 1], {'image_size': (3, None)})
"""

from __future__ import annotations

import collections
import os
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datarax.dataset.images import (
    HEADER_BYTES,
    ImageSizes,
    alpha_unused,
    file_bytes,
    image_size_and_grey,
)
from datarax.dataset.metadata import METADATA_FILE, PARTIAL_DIR
from datarax.dataset.rows import Rows
from datarax.dataset.splits import SPLIT_NAMES
from datarax.dataset.write_outcome import ConversionError

__all__ = ["IMAGE_SUFFIXES", "ImageFolderRows", "is_class_folder", "split_folders"]

#: the suffixes of image files: torchvision's ImageFolder's, and GIF
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
#: bytes of small files kept by the probe, which read them whole, for the write
KEPT_BYTES = 128 * 2**20
#: folder names of splits (ImageNet's ``val`` too): a root holding only such folders, one
#: of them a folder of class folders, is a folder of splits (:func:`split_folders`)
SPLIT_FOLDERS = (*SPLIT_NAMES, "val", "training", "testing")


def is_class_folder(root: str, name: str) -> bool:
    """Whether ``root/name`` is a class of an image folder: a folder, not hidden, not
    ``__MACOSX`` and not a datarax dataset."""
    path = os.path.join(root, name)
    return os.path.isdir(path) and not name.startswith(".") and name != "__MACOSX" and not (
        os.path.exists(os.path.join(path, METADATA_FILE))
        or os.path.exists(os.path.join(path, PARTIAL_DIR)))


class ImageFolderRows(Rows):
    """Rows ``{"image": <file bytes>, "label": class index}`` of ``root/<class>/<image>``
    (not hidden or dataset folders); images of several sizes get ``None`` dimensions.

    A small file the header probe read whole is kept (up to :data:`KEPT_BYTES` in all) and
    written from those bytes."""

    probes_rows = True

    def __init__(self, root: str) -> None:
        names = os.listdir(root)
        # by their NFC form: macOS stores names decomposed (NFD), Linux composed
        folders = sorted((d for d in names if is_class_folder(root, d)), key=_nfc)
        loose = sorted(f for f in names if f.lower().endswith(IMAGE_SUFFIXES)
                       and not f.startswith(".") and os.path.isfile(os.path.join(root, f)))
        if folders and loose:
            more = f" and {len(loose) - 3} more" if len(loose) > 3 else ""
            raise ConversionError(
                f"the image folder '{root}' holds images beside its class folders "
                f"({', '.join(loose[:3])}{more}), which would belong to no class; move them "
                "into a class folder (root/<class>/<image>), or out of SRC.")
        _refuse_splits(root, folders)
        _refuse_broken_links(root, names)
        for name in folders:  # a class name is stored in the metadata, read by other programs
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raw = os.fsencode(name)
                raise ConversionError(
                    f"the class folder {raw!r} of the image folder '{root}' has a name that is "
                    "not UTF-8 (written on a system of another encoding, e.g. a zip from "
                    "Windows), which the class names of the metadata cannot hold; rename it, "
                    f"e.g. to {raw.decode('latin-1')!r} (convmv -f latin1 -t utf8).") from None
        self.root = root
        #: (path under root, label) of each row, in row order (docs/data-in.md names it)
        self.items: list[tuple[str, int]] = []
        #: files in the class folders left out, not hidden and not images: count by suffix
        self.left_out: collections.Counter[str] = collections.Counter()
        reals = [os.path.realpath(os.path.join(root, name)) for name in folders]
        same = [name for name, real in zip(folders, reals) if reals.count(real) > 1]
        if same:
            raise ConversionError(
                f"the class folders {', '.join(map(repr, same))} of the image folder '{root}' "
                "are one folder (links to it): its images would be in each class, once a label. "
                "Keep one of them, or copy the images where each class must have them.")
        classes = set(reals)
        for label, name in enumerate(folders):
            self.items.extend((path, label) for path in
                              _images_under(root, name, self.left_out, classes))
        if not self.items:
            raise ConversionError(
                f"'{root}' holds no images in class subfolders (root/<class>/<image>, "
                f"suffixes {', '.join(IMAGE_SUFFIXES)}).")
        self.folders = folders  # as the file system names them
        self.classes = [_nfc(name) for name in folders]
        found = {label for _, label in self.items}
        #: the class folders that hold no image (still classes: the labels of the others stay)
        self.empty_classes = [c for label, c in enumerate(self.classes) if label not in found]
        twins = sorted(c for c, n in collections.Counter(self.classes).items() if n > 1)
        if twins:
            raise ConversionError(
                f"the image folder '{root}' has two class folders named '{twins[0]}' (one "
                "composed, one decomposed Unicode: they look the same and would be two classes "
                "of one name); merge them into one folder.")
        self.length = len(self.items)
        self.description = f"the image folder {root}"
        self._probes: list[Any] | None = None
        self._kept: dict[int, bytes] = {}  # row -> its file's bytes, read whole by the probe
        self._kept_bytes = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_kept": {}, "_kept_bytes": 0}  # a process reads its own

    def hints(self) -> dict[str, dict[str, Any]]:
        """The class names, the image size over every file (``None`` where it varies),
        and colour where the first image is grey but others are not (headers only)."""
        hints: dict[str, dict[str, Any]] = {"label": {"class_names": list(self.classes)}}
        sizes = ImageSizes.joined(self._probes if self._probes is not None
                                  else [self.probe(0, self.length)])
        image = sizes.hint()
        if not sizes.heights:  # no image opens: every row is named by the writer
            image["image_size"] = (None, None)
        if alpha_unused(os.path.join(self.root, path) for path, _ in self.items):
            image["drop_alpha"] = True  # no image uses the first one's alpha (a screenshot
            # saved as an opaque RGBA PNG): the field has none, and JPEGs stay as they are
        if image:
            hints["image"] = image
        return hints

    def probe(self, start: int, stop: int) -> ImageSizes:
        """The image sizes of rows ``start..stop-1`` (it stops once nothing later changes
        the hints)."""
        sizes = ImageSizes()
        for row, (path, _) in enumerate(self.items[start:stop], start):
            full = os.path.join(self.root, path)
            try:
                head = file_bytes(full, HEADER_BYTES)
                if len(head) < HEADER_BYTES and self._kept_bytes + len(head) <= KEPT_BYTES:
                    self._kept[row] = head  # the whole file: written from these bytes
                    self._kept_bytes += len(head)
                height, width, grey = image_size_and_grey(full, head)
            except (OSError, ValueError):  # reported with its row when it is written
                continue
            if sizes.add((height,), (width,), (grey,)):
                break
        return sizes

    def use_probes(self, parts: list[Any]) -> None:
        self._probes = list(parts)

    def name_classes(self, class_names: Mapping[str, Sequence[str]]) -> None:
        """Label each class folder by its position in the ``label`` names given (those of
        a train split converted before, say), so a split missing a class keeps the same
        labels; a class folder not among them is refused."""
        names = class_names.get("label")
        if names is None or list(names) == self.classes:
            return
        names = [_nfc(str(n)) for n in names]
        unknown = [c for c in self.classes if c not in names]
        if unknown:
            raise ConversionError(
                f"{self.description} has the class folder(s) {', '.join(map(repr, unknown))}, "
                f"which are not among the class names given for 'label' ({', '.join(names)}); "
                "give every class's name (those of the dataset its labels must match), or move "
                "the folder out of SRC.")
        relabel = [names.index(c) for c in self.classes]
        self.items = [(path, relabel[label]) for path, label in self.items]
        self.classes = names

    def row_name(self, row: int) -> str:
        # a file name that is not UTF-8 shown by its bytes (b'\xfe' as \xfe), not as a lone
        # surrogate, which the metadata's JSON (a skipped row) could not hold for other readers
        path = os.fsencode(self.items[row][0]).decode("utf-8", "backslashreplace")
        return f"row {row} ({path})"

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        stop = self.length if stop is None else stop
        kept = self._kept
        for row, (path, label) in enumerate(self.items[start:stop], start):
            data = kept.pop(row, None) if kept else None
            if data is None:
                full = os.path.join(self.root, path)
                try:
                    data = file_bytes(full)
                except OSError:  # gone, a broken link, not readable: the writer names the row
                    yield {"image": {"bytes": None, "path": full}, "label": label}
                    continue
            else:
                self._kept_bytes -= len(data)
            yield {"image": {"bytes": data}, "label": label}


def split_folders(root: str, folders: Sequence[str] | None = None) -> list[str]:
    """The class folders of ``root`` (``folders`` where given) when they are all splits
    (``train``, ``val`` ...) and one holds subfolders and no image of its own, else ``[]``."""
    if folders is None:
        folders = sorted(d for d in os.listdir(root) if is_class_folder(root, d))
    if not folders or any(name.lower() not in SPLIT_FOLDERS for name in folders):
        return []
    for name in folders:
        entries = os.listdir(os.path.join(root, name))
        if not any(e.lower().endswith(IMAGE_SUFFIXES) for e in entries if not e.startswith(".")) \
                and any(is_class_folder(os.path.join(root, name), e) for e in entries):
            return list(folders)
    return []


def _refuse_splits(root: str, folders: Sequence[str]) -> None:
    """Refuse a ``root`` of split folders (:func:`split_folders`)."""
    if not split_folders(root, folders):
        return
    first = os.path.join(root, folders[0])
    later = "".join(f"; then datarax convert {os.path.join(root, n)} DST_{n} --classes-from "
                    f"DST_{folders[0]}" for n in folders[1:])
    raise ConversionError(
        f"the image folder '{root}' holds only the split folder(s) "
        f"{', '.join(map(repr, folders))}, with class folders inside: its images would be "
        "labelled by split, not by class. "
        f"Convert each split on its own: datarax convert {first} DST_{folders[0]}{later} "
        "(--classes-from keeps the same labels where a split lacks a class).")


def _refuse_broken_links(root: str, names: Sequence[str]) -> None:
    """Refuse a link in ``root`` to nothing: a class folder on a drive not mounted would
    be left out, and the labels of the classes after it would change."""
    for name in sorted(names):
        path = os.path.join(root, name)
        if not name.startswith(".") and os.path.islink(path) and not os.path.exists(path):
            raise ConversionError(
                f"the image folder '{root}' holds the link '{name}' to '{os.readlink(path)}', "
                "which does not exist: were it a class folder (on a drive not mounted), its "
                "images would be left out and the classes after it labelled differently. "
                "Restore or mount its target, or remove the link.")


def _nfc(name: str) -> str:
    """``name`` composed (Unicode NFC), as Linux and Windows store it."""
    return unicodedata.normalize("NFC", name)


def _images_under(root: str, name: str, left_out: collections.Counter[str],
                  classes: set[str]) -> Iterator[str]:
    """The image files in ``root/name`` and its subfolders (links followed, each folder
    once, none into a class folder of ``classes``, real paths), as paths under ``root``,
    sorted by NFC name; hidden ones left out, other files counted in ``left_out`` by their
    suffix."""
    def unlisted(err: OSError) -> None:  # os.walk would leave the folder out in silence
        raise ConversionError(
            f"cannot list the folder '{err.filename}' of the image folder '{root}' "
            f"({type(err).__name__}: {err.strerror}); its images would be left out. Make it "
            "readable, or move it out of SRC.") from err

    own = os.path.realpath(os.path.join(root, name))
    seen = {os.path.realpath(root), own}
    others = tuple(c for c in classes if c != own)  # a link into one: its images are its own
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, name), onerror=unlisted,
                                                followlinks=True):
        kept = []
        for sub in sorted(dirnames, key=_nfc):
            real = os.path.realpath(os.path.join(dirpath, sub))
            if real not in seen and not sub.startswith(".") and not any(  # (.thumbnails)
                    real == c or real.startswith(c + os.sep) for c in others):
                seen.add(real)
                kept.append(sub)
        dirnames[:] = kept
        folder = os.path.relpath(dirpath, root)  # once a folder, not once a file
        for file in sorted(filenames, key=_nfc):
            if file.startswith("."):
                continue
            if file.lower().endswith(IMAGE_SUFFIXES):
                yield os.path.join(folder, file)
            else:
                left_out[os.path.splitext(file)[1].lower() or "(no suffix)"] += 1

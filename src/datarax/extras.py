"""Optional dependencies: import one, or fail naming the ``pip install`` command.

Example:
    >>> require("json", extra="hf", user="HFEagerSource").__name__
    'json'
    >>> require("no_such_package_xyz", extra="hf", user="HFEagerSource")
    Traceback (most recent call last):
    ...
    datarax.core.errors.MissingExtraError: HFEagerSource needs the optional package 'no_such_package_xyz', which is not installed. Install it with: pip install "datarax[hf]"
"""

from __future__ import annotations

import importlib
from types import ModuleType

from datarax.errors import MissingExtraError

#: extra -> what it is for (the extras of pyproject.toml that hold integrations).
EXTRAS = {
    "arrayrecord": "ArrayRecord files",
    "hf": "Hugging Face datasets",
    "tfds": "TensorFlow Datasets",
    "checkpoint": "Orbax checkpointing",
    "image": "images: PNG / JPEG decoding (Pillow, simplejpeg) and image operators (dm-pix)",
    "tokenizers": "text tokenizers (Hugging Face tokenizers)",
    "cli": "the command line's pictures (Pillow, Matplotlib)",
    "metrics": "TensorBoard output of StatsLogger (tensorboardX)",
    "demo": "the training demo (optax, scikit-learn, tqdm)",
    "convert": "writing datasets with datarax convert (array_record, pyarrow, Pillow, tqdm)",
    "beam": "conversion on Apache Beam (datarax.beam)",
    "remote": "reading s3://, gs:// and other fsspec URLs (fsspec, s3fs, gcsfs)",
}


def missing_extra(package: str, *, extra: str, user: str, via: str | None = None) -> MissingExtraError:
    """The error for optional ``package`` (imported by ``via``, if another) missing."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; datarax's extras are {sorted(EXTRAS)}")
    through = f" (imported by '{via}')" if via and via != package else ""
    return MissingExtraError(
        f"{user} needs the optional package '{package}'{through}, which is not installed. "
        f'Install it with: pip install "datarax[{extra}]"'
    )


def require(module: str, *, extra: str, user: str) -> ModuleType:
    """``import module`` for ``user``, or raise :class:`MissingExtraError` naming the
    missing package and ``pip install "datarax[extra]"``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        missing = (err.name or top).split(".")[0]
        raise missing_extra(missing, extra=extra, user=user, via=top) from err

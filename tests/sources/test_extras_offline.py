"""Optional extras: one MissingExtraError naming the pip command; TFDS preparing a catalog
dataset offline says "offline" (no network is used: connections are refused here)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from datarax.core.errors import DataraxError, MissingExtraError
from datarax.core.extras import missing_extra, require


def test_missing_extra_error_is_a_datarax_error_and_an_import_error():
    err = missing_extra("datasets", extra="hf", user="HFEagerSource")
    assert isinstance(err, DataraxError) and isinstance(err, ImportError)
    assert str(err) == (
        "HFEagerSource needs the optional package 'datasets', which is not installed. "
        'Install it with: pip install "datarax[hf]"'
    )
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        missing_extra("x", extra="nope", user="X")


def test_a_package_missing_below_the_optional_one_is_named(tmp_path, monkeypatch):
    (tmp_path / "needs_missing_dep.py").write_text("import no_such_dep_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtraError) as err:
        require("needs_missing_dep", extra="tfds", user="TFDSEagerSource")
    assert str(err.value) == (
        "TFDSEagerSource needs the optional package 'no_such_dep_xyz' (imported by "
        "'needs_missing_dep'), which is not installed. Install it with: pip install "
        '"datarax[tfds]"'
    )


def test_without_the_optional_packages_the_core_imports_and_each_user_names_its_extra(
        tmp_path):
    path = tmp_path / "data.array_record"
    path.write_bytes(b"")
    code = textwrap.dedent(  # one fresh process, the packages as if not installed
        f"""
        import sys
        for name in ("orbax", "array_record", "datasets", "tensorflow_datasets"):
            sys.modules[name] = None
        import datarax.sources
        print(datarax.sources.HFStreamingSource.__name__)  # the core import needs neither
        from datarax.core.errors import MissingExtraError
        try:
            import datarax.checkpoint
        except MissingExtraError as err:
            print(err)
        from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
        try:
            ArrayRecordSourceModule(ArrayRecordSourceConfig(), {str(path)!r})
        except MissingExtraError as err:
            print(err)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines() == [
        "HFStreamingSource",
        "datarax.checkpoint needs the optional package 'orbax', which is not installed. "
        'Install it with: pip install "datarax[checkpoint]"',
        "ArrayRecordSourceModule needs the optional package 'array_record', which is not "
        'installed. Install it with: pip install "datarax[arrayrecord]"',
    ], out.stderr


def test_every_extra_the_code_names_is_known_and_installable():
    """Each ``require(..., extra=X)`` / ``missing_extra(..., extra=X)`` in datarax names an
    extra that core.extras knows (else the user got "unknown extra" instead of the pip
    command) and that pyproject.toml defines; the ``all`` extra pulls every one."""
    import re
    import tomllib
    from pathlib import Path

    from datarax.core.extras import EXTRAS

    root = Path(__file__).resolve().parents[2]
    named = set()
    for path in (root / "src" / "datarax").rglob("*.py"):
        named |= set(re.findall(r'extra="(\w+)"', path.read_text(encoding="utf-8")))
    named.discard("x")  # the placeholder in docstrings
    assert named - set(EXTRAS) == set(), "extras named in the code but unknown to core.extras"
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) - set(extras) == set(), "core.extras names extras pyproject lacks"
    pulled = set()
    for spec in extras["all"] + extras["data"]:
        pulled |= set(re.findall(r"\w+", spec.split("[", 1)[1])) if "[" in spec else set()
    assert set(EXTRAS) - pulled == set(), "extras the all extra does not pull"


def test_each_optional_import_is_installed_by_the_extra_it_names():
    """``require("pkg.mod", extra=X)`` tells the user to ``pip install "datarax[X]"``: X
    (with the extras it pulls) must list the distribution that provides ``pkg`` (found in
    this environment, where every extra is installed), else that install does not help."""
    import importlib.metadata
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def distributions(extra: str) -> set[str]:
        names = set()
        for spec in extras[extra]:
            name = re.split(r"[<>=!~; ]", spec)[0]
            if name.startswith("datarax["):
                for inner in name[len("datarax["):-1].split(","):
                    names |= distributions(inner)
            else:
                names.add(re.sub(r"[-_.]+", "-", name.split("[")[0]).lower())
        return names

    providers = importlib.metadata.packages_distributions()
    uses = set()
    for path in (root / "src" / "datarax").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        uses |= {(m, x, path.name) for m, x in
                 re.findall(r'require\(\s*"([\w.]+)",\s*extra="(\w+)"', text)}
    uses = {u for u in uses if u[0].split(".")[0] not in sys.stdlib_module_names
            and not u[0].startswith("no_such")}  # the docstrings' examples
    assert len(uses) >= 20, sorted(uses)  # the scan finds the requires
    wrong = []
    for module, extra, where in sorted(uses):
        top = module.split(".")[0]
        provided_by = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(top, [])}
        assert provided_by, f"{top} (required in {where}) is not installed here"
        if not provided_by & distributions(extra):
            wrong.append(f"{where}: {module} from extra {extra!r}, which lacks {provided_by}")
    assert wrong == []


def test_an_image_operator_without_dm_pix_names_the_image_extra(monkeypatch):
    import numpy as np

    from datarax.operators.image import GaussianBlur
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    monkeypatch.setitem(sys.modules, "dm_pix", None)  # not installed
    images = MemorySource(MemorySourceConfig(), {"image": np.zeros((2, 4, 4, 3), np.float32)})
    with pytest.raises(MissingExtraError) as err:
        next(iter(Pipeline(source=images, stages=[GaussianBlur(sigma=1.0)], batch_size=2)))
    assert str(err.value) == (
        "datarax.operators.image needs the optional package 'dm_pix', which is not installed. "
        'Install it with: pip install "datarax[image]"'
    )


@pytest.mark.parametrize("extra", ["tokenizers", "cli", "metrics", "image", "demo"])
def test_the_newer_extras_raise_the_same_error(extra):
    with pytest.raises(MissingExtraError) as err:
        require("no_such_package_xyz", extra=extra, user="X")
    assert str(err.value) == (
        "X needs the optional package 'no_such_package_xyz', which is not installed. "
        f'Install it with: pip install "datarax[{extra}]"'
    )


def test_without_pillow_image_fields_name_the_image_extra_not_a_bad_record(tmp_path):
    """A dataset of PNG fields read where Pillow is not installed: the missing package and
    its extra, from decode_images and from the default decode, even with on_error='skip'
    (it is no record's fault, so none is skipped and no file is blamed)."""
    pytest.importorskip("array_record")
    image = pytest.importorskip("PIL.Image")
    import io

    import numpy as np

    from datarax.dataset import write_dataset

    pngs = []
    for shade in (0, 90, 180):
        out = io.BytesIO()
        image.fromarray(np.full((6, 5, 3), shade, np.uint8)).save(out, "PNG")
        pngs.append(out.getvalue())
    write_dataset([{"image": png} for png in pngs], tmp_path / "ds")
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["PIL"] = None  # Pillow not installed
        from datarax import ArrayRecordSourceConfig, ArrayRecordSourceModule, Pipeline, decode_images
        from datarax.core.errors import MissingExtraError
        try:
            decode_images(resize=(4, 4))
        except MissingExtraError as err:
            print(err)
        for on_error in ("raise", "skip"):
            try:
                source = ArrayRecordSourceModule(ArrayRecordSourceConfig(on_error=on_error),
                                                 {str(tmp_path / "ds")!r})
                print(len([b for b in Pipeline(source=source, stages=[], batch_size=2)]))
            except MissingExtraError as err:
                print(err)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    reading = ("reading or writing PNG / JPEG images needs the optional package 'PIL', which "
               'is not installed. Install it with: pip install "datarax[image]"')
    assert out.stdout.strip().splitlines() == [
        "decode_images needs the optional package 'PIL', which is not installed. Install it "
        'with: pip install "datarax[image]"',
        reading,
        reading,
    ], out.stderr[-3000:]


# ------------------------------------------------------------------- TFDS offline
tfds = pytest.importorskip("tensorflow_datasets")

from datarax.sources import TFDSEagerConfig, TFDSEagerSource, TFDSStreamingConfig  # noqa: E402
from datarax.sources import TFDSStreamingSource  # noqa: E402


@pytest.fixture
def no_network(monkeypatch):
    """Every connection attempt fails as on a machine without network."""

    def refuse(*args, **kwargs):
        raise OSError("[Errno 101] Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_preparing_a_catalog_dataset_offline_says_offline(tmp_path, no_network):
    # refused before TFDS's download began (which would retry for minutes first)
    with pytest.raises(DataraxError) as err:
        TFDSEagerSource(TFDSEagerConfig(name="mnist", data_dir=str(tmp_path)))
    assert str(err.value) == (
        f"TFDSEagerSource: dataset 'mnist' is not prepared in '{tmp_path}', and its download "
        "server storage.googleapis.com cannot be reached (offline): OSError: [Errno 101] "
        "Network is unreachable. Connect to the network, or prepare it on a machine that has "
        "one (tfds.builder('mnist').download_and_prepare(file_format='array_record')) and "
        "copy its data_dir here (pass data_dir=); download=False reads only what is prepared."
    )
    with pytest.raises(DataraxError, match="TFDSStreamingSource: dataset 'mnist' is not prepared"):
        TFDSStreamingSource(TFDSStreamingConfig(name="mnist", data_dir=str(tmp_path)))


def test_a_network_failure_during_the_download_says_offline(tmp_path, no_network, monkeypatch):
    """Past the up-front check (as if the server answered it), TFDS itself downloads:
    everything preparing needs imports (the tfds extra installs it), and requests'
    error after TFDS's retries is reworded as offline."""
    from tensorflow_datasets.core.download import downloader

    from datarax.sources.tfds import opening

    monkeypatch.setattr(opening, "check_download_reachable", lambda *a: None)
    monkeypatch.setattr(downloader, "MAX_RETRIES", 0)  # fail fast instead of backing off
    with pytest.raises(DataraxError) as err:
        TFDSEagerSource(TFDSEagerConfig(name="mnist", data_dir=str(tmp_path)))
    message = str(err.value)
    assert not isinstance(err.value, MissingExtraError), message
    assert message.startswith(
        f"TFDSEagerSource: dataset 'mnist' is not prepared in '{tmp_path}', and its download "
        "server cannot be reached (offline): "
    )
    assert message.endswith("download=False reads only what is prepared.")


def test_a_package_tfds_imports_lazily_is_a_missing_extra(tmp_path):
    """What a tfds extra without importlib_resources did: fail when preparing, before any
    download. Run in a fresh process, where the package was never imported."""
    code = textwrap.dedent(
        f"""
        import socket, sys
        sys.modules["importlib_resources"] = None  # not installed
        def refuse(*args, **kwargs):
            raise OSError("[Errno 101] Network is unreachable")
        socket.create_connection = socket.getaddrinfo = socket.socket.connect = refuse
        from tensorflow_datasets.core.download import downloader
        downloader.MAX_RETRIES = 0
        from datarax.core.errors import MissingExtraError
        from datarax.sources import TFDSEagerConfig, TFDSEagerSource
        from datarax.sources.tfds import opening
        opening.check_download_reachable = lambda *a: None
        try:
            TFDSEagerSource(TFDSEagerConfig(name="mnist", data_dir={str(tmp_path)!r}))
        except MissingExtraError as err:
            print(err)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1:] == [
        "TFDSEagerSource needs the optional package 'importlib_resources' (imported by "
        "'tensorflow_datasets'), which is not installed. Install it with: pip install "
        '"datarax[tfds]"'
    ], out.stderr[-3000:]

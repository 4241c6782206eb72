"""Downloading a TFDS dataset that is not prepared yet, and saying "offline" when the
network is not there: rather than let TFDS retry for minutes, one connection to the
dataset's download server is tried first (:func:`check_download_reachable`), and a
network failure during the download is reworded the same way (:func:`offline_error`).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlparse

from datarax.core.errors import DataraxError
from datarax.errors import error_chain
from datarax.sources.tfds.config import TFDSConfig

#: seconds one connection attempt to a download server may take.
CONNECT_TIMEOUT = 10.0


def offline_error(config: TFDSConfig, where: str, host: str | None, cause: BaseException) -> DataraxError:
    """The error for a dataset that must be downloaded while ``host`` cannot be reached."""
    place = repr(config.data_dir) if config.data_dir else "TFDS's default data_dir"
    server = f"its download server {host}" if host else "its download server"
    return DataraxError(
        f"{where}: dataset {config.name!r} is not prepared in {place}, and {server} cannot "
        f"be reached (offline): {type(cause).__name__}: {cause}. Connect to the network, "
        f"or prepare it on a machine that has one (tfds.builder({config.name!r})."
        "download_and_prepare(file_format='array_record')) and copy its data_dir here "
        "(pass data_dir=); download=False reads only what is prepared."
    )


def is_network_error(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) is a failure to reach a server."""
    for current in error_chain(err):
        module = type(current).__module__.split(".")[0]
        if isinstance(current, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        if module in ("requests", "urllib3") and type(current).__name__ in (
            "ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "MaxRetryError",
            "NewConnectionError", "NameResolutionError",
        ):
            return True
    return False


def check_download_reachable(builder: Any, config: TFDSConfig, where: str) -> None:
    """Raise :func:`offline_error` now when ``builder`` must download and cannot connect.

    Nothing is checked when downloads are off, the dataset is prepared, it declares no
    download URLs (a local builder), or its ``download_and_prepare`` is not TFDS's own
    (``tfds.testing.mock_data`` replaces it: a mocked download needs no network).
    """
    if not config.download or _is_prepared(builder) or not _downloads_for_real(builder):
        return
    try:
        urls = list(builder.url_infos or {})
    except Exception:  # noqa: BLE001 - no declared URLs: nothing to check up front
        return
    targets = sorted({_host_port(u) for u in urls} - {None})
    if not targets:
        return
    host, port = targets[0]
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as err:
        raise offline_error(config, where, host, err) from err


def _downloads_for_real(builder: Any) -> bool:
    method = getattr(type(builder), "download_and_prepare", None)
    return getattr(method, "__module__", "").startswith("tensorflow_datasets.core")


def _is_prepared(builder: Any) -> bool:
    try:
        return bool(builder.is_prepared())
    except Exception:  # noqa: BLE001 - unknown: let TFDS decide
        return True


def _host_port(url: str) -> tuple[str, int] | None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)

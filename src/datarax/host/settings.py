"""Settings read one way, given as arguments or as ``DATARAX_*`` environment variables:
sizes (``"512M"``), folders (``~`` expanded, made absolute), on/off switches and seconds.
A bad value is a ConfigError naming the setting and the value. Every variable, what it
takes and its default: docs/reliability.md, "Environment variables".

Example:
    >>> parse_bytes("512M") == 512 << 20, read_size("2K", "max_bytes", least=1)
    (True, 2048)
    >>> env_size("EXAMPLE_UNSET_SIZE", 7, least=0), switched_on("EXAMPLE_UNSET_SWITCH")
    (7, True)
"""

from __future__ import annotations

import os
import re

from datarax.errors import ConfigError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.I)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+://")
_ON = ("", "1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def parse_bytes(text: str | int) -> int:
    """Bytes from ``"20G"``, ``"512MiB"``, ``"1.5T"`` or a plain number (K, M, G, T count
    in 1024s).

    Example:
        >>> parse_bytes("1.5K"), parse_bytes(10)
        (1536, 10)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _SIZE.match(str(text))
    unit = _UNITS[match.group(2).upper()] if match else 1
    if not match or unit == 1 and not float(match.group(1)).is_integer():  # 1.5 bytes
        raise ConfigError(f"cannot read {text!r} as a size; write e.g. 20G, 512M or 1000000.")
    return int(float(match.group(1)) * unit)


def read_size(value: str | int, setting: str, *, least: int, hint: str = "") -> int:
    """``value`` as :func:`parse_bytes` reads it, at least ``least`` bytes; else a
    ConfigError naming ``setting`` and the value (``hint`` ends it)."""
    negative = isinstance(value, str) and value.strip().startswith("-")
    if not negative:
        try:
            size = parse_bytes(value)
        except ConfigError as err:
            raise ConfigError(f"{setting}: {err}") from err
    if negative or size < least:
        bound = "> 0" if least == 1 else f">= {least}"
        raise ConfigError(f"{setting} must be {bound}, got {value!r}{hint}.")
    return size


def env_size(name: str, default: int, *, least: int, hint: str = "") -> int:
    """The size the variable ``name`` gives (:func:`read_size`); ``default`` when it is
    unset or blank."""
    given = os.environ.get(name, "")
    return read_size(given, name, least=least, hint=hint) if given.strip() else default


def env_folder(name: str) -> str | None:
    """The folder the variable ``name`` names, ``~`` expanded and made absolute (a relative
    path is taken from the working folder); None when it is unset or blank."""
    given = os.environ.get(name, "")
    if not given.strip():
        return None
    if _URL.match(given):
        raise ConfigError(f"{name}={given!r} is a URL, but it names a local folder: point it at "
                          "a folder on a local disk (a leading ~ is expanded).")
    return os.path.abspath(os.path.expanduser(given))


def switched_on(name: str) -> bool:
    """Whether the on/off variable ``name`` is on: unset, empty, ``1``, ``true``, ``on`` or
    ``yes`` is on; ``0``, ``false``, ``off`` or ``no`` is off; anything else a ConfigError."""
    given = os.environ.get(name, "")
    word = given.strip().lower()
    if word in _ON:
        return True
    if word in _OFF:
        return False
    raise ConfigError(f"{name}={given!r} is neither on nor off: set it to 0 (also false, off, "
                      "no) to turn it off, or 1 (or leave it unset) to keep it on.")


def env_seconds(name: str, default: float, meaning: str) -> float:
    """The seconds the variable ``name`` gives (``"120"``, ``"2.5s"``; 0 or more, finite);
    ``default`` when it is unset or blank. ``meaning`` says what to set it to."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{name}={text!r} is not a number of seconds; set it to {meaning}, "
                          f"e.g. {name}=120 (default {default:g}).")
    return value

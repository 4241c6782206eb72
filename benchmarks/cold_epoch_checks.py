"""What a download's SHA-256 check and ``fsync`` cost a global shuffle's epoch 0 from a
bucket: :mod:`benchmarks.cold_epoch_timeline` in fresh processes, alternating the code as
it is with a variant that leaves them out (measurement only: a variant that skips them
gives up the cache's guarantees, see docs/object-storage.md "Verified" and "Atomic").

Variants: ``as_is``; ``no_sha256`` (downloads not checked against the dataset's SHA-256);
``no_fsync`` (a download renamed into the cache without ``fsync``); ``neither``.

Run: ``python -m benchmarks.cold_epoch_checks --variants as_is,neither --rounds 4
[--json X]`` (one line per run: the load at its start and its phases, seconds).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from benchmarks import timeline_variants

VARIANTS = ("as_is", "no_sha256", "no_fsync", "neither")


def _leave_out(variant: str) -> None:
    """Patch this process's datarax so its downloads skip what ``variant`` names."""
    from datarax.storage import cache, fetch

    if variant in ("no_fsync", "neither"):
        class _NoFsync:  # ``os`` as the cache module sees it, but ``fsync``
            def __getattr__(self, name: str) -> Any:
                return getattr(os, name)

            @staticmethod
            def fsync(fd: int) -> None:
                del fd

        cache.os = _NoFsync()  # type: ignore[assignment]
    if variant in ("no_sha256", "neither"):
        download = fetch.Fetcher.download

        def unchecked(self: fetch.Fetcher, obj: Any, part: str) -> None:
            download(self, dataclasses.replace(obj, sha256=None), part)

        fetch.Fetcher.download = unchecked  # type: ignore[method-assign]


def _line(run: dict[str, Any]) -> str:
    return (f"epoch 0 ends {run['epoch_end_s']:.2f}  cpu {run['cpu_s']:.2f}")


def main() -> None:
    timeline_variants.main("benchmarks.cold_epoch_checks", __doc__, VARIANTS, "as_is,neither", _leave_out, _line)


if __name__ == "__main__":
    main()

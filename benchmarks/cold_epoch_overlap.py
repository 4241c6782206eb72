"""Whether a global shuffle's epoch 0 from a bucket gains by downloading beside its first
batch: :mod:`benchmarks.cold_epoch_timeline` in fresh processes, alternating the code as
it is (whole-file downloads held back until the first batch's ranged read returns:
``storage/read_ahead_hold.py``) with variants that start them sooner (measurement only:
each patches the child process's datarax; none is the library's behaviour).

Variants:

- ``as_is``: the hold as shipped.
- ``no_hold``: no hold; the 16 read-ahead downloads start with the plan, beside the first
  batch's ranged requests.
- ``few_beside``: ``FEW`` downloads beside the first batch, widening to 16 once its read
  returns; the reads after it wait for the downloads (as in ``as_is``, where the second
  one-batch read is declined by the request budget: without this, a few files cached
  early let it go by range, ~220 more requests beside the downloads).
- ``at_sent``: the hold ends once every file of the first read has its chunk requests
  handed to the event loop (its last footer decoded), not once their answers are in.

Run: ``python -m benchmarks.cold_epoch_overlap --variants as_is,no_hold,few_beside,at_sent
--rounds 3 [--json X]`` (one line per run: the load at its start, the phases in seconds
from the build's start, the process's CPU seconds).
"""

from __future__ import annotations

import threading
from typing import Any

from benchmarks import timeline_variants

VARIANTS = ("as_is", "no_hold", "few_beside", "at_sent")
FEW = 3  # downloads beside the first batch in ``few_beside``


def _start_sooner(variant: str) -> None:
    """Patch this process's datarax so read-ahead starts as ``variant`` says."""
    from datarax.storage import head_start, read_ahead_hold

    hold = read_ahead_hold.ReadAheadHold
    if variant == "no_hold":
        hold.hold_read_ahead = lambda self, seconds=read_ahead_hold.HOLD_S: None  # type: ignore[method-assign]
    elif variant == "few_beside":
        from datarax.storage.shards import RemoteShards

        checking = threading.local()  # a download's own check (it counts itself)

        def held(self: Any) -> bool:  # FEW downloads allowed while held
            mine, checking.on = getattr(checking, "on", False), False
            return self._hold_timer is not None and len(self._prefetching) > FEW - 1 + mine

        prefetch = RemoteShards._prefetch

        def prefetch_counted(self: Any, i: int, future: Any) -> None:
            checking.on = True  # its first question is whether it may start
            try:
                prefetch(self, i, future)
            finally:
                checking.on = False

        hold._read_ahead_held = held  # type: ignore[method-assign]
        RemoteShards._prefetch = prefetch_counted  # type: ignore[method-assign]
        read = head_start.HeadStart.read

        def first_only(self: head_start.HeadStart, wanted: Any) -> dict[int, list[bytes]]:
            out = read(self, wanted)
            with self._lock:
                self._declined = True  # the later reads wait for the downloads
            return out

        head_start.HeadStart.read = first_only  # type: ignore[method-assign]
    elif variant == "at_sent":
        pipelined, plan = head_start.HeadStart._read_pipelined, head_start.HeadStart._plan
        count: dict[str, int] = {}

        def read_pipelined(self: head_start.HeadStart, todo: list[int], wanted: Any) -> Any:
            count["files"], count["planned"] = len({self._file_of(u) for u in todo}), 0
            return pipelined(self, todo, wanted)

        def planned(self: head_start.HeadStart, f: int, reader: Any, units: list[int],
                    wanted: Any) -> Any:
            out = plan(self, f, reader, units, wanted)
            count["planned"] = count.get("planned", 0) + 1
            if count["planned"] == count.get("files"):  # its follow-up is sent next
                threading.Timer(0.0, self.shards.release_read_ahead).start()
            return out

        head_start.HeadStart._read_pipelined = read_pipelined  # type: ignore[method-assign]
        head_start.HeadStart._plan = planned  # type: ignore[method-assign]


def _line(run: dict[str, Any]) -> str:
    return (f"first download {run['first_download_start_s']:.2f}  last download "
        f"{run['last_download_end_s']:.2f}  epoch 0 ends {run['epoch_end_s']:.2f}  "
        f"cpu {run['cpu_s']:.2f}")


def main() -> None:
    timeline_variants.main("benchmarks.cold_epoch_overlap", __doc__, VARIANTS, "as_is,no_hold,few_beside,at_sent", _start_sooner, _line)


if __name__ == "__main__":
    main()

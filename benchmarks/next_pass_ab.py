"""The next epoch's pass started ahead or not: W1 in ``for batch in pipeline``, back to back.

``python -m benchmarks.next_pass_ab [--records N] [--rounds R] [--json out.json]``

W1 (:mod:`benchmarks.on_chip`'s pipeline and plain jits) at batch 256 and 1024 in one
process, on the loop's-thread path (``WORKER_BACKENDS`` emptied, as on a TPU or GPU),
the variants alternating round after round: the ``for`` loop with the next epoch's pass
started ahead (``CompiledDriver.next_pass_ahead``, the default) and without, the
``for`` loop with ``prefetch=0``, and the plain jits (a fixed permutation table, the
Feistel cipher). Each measure: ``steps`` back-to-back calls waited for once at the end;
the report gives per variant the median and the fastest over rounds, and best plain
jit ÷ variant (≥ 1: datarax as fast). ``host_per_epoch``: over ``epochs`` epochs with
nothing waited for, each epoch's host time in ``next()`` (its ``iter()`` and the
``StopIteration`` included) less its batches × the median ``next()``: what the epoch
switch costs the loop's thread. ``same_batches``: three epochs of each ``for`` variant
compared bit for bit. ``--profile-epochs K``: a cProfile of K epochs of each ``for``
loop, the top functions per epoch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

import datarax.pipeline.driver_compiled as driver_compiled
from benchmarks.dispatch_ahead_ab import _measure
from benchmarks.on_chip import _endless, _w1_floor, _w1_pipeline


def _set(ahead: bool) -> None:
    driver_compiled.CompiledDriver.next_pass_ahead = ahead


def _variants(images: np.ndarray, batch: int) -> dict[str, tuple[Any, bool]]:
    """name -> (a function giving the next batch, next_pass_ahead it runs under)."""
    made: dict[str, tuple[Any, bool]] = {}
    for name, ahead in (("for_next_pass", True), ("for_without", False)):
        it = _endless(lambda: _w1_pipeline(images, batch, True))
        made[name] = (lambda it=it: next(it), ahead)
    inline = _endless(lambda: _w1_pipeline(images, batch, True, prefetch=0))
    made["for_prefetch0"] = (lambda: next(inline), True)
    made["plain_jit"] = (_w1_floor(images, batch, True), True)
    made["plain_jit_feistel"] = (_w1_floor(images, batch, True, feistel=True), True)
    return made


def _same_batches(images: np.ndarray, batch: int, epochs: int = 3) -> bool:
    served = []
    for ahead, prefetch in ((True, 2), (False, 2), (True, 0)):
        _set(ahead)
        pipeline = _w1_pipeline(images, batch, True, prefetch=prefetch)
        served.append([np.asarray(b["image"]).tobytes() + np.asarray(b["label"]).tobytes()
                       for _ in range(epochs) for b in pipeline])
    _set(True)
    return served[0] == served[1] == served[2]


def _host_per_epoch(images: np.ndarray, batch: int, ahead: bool, epochs: int) -> dict[str, Any]:
    """Per epoch, host ms in ``next()`` beyond its batches × the median ``next()``."""
    _set(ahead)
    pipeline = _w1_pipeline(images, batch, True)
    jax.block_until_ready([b for _ in range(2) for b in pipeline])  # compiled, warm
    extra, medians, kept = [], [], []
    for _ in range(epochs):
        calls, it = [], None
        began = time.perf_counter()
        it = iter(pipeline)
        while True:
            try:
                kept.append(next(it))
            except StopIteration:
                calls.append(time.perf_counter() - began)
                break
            calls.append(time.perf_counter() - began)
            began = time.perf_counter()
        median = statistics.median(calls)
        medians.append(1000 * median)
        extra.append(1000 * (sum(calls) - median * (len(calls) - 1)))
        if len(kept) > 64:
            jax.block_until_ready(kept)
            kept.clear()
    jax.block_until_ready(kept)
    _set(True)
    return {"extra_ms_median": statistics.median(extra), "extra_ms_all": [round(e, 3) for e in extra],
            "next_ms_median": statistics.median(medians)}


def _profile(images: np.ndarray, batch: int, ahead: bool, epochs: int) -> dict[str, Any]:
    """cProfile of ``epochs`` epochs of the ``for`` loop (nothing waited for but every 64
    batches): the top functions by cumulative and by own time, in us per epoch."""
    import cProfile
    import pstats

    _set(ahead)
    pipeline = _w1_pipeline(images, batch, True)
    jax.block_until_ready([b for _ in range(2) for b in pipeline])
    kept: list[Any] = []
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(epochs):
        for b in pipeline:
            kept.append(b)
            if len(kept) > 64:
                jax.block_until_ready(kept)
                kept.clear()
    profile.disable()
    jax.block_until_ready(kept)
    _set(True)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = [(v[3], v[2], v[1], f"{Path(k[0]).name}:{k[1]}({k[2]})") for k, v in stats.items()]

    def top(index: int) -> list[dict[str, Any]]:
        return [{"fn": name, "cum_us": round(1e6 * cum / epochs, 1),
                 "own_us": round(1e6 * own / epochs, 1), "calls": round(n / epochs, 2)}
                for cum, own, n, name in sorted(rows, key=lambda r: -r[index])[:45]]

    return {"by_cumulative": top(0), "by_own": top(1)}


def run(records: int, batches: tuple[int, ...], steps: int, rounds: int,
        epochs: int, profile_epochs: int = 0) -> dict[str, Any]:
    driver_compiled.WORKER_BACKENDS = frozenset()  # the loop's-thread path, as on a chip
    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    report: dict[str, Any] = {"backend": jax.default_backend(), "records": records,
                              "steps": steps, "rounds": rounds}
    for batch in batches:
        entry: dict[str, Any] = {"same_batches": _same_batches(images, batch)}
        variants = _variants(images, batch)
        for fn, ahead in variants.values():  # compiled, warm
            _set(ahead)
            jax.block_until_ready(fn())
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                fn, ahead = variants[name]
                _set(ahead)
                samples[name].append(_measure(fn, steps)[0])
        _set(True)
        floor = min(min(samples["plain_jit"]), min(samples["plain_jit_feistel"]))
        floor_med = min(statistics.median(samples["plain_jit"]),
                        statistics.median(samples["plain_jit_feistel"]))
        entry["ms"] = {name: {"median": statistics.median(s), "fastest": min(s),
                              "all": [round(v, 4) for v in s]} for name, s in samples.items()}
        entry["plain_over_variant"] = {
            name: {"fastest": floor / min(s), "median": floor_med / statistics.median(s)}
            for name, s in samples.items() if not name.startswith("plain")}
        entry["host_per_epoch"] = {
            name: _host_per_epoch(images, batch, ahead, epochs)
            for name, ahead in (("next_pass", True), ("without", False))}
        if profile_epochs:
            entry["profile"] = {name: _profile(images, batch, ahead, profile_epochs)
                                for name, ahead in (("next_pass", True), ("without", False))}
        report[str(batch)] = entry
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batches", default="256,1024")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--profile-epochs", type=int, default=0,
                        help="also profile this many epochs of each for loop (cProfile)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(args.records, tuple(int(b) for b in args.batches.split(",")), args.steps,
                 args.rounds, args.epochs, args.profile_epochs)
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()

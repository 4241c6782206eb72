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
compared bit for bit. ``--train-ms T``: also a loop waiting for a train step of about T ms after each batch
(the two ``for`` variants and the step alone). ``--profile-epochs K``: a cProfile of K epochs of each ``for``
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
from benchmarks.dispatch_ahead_ab import _measure, _train_step, _with_train
from benchmarks.on_chip import _endless, _w1_floor, _w1_pipeline


_DEFAULT = driver_compiled.CompiledDriver.next_pass_ahead  # put back after each measure


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


def _host_stages(images: np.ndarray, batch: int) -> Any:
    """W1's pipeline with its stages on the host CPU (``head_rows`` cuts the short last
    batch there): a reference for the batches the chip's step and cut make."""
    from flax import nnx

    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": np.arange(len(images), dtype=np.int32)})
    ops = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
           ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)]
    return Pipeline(source=source, stages=ops, batch_size=batch, rngs=nnx.Rngs(0),
                    stages_on="host")


def _same_batches(images: np.ndarray, batch: int, epochs: int = 3) -> dict[str, bool]:
    served = []
    for ahead, prefetch in ((True, 2), (False, 2), (True, 0)):
        _set(ahead)
        pipeline = _w1_pipeline(images, batch, True, prefetch=prefetch)
        served.append([np.asarray(b["image"]).tobytes() + np.asarray(b["label"]).tobytes()
                       for _ in range(epochs) for b in pipeline])
    _set(_DEFAULT)
    host = _host_stages(images, batch)
    on_host = [np.asarray(b["image"]).tobytes() + np.asarray(b["label"]).tobytes()
               for _ in range(epochs) for b in host]
    return {"ahead_without_prefetch0": served[0] == served[1] == served[2],
            "as_stages_on_host": served[0] == on_host}


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
    _set(_DEFAULT)
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
    _set(_DEFAULT)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = [(v[3], v[2], v[1], f"{Path(k[0]).name}:{k[1]}({k[2]})") for k, v in stats.items()]

    def top(index: int) -> list[dict[str, Any]]:
        return [{"fn": name, "cum_us": round(1e6 * cum / epochs, 1),
                 "own_us": round(1e6 * own / epochs, 1), "calls": round(n / epochs, 2)}
                for cum, own, n, name in sorted(rows, key=lambda r: -r[index])[:45]]

    return {"by_cumulative": top(0), "by_own": top(1)}


def _with_train_ms(images: np.ndarray, batch: int, steps: int, rounds: int,
                   train_ms: float) -> dict[str, Any]:
    """ms per step of a loop that trains on each batch and waits for its step (as one
    reading its loss does), with and without the next pass started ahead, and the train
    step alone: medians over ``rounds`` alternating rounds."""
    train = _train_step(train_ms, batch)
    probe = jax.device_put(np.zeros((batch, 32, 32, 3), np.float32))
    variants: dict[str, tuple[Any, bool]] = {}
    for name, ahead in (("for_next_pass", True), ("for_without", False)):
        it = _endless(lambda: _w1_pipeline(images, batch, True))
        variants[name] = (_with_train(lambda it=it: next(it), train), ahead)
    variants["train_alone"] = (lambda: jax.block_until_ready(train(probe)), True)
    for fn, ahead in variants.values():
        _set(ahead)
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn, ahead = variants[name]
            _set(ahead)
            samples[name].append(_measure(fn, steps)[0])
    _set(_DEFAULT)
    return {name: {"median": statistics.median(v), "all": [round(x, 4) for x in v]}
            for name, v in samples.items()}


def run(records: int, batches: tuple[int, ...], steps: int, rounds: int,
        epochs: int, profile_epochs: int = 0, train_ms: float = 0.0) -> dict[str, Any]:
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
        _set(_DEFAULT)
        floor = min(min(samples["plain_jit"]), min(samples["plain_jit_feistel"]))
        floor_med = min(statistics.median(samples["plain_jit"]),
                        statistics.median(samples["plain_jit_feistel"]))
        entry["ms"] = {name: {"median": statistics.median(s), "fastest": min(s),
                              "all": [round(v, 4) for v in s]} for name, s in samples.items()}
        entry["plain_over_variant"] = {
            name: {"fastest": floor / min(s), "median": floor_med / statistics.median(s)}
            for name, s in samples.items() if not name.startswith("plain")}
        if train_ms > 0:
            entry["with_train_step"] = _with_train_ms(images, batch, steps, rounds, train_ms)
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
    parser.add_argument("--train-ms", type=float, default=0.0,
                        help="also a loop waiting for a train step of about this many ms")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(args.records, tuple(int(b) for b in args.batches.split(",")), args.steps,
                 args.rounds, args.epochs, args.profile_epochs, args.train_ms)
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()

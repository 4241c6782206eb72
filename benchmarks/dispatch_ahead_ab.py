"""Where a compiled pass dispatches ahead: a worker thread or the loop's own thread.

``python -m benchmarks.dispatch_ahead_ab [--records N] [--rounds R] [--json out.json]``

W1 (shuffle, /255, per-record flip; :mod:`benchmarks.on_chip`'s pipeline and plain
jit) at batch 256 and 1024, in one process, the variants alternating round after round
(a loaded machine drifts): the ``for`` loop and ``pipeline.step()`` with the read-ahead
worker (``WORKER_BACKENDS`` holding this backend) and with batches dispatched ahead on
the loop's thread (``WORKER_BACKENDS`` empty), ``prefetch=0``, and the plain jit of the
same work. Each measure: ``steps`` back-to-back calls waited for once at the end, wall
and process CPU time per batch; the report gives per variant the median over rounds and
the ratios plain jit ÷ variant (≥ 1: datarax as fast). ``--train-ms`` > 0 adds, per
batch, a train step (chained matmuls of about that many ms here) that takes the batch
and is waited for, as a loop reading its loss is: the ms per step of each variant
beside the train step alone (``train_alone``) show what the data adds to such a loop.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import jax
import numpy as np

from benchmarks.harness import emit, parser
from benchmarks.on_chip import _endless, _w1_floor, _w1_pipeline

import datarax.pipeline.driver_compiled as driver_compiled


def _measure(fn: Any, steps: int) -> tuple[float, float]:
    """ms per call of ``steps`` back-to-back calls: (wall, this process's CPU)."""
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready([fn() for _ in range(steps)])
    return (1000 * (time.perf_counter() - wall) / steps,
            1000 * (time.process_time() - cpu) / steps)


def _with_train(next_batch: Any, train: Any) -> Any:
    """``next_batch`` followed by a train step on its batch, waited for."""
    def step() -> Any:
        return jax.block_until_ready(train(next_batch()["image"]))
    return step


def _train_step(train_ms: float, batch: int) -> Any:
    """A jitted step of chained matmuls over the batch, about ``train_ms`` ms here."""
    weight = jax.device_put(np.full((256, 256), 1e-3, np.float32))

    def make(depth: int) -> Any:
        @jax.jit
        def train(image: Any) -> Any:
            h = image.reshape(image.shape[0], -1)[:, :256]
            for _ in range(depth):
                h = jax.numpy.tanh(h @ weight)
            return h.sum()
        return train

    probe = jax.device_put(np.zeros((batch, 32, 32, 3), np.float32))
    one = make(1)
    one(probe).block_until_ready()
    began = time.perf_counter()
    for _ in range(5):
        one(probe).block_until_ready()
    each = 1000 * (time.perf_counter() - began) / 5
    train = make(max(1, round(train_ms / max(each, 1e-3))))
    train(probe).block_until_ready()
    return train


def _variants(images: np.ndarray, batch: int) -> dict[str, Any]:
    """name -> (a function giving the next batch, the WORKER_BACKENDS it runs under)."""
    worker = frozenset({jax.default_backend()})
    loop = frozenset()
    made: dict[str, Any] = {}
    for name, backends in (("worker", worker), ("loop", loop)):
        driver_compiled.WORKER_BACKENDS = backends
        it = _endless(lambda: _w1_pipeline(images, batch, True))
        made[f"for_{name}"] = (lambda it=it: next(it), backends)
        pipe = _w1_pipeline(images, batch, True)
        made[f"step_{name}"] = (pipe.step, backends)
    inline = _endless(lambda: _w1_pipeline(images, batch, True, prefetch=0))
    made["for_prefetch0"] = (lambda: next(inline), loop)
    made["plain_jit"] = (_w1_floor(images, batch, True), loop)
    return made


def _same_batches(images: np.ndarray, batch: int, epochs: int = 2) -> bool:
    """Whether the worker, the loop's thread and ``prefetch=0`` serve the same batches
    (``epochs`` epochs each, compared bit for bit)."""
    served, kept = [], driver_compiled.WORKER_BACKENDS
    for backends, prefetch in ((frozenset({jax.default_backend()}), 2), (frozenset(), 2),
                               (frozenset(), 0)):
        driver_compiled.WORKER_BACKENDS = backends
        pipeline = _w1_pipeline(images, batch, True, prefetch=prefetch)
        served.append([np.asarray(b["image"]).tobytes() + np.asarray(b["label"]).tobytes()
                       for _ in range(epochs) for b in pipeline])
    driver_compiled.WORKER_BACKENDS = kept
    return served[0] == served[1] == served[2]


def run(records: int, batches: tuple[int, ...], steps: int, rounds: int,
        train_ms: float = 0.0) -> dict[str, Any]:
    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    kept = driver_compiled.WORKER_BACKENDS  # put back at the end
    report: dict[str, Any] = {"backend": jax.default_backend(), "records": records,
                              "steps": steps, "rounds": rounds, "train_ms": train_ms}
    for batch in batches:
        variants = _variants(images, batch)
        report[f"{batch}_same_batches"] = _same_batches(images, batch)
        if train_ms > 0:
            train = _train_step(train_ms, batch)
            variants = {name: (_with_train(fn, train), backends)
                        for name, (fn, backends) in variants.items()}
            probe = jax.device_put(np.zeros((batch, 32, 32, 3), np.float32))
            variants["train_alone"] = (lambda: jax.block_until_ready(train(probe)), frozenset())
        for fn, backends in variants.values():  # compiled, the worker (if any) started
            driver_compiled.WORKER_BACKENDS = backends
            jax.block_until_ready(fn())
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                fn, backends = variants[name]
                driver_compiled.WORKER_BACKENDS = backends
                samples[name].append(_measure(fn, steps))
        med = {name: {"wall_ms": statistics.median(w for w, _ in s),
                      "cpu_ms": statistics.median(c for _, c in s),
                      "wall_ms_all": [round(w, 3) for w, _ in s]}
               for name, s in samples.items()}
        floor = med["plain_jit"]
        ratios = {name: {"wall": floor["wall_ms"] / m["wall_ms"],
                         "cpu": floor["cpu_ms"] / m["cpu_ms"]}
                  for name, m in med.items() if name != "plain_jit"}
        report[str(batch)] = {"median": med, "plain_jit_over_variant": ratios}
    driver_compiled.WORKER_BACKENDS = kept
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser(__doc__, "json", records=50_000, batches="256,1024", steps=30, rounds=5,
                  train_ms=0.0).parse_args(argv)
    report = run(args.records, tuple(int(b) for b in args.batches.split(",")), args.steps,
                 args.rounds, args.train_ms)
    report["load_average_1m"] = round(__import__("os").getloadavg()[0], 2)
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()

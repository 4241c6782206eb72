"""W1's first batch, split into its parts, beside a plain jit of the same work, in one
fresh process.

``python -m benchmarks.first_batch_profile [--records N] [--batch B] [--first datarax|floor]``
prints JSON. Imports (JAX, Flax, datarax) and opening the device come first and are
reported apart (``imports_s``); then, in the order ``--first`` names (the second gets a
warm runtime: run both orders), each side's parts:

* datarax — ``place_s``: ``MemorySource(...)`` (the columns put on the device);
  ``build_s``: ``Pipeline(..., seed=0)`` (starts compiling the first pass on a thread);
  ``first_next_s``: the first ``next()`` waited for; ``store``: seconds in
  :mod:`datarax.core.compiled_store`'s lowering, compiling, loading and storing.
* floor — ``place_s``: the same arrays put on the device; ``lower_s``: ``jax.jit(step)
  .lower(...)`` (trace + lowering); ``compile_s``: ``.compile()``; ``first_run_s``: the
  first call waited for.

``--effort X``: both sides compiled with XLA's ``exec_time_optimization_effort`` set to
``X`` (-1.0: least optimization, fastest compile; datarax's through its compiled store's
per-backend options, for this process only); ``steady_ms``: each side's next 50 batches,
ms a batch; ``checksum``: a digest of the first batch's bytes (equal across ``--effort``
values: the same values).

``events``: JAX's public compile duration events (``jax.monitoring``: tracing, lowering,
backend compile) summed per side, with their counts (events of datarax's compile-ahead
thread included).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import defaultdict
from typing import Any

import jax
import numpy as np

from benchmarks.harness import time_calls

SIDE = ["imports"]
EVENTS: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))


def _listen(event: str, duration: float, **_: object) -> None:
    EVENTS[SIDE[0]][event.rsplit("/", 1)[-1]].append(duration)


def _timed_store() -> dict[str, float]:
    """Seconds spent in the compiled store's parts (wrapped here, for this run only)."""
    from datarax.core import compiled_store as store

    spent: dict[str, float] = defaultdict(float)
    time_calls(store, "_load", "load_s", spent)
    time_calls(store, "_store", "store_s", spent)
    time_calls(store, "compile_lowered", "lower_to_executable_s", spent)
    return spent


def _checksum(batch: Any) -> str:
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(batch):
        digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()[:16]


def _steady_ms(next_batch: Any, calls: int = 50) -> float:
    began = time.perf_counter()
    jax.block_until_ready([next_batch() for _ in range(calls)])
    return 1000 * (time.perf_counter() - began) / calls


def datarax_side(images: np.ndarray, batch: int, options: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    from datarax.core import compiled_store

    if options:  # this benchmark process only
        compiled_store.COMPILER_OPTIONS[jax.default_backend()] = dict(options)
    spent = _timed_store()
    out: dict[str, Any] = {}
    t = time.perf_counter()
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": np.arange(len(images), dtype=np.int32)})
    jax.block_until_ready(jax.tree.leaves(source.step_inputs()))
    out["place_s"] = time.perf_counter() - t
    t = time.perf_counter()
    stages = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
              ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)]
    pipeline = Pipeline(source=source, stages=stages, batch_size=batch, seed=0)
    out["build_s"] = time.perf_counter() - t
    t = time.perf_counter()
    iterator = iter(pipeline)
    first = jax.block_until_ready(next(iterator))
    out["first_next_s"] = time.perf_counter() - t
    out["first_batch_s"] = out["place_s"] + out["build_s"] + out["first_next_s"]
    out["store"] = dict(spent)
    out["steady_ms"] = _steady_ms(lambda: next(iterator), min(50, len(images) // batch - 2))
    out["checksum"] = _checksum(first)
    return out


def floor_side(images: np.ndarray, batch: int, options: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.on_chip import _w1_floor_parts

    out: dict[str, Any] = {}
    t = time.perf_counter()
    step, args = _w1_floor_parts(images, batch, True)
    jax.block_until_ready(args)
    out["place_s"] = time.perf_counter() - t
    t = time.perf_counter()
    lowered = step.lower(*args, batch)
    out["lower_s"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile(compiler_options=options or None)
    out["compile_s"] = time.perf_counter() - t
    t = time.perf_counter()
    first = jax.block_until_ready(compiled(*args, batch))
    out["first_run_s"] = time.perf_counter() - t
    out["first_batch_s"] = out["place_s"] + out["lower_s"] + out["compile_s"] + out["first_run_s"]
    at = iter(range(2 * batch, 10**9, batch))
    out["steady_ms"] = _steady_ms(lambda: compiled(*args, next(at)), min(50, len(images) // batch - 2))
    out["checksum"] = _checksum(first)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--first", choices=("datarax", "floor"), default="datarax")
    parser.add_argument("--effort", type=float, default=None,
                        help="XLA exec_time_optimization_effort for both sides' compiles")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    jax.monitoring.register_event_duration_secs_listener(_listen)
    import flax.nnx  # noqa: F401 - imports apart from the first batch

    import datarax.pipeline  # noqa: F401
    import datarax.sources  # noqa: F401

    imported = time.perf_counter()
    images = np.random.default_rng(0).integers(0, 256, (args.records, 32, 32, 3), dtype=np.uint8)
    jax.devices()
    options = {} if args.effort is None else {"exec_time_optimization_effort": args.effort}
    report: dict[str, Any] = {"backend": jax.default_backend(), "first": args.first,
                              "compiler_options": options,
                              "flax_datarax_import_s": imported - began,
                              "imports_s": time.perf_counter() - began}
    sides = {"datarax": datarax_side, "floor": floor_side}
    order = [args.first, *(s for s in sides if s != args.first)]
    for side in order:
        SIDE[0] = side
        report[side] = sides[side](images, args.batch, options)
    report["events"] = {side: {e: {"s": round(sum(v), 4), "n": len(v)} for e, v in found.items()}
                        for side, found in EVENTS.items()}
    report["datarax_vs_floor"] = report["datarax"]["first_batch_s"] / report["floor"]["first_batch_s"]
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()

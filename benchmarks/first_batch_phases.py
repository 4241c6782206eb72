"""Where a fresh process's first batch goes, phase by phase, beside a plain ``jax.jit``.

``python -m benchmarks.first_batch_phases [--workloads W1 W10 W7] [--repeats 3]
[--before SRC] [--json PATH]``

Each run is a fresh process (``--worker``) that times, in order: ``import jax``,
``import datarax`` (its pipeline, sources and operators), making the data (not counted),
building the source, building the ``Pipeline``, and its first batch, then one more batch
(a steady one, for scale). Compiling ahead is off (``DATARAX_COMPILE_AHEAD=0``) so that
everything the first batch needs happens inside ``next()``, on whichever thread; within
it, JAX's own events (``jax.monitoring``: tracing to a jaxpr, lowering to StableHLO, XLA's
backend compile) and datarax's store (hashing the program into its key, loading an
executable) are summed by kind. ``other`` is what is left of the first batch.

Cases per workload, run in rotating order, each a fresh process:

* ``cold`` — an empty store of compiled steps;
* ``warm`` — a second process on the store ``cold`` filled (the user's second run);
* ``jax.jit`` — a plain ``jax.jit`` of the same math (``benchmarks/first_batch``'s
  twin; for W10 the kept records are chosen on the host), nothing cached;
* ``before`` (``--before SRC``) — ``cold`` from another source tree.

W1: 50,000 32x32x3 images, /255 + random flip, batch 256. W10: W1 with a filter keeping
the even labels (half) as its first stage. W7: 20,000 96x96x3 images, random resized crop
to 64 + flip + brightness + contrast, batch 256. Reported: medians per case and phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.first_batch import worker_options
from benchmarks.harness import ROOT, rotated, run_worker, time_calls, worker_env

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}


def _pipeline(workload: str, images: Any, labels: Any) -> tuple[Any, float]:
    """The workload's datarax pipeline, and the seconds spent building its source."""
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    start = time.perf_counter()
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                          {"image": images, "label": labels})
    source_s = time.perf_counter() - start
    if workload == "W7":
        from benchmarks.w7_contenders import datarax_stages

        stages = datarax_stages(images.shape[1], fixed=False)
    else:
        from datarax.operators import ElementOperator, FilterOperator

        from benchmarks.contenders.datarax_pipeline import flip, normalize

        stages = [ElementOperator(fn=normalize), ElementOperator(fn=flip, stochastic=True)]
        if workload == "W10":
            stages.insert(0, FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0))
    return Pipeline(source=source, stages=stages, batch_size=256, seed=0), source_s


def worker(case: str, workload: str) -> dict[str, Any]:
    started = time.perf_counter()
    import jax

    out: dict[str, Any] = {"import_jax_s": time.perf_counter() - started}
    spent: dict[str, float] = defaultdict(float)
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: spent.__setitem__(EVENTS[event], spent[EVENTS[event]] + duration)
        if event in EVENTS else None)
    import benchmarks.contenders.jax_floor  # noqa: F401 - the plain twin's step, imported apart
    from benchmarks.first_batch import _data, _plain

    if case != "jax.jit":
        start = time.perf_counter()
        import datarax.operators.image  # noqa: F401
        import datarax.pipeline  # noqa: F401
        import datarax.sources  # noqa: F401
        from datarax.core import compiled_store

        out["import_datarax_s"] = time.perf_counter() - start
        time_calls(compiled_store, "_program_key", "store_key", spent)
        time_calls(compiled_store, "_load", "store_load", spent)
        time_calls(compiled_store, "_store", "store_write", spent)
    import numpy as np

    images = _data("W1" if workload == "W10" else workload)
    labels = np.arange(len(images), dtype=np.int32)
    jax.devices()
    spent.clear()
    start = time.perf_counter()
    if case == "jax.jit":
        kept = images[labels % 2 == 0] if workload == "W10" else images
        first = _plain("W1" if workload == "W10" else workload, kept)
        out["source_s"] = 0.0
        out["build_s"] = time.perf_counter() - start
        phases_at_build = dict(spent)
        start = time.perf_counter()
        batch = jax.block_until_ready(first())
        out["first_next_s"] = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(first())
    else:
        pipeline, out["source_s"] = _pipeline(workload, images, labels)
        out["build_s"] = time.perf_counter() - start - out["source_s"]
        phases_at_build = dict(spent)
        spent.clear()
        iterator = iter(pipeline)
        start = time.perf_counter()
        batch = jax.block_until_ready(next(iterator))["image"]
        out["first_next_s"] = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(next(iterator, None))  # None: a tiny run had one batch
        out["counts"] = compiled_store.counts()
    out["second_next_s"] = time.perf_counter() - start
    out["first_batch_s"] = out["source_s"] + out["build_s"] + out["first_next_s"]
    out["build_phases"] = {k: round(v, 4) for k, v in phases_at_build.items()}
    out["first_next_phases"] = {k: round(v, 4) for k, v in spent.items()}
    out["first_next_phases"]["other"] = round(out["first_next_s"] - sum(
        v for k, v in spent.items() if k in ("trace", "lower", "compile", "store_key",
                                              "store_load", "store_write")), 4)
    import hashlib

    out["sha256"] = hashlib.sha256(np.asarray(batch).tobytes()).hexdigest()[:16]
    return out


def _run(case: str, workload: str, src: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """:func:`worker` in a fresh process importing datarax from ``src``, nothing compiled
    ahead, ``env`` set."""
    environ = worker_env({"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
                          "DATARAX_COMPILE_AHEAD": "0", **(env or {})}, src=src)
    result = run_worker("benchmarks.first_batch_phases", ["--worker", case, "--workload", workload],
                        environ, timeout=900, check=True)
    result.update(case=case, workload=workload, load=round(os.getloadavg()[0], 2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W1", "W10", "W7"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", help="another datarax source tree, run cold beside")
    parser.add_argument("--json")
    worker_options(parser)
    args = parser.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args.worker, args.workload)))
        return
    mine = str(ROOT / "src")
    rows: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for workload in args.workloads:
            cases = ["jax.jit", "cold+warm"] + (["before"] if args.before else [])
            for case in rotated(cases, repeat):
                if case == "cold+warm":
                    with tempfile.TemporaryDirectory() as store:
                        env = {"DATARAX_COMPILE_CACHE_DIR": store}
                        rows.append(_run("cold", workload, mine, env))
                        rows.append(_run("warm", workload, mine, env))
                        rows[-1]["case"] = "warm"
                elif case == "before":
                    with tempfile.TemporaryDirectory() as store:
                        rows.append(_run("cold", workload, args.before,
                                         {"DATARAX_COMPILE_CACHE_DIR": store}))
                        rows[-1]["case"] = "before"
                else:
                    rows.append(_run(case, workload, mine))
                print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    """Median seconds per workload, case and phase."""
    phases = ["trace", "lower", "store_key", "store_load", "compile", "other"]
    lines = ["| workload | case | import jax | import datarax | source | build | first next | "
             + " | ".join(phases) + " | first batch (source+build+next) | steady batch |",
             "|---|---|" + "---:|" * (len(phases) + 7)]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        for case in dict.fromkeys(r["case"] for r in rows if r["workload"] == workload):
            mine = [r for r in rows if r["workload"] == workload and r["case"] == case]

            def med(get: Any) -> str:
                return f"{statistics.median(get(r) for r in mine):.3f}"

            lines.append(
                f"| {workload} | {case} | {med(lambda r: r['import_jax_s'])} | "
                f"{med(lambda r: r.get('import_datarax_s', 0.0))} | "
                f"{med(lambda r: r['source_s'])} | {med(lambda r: r['build_s'])} | "
                f"{med(lambda r: r['first_next_s'])} | "
                + " | ".join(med(lambda r, p=p: r['first_next_phases'].get(p, 0.0))
                             for p in phases)
                + f" | {med(lambda r: r['first_batch_s'])} | "
                f"{med(lambda r: r['second_next_s'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

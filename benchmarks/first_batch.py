"""The first batch: how long a fresh process waits for it, datarax beside plain ``jax.jit``.

``python -m benchmarks.first_batch [--workloads W1 W10 W7] [--repeats 2] [--sleep 2]
[--before SRC] [--records N] [--json PATH]``

Every measurement is a fresh process (``--worker``) that makes its data, then times
building the loader and getting its first batch materialised (imports and data excluded).
Each case runs once with no pause and once with ``--sleep`` seconds of "user work"
(a sleep) between building and asking, where *wait* is the time from asking to the batch.

* ``jax.jit``: a plain ``jax.jit`` of the same math (host shuffle + gather, one
  ``device_put`` per batch), nothing cached: the floor for a loader that compiles.
* ``datarax cold``: datarax with an empty store of compiled steps (a fresh
  ``DATARAX_COMPILE_CACHE_DIR``); ``datarax warm``: a second process on the store the
  cold one filled.
* ``datarax, no ahead``: ``DATARAX_COMPILE_AHEAD=0``, store off: compiled at the first batch.
* ``before`` (with ``--before SRC``): datarax from another source tree (e.g. the main
  checkout), nothing cached.

W1: 50,000 32x32x3 uint8 images, flip + /255, batch 256. W10: W1 after a filter keeping
the even labels (half), as its first stage (the plain twin filters on the host). W7: 20,000 96x96x3 images,
random resized crop to 64 + flip + brightness + contrast (``benchmarks/w7_contenders``'s
datarax chain), batch 256; its plain-JAX twin samples the same kinds of parameters per
record (crop by ``jax.image.scale_and_translate``), so it is the same work, not the same
values. The first batch's SHA-256 is compared between every datarax case.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, run_worker, worker_env

RECORDS = {"W1": 50_000, "W10": 50_000, "W7": 20_000}


def _data(workload: str) -> Any:
    import numpy as np

    records = int(os.environ.get("FIRST_BATCH_RECORDS") or RECORDS[workload])
    if workload in ("W1", "W10"):
        rng = np.random.default_rng(0)
        return rng.integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    from benchmarks.augment_data import make_data

    return make_data(records, 0)[0]


def _datarax(workload: str, images: Any) -> Any:
    """The pipeline, built; a function returning its first batch's image array."""
    import numpy as np

    if workload in ("W1", "W10"):
        from types import SimpleNamespace

        from benchmarks.contenders import datarax_pipeline

        spec = SimpleNamespace(seed=0, batch_size=min(256, len(images)))
        labels = np.arange(len(images), dtype=np.int32)
        if workload == "W1":
            pipeline = datarax_pipeline.build(images, labels, spec)
        else:  # W1's stages after a filter keeping the even labels
            from datarax.operators import ElementOperator, FilterOperator
            from datarax.pipeline import Pipeline
            from datarax.sources import MemorySource, MemorySourceConfig

            source = MemorySource(MemorySourceConfig(shuffle=True, seed=0),
                                  {"image": images, "label": labels})
            stages = [FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0),
                      ElementOperator(fn=datarax_pipeline.normalize),
                      ElementOperator(fn=datarax_pipeline.flip, stochastic=True)]
            pipeline = Pipeline(source=source, stages=stages, batch_size=spec.batch_size,
                                seed=0)
    else:
        from benchmarks.w7_contenders import _datarax_pipeline

        labels = np.arange(len(images), dtype=np.int32)
        pipeline = _datarax_pipeline(images, labels, 256, 0, fixed=False)
    return lambda: next(iter(pipeline))["image"]


def _plain(workload: str, images: Any) -> Any:
    """A plain ``jax.jit`` of the workload's math; a function returning its first batch."""
    import jax

    step, args = plain_program(workload, images)
    jitted = jax.jit(step)
    return lambda: jitted(jax.device_put(args[0]), *args[1:])


def plain_program(workload: str, images: Any) -> tuple[Any, tuple[Any, ...]]:
    """The plain twin's step (not jitted) and its first batch's arguments (the raw
    records as NumPy, the key, the batch number)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if workload in ("W1", "W10"):
        from benchmarks.contenders.jax_floor import flip_normalize as step
    else:
        from benchmarks.augment_data import BRIGHTNESS, CONTRAST, MEAN, OUT, RATIO, SCALE, STD

        size = images.shape[1]

        def one(image: Any, key: Any) -> Any:
            k = jax.random.split(key, 6)
            area = jax.random.uniform(k[0], (), minval=SCALE[0], maxval=SCALE[1]) * size * size
            ratio = jnp.exp(jax.random.uniform(k[1], (), minval=np.log(RATIO[0]),
                                               maxval=np.log(RATIO[1])))
            h = jnp.clip(jnp.sqrt(area / ratio), 1, size)
            w = jnp.clip(jnp.sqrt(area * ratio), 1, size)
            y = jax.random.uniform(k[2], ()) * (size - h)
            x = jax.random.uniform(k[3], ()) * (size - w)
            scale = jnp.stack([OUT / h, OUT / w])
            out = jax.image.scale_and_translate(
                image.astype(jnp.float32) / 255.0, (OUT, OUT, 3), (0, 1), scale,
                -jnp.stack([y, x]) * scale, "linear")
            out = jnp.where(jax.random.bernoulli(k[4]), out[:, ::-1], out)
            b, c = jax.random.uniform(k[5], (2,))
            out = out + (BRIGHTNESS[0] + b * (BRIGHTNESS[1] - BRIGHTNESS[0]))
            factor = CONTRAST[0] + c * (CONTRAST[1] - CONTRAST[0])
            out = (out - out.mean()) * factor + out.mean()
            return (out - MEAN) / STD

        def step(raw: Any, key: Any, batch: Any) -> Any:
            keys = jax.random.split(jax.random.fold_in(key, batch), raw.shape[0])
            return jax.vmap(one)(raw, keys)

    key = jax.random.key(0)
    order = np.random.default_rng(0).permutation(len(images))
    if workload == "W10":  # the filter on the host: the even records (labels = ids)
        order = order[order % 2 == 0]
    return step, (images[order[:256]], key, 0)


def worker(case: str, workload: str, sleep: float) -> dict[str, Any]:
    import hashlib

    import numpy as np

    images = _data(workload)
    import jax

    # imports are not the loader's build (as jax's are not)
    import benchmarks.contenders.jax_floor  # noqa: F401
    if case != "jax.jit":
        import benchmarks.contenders.datarax_pipeline  # noqa: F401
        import benchmarks.w7_contenders  # noqa: F401
        import datarax.operators.image  # noqa: F401
    began = time.perf_counter()
    first = (_plain if case == "jax.jit" else _datarax)(workload, images)
    built = time.perf_counter()
    time.sleep(sleep)
    asked = time.perf_counter()
    batch = np.asarray(jax.block_until_ready(first()))
    done = time.perf_counter()
    result = {"build_s": built - began, "wait_s": done - asked,
              "first_s": built - began + done - asked,
              "sha256": hashlib.sha256(batch.tobytes()).hexdigest()[:16]}
    try:
        from datarax.core.compiled_store import counts

        result["counts"] = counts()
    except ImportError:  # the "before" tree has no store
        pass
    return result


def _run(case: str, workload: str, sleep: float, src: str,
         env: dict[str, str] | None = None) -> dict[str, Any]:
    """:func:`worker` in a fresh process importing datarax from ``src``, ``env`` set."""
    environ = worker_env({"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), **(env or {})},
                         src=src)
    return run_worker("benchmarks.first_batch",
                      ["--worker", case, "--workload", workload, "--sleep", str(sleep)],
                      environ, timeout=900, check=True)


def worker_options(parser: argparse.ArgumentParser) -> None:
    """The options a worker process of this script (or ``first_batch_phases``) is given."""
    parser.add_argument("--worker")
    parser.add_argument("--workload")
    parser.add_argument("--out")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["W1", "W10", "W7"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=2.0)
    parser.add_argument("--before", help="another datarax source tree to compare against")
    parser.add_argument("--records", type=int, help="records per workload (default: full)")
    parser.add_argument("--json")
    worker_options(parser)
    args = parser.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args.worker, args.workload, float(args.sleep))))
        return
    if args.records:
        os.environ["FIRST_BATCH_RECORDS"] = str(args.records)
    src = str(ROOT / "src")
    rows: list[dict[str, Any]] = []
    for workload in args.workloads:
        for repeat in range(args.repeats):
            for pause in (0.0, args.sleep):
                with tempfile.TemporaryDirectory() as store, \
                        tempfile.TemporaryDirectory() as before:  # its own, empty
                    mine = {"DATARAX_COMPILE_CACHE_DIR": store}
                    runs = [("jax.jit", src, mine), ("datarax cold", src, mine),
                            ("datarax warm", src, mine),
                            ("datarax, no ahead", src, {**mine, "DATARAX_COMPILE_AHEAD": "0",
                                                        "DATARAX_COMPILE_CACHE": "0"})]
                    if args.before:
                        runs.append(("before", args.before, {"DATARAX_COMPILE_CACHE_DIR": before}))
                    for case, tree, env in runs:
                        kind = "jax.jit" if case == "jax.jit" else "datarax"
                        out = _run(kind, workload, pause, tree, env)
                        out.update(workload=workload, case=case, sleep=pause, repeat=repeat,
                                   load=os.getloadavg()[0])
                        rows.append(out)
                        print(json.dumps(out), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(_table(rows))


def _table(rows: list[dict[str, Any]]) -> str:
    """Median build→first (no pause) and wait (after the pause) per workload and case."""
    import statistics

    lines = ["| workload | case | first batch s (no pause) | wait s after sleep | same batch |",
             "|---|---|---:|---:|---|"]
    seen: dict[str, set[str]] = {}
    for row in rows:
        if row["case"] != "jax.jit":
            seen.setdefault(row["workload"], set()).add(row["sha256"])
    for workload in dict.fromkeys(r["workload"] for r in rows):
        for case in dict.fromkeys(r["case"] for r in rows if r["workload"] == workload):
            mine = [r for r in rows if r["workload"] == workload and r["case"] == case]
            cold = [r["first_s"] for r in mine if r["sleep"] == 0]
            slept = [r["wait_s"] for r in mine if r["sleep"] > 0]
            same = "—" if case == "jax.jit" else ("yes" if len(seen[workload]) == 1 else "NO")
            lines.append(f"| {workload} | {case} | {statistics.median(cold):.2f} | "
                         f"{statistics.median(slept):.3f} | {same} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

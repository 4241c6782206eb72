"""W1's step program part by part: equations per part and the seconds to trace and
lower each part alone, beside the plain ``jax.jit`` twin, in one process.

``python -m benchmarks.w1_program_parts [--repeats 11] [--records 50000] [--json PATH]``

The step is the one W1's first batch compiles (``w10_program.captured``: flip + /255
over a shuffled ``MemorySource``, batch 256). Its jaxpr's equations (those inside a
nested ``jit``, such as ``bernoulli``'s, counted with the one holding them) are
attributed to the innermost datarax or W1 file that made them: ``keys`` (the
per-record keys, ``core/keys.py``), ``read`` (the order and the gathers:
``sources/memory.py``, ``core/batch.py``), ``stages`` (W1's two functions), the twin's
``twin``, the rest by file. Then, ``--repeats`` times, each program is traced afresh
(JAX's caches cleared) and lowered: the step; the twin; the keys alone (``fold_in_rows``
at the step's shapes); W1's functions alone, vmapped as ``ElementOperator`` runs them;
an empty ``jit`` (what every program costs). Medians, CPU of the whole process. First,
once, after importing datarax as the first batch finds it: the process's first lowering
(an empty ``jit``), which the first batch pays and no program shape changes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from benchmarks.harness import emit

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["DATARAX_COMPILE_AHEAD"] = "0"
os.environ["DATARAX_COMPILE_CACHE"] = "0"

PARTS = (("core/keys.py", "keys"), ("sources/memory.py", "read"), ("core/batch.py", "read"),
         ("contenders/datarax_pipeline.py", "stages"), ("contenders/jax_floor.py", "twin"))


def _part(eqn: Any) -> str:
    """The part that made ``eqn``: the innermost datarax or W1 frame's file."""
    for frame in eqn.source_info.traceback.frames:
        name = frame.file_name.replace(os.sep, "/")
        if "/datarax/" in name or "/contenders/" in name:
            return next((part for tail, part in PARTS if name.endswith(tail)),
                        name.rsplit("/", 2)[-1] if "/datarax/" in name else "other")
    return "other"


def _size(jaxpr: Any) -> int:
    """Equations in ``jaxpr``, those of nested jaxprs included."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                total += _size(inner)
    return total


def equations(fn: Any, args: tuple[Any, ...]) -> dict[str, int]:
    """Equations of ``fn``'s jaxpr per part."""
    import jax

    counts: Counter[str] = Counter()
    for eqn in jax.make_jaxpr(fn)(*args).jaxpr.eqns:
        counts[_part(eqn)] += 1 + sum(_size(getattr(v, "jaxpr", v)) for v in eqn.params.values()
                                      if hasattr(getattr(v, "jaxpr", v), "eqns"))
    return dict(counts.most_common())


def parts(step_args: tuple[Any, ...]) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """The keys and W1's functions alone, at the step's shapes, and an empty program."""
    import jax
    import numpy as np

    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.core.element import Element
    from datarax.core.keys import fold_in_rows

    rows = np.zeros((1, 2), np.uint32)
    indices = np.zeros(256, np.int32)
    images = np.zeros((256, 32, 32, 3), np.uint8)

    def stages(images: Any, data: Any) -> Any:
        batch = jax.vmap(lambda d: dict(normalize(Element(d)).data))({"image": images})
        keys = jax.random.wrap_key_data(data)
        return jax.vmap(lambda d, k: dict(flip(Element(d), k).data))(batch, keys)

    return {"keys alone": (fold_in_rows, (rows, indices)),
            "W1 functions alone": (stages, (images, np.zeros((256, 2), np.uint32))),
            "empty jit": (lambda x: x + 1, (np.int32(1),))}


def measure(programs: dict[str, tuple[Any, tuple[Any, ...]]], repeats: int) -> dict[str, Any]:
    """Median CPU ms to trace and to lower each program afresh."""
    import jax

    seen: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _ in range(repeats):
        for name, (fn, args) in programs.items():
            jax.clear_caches()
            fresh = jax.jit(lambda *a, fn=fn: fn(*a))
            start = time.process_time()
            traced = fresh.trace(*args)
            traced_at = time.process_time()
            traced.lower()
            seen[name]["trace"].append(traced_at - start)
            seen[name]["lower"].append(time.process_time() - traced_at)
    return {name: {phase: round(statistics.median(v) * 1e3, 2) for phase, v in got.items()}
            for name, got in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ["FIRST_BATCH_RECORDS"] = str(args.records)
    import jax
    import numpy as np

    for module in ("datarax.operators.image", "datarax.pipeline", "datarax.sources"):
        importlib.import_module(module)  # as benchmarks.first_batch_phases imports them
    jax.devices()
    start = time.process_time()
    jax.jit(lambda x: x + 1).trace(np.int32(1)).lower()
    first = round((time.process_time() - start) * 1e3, 2)
    from benchmarks.first_batch import _data, plain_program
    from benchmarks.w10_program import captured

    images = _data("W1")
    (step, step_args), *others = captured("W1", images)
    programs = {"datarax W1 step": (step, step_args), "jax.jit W1": plain_program("W1", images),
                **parts(step_args)}
    report = {"records": args.records, "repeats": args.repeats,
              "load_avg_1m": round(os.getloadavg()[0], 2),
              "programs_first_batch_compiles": 1 + len(others),
              "first_lowering_in_process_ms": first,
              "equations": {name: equations(fn, a) for name, (fn, a) in programs.items()
                            if name != "empty jit"},
              "cpu_ms": measure(programs, args.repeats)}
    emit(report, args.json, indent=1)


if __name__ == "__main__":
    main()

"""Where W1's first batch goes: every compile JAX reports, by phase, in a fresh process.

``python -m benchmarks.first_batch_profile [records] [batch]`` prints JSON: the seconds of
building the source, the Pipeline and the first ``next()``, and each JAX compilation
event (``jax.monitoring``'s public duration events: tracing, lowering, backend compile)
with the phase it fell in.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, defaultdict

import jax
import numpy as np

EVENTS: list[tuple[str, str, float]] = []
PHASE = ["imports"]


def _listen(event: str, duration: float, **_: object) -> None:
    EVENTS.append((PHASE[0], event, duration))


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    jax.monitoring.register_event_duration_secs_listener(_listen)
    from benchmarks.on_chip import _w1_pipeline

    images = np.random.default_rng(0).integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    jax.devices()
    out: dict[str, object] = {}
    PHASE[0] = "build"
    t = time.perf_counter()
    pipeline = _w1_pipeline(images, batch, True)
    out["build_s"] = time.perf_counter() - t
    PHASE[0] = "first_next"
    t = time.perf_counter()
    jax.block_until_ready(next(iter(pipeline)))
    out["first_next_s"] = time.perf_counter() - t
    totals: dict[str, dict[str, float]] = defaultdict(dict)
    counts: Counter[tuple[str, str]] = Counter()
    for phase, event, duration in EVENTS:
        totals[phase][event] = totals[phase].get(event, 0.0) + duration
        counts[(phase, event)] += 1
    out["events"] = {p: {e: {"s": round(s, 4), "n": counts[(p, e)]} for e, s in v.items()}
                     for p, v in totals.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

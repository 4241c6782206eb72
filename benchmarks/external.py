"""W2, W4 and W5 come from standalone benchmark scripts, each run in its own process.

``bench_array_record.py`` (W2 ArrayRecord throughput), ``w4_resume.py`` (W4) and
``bench_hf_streaming.py`` (W5) live next to this module. The suite runs each in its
own process and files what it reports; until a script exists its workloads are
reported as *pending*, never dropped. A script is asked for JSON first
(``--json PATH``); when it does not take that option its printed output is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.suite import ROOT, worker_env

SCRIPTS = {
    "W2": "bench_array_record",
    "W4": "w4_resume",
    "W5": "bench_hf_streaming",
    "W7": "w7_augment",
    "W8": "w8_mixture",
    "W9": "bench_text_packing",
}
# Options each script takes, per scale (tried first; a script that refuses them with
# an argparse error is run with --json only, then bare).
W2_RECORDS = {"tiny": 2_000, "small": 20_000, "full": 100_000}
W4_RECORDS = {"tiny": 40_000, "small": 40_000, "full": 100_000}
W5_ROWS = {"tiny": 2_000, "small": 20_000, "full": 100_000}
W7_RECORDS = {"tiny": 600, "small": 4_000, "full": 20_000}
W8_RECORDS = {"tiny": 20_000, "small": 100_000, "full": 300_000}
W9_DOCS = {"tiny": 2_000, "small": 20_000, "full": 100_000}
WHAT = {
    "W2": "ArrayRecord: 100,000 x 3,072 B records in 8 files, global shuffle, decode, batch 256",
    "W4": "resume ArrayRecord after 30,000 records: state bytes, restore -> next batch, exactness",
    "W5": "HF streaming over a local 100,000-row parquet dataset vs plain datasets iteration",
    "W7": "augmentation chain (random resized crop 64, flip, brightness/contrast, normalize) "
    "over 20,000 in-memory 96x96 images",
    "W8": "3-source in-memory mixture 0.5/0.3/0.2 (300,000 records, batch 256): datarax "
    "MixSource vs Grain MapDataset.mix vs tf.data sample_from_datasets",
    "W9": "tokenize + pack 100,000 documents (~200 words) to seq_len 512: datarax vs Grain "
    "FirstFitPack vs a plain Python loop",
}


def script_options(workload: str, scale: str, reps: int) -> list[str]:
    if workload == "W2":
        return ["--records", str(W2_RECORDS[scale]), "--repeats", str(reps)]
    if workload == "W4":
        return ["--records", str(W4_RECORDS[scale])]
    if workload == "W5":
        return ["--rows", str(W5_ROWS[scale]), "--repeats", str(max(reps, 3))]
    if workload == "W7":
        return ["--records", str(W7_RECORDS[scale]), "--repeats", str(reps)]
    if workload == "W8":
        return ["--records", str(W8_RECORDS[scale]), "--repeats", str(reps)]
    if workload == "W9":
        return ["--docs", str(W9_DOCS[scale])]
    return []


def run_external(
    workload: str, scale: str, reps: int, timeout: float = 1800, extra: list[str] | None = None
) -> dict[str, Any]:
    """Run the script behind ``workload``; ``status`` is ok, pending or error.

    ``extra`` options go to the script as well (e.g. ``["--batch", "32"]`` for W6).
    """
    module = SCRIPTS[workload]
    path = ROOT / "benchmarks" / f"{module}.py"
    base = {"workload": workload, "what": WHAT[workload], "script": f"benchmarks/{module}.py"}
    if not path.exists():
        return {**base, "status": "pending", "note": f"{base['script']} has not landed yet"}
    with tempfile.TemporaryDirectory(prefix="datarax-bench-") as tmp:
        out = Path(tmp) / "result.json"
        attempts = [
            ["--json", str(out), *script_options(workload, scale, reps), *(extra or [])],
            ["--json", str(out), *(extra or [])],
            ["--json", str(out)],
            [],
        ]
        proc = None
        load_before = os.getloadavg()[0]
        for extra in attempts:
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", f"benchmarks.{module}", *extra],
                    cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                return {**base, "status": "error", "note": f"timed out after {timeout:.0f} s"}
            if proc.returncode != 2:  # 2: argparse refused the options; try fewer
                break
        assert proc is not None
        base["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        if proc.returncode != 0:
            return {**base, "status": "error", "note": proc.stderr[-2000:]}
        result: dict[str, Any] = {
            **base, "status": "ok", "stdout": proc.stdout[-6000:], "options": extra or []
        }
        if out.exists():
            try:
                result["data"] = json.loads(out.read_text())
            except json.JSONDecodeError:
                result["note"] = "the script's JSON did not parse"
        return result

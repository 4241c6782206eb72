"""Conversion before and after a change, interleaved: ``bench_convert``'s inputs (PNG folder,
Parquet, JSON Lines) converted by the ``src/`` of an earlier commit and by this tree's, in
rounds of floor / before 1 process / after 1 / before 2 / after 2, each a fresh process
(``python -m benchmarks.bench_convert --one``); then whether before and after, and 1 and 2
processes, wrote the same files (shards and metadata, by SHA-256).

Run: ``git archive COMMIT src | tar -x -C BEFORE`` then ``python -m
benchmarks.convert_before_after BEFORE/src OUT.json [--rounds N] [--images N] [--lines N]
[--inputs DIR] [--kinds png,parquet,jsonl]`` (``--inputs``: reuse the inputs of an earlier
run, ``DIR/png``, ``DIR/parquet``, ``DIR/jsonl``). ``summary`` gives each round's ratios:
one process over the floor by CPU and wall seconds, two over one by wall seconds and by
``cpu_bound`` (one process's CPU seconds over the busier of two processes': what two
give on two free cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

from benchmarks.convert_inputs import ROOT, make_jsonl, make_parquet, make_png_folder

DATA_DIR = ROOT / "data" / "convert_before_after"
PLAN = [("after", "floor"), ("before", "datarax_w1"), ("after", "datarax_w1"),
        ("before", "datarax_w2"), ("after", "datarax_w2")]


def _digests(folder: pathlib.Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def run(before_src: str, rounds: int, images: int, lines: int,
        inputs: str | None = None, kinds: tuple[str, ...] = ("png", "parquet", "jsonl")) -> dict:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    if inputs is not None:  # made by an earlier run: INPUTS/png, INPUTS/parquet, INPUTS/jsonl
        srcs = {kind: pathlib.Path(inputs) / kind for kind in kinds}
    else:
        makers = {"png": lambda: make_png_folder(images, DATA_DIR),
                  "parquet": lambda: make_parquet(images, DATA_DIR),
                  "jsonl": lambda: make_jsonl(lines, DATA_DIR)}
        srcs = {kind: makers[kind]() for kind in kinds}
    code = {"before": os.path.abspath(before_src), "after": str(ROOT / "src")}
    runs = []
    for r in range(rounds):
        for kind, src in srcs.items():
            for version, contender in PLAN:
                dst = DATA_DIR / "out" / kind / f"{version}_{contender}"
                env = {**os.environ, "PYTHONPATH": f"{code[version]}{os.pathsep}{ROOT}"}
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.bench_convert", "--one", kind, contender,
                     str(src), str(dst)], env=env, capture_output=True, text=True, check=True)
                one = json.loads(done.stdout.strip().splitlines()[-1])
                runs.append({"round": r, "kind": kind, "version": version, "contender": contender,
                             "seconds": round(one["seconds"], 4),
                             "cpu_seconds": round(one["cpu_seconds"], 4),
                             "cpu_seconds_main": round(one["cpu_seconds_main"], 4),
                             "load": round(os.getloadavg()[0], 2)})
                print(json.dumps(runs[-1]), flush=True)
    identical = {}
    for kind in srcs:
        d = {name: _digests(DATA_DIR / "out" / kind / name) for name in
             ("before_datarax_w1", "after_datarax_w1", "before_datarax_w2", "after_datarax_w2")}
        identical[kind] = {"after_w1_eq_before_w1": d["after_datarax_w1"] == d["before_datarax_w1"],
                           "after_w2_eq_after_w1": d["after_datarax_w2"] == d["after_datarax_w1"],
                           "before_w2_eq_before_w1": d["before_datarax_w2"] == d["before_datarax_w1"]}
    return {"cpus": os.cpu_count(), "runs": runs, "identical": identical,
            "summary": summarise(runs)}


def summarise(runs: list[dict]) -> dict:
    """Per input, the ratios of each round, before and after: one process over the floor
    (``w1_vs_floor``, by CPU and wall seconds) and two over one (``w2_vs_w1``, by wall
    seconds and ``cpu_bound``)."""
    out: dict = {}
    for kind in dict.fromkeys(r["kind"] for r in runs):
        mine = [r for r in runs if r["kind"] == kind]
        per: dict = {}
        for r in mine:
            per.setdefault(r["round"], {})[(r["version"], r["contender"])] = r
        ratios: dict = {}
        for version in ("before", "after"):
            for measure in ("cpu_seconds", "seconds"):
                floor = [p[("after", "floor")][measure] for p in per.values()]
                w1 = [p[(version, "datarax_w1")][measure] for p in per.values()]
                w2 = [p[(version, "datarax_w2")][measure] for p in per.values()]
                tag = "cpu" if measure == "cpu_seconds" else "wall"
                ratios[f"{version}_w1_vs_floor_{tag}"] = [round(f / a, 3) for f, a in zip(floor, w1)]
                if tag == "wall":
                    ratios[f"{version}_w2_vs_w1_wall"] = [round(a / b, 3) for a, b in zip(w1, w2)]
            # one process's CPU over the busier of two processes' (the main one or its
            # worker): what two processes give on two free cores
            ratios[f"{version}_w2_vs_w1_cpu_bound"] = [
                round(p[(version, "datarax_w1")]["cpu_seconds"] / max(
                    p[(version, "datarax_w2")]["cpu_seconds_main"],
                    p[(version, "datarax_w2")]["cpu_seconds"]
                    - p[(version, "datarax_w2")]["cpu_seconds_main"]), 3) for p in per.values()]
        out[kind] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before_src")
    parser.add_argument("json")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--inputs", default=None,
                        help="a folder holding png/, parquet/ and jsonl/ inputs made before "
                             "(else they are made, as bench_convert makes them)")
    parser.add_argument("--kinds", default="png,parquet,jsonl")
    args = parser.parse_args()
    result = run(args.before_src, args.rounds, args.images, args.lines, args.inputs,
                 tuple(args.kinds.split(",")))
    pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

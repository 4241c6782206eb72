"""Medians, ratios to the floor, and the report files (markdown, PNG chart, JSON)."""

from __future__ import annotations

import json
import os
import platform
import statistics
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from benchmarks.contenders import CONTENDERS

PACKAGES = ("datarax", "jax", "jaxlib", "flax", "numpy", "grain", "array_record", "torch",
            "tensorflow", "tensorflow-cpu", "datasets", "pyarrow", "matplotlib")
CHECKSUM_RTOL = 1e-6


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "git_commit": _git_commit(),
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _git_commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).resolve().parent, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, cwd=Path(__file__).resolve().parent, timeout=10)
        return out.stdout.strip() + (" (+ uncommitted changes in src/)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize_case(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per contender: status, medians of rates and times, ratios to the numpy floor."""
    rows: dict[str, dict[str, Any]] = {}
    for name, results in runs.items():
        missing = next((r["missing"] for r in results if "missing" in r), None)
        errors = [r["error"] for r in results if "error" in r]
        good = [r for r in results if "epoch_rate" in r]
        row: dict[str, Any] = {"runs": len(good)}
        if missing:
            row["status"] = "missing: " + ", ".join(missing)
        elif not good:
            row["status"] = "error: " + (errors[0] if errors else "no result")
        else:
            bad = [r["check"]["problems"] for r in good if not r["check"]["ok"]]
            row["status"] = "ok" if not bad and not errors else "check failed: " + "; ".join(
                sum(bad, []) or errors
            )
            for key in ("epoch_rate", "steady_rate", "first_batch_s", "spawn_to_first_batch_s",
                        "epoch_s", "import_s", "cpu_s", "peak_rss_mb"):
                row[key] = _median([r.get(key) for r in good])
            row["checksum"] = good[0]["check"]["checksum"]
            row["flip_fraction"] = _median([r["check"]["flip_fraction"] for r in good])
            row["load_avg_1m"] = _median([max(r.get("load_avg_1m") or [0]) for r in good])
            stats = [r["pipeline_stats"] for r in good if r.get("pipeline_stats")]
            if stats:
                row["pipeline_stats"] = stats[-1]
        rows[name] = row
    floor_name = next((n for n in rows if CONTENDERS[n].floor and "epoch_rate" in rows[n]), None)
    floor = rows[floor_name] if floor_name else None
    for name, row in rows.items():
        if floor and "epoch_rate" in row:
            # ratio per repetition (the floor ran in the same round), then the median
            cpu_ratios = [
                base["cpu_s"] / mine["cpu_s"]
                for mine, base in zip(runs[name], runs[floor_name])
                if mine.get("cpu_s") and base.get("cpu_s")
            ]
            row["cpu_ratio"] = statistics.median(cpu_ratios) if cpu_ratios else None
            for key in ("epoch", "steady"):
                ratios = [
                    mine[f"{key}_rate"] / base[f"{key}_rate"]
                    for mine, base in zip(runs[name], runs[floor_name])
                    if mine.get(f"{key}_rate") and base.get(f"{key}_rate")
                ]
                row[f"{key}_ratio"] = statistics.median(ratios) if ratios else None
            same = abs(row["checksum"] - floor["checksum"]) <= CHECKSUM_RTOL * abs(floor["checksum"])
            row["checksum_agrees"] = same
            if not same and row["status"] == "ok":
                row["status"] = "checksum differs from the floor's"
    return rows


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets that this run measured, each with value and verdict."""
    out = []
    w1 = report["vision"].get("W1 vision b256", {}).get("summary", {})
    dx = w1.get("datarax", {})
    if "epoch_ratio" in dx:
        out.append({"target": "W1 datarax whole-epoch rate >= 1.0x numpy floor",
                    "value": f"{dx['epoch_ratio']:.2f}x", "met": dx["epoch_ratio"] >= 1.0})
    if dx.get("first_batch_s") is not None:
        out.append({"target": "W3 datarax first batch <= 0.5 s after data is loaded",
                    "value": f"{dx['first_batch_s']:.2f} s", "met": dx["first_batch_s"] <= 0.5})
    imp = report.get("imports", {})
    if imp.get("datarax_extra_s") is not None:
        cpu = imp.get("datarax_extra_cpu_s")
        value = f"{imp['datarax_extra_s']:.2f} s wall (jax {imp['jax_s']:.2f} s)"
        if cpu is not None:
            value += f"; {cpu:.2f} CPU s (jax {imp['jax_cpu_s']:.2f})"
        out.append({"target": "W3 import datarax adds <= 0.3 s to import jax",
                    "value": value, "met": (cpu if cpu is not None else imp["datarax_extra_s"]) <= 0.3})
        own = imp.get("datarax_own_s")
        if own is not None:
            out.append({"target": "W3 datarax's own imports (W1's names) add <= 0.1 s to jax + "
                        "flax.nnx", "value": f"{own:.3f} s wall", "met": own <= 0.1})
    ext = report.get("external", {})
    w2 = (ext.get("W2") or {}).get("data") or {}
    for key, who in (("datarax_pipeline_vs_floor", "Pipeline"), ("datarax_vs_floor", "source only")):
        if key in w2:
            out.append({"target": f"W2 datarax ({who}) >= 0.8x the raw ArrayRecord reader",
                        "value": f"{w2[key]:.2f}x", "met": w2[key] >= 0.8})
    w4 = (ext.get("W4") or {}).get("data") or {}
    if "state_bytes" in w4:
        out.append({"target": "W4 state <= 512 bytes at any dataset size",
                    "value": ", ".join(f"{b} B at {n} records"
                                       for n, b in w4.get("state_bytes_by_records", {}).items()),
                    "met": max(w4.get("state_bytes_by_records", {"": w4["state_bytes"]}).values())
                    <= 512})
        out.append({"target": "W4 restore -> next batch <= 0.05 s (fresh process)",
                    "value": f"{w4['restore_to_next_batch_s']:.3f} s",
                    "met": w4["restore_to_next_batch_s"] <= 0.05})
        peer = w4.get("grain") or {}
        if peer.get("restore_to_next_batch_s"):
            out.append({"target": "W4 restore -> next batch <= Grain's (fresh process)",
                        "value": f"{w4['restore_to_next_batch_s']:.3f} s vs Grain "
                        f"{peer['restore_to_next_batch_s']:.3f} s",
                        "met": w4["restore_to_next_batch_s"] <= peer["restore_to_next_batch_s"]})
        out.append({"target": "W4 resume is exact", "value": str(w4["exact"]),
                    "met": bool(w4["exact"])})
    w5 = (ext.get("W5") or {}).get("data") or {}
    if "ratio_pipeline_vs_floor" in w5:
        r = w5["ratio_pipeline_vs_floor"]
        out.append({"target": "W5 HF streaming Pipeline >= 0.8x plain datasets iteration",
                    "value": f"{r:.2f}x", "met": r >= 0.8})
    w9 = ((ext.get("W9") or {}).get("data") or {}).get("ratios", {})
    if "datarax / grain tokens/s" in w9:
        speed, eff = w9["datarax / grain tokens/s"], w9["datarax / grain efficiency"]
        out.append({"target": "W9 tokenize+pack >= 1.5x Grain tokens/s at >= its efficiency",
                    "value": f"{speed:.2f}x tokens/s, {eff:.2f}x efficiency",
                    "met": speed >= 1.5 and eff >= 1.0})
    w8 = ((ext.get("W8") or {}).get("data") or {}).get("ratios", {})
    peers = [w8[k] for k in ("datarax / grain", "datarax / tf.data") if k in w8]
    if peers:
        worst = min(peers)  # against the best peer
        out.append({"target": "W8 3-source mixture >= 2x the best peer (Grain mix, tf.data)",
                    "value": f"{worst:.2f}x", "met": worst >= 2.0})
    return out


def _cores(report: dict[str, Any]) -> int:
    m = report.get("machine", {})
    return int(m.get("usable_cpus") or m.get("nproc") or os.cpu_count() or 1)


def run_loads(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run's 1-minute load average before and after it, flagged above the cores.

    One entry per vision run (case, contender, repetition), per external script run and
    per import probe that recorded its load: ``what``, ``before``, ``after`` and
    ``over`` (either reading exceeded the machine's usable core count).
    """
    cores = _cores(report)
    out: list[dict[str, Any]] = []

    def add(what: str, load: Any) -> None:
        if not load:
            return
        before, after = (list(load) + [None, None])[:2]
        peak = max(v for v in (before, after) if v is not None)
        out.append({"what": what, "before": before, "after": after, "over": peak > cores})

    for label, case in report.get("vision", {}).items():
        for name, results in case.get("runs", {}).items():
            for i, r in enumerate(results, 1):
                add(f"{label} {name} rep {i}", r.get("load_avg_1m"))
        for name, r in case.get("warm_ups", {}).items():
            add(f"{label} {name} warm-up", r.get("load_avg_1m"))
    for i, probe in enumerate((report.get("imports") or {}).get("probes", []), 1):
        add(f"W3 import probe {i}", probe.get("load_avg_1m"))
    for wl, ext in report.get("external", {}).items():
        add(wl, ext.get("load_avg_1m"))
    return out


def load_lines(report: dict[str, Any]) -> list[str]:
    """The report's "Load" section: the range seen and every run above the core count."""
    loads = run_loads(report)
    if not loads:
        return []
    cores = _cores(report)
    values = [v for e in loads for v in (e["before"], e["after"]) if v is not None]
    over = [e for e in loads if e["over"]]
    lines = [
        "## Load",
        "",
        f"The machine's 1-minute load average, read before and after each run: "
        f"{min(values):.2f}–{max(values):.2f} over {len(loads)} runs on {cores} usable cores.",
        "",
    ]
    if over and len(over) == len(loads):
        lines.append(f"**Every run ran with the load above the {cores} cores** (other work shared "
                     "them; the numbers are noisier and slower than the machine's best).")
    elif over:
        lines += [
            f"**{len(over)} run(s) ran with the load above the {cores} cores** (other work "
            "shared them; their numbers are noisier and slower than the machine's best):",
            "",
        ]
        lines += [f"- {e['what']}: {_fmt(e['before'], '.2f')} → {_fmt(e['after'], '.2f')}"
                  for e in over]
    else:
        lines.append(f"No run's load exceeded the {cores} cores.")
    lines.append("")
    return lines


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# datarax benchmark report",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu'] or 'unknown CPU'}), {m['platform']}, "
        f"Python {m['python']}, datarax at commit {m.get('git_commit', 'unknown')}. Scale "
        f"`{report['scale']}`; every repetition of every contender runs in a fresh process, "
        "order rotated per repetition (repetitions per case in its heading). Medians shown; "
        "ratios (× floor) are medians over repetitions of the rate divided by the "
        "plain-numpy floor's rate in the same repetition.",
        "",
        "*Whole epoch* = records / time from data-in-memory to the last batch materialised "
        "(pipeline build, compile, worker start-up and the short last batch included). "
        "*Steady* = records after the first batch / time after the first batch. "
        "*Spawn→first* = process start to first batch, imports included. *CPU s* = CPU time (all threads, finished child processes) "
        "the epoch used; *× floor (CPU)* = the floor's CPU time / this contender's (work per "
        "CPU second, which other load on the machine disturbs far less than wall time; "
        "child processes still running at the end, e.g. Grain's mp workers, are not "
        "counted). *Peak RSS* = the process's peak resident memory (or its largest "
        "finished child's) up to the end of the epoch, imports and data included "
        "(the check after it is not counted). *Load* = the "
        "machine's 1-minute load average during the run (median of runs): above the CPU "
        "count, other work shared the cores and the numbers are noisier (the Load "
        "section lists every such run; a row's load is flagged with ⚠).",
        "",
    ]
    lines += load_lines(report)
    cores = _cores(report)
    if report.get("targets"):
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in report["targets"]:
            lines.append(f"| {t['target']} | {t['value']} | {'yes' if t['met'] else '**no**'} |")
        lines.append("")
    for label, case in report["vision"].items():
        c = case["case"]
        lines += [
            f"## {label}: {c['records']:,} records, batch {c['batch_size']}, "
            f"{max((len(v) for v in case['runs'].values()), default=0)} repetitions",
            "",
            "| contender | whole epoch rec/s | × floor | steady rec/s | × floor | first batch s "
            "| spawn→first s | CPU s | × floor (CPU) | peak RSS MB | load | check |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for name, row in case["summary"].items():
            if "epoch_rate" not in row:
                lines.append(f"| {name} | - | - | - | - | - | - | - | - | - | - | {row['status']} |")
                continue
            lines.append(
                f"| {name} | {row['epoch_rate']:,.0f} | {_fmt(row.get('epoch_ratio'), '.2f')} "
                f"| {row['steady_rate']:,.0f} | {_fmt(row.get('steady_ratio'), '.2f')} "
                f"| {_fmt(row['first_batch_s'], '.3f')} | {_fmt(row['spawn_to_first_batch_s'], '.2f')} "
                f"| {_fmt(row.get('cpu_s'), '.2f')} | {_fmt(row.get('cpu_ratio'), '.2f')} "
                f"| {_fmt(row.get('peak_rss_mb'), '.0f')} | {_fmt(row.get('load_avg_1m'), '.1f')}"
                f"{' ⚠' if (row.get('load_avg_1m') or 0) > cores else ''} "
                f"| {row['status']} (flips {row['flip_fraction']:.3f}) |"
            )
        lines.append("")
        stats = case["summary"].get("datarax", {}).get("pipeline_stats")
        if stats:
            lines += ["datarax `pipeline.stats()` (last run):", "", "```",
                      json.dumps(stats, indent=1, default=str)[:3000], "```", ""]
    if report.get("imports"):
        imp = report["imports"]
        lines += ["## W3 imports", ""]
        if "error" in imp:
            lines += [f"import probe failed: {imp['error']}", ""]
        else:
            lines += [f"`import jax`: {imp['jax_s']:.2f} s; importing datarax's public modules "
                      f"after it adds {imp['datarax_extra_s']:.2f} s (medians, wall)."]
            if "datarax_extra_cpu_s" in imp:
                lines += ["", f"In CPU time: jax {imp['jax_cpu_s']:.2f} s; datarax adds "
                          f"{imp['datarax_extra_cpu_s']:.2f} s, of which flax.nnx (a dependency) "
                          f"{imp['flax_nnx_cpu_s']:.2f} s and datarax's own modules "
                          f"{imp['datarax_own_cpu_s']:.2f} s."]
            lines.append("")
    for wl, ext in report.get("external", {}).items():
        lines += [f"## {wl}: {ext['what']}", "", f"Status: **{ext['status']}** ({ext['script']})"]
        if ext.get("load_avg_1m"):
            before, after = ext["load_avg_1m"]
            flag = " ⚠ above the core count" if max(before, after) > cores else ""
            lines += ["", f"Load (1-minute average) before → after: {before:.2f} → {after:.2f}{flag}"]
        if ext.get("note"):
            lines += ["", ext["note"]]
        if ext.get("data") is not None:
            lines += ["", "```json", json.dumps(ext["data"], indent=1, default=str)[:6000], "```"]
        elif ext.get("stdout"):
            lines += ["", "```", ext["stdout"].strip()[-4000:], "```"]
        lines.append("")
    lines += ["## Versions", "", "| package | version |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report["versions"].items()]
    lines += ["", "Contenders:", ""]
    lines += [f"- **{c.name}**: {c.note}" for c in CONTENDERS.values()]
    return "\n".join(lines) + "\n"


def chart(report: dict[str, Any], path: Path) -> bool:
    """Grouped bars: whole-epoch and steady rate / floor, per contender and case."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cases = list(report["vision"].items())
    if not cases:
        return False
    fig, axes = plt.subplots(len(cases), 1, figsize=(10, 3.2 * len(cases)), squeeze=False)
    for ax, (label, case) in zip(axes[:, 0], cases):
        names = [n for n, r in case["summary"].items() if "epoch_ratio" in r]
        epoch = [case["summary"][n]["epoch_ratio"] for n in names]
        steady = [case["summary"][n]["steady_ratio"] for n in names]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], epoch, width=0.4, label="whole epoch")
        ax.bar([x + 0.2 for x in xs], steady, width=0.4, label="steady")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(list(xs), names)
        ax.set_ylabel("× numpy floor")
        ax.set_title(label)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md and report.png into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report["targets"] = targets(report)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    paths["json"].write_text(json.dumps(report, indent=1, default=str))
    paths["md"].write_text(markdown(report))
    if chart(report, out_dir / "report.png"):
        paths["png"] = out_dir / "report.png"
    return paths


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs (e.g. W1-W5 and W6 run separately); later wins."""
    out = dict(reports[0])
    out["vision"] = {}
    out["external"] = {}
    out["workloads"] = []
    for report in reports:
        out["vision"].update(report.get("vision", {}))
        out["external"].update(report.get("external", {}))
        out["workloads"] += [w for w in report.get("workloads", []) if w not in out["workloads"]]
        if report.get("imports"):
            out["imports"] = report["imports"]
    out["merged_from"] = [
        {"started": r.get("started"), "commit": r["machine"].get("git_commit"),
         "workloads": r.get("workloads")} for r in reports
    ]
    out["machine"] = dict(reports[-1]["machine"])
    out["machine"]["git_commit"] = "; ".join(
        f"{m['commit']} ({','.join(m['workloads'] or [])})" for m in out["merged_from"]
    )
    for case in out["vision"].values():  # recompute with this version's summary
        case["summary"] = summarize_case(case["runs"])
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.report A.json [B.json ...] --out DIR``: merge and rewrite."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    merged = merge([json.loads(Path(p).read_text()) for p in args.reports])
    for path in write(merged, Path(args.out)).values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

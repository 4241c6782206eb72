"""W8 harness: floor and datarax serve the same records in the same order, the same-work
check refuses a pass that drops or repeats records, and the window measure is right.
No timing asserts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import w8_mixture as W  # noqa: E402


def test_floor_and_datarax_give_the_same_batches():
    sources = W.make_sources(1000, 4)
    assert [len(s["id"]) for s in sources] == [500, 300, 200]
    floor = list(W.run_floor(sources, 64))
    datarax = list(W.run_datarax(sources, 64))
    assert len(floor) == len(datarax) == 16
    for a, b in zip(floor, datarax):
        assert np.array_equal(a["id"], b["id"]) and np.array_equal(a["x"], b["x"])


def test_main_reports_same_work_and_ratios(tmp_path):
    out = tmp_path / "w8.json"
    assert W.main(["--records", "2000", "--contenders", "floor,datarax", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["results"]["floor"]["same_work"] and data["results"]["datarax"]["same_work"]
    assert data["results"]["datarax"]["records"] == 2000
    assert set(data["ratios"]) == {"datarax / floor", "datarax / floor, median of repetitions",
                                   "datarax / floor, per repetition",
                                   "datarax / floor CPU, median of repetitions"}
    assert data["results"]["datarax"]["cpu_seconds"] > 0


def test_repetitions_alternate_and_each_gets_a_ratio(tmp_path, monkeypatch):
    order: list[str] = []
    real = W.timed_pass

    def noting(name, sources, batch):
        order.append(name)
        return real(name, sources, batch)

    monkeypatch.setattr(W, "timed_pass", noting)
    out = tmp_path / "w8.json"
    assert W.main(["--records", "1000", "--contenders", "floor,datarax", "--repeats", "3",
                   "--json", str(out)]) == 0
    assert order == ["floor", "datarax", "datarax", "floor", "floor", "datarax"]
    data = json.loads(out.read_text())
    per_rep = data["ratios"]["datarax / floor, per repetition"]
    seconds = [data["results"][n]["seconds_all"] for n in ("floor", "datarax")]
    assert per_rep == [f / d for f, d in zip(*seconds)]
    assert data["ratios"]["datarax / floor, median of repetitions"] == float(np.median(per_rep[1:]))


def test_paired_rounds_read_a_dotted_metric():
    from benchmarks.paired_ab import metric_of

    result = {"ratios": {"datarax / floor, median of repetitions": 0.75}, "a": {"b": 2}}
    assert metric_of(result, "ratios.datarax / floor, median of repetitions") == 0.75
    assert metric_of(result, "a.b") == 2.0


def test_same_work_and_window_checks_catch_wrong_passes(monkeypatch):
    def dropping(sources, batch):
        for b in W.run_floor(sources, batch):
            yield {k: v[1:] for k, v in b.items()}  # one record lost per batch

    monkeypatch.setitem(W.CONTENDERS, "dropping", dropping)
    r = W.timed_pass("dropping", W.make_sources(1000, 4), 100)
    assert r["records"] == 990 and r["id_sum"] != sum(range(1000))
    ids = np.concatenate([np.zeros(10_000, np.int64), np.full(10_000, 700)])
    # the last window is all source 1 (weight 0.3): its share is 1, off by 0.7
    assert abs(W.window_deviation(ids, [500, 800]) - 0.7) < 1e-9

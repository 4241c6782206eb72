"""``Pipeline(sharding=...)`` under two real JAX processes built with a setting that
differs between them: refused on both when built, naming the setting (it used to
hang in the first collective, or join shares of two different orders); built alike,
``scan`` is refused (one process only); a build whose peer process is gone fails at
once, saying so."""

from __future__ import annotations

from pathlib import Path

from jax_processes import run_jax_processes

HERE = Path(__file__).resolve().parent


def test_a_pipeline_built_otherwise_on_another_process_is_refused_on_every_process(tmp_path):
    results = run_jax_processes(HERE / "agreement_worker.py", 2, tmp_path,
                                lambda port, i, out: [str(port), str(i), str(out)])
    # the same settings: 12 records, 6 a share, 3 global batches of 2 + 2 records
    assert results[0]["same"] == results[1]["same"]
    assert [len(batch) for batch in results[0]["same"]] == [4, 4, 4]
    assert sorted(sum(results[0]["same"], [])) == list(range(12))
    for result in results:  # the fused scan runs in one process only
        assert result["same scan"] == ("ConfigError: Pipeline.scan with sharding= runs in one "
                                       "process only; under several processes iterate the "
                                       "pipeline (each process contributes its share).")
    wanted = {
        "batch_size": "batch_size is 2 on process 0 but 4 on process 1",
        "seed": "source.seed is 5 on process 0 but 6 on process 1",
        "records": "num_records is 12 on process 0 but 14 on process 1",
    }
    for case, words in wanted.items():
        for result in results:
            assert result[case].startswith("ConfigError: Pipeline(sharding=...) under several "
                                           f"processes: {words}."), result[case]
            assert "Every process must build the same pipeline" in result[case]
    # Refused on process 1 before the comparison: process 0 gets its error, not a hang.
    own = ("ConfigError: Pipeline shard_count=2 over MemorySource's 1 record: each "
           "process's share is 1 // 2 = 0 records")
    assert results[1]["refused"].startswith(own), results[1]["refused"]
    assert results[0]["refused"].startswith(
        "ConfigError: Pipeline(sharding=...) under several processes: process 1 could not "
        f"build this pipeline ({own}"), results[0]["refused"]
    assert "Fix what process 1 names" in results[0]["refused"]
    # Process 1 gone (as if it died): process 0's build fails at once, saying so.
    assert results[0]["peer gone"].startswith(
        "RuntimeError: Pipeline(sharding=...) under several processes: exchanging with the "
        "other 1 process failed ("), results[0]["peer gone"]
    assert "a process that died, failed earlier or took another path" in results[0]["peer gone"]
    assert "peer gone" not in results[1]

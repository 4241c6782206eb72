"""The `make demo` job: trains, checkpoints mid-epoch and verifies the resume."""

from datarax.cli.demo import run_demo
from datarax.cli.main import main


def test_demo_trains_and_resumes_exactly(capsys):
    metrics = run_demo(epochs=2, batch_size=64, seed=0, progress=False)
    printed = capsys.readouterr().out
    assert metrics["resume_exact"] == 1.0
    assert 0.5 < metrics["accuracy"] <= 1.0  # chance is 0.1
    assert "identical: True" in printed and "test accuracy:" in printed


def test_cli_runs_the_demo(capsys):
    assert main(["demo", "--epochs", "2", "--no-progress"]) == 0
    assert "records/s" in capsys.readouterr().out


def test_demo_trains_with_scan_and_resumes_exactly(capsys):
    metrics = run_demo(epochs=2, batch_size=64, seed=0, progress=False, scan=True)
    printed = capsys.readouterr().out
    assert metrics["resume_exact"] == 1.0
    assert 0.5 < metrics["accuracy"] <= 1.0
    assert "(Pipeline.scan)" in printed and "replayed 11 batches, identical: True" in printed



def test_cli_runs_the_demo_with_scan(capsys):
    assert main(["demo", "--epochs", "2", "--no-progress", "--scan"]) == 0
    printed = capsys.readouterr().out
    assert "(Pipeline.scan)" in printed and "identical: True" in printed

"""README.md is the first page a user reads: its opening commands and its code run as shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_commands_for_a_fresh_machine():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands == ["make demo", "make test"]
    assert README.index("```bash") < README.index("```python")


# ~3 s (two compiled steps on 32x32x3 images); docs/getting-started.md's first pipeline,
# the same program on smaller data, runs in the default suite (tests/docs).
@pytest.mark.slow
def test_readme_python_block_runs_and_keeps_its_promises(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) == 1
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(blocks[0], "README.md", "exec", dont_inherit=True), namespace)  # noqa: S102
    pipeline, batch, state = namespace["pipeline"], namespace["batch"], namespace["state"]
    assert len(pipeline) == 8  # 1000 records in batches of 128
    assert batch["image"].shape == (104, 32, 32, 3) and batch["image"].dtype == np.float32
    saved = json.dumps(state)  # "a few hundred bytes of JSON"
    assert 100 <= len(saved) < 1000, len(saved)
    assert state["epoch"] == 2 and state["position"] == 128


def test_the_core_install_lists_pyproject_core_dependencies():
    """The install lines of README.md and docs/getting-started.md name the packages
    ``pip install -e .`` brings, as pyproject.toml declares them (the README named Grain
    after it had left the core)."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = sorted(re.split(r"[<>=!~\[ ]", spec)[0].lower() for spec in declared)
    for page in (README, (ROOT / "docs" / "getting-started.md").read_text()):
        listed = re.search(r"^pip install -e \.\s+# core: (.*)$", page, re.M).group(1)
        assert sorted(name.strip() for name in listed.split(",")) == names

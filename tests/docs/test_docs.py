"""The documentation cannot rot: every ```python block in docs/**/*.md runs, and the
site builds with ``mkdocs build --strict``.

Code blocks: the ```python blocks of one page run in order, in one namespace (a later
block may use what an earlier one defined), with a fresh temporary folder as the
working directory, as a reader's script runs them: ``__name__ == "__main__"``, so a
block that starts worker processes shows the guard a script needs. A block that cannot run as it stands (network, data the reader
does not have, a fragment of the reader's own program) is skipped by the line
``<!-- skip-test: reason -->`` (or ``<!-- skip-test -->``) directly above its opening
fence. docs/contributing.md states the rule for writers.

Printed output: what a block says a ``print`` prints (its trailing comment, or the
comment lines right below it) is what it prints — a line of the block's output, or
that line followed by ``": "`` and words about it. A comment with ``..`` in it elides
and is not compared.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SKIP = re.compile(r"^\s*<!--\s*skip-test(:[^>]*)?\s*-->\s*$")


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(line, code, skipped)`` of each ```python block of a Markdown page.

    Example:
        >>> page = ("x\\n<!-- skip-test: net -->\\n```python\\na = 1\\n```\\n"
        ...         "```python\\nb = 2\\n```\\n")
        >>> python_blocks(page)
        [(3, 'a = 1\\n', True), (6, 'b = 2\\n', False)]
    """
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, language = match.group(1), match.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
            body.append(lines[i][len(indent) :])
            i += 1
        i += 1
        if language == "python":
            skipped = start > 0 and SKIP.match(lines[start - 1]) is not None
            blocks.append((start + 1, "\n".join(body) + "\n", skipped))
    return blocks


def stated_outputs(code: str) -> list[str]:
    """What a block's comments say its ``print`` calls print (see the module docstring).

    Example:
        >>> stated_outputs("print(n)  # 3: three\\nprint(s)\\n# [1, 2]\\n# [..., 9]\\nx = 1  # 4\\n")
        ['3: three', '[1, 2]']
    """
    stated = []
    lines = code.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("print("):
            continue
        comment = re.search(r"\)\s+#\s?(.*)$", line)
        said = [comment.group(1)] if comment else []
        for below in lines[i + 1 :]:
            if not below.lstrip().startswith("#"):
                break
            said.append(below.lstrip()[1:].strip())
        stated += [text.strip() for text in said if ".." not in text]
    return stated


def is_printed(stated: str, printed: list[str]) -> bool:
    """``stated`` is a printed line, alone or followed by ``": "`` and words about it."""
    return any(line and (stated == line or stated.startswith(line + ": ")) for line in printed)


# devices.md's outputs are those of eight devices: tests/devices/eight/check_docs.py checks them.
OUTPUTS_CHECKED_ELSEWHERE = {"devices.md"}

PAGES = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def test_python_blocks_parser_reads_fences_and_skip_markers():
    page = (
        "text\n```python\nx = 1\n```\n<!-- skip-test -->\n```python\nraise SystemExit\n```\n"
        "```bash\nls\n```\n    ```python\n    y = 2\n    ```\n"
    )
    assert python_blocks(page) == [
        (2, "x = 1\n", False),
        (6, "raise SystemExit\n", True),
        (12, "y = 2\n", False),
    ]


def test_stated_outputs_are_compared_with_the_printed_lines():
    code = ("print(a)  # 10 7\nprint(b)\n# epoch 0\n# [1, 2]\nx = 2  # not a print\n"
            "print(c)  # [[0, ...], [9]]\n")
    assert stated_outputs(code) == ["10 7", "epoch 0", "[1, 2]"]
    assert is_printed("10 7", ["10 7"]) and is_printed("[0, 2]: the cursor", ["x", "[0, 2]"])
    assert not is_printed("10 7", ["10 8"])
    assert not is_printed("10 7", ["10"])  # a longer statement is not a printed prefix
    assert not is_printed("anything", [""])


def test_every_page_with_code_is_collected():
    assert {p.relative_to(DOCS).as_posix() for p in PAGES} >= {
        "index.md",
        "getting-started.md",
        "cli.md",
        "monitoring.md",
        "devices.md",
        "sources/index.md",
        "sources/array_record.md",
        "sources/hf.md",
        "sources/tfds.md",
        "reliability.md",
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_python_blocks_of_page_run(page, tmp_path, monkeypatch):
    blocks = python_blocks(page.read_text())
    runnable = [(line, code) for line, code, skipped in blocks if not skipped]
    if not runnable:
        pytest.skip("no runnable python block")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}  # a block under the script guard runs
    for line, code in runnable:
        where = f"{page.relative_to(ROOT)}:{line}"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                # dont_inherit: the page runs as a reader runs it, not under this file's __future__ flags
                exec(compile(code, where, "exec", dont_inherit=True), namespace)  # noqa: S102
            except Exception as err:
                pytest.fail(f"the python block at {where} raised {type(err).__name__}: {err}")
        if page.name in OUTPUTS_CHECKED_ELSEWHERE:
            continue
        printed = [line.strip() for line in out.getvalue().splitlines()]
        for stated in stated_outputs(code):
            assert is_printed(stated, printed), (
                f"the python block at {where} says it prints {stated!r}; it printed {printed}")


def test_site_builds_strictly(tmp_path):
    """What `make docs` runs; strict: a broken link or unresolved API reference fails."""
    env = dict(
        os.environ,
        NO_MKDOCS_2_WARNING="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
    assert (tmp_path / "site" / "assets" / "benchmark-report.png").read_bytes()[
        :8
    ] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_broken_link_fails_the_strict_build(tmp_path):
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs", symlinks=False)
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    with open(copy / "docs" / "cli.md", "a") as page:
        page.write("\nSee [nowhere](no-such-page.md).\n")
    env = dict(
        os.environ,
        NO_MKDOCS_2_WARNING="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr

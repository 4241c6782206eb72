"""New processes without a new interpreter start-up each (``tests/conftest.py`` puts this
folder on ``sys.path``).

``ForkedRuns(imports)`` starts one Python process that runs ``imports`` (say ``import jax``)
and nothing else: no JAX backend, no compile, no pipeline. Each ``start(script, ...)`` forks
it; the fork runs the script as ``__main__`` with the given arguments, writes to its own
stdout and stderr files and exits as a process does (``atexit`` and all). Tests that need
several fresh processes pay the interpreter start-up and the imports once, not once each.

    with ForkedRuns("import json", folder) as runs:
        pid = runs.start(script, ["arg"], folder / "out.txt")
        assert runs.wait(pid) == 0
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

SERVER = """
import json, os, runpy, sys
exec(sys.argv[1])  # the imports the runs share; nothing else is done before a fork
ended = {}  # pid: exit code, of the runs waited for
for line in sys.stdin:
    ask = json.loads(line)
    if "wait" in ask:  # {"wait": pid, "block": bool}: its exit code, or null if running
        pid = ask["wait"]
        if pid not in ended:
            done, status = os.waitpid(pid, 0 if ask["block"] else os.WNOHANG)
            if done:
                ended[pid] = os.waitstatus_to_exitcode(status)
        print(json.dumps(ended.get(pid)), flush=True)
        continue
    pid = os.fork()
    if pid == 0:  # the run: its own stdin, stdout and stderr, then the script as __main__
        for fd, path, mode in ((0, os.devnull, "r"), (1, ask["stdout"], "w"),
                               (2, ask["stderr"], "w")):
            if fd == 2 and path == ask["stdout"]:
                os.dup2(1, 2)  # one file for both, as stderr=STDOUT
                continue
            with open(path, mode) as f:
                os.dup2(f.fileno(), fd)
        sys.argv = ask["argv"]
        runpy.run_path(ask["argv"][0], run_name="__main__")
        sys.exit(0)
    print(json.dumps(pid), flush=True)
# stdin closed: every run was waited for or killed, and this process only imported, so it
# ends without the interpreter's teardown of what it imported (a few tenths of a second)
sys.stderr.flush()
os._exit(0)
"""


class ForkedRuns:
    """A process that ran ``imports`` once and forks a new process for each run."""

    def __init__(self, imports: str, folder: Path, env: dict[str, str] | None = None,
                 timeout: float = 300) -> None:
        self.timeout = timeout
        self.running: set[int] = set()  # started, not yet seen to end
        self.log = folder / "forked_runs.stderr"
        self.stderr = open(self.log, "w")
        self.server = subprocess.Popen(
            [sys.executable, "-c", SERVER, imports], env=env, cwd=folder, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
        )

    def _ask(self, ask: dict) -> int | None:
        self.server.stdin.write(json.dumps(ask) + "\n")
        self.server.stdin.flush()
        ready = select.select([self.server.stdout], [], [], self.timeout)[0]
        answer = self.server.stdout.readline() if ready else ""
        assert answer, f"the forking process did not answer {ask}: {self.log.read_text()[-3000:]}"
        return json.loads(answer)

    def start(self, script: Path, args: list[str], stdout: Path,
              stderr: Path | None = None) -> int:
        """Starts ``python script *args`` as a fork; returns its process id."""
        pid = self._ask({"argv": [str(script), *args], "stdout": str(stdout),
                         "stderr": str(stderr or stdout)})
        self.running.add(pid)
        return pid

    def wait(self, pid: int) -> int:
        """Waits for run ``pid``; its exit code, or minus the signal that ended it."""
        code = self._ask({"wait": pid, "block": True})
        self.running.discard(pid)
        return code

    def poll(self, pid: int) -> int | None:
        """Run ``pid``'s exit code as ``wait`` gives it, or None while it runs."""
        code = self._ask({"wait": pid, "block": False})
        if code is not None:
            self.running.discard(pid)
        return code

    def close(self) -> None:
        """Kills the runs still going (a test that failed midway), then ends the process."""
        for pid in self.running:  # not yet waited for, so not yet a reused id
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.server.stdin.close()
            self.server.wait(timeout=60)
        finally:
            self.server.kill()  # a no-op once it has ended
            self.stderr.close()

    def __enter__(self) -> ForkedRuns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

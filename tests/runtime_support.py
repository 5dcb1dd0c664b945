"""Helpers for the runtime, approval and crash tests: the demo tools and their ledger, driving a run
through its approvals, the CLI in a subprocess, and a run advanced in a forked child that the fault
hook kills."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from plangate.runtime.host import RunReport, Runtime, RunError
from plangate.runtime.journal import Journal
from plangate.runtime.tools import ToolRegistry

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DEMO_TOOLS = EXAMPLES / "tools" / "local.py"
BASELINE = ROOT / "policies" / "baseline.policy"
ROLES = ("operator", "approver")


def demo_registry() -> ToolRegistry:
    registry = ToolRegistry()
    problems = registry.load(str(DEMO_TOOLS))
    assert not problems, problems
    return registry


def baseline() -> list[tuple[str, str]]:
    return [("policies/baseline.policy", BASELINE.read_text(encoding="utf-8"))]


def example(name: str) -> tuple[str, str]:
    """(text, file name) of `examples/<name>.plan`."""
    return (EXAMPLES / f"{name}.plan").read_text(encoding="utf-8"), f"examples/{name}.plan"


def ledger(demo_dir: Path) -> list[dict]:
    path = demo_dir / "ledger.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@contextmanager
def runtime_at(journal_path: Path, registry: ToolRegistry | None = None, **options) -> Iterator[Runtime]:
    """A runtime on its own journal connection, closed on leaving (so that a fork holds none)."""
    with Journal.open(journal_path) as journal:
        yield Runtime(journal, registry if registry is not None else demo_registry(), **options)


def approve_waiting(runtime: Runtime, run: str) -> list[str]:
    """Approve every step that waits, as two distinct people of each role it needs."""
    view = runtime.view(run)
    approved = []
    for step_id, state in view.states.items():
        if state != "waiting_for_approval":
            continue
        for role in ROLES:
            for number in (1, 2):
                try:
                    runtime.approve(run, step_id, f"{role}-{number}", role)
                except RunError as error:
                    assert "needs no approval by role" in str(error), error
                    break
        approved.append(step_id)
    return approved


def drive(runtime: Runtime, run: str, rounds: int = 10) -> RunReport:
    """Advance, approving whatever waits, until the run no longer pauses for approvals."""
    report = runtime.advance(run)
    for _ in range(rounds):
        if report.state != "paused" or not approve_waiting(runtime, run):
            return report
        report = runtime.advance(run)
    return report


def cli(*args: str, cwd: Path, demo_dir: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    """`plangate ARGS` in a subprocess, acting on `demo_dir`."""
    env = {**os.environ, "PLANGATE_DEMO_DIR": str(demo_dir)}
    env.pop("PLANGATE_FAULT", None)
    if fault is not None:
        env["PLANGATE_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "plangate.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def run_id(output: str) -> str:
    """`plangate run` prints the run id alone on its first line."""
    lines = output.splitlines()
    assert lines and lines[0].strip() and " " not in lines[0].strip(), f"no run id in:\n{output}"
    return lines[0].strip()


def advance_in_child(journal_path: Path, run: str, registry: ToolRegistry, fault: str) -> int:
    """Advance `run` in a forked child with `PLANGATE_FAULT=fault`; its exit code, or minus the
    signal that ended it (-9 when the fault hook killed it). The parent must hold no open journal
    connection across the fork (SQLite's rule), hence `runtime_at`."""
    return in_child(journal_path, registry, lambda runtime: runtime.advance(run).exit_code, fault)


def in_child(journal_path: Path, registry: ToolRegistry, action: Callable[[Runtime], int],
             fault: str | None = None) -> int:
    """`action(runtime)` in a forked child (with `PLANGATE_FAULT=fault` if given); its exit code
    (what `action` returned), or minus the signal that ended it. A tool may end the child with
    `os._exit`: that code is returned."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in os._exit or SIGKILL
        code = 70
        try:
            if fault is not None:
                os.environ["PLANGATE_FAULT"] = fault
            with Journal.open(journal_path) as journal:
                code = action(Runtime(journal, registry))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

"""The end-to-end corpus: `examples/corpus/<case>/` holds a plan, its policy and what must happen.

`expected.json` says, for `plangate check PLAN --policy POLICY`, the exit code and the errors and
warnings as (name, line) pairs; and, where the case runs (`run`), how `plangate run` with the demo
tools (`examples/tools/local.py`) ends: the exit code, the run's state and each step's state. A
`then` block approves the listed (step, role) pairs, resumes, and says how the run ends after.
Each case is run through the command line, as a user runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plangate.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "corpus"
TOOLS = ROOT / "examples" / "tools" / "local.py"
CASES = sorted(path for path in CORPUS.iterdir() if (path / "expected.json").is_file())


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main([str(arg) for arg in argv])
    return code, capsys.readouterr().out


def test_the_corpus_has_cases():
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES, ids=lambda path: path.name)
def test_check(case, capsys):
    expected = json.loads((case / "expected.json").read_text(encoding="utf-8"))["check"]
    code, out = cli(capsys, "check", case / "plan.plan", "--policy", case / "policy.policy", "--format", "json")
    report = json.loads(out)
    found = sorted([item["name"], item["span"]["start"]["line"]] for item in report["diagnostics"]
                   if item["severity"] in ("error", "warning"))
    assert found == sorted(expected["diagnostics"]), out
    assert code == expected["exit"]


@pytest.mark.parametrize("case", [case for case in CASES
                                  if "run" in json.loads((case / "expected.json").read_text(encoding="utf-8"))],
                         ids=lambda path: path.name)
def test_run(case, capsys, demo, tmp_path):
    expected = json.loads((case / "expected.json").read_text(encoding="utf-8"))["run"]
    journal = tmp_path / "journal.db"
    code, out = cli(capsys, "run", case / "plan.plan", "--policy", case / "policy.policy", "--tools", TOOLS,
                    "--journal", journal)
    run = out.splitlines()[0].strip()
    while True:
        assert code == expected["exit"], out
        code, out = cli(capsys, "status", run, "--format", "json", "--journal", journal)
        status = json.loads(out)
        assert status["state"] == expected["state"]
        assert {step: info["state"] for step, info in status["steps"].items()} == expected["steps"]
        if "then" not in expected:
            break
        expected = expected["then"]
        for step, role in expected["approve"]:
            assert cli(capsys, "approve", run, step, "--as", "alice", "--role", role, "--yes",
                       "--journal", journal)[0] == 0
        code, out = cli(capsys, "resume", run, "--tools", TOOLS, "--journal", journal)

"""The command line: exit codes of `check`, `--output`, every `--format`, `--version`, `explain`.

Most tests call `plangate.cli.main(argv)` in process (what the console script calls); the ones about
start-up and the installed script run it as a child process. The plans and the policy are written
here, small and stable, so that the exit codes do not move when the examples change; the README's
quick-start command over the real examples is checked too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from plangate import __version__
from plangate.cli import main

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

POLICY = """\
policy tools {
  version 1
  tool ci.build { risk read_only args { commit: string } }
  tool http.get { risk read_only }
  unknown_tools deny
}
"""

CLEAN = """\
plan clean {
  version 1
  step build {
    call ci.build(commit: "abc123")
    risk read_only
  }
  check probe after build {
    call   http.get(url: "https://example.com/" + build.result.id)
    expect result.status == 200
  }
}
"""

WARNING_ONLY = """\
plan warned {
  version 1
  decision "which commit" pending
  step build {
    call ci.build(commit: "abc123")
    risk read_only
  }
}
"""

BROKEN = """\
plan broken {
  version 1
  step build after biuld {
    call ci.build(commit: "abc123")
    risk read_only
  }
}
"""

FORMATS = ("text", "json", "sarif", "github", "junit")


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the plans and the policy above; the tests run inside it (relative names)."""
    for name, text in {"tools.policy": POLICY, "clean.plan": CLEAN, "warn.plan": WARNING_ONLY,
                       "broken.plan": BROKEN}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit:  # argparse exits on usage errors
        code = exit.code if isinstance(exit.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plangate_command() -> list[str]:
    script = Path(sys.executable).with_name("plangate")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "plangate.cli"]


# ---------------------------------------------------------------------------------- exit codes

def test_clean_plan_exits_0(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "clean.plan", "--policy", "tools.policy")
    assert code == 0, out + err
    assert "no problems in 1 file" in out


def test_clean_plan_with_strict_still_exits_0(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--strict", "clean.plan", "--policy", "tools.policy")
    assert code == 0, out + err


def test_notes_do_not_fail_strict(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--strict", "clean.plan")  # no policy: a `no-policy` note
    assert code == 0
    assert "no-policy" in out


def test_errors_exit_1(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "broken.plan", "--policy", "tools.policy")
    assert code == 1
    assert "broken.plan:3:20: error[PG101] unknown-step" in out
    assert "help: the plan has no other step" in out  # not `build` itself: it cannot come after itself


def test_warnings_exit_0_but_1_with_strict(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "warn.plan", "--policy", "tools.policy")
    assert code == 0
    assert "warning[PG107] open-decision" in out
    code, out, _ = run(capsys, "check", "--strict", "warn.plan", "--policy", "tools.policy")
    assert code == 1
    assert "1 warning in 1 file" in out


def test_one_bad_file_among_good_ones_exits_1(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "clean.plan", "warn.plan", "broken.plan", "--policy", "tools.policy")
    assert code == 1
    assert "1 error, 1 warning in 3 files" in out


@pytest.mark.parametrize("argv, needle", [
    (["check", "missing.plan", "--policy", "tools.policy"], "no such file `missing.plan`"),
    (["check", "clean.plan", "--policy", "missing.policy"], "no such file `missing.policy`"),
    (["check", "."], "is a folder"),
    (["check", "binary.plan"], "not UTF-8"),
])
def test_unreadable_input_exits_2(files: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                  needle: str) -> None:
    (files / "binary.plan").write_bytes(b"plan p {\xff\xfe\x00}")
    code, out, err = run(capsys, *argv)
    assert code == 2, out + err
    assert "unreadable-input" in out
    assert needle in out
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    [],
    ["check"],
    ["check", "clean.plan", "--format", "yaml"],
    ["check", "clean.plan", "--no-such-flag"],
    ["frobnicate"],
])
def test_usage_errors_exit_2(files: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "usage: plangate" in out + err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, said", [
    (["status", "r\udcff"], "the run id `r\\udcff`"),
    (["log", "r\udcff"], "the run id `r\\udcff`"),
    (["approve", "r1", "s\udcff", "--as", "al", "--role", "ops", "--yes"], "the step id `s\\udcff`"),
    (["approve", "r1", "s", "--as", "al\udcff", "--role", "ops", "--yes"], "the name given to `--as` `al\\udcff`"),
    (["reconcile", "r1", "s", "--happened", "--as", "b\udcff"], "the name given to `--as` `b\\udcff`"),
])
def test_an_argument_holding_a_byte_that_is_not_utf8_exits_2(files: Path, capsys: pytest.CaptureFixture[str],
                                                            argv: list[str], said: str) -> None:
    """A command line in another encoding reaches Python with each such byte as a lone surrogate:
    no run, step or name can hold one (the journal is UTF-8 JSON), so it is refused by name."""
    code, out, err = run(capsys, *argv, "--journal", str(files / "journal.db"))
    assert code == 2 and err.startswith(f"plangate: {said} holds a byte that is not UTF-8 text")
    assert "internal error" not in err and not (files / "journal.db").exists()


def test_policy_given_as_plan_is_a_diagnostic(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "clean.plan", "--policy", "clean.plan")
    assert code == 1
    assert "wrong-document-kind" in out


# ---------------------------------------------------------------------------------- --output

def test_output_writes_the_report_to_a_file(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, printed, _ = run(capsys, "check", "broken.plan", "--policy", "tools.policy", "--format", "json")
    assert code == 1
    code, out, err = run(capsys, "check", "broken.plan", "--policy", "tools.policy", "--format", "json",
                         "--output", "report.json")
    assert code == 1  # the exit code is the check's, not the write's
    assert out == "" and err == ""
    written = (files / "report.json").read_text(encoding="utf-8")
    assert json.loads(written) == json.loads(printed)


def test_output_text_has_no_color(files: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR")
    code, _, _ = run(capsys, "check", "broken.plan", "--color", "always", "--output", "report.txt")
    assert code == 1
    assert "\x1b[" not in (files / "report.txt").read_text(encoding="utf-8")


def test_output_to_an_unwritable_place_exits_2(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "folder").mkdir()
    code, _, err = run(capsys, "check", "clean.plan", "--output", "folder")
    assert code == 2
    assert "cannot write `folder`" in err
    assert "Traceback" not in err


def test_output_dash_is_standard_output(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, printed, _ = run(capsys, "check", "broken.plan", "--policy", "tools.policy", "--format", "json")
    assert run(capsys, "check", "broken.plan", "--policy", "tools.policy", "--format", "json",
               "--output", "-") == (code, printed, "")
    assert not (files / "-").exists()


@pytest.mark.parametrize("command", [["check", "broken.plan", "--policy", "tools.policy"], ["test", "tools.policy"]])
@pytest.mark.parametrize("target", ["broken.plan", "./tools.policy"])
def test_output_never_replaces_an_input_file(files: Path, capsys: pytest.CaptureFixture[str],
                                             command: list[str], target: str) -> None:
    before = {name: (files / name).read_bytes() for name in ("broken.plan", "tools.policy")}
    code, out, err = run(capsys, *command, "--output", target)
    if target.lstrip("./") not in command:  # not an input of this command: written as asked
        assert code in (0, 1) and (files / target).read_bytes() != before[target.lstrip("./")]
        return
    assert (code, out) == (2, "") and f"`--output {target}` is one of the files to check" in err
    assert {name: (files / name).read_bytes() for name in before} == before


# ---------------------------------------------------------------------------------- formats

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("plan", ["clean.plan", "warn.plan", "broken.plan"])
def test_every_format_is_parseable(files: Path, capsys: pytest.CaptureFixture[str], fmt: str, plan: str) -> None:
    code, out, err = run(capsys, "check", plan, "--policy", "tools.policy", "--format", fmt)
    assert code in (0, 1), err
    assert err == ""
    if fmt == "json":
        report = json.loads(out)
        assert report["version"] == 1
        assert report["summary"]["files"] == 1
        assert report["summary"]["errors"] == (1 if plan == "broken.plan" else 0)
        for item in report["diagnostics"]:
            assert set(item) >= {"code", "name", "severity", "message", "file", "span", "notes", "help"}
            assert item["span"]["start"]["line"] >= 1 and item["span"]["start"]["column"] >= 1
    elif fmt == "sarif":
        report = json.loads(out)
        assert report["version"] == "2.1.0"
        assert report["runs"][0]["tool"]["driver"]["name"] == "plangate"
        if SARIF_SCHEMA.is_file():
            jsonschema = pytest.importorskip("jsonschema")
            jsonschema.validate(report, json.loads(SARIF_SCHEMA.read_text(encoding="utf-8")))
    elif fmt == "junit":
        root = ET.fromstring(out)
        assert root.tag in ("testsuites", "testsuite")
        failures = root.iter("failure")
        assert (len(list(failures)) > 0) == (plan == "broken.plan")
    elif fmt == "github":
        for line in out.splitlines():
            assert line.startswith("::"), line
        assert ("::error " in out) == (plan == "broken.plan")
        assert ("::warning " in out) == (plan == "warn.plan")
    else:
        assert out.rstrip().splitlines()[-1].endswith("in 1 file")


def test_json_span_points_at_the_offending_name(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "check", "broken.plan", "--policy", "tools.policy", "--format", "json")
    (item,) = json.loads(out)["diagnostics"]
    assert item["code"] == "PG101" and item["name"] == "unknown-step" and item["severity"] == "error"
    assert item["file"] == "broken.plan"
    assert item["span"] == {"start": {"line": 3, "column": 20}, "end": {"line": 3, "column": 25}}


def test_a_byte_order_mark_is_no_column_of_line_1(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "bom.plan").write_bytes("\ufeffplan p { step s after nope { call t.x() } }\n".encode("utf-8"))
    _, out, _ = run(capsys, "check", "bom.plan", "--format", "json")
    (item,) = [d for d in json.loads(out)["diagnostics"] if d["name"] == "unknown-step"]
    assert item["span"] == {"start": {"line": 1, "column": 23}, "end": {"line": 1, "column": 27}}


# ---------------------------------------------------------------------------------- the examples

def test_readme_quick_start_command_is_clean(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`plangate check examples/*.plan --policy policies/baseline.policy` exits 0 (the README's)."""
    plans = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "examples").glob("*.plan"))
    if not plans or not (ROOT / "policies" / "baseline.policy").is_file():
        pytest.skip("examples/*.plan or policies/baseline.policy are not in this checkout")
    monkeypatch.chdir(ROOT)
    code, out, err = run(capsys, "check", *plans, "--policy", "policies/baseline.policy", "--color", "never")
    assert code == 0, out + err
    assert f"no problems in {len(plans)} files" in out


# ---------------------------------------------------------------------------------- --version, explain

_STARTUP_PROBE = textwrap.dedent("""
    import json, sys
    from plangate.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code
    heavy = sorted(name for name in ("lark", "pydantic", "networkx", "z3", "celpy", "sqlite3")
                   if name in sys.modules)
    print(json.dumps({"code": code, "heavy": heavy}))
""")


def _probe(*argv: str) -> tuple[dict, str]:
    completed = subprocess.run([sys.executable, "-c", _STARTUP_PROBE, *argv], capture_output=True, text=True,
                               timeout=60)
    assert "Traceback" not in completed.stderr, completed.stderr
    lines = completed.stdout.strip().splitlines()
    return json.loads(lines[-1]), "\n".join(lines[:-1])


def test_version_does_not_import_the_engine() -> None:
    result, printed = _probe("--version")
    assert result["code"] == 0
    assert printed.strip() == f"plangate {__version__}"
    assert result["heavy"] == [], f"`plangate --version` imported {result['heavy']}"


def test_explain_does_not_import_the_parser() -> None:
    result, printed = _probe("explain", "PG101")
    assert result["code"] == 0
    assert "unknown-step" in printed
    assert "lark" not in result["heavy"] and "z3" not in result["heavy"], result["heavy"]


def test_version_through_the_installed_script() -> None:
    completed = subprocess.run([*plangate_command(), "--version"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0
    assert completed.stdout.strip() == f"plangate {__version__}"


@pytest.mark.parametrize("query", ["PG101", "pg101", "unknown-step", " PG101 ", "UNKNOWN-STEP", "Unknown_Step"])
def test_explain_by_code_or_name(capsys: pytest.CaptureFixture[str], query: str) -> None:
    code, out, _ = run(capsys, "explain", query)
    assert code == 0
    assert out.startswith("## PG101 unknown-step") or out.startswith("PG101 unknown-step")


def test_explain_every_contract_name(capsys: pytest.CaptureFixture[str]) -> None:
    names = ["syntax-error", "unknown-step", "duplicate-step", "dependency-cycle", "unknown-tool", "arg-type",
             "risk-underdeclared", "approval-missing", "approval-insufficient", "check-missing",
             "rollback-missing", "idempotency-missing", "retry-without-idempotency", "limit-exceeded",
             "policy-deny", "policy-deny-possible", "budget-exceeded", "budget-unknown", "open-decision",
             "currency-mismatch"]
    for name in names:
        code, out, _ = run(capsys, "explain", name)
        assert code == 0, name
        assert name in out.splitlines()[0], (name, out.splitlines()[0])


def test_explain_a_retired_code_names_its_successor_and_a_near_miss_gets_a_suggestion(capsys) -> None:
    code, out, _ = run(capsys, "explain", "PG104")
    assert code == 0 and out.startswith("`PG104` is retired: it is now PG103 `dependency-cycle`\n\n## PG103")
    code, _, err = run(capsys, "explain", "aproval-missing")
    assert code == 2 and err.strip().endswith("did you mean `approval-missing`?")
    code, _, err = run(capsys, "explain", "pg31")
    assert code == 2 and "did you mean `PG3" in err  # a code is suggested as codes are written


@pytest.mark.parametrize("query", ["PG999", "no-such-thing", ""])
def test_explain_unknown_code_exits_2(capsys: pytest.CaptureFixture[str], query: str) -> None:
    code, out, err = run(capsys, "explain", query)
    assert code == 2
    assert out == ""
    assert "is not a diagnostic code or name" in err


def test_python_dash_m_plangate_is_the_same_command():
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-m", "plangate", "explain", "PG101"], capture_output=True, text=True)
    assert completed.returncode == 0 and completed.stdout.startswith("## PG101 unknown-step")
    unknown = subprocess.run([sys.executable, "-m", "plangate", "explain", b"\xff\x1b[31m"], capture_output=True)
    assert unknown.returncode == 2  # a byte that is not UTF-8 as `\xNN`, a control by its picture
    assert unknown.stderr.decode() == "plangate: `\\xff␛[31m` is not a diagnostic code or name\n"


def test_a_policy_that_cannot_be_read_is_named_in_the_no_policy_note(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "clean.plan", "--policy", "missing.policy")
    assert code == 2
    assert "no-policy: the policy `missing.policy` could not be read" in out
    assert "no policy was given" not in out
    code, out, _ = run(capsys, "check", "clean.plan", "--policy", "missing.policy", "--format", "json")
    names = [d["name"] for d in json.loads(out)["diagnostics"]]
    assert code == 2 and "no-policy" in names  # in every format, unlike the note that none was given
    code, out, _ = run(capsys, "check", "clean.plan", "--format", "json")
    assert code == 0 and json.loads(out)["diagnostics"] == []
    # one of several: the others' checks ran, and the note says which did not
    (files / "broken.policy").write_text("policy broken { deny }\n")
    for missing in ("missing.policy", "broken.policy"):
        code, out, _ = run(capsys, "check", "clean.plan", "--policy", "tools.policy", "--policy", missing,
                           "--format", "json")
        [note] = [d for d in json.loads(out)["diagnostics"] if d["name"] == "no-policy"]
        assert note["message"] == (f"the policy `{missing}` could not be read: its tools, risks, approvals, rules and "
                                   "limits were not checked; the plans were checked against `tools.policy` alone")
    code, out, _ = run(capsys, "check", "clean.plan", "--policy", "tools.policy", "--policy", "tools.policy")
    assert "no-policy" not in out


def test_the_summary_counts_every_plan_given_even_one_that_cannot_be_read(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "missing.plan", "clean.plan", "--policy", "tools.policy", "--format", "json")
    assert code == 2 and json.loads(out)["summary"]["files"] == 2


def test_the_solver_time_bound_is_a_flag(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "check", "clean.plan", "--policy", "tools.policy", "--solver-time", "2.5")[0] == 0
    for bad in ("0", "-1", "601", "soon"):
        with pytest.raises(SystemExit) as exited:
            main(["check", "clean.plan", "--solver-time", bad])
        assert exited.value.code == 2


def test_the_budget_unknown_example_of_the_docs_is_unknown_with_a_tiny_solver_time(files: Path, capsys) -> None:
    section = (ROOT / "docs" / "diagnostics.md").read_text().split("## PG402 budget-unknown")[1]
    plan = section.split("```text\n")[1].split("```")[0]
    (files / "example.plan").write_text(plan)
    code, out, _ = run(capsys, "check", "example.plan", "--solver-time", "0.0001", "--format", "json")
    [found] = json.loads(out)["diagnostics"]
    assert code == 2 and found["name"] == "budget-unknown" and found["span"]["start"] == {"line": 3, "column": 13}
    assert found["message"].startswith("cannot tell whether the worst-case cost stays within the plan's budget of `40 usd`")
    code, out, _ = run(capsys, "check", "example.plan", "--format", "json")
    assert code == 0 and json.loads(out)["diagnostics"] == []


def test_versions_of_one_plan_are_checked_together_without_a_duplicate_warning(tmp_path) -> None:
    """Reviewing a new version beside the old one is normal input (`--strict` must not fail on it);
    the same id and version twice is `duplicate-plan`."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    def plan(version: str) -> str:
        return f'plan rollout {{ {version} step a {{ call ci.build(commit: "abc") risk read_only }} }}'

    versions = check_sources([SourceFile("v1.plan", plan("version 1")), SourceFile("v2.plan", plan("version 2"))])
    assert [d.name for d in versions.diagnostics] == []
    for version in ("version 2", ""):
        twice = check_sources([SourceFile("a.plan", plan(version)), SourceFile("b.plan", plan(version))])
        assert [d.name for d in twice.diagnostics] == ["duplicate-plan"]


def test_a_file_given_twice_is_checked_once(tmp_path, monkeypatch) -> None:
    from plangate.driver import check

    (tmp_path / "a.plan").write_text('plan p { step a { call t.x() risk read_only retry 1 } }\n')
    (tmp_path / "p.policy").write_text("policy q { tool t.* { risk read_only } limit retries <= 0 }\n")
    monkeypatch.chdir(tmp_path)
    result = check(["a.plan", "./a.plan", str(tmp_path / "a.plan")], ["p.policy", "./p.policy"])
    assert [d.name for d in result.diagnostics] == ["limit-exceeded"]
    assert result.plan_files == ["a.plan"] and result.files == ["a.plan", "p.policy"]


def test_run_with_an_empty_run_id_is_refused(tmp_path, capsys) -> None:
    plan = tmp_path / "p.plan"
    plan.write_text('plan p { step a { call t.x() risk read_only } }\n')
    policy = tmp_path / "p.policy"
    policy.write_text("policy p { tool t.* { risk read_only } }\n")
    tools = tmp_path / "tools.py"
    tools.write_text("from plangate import tool\n\n@tool('t.x')\ndef x() -> dict:\n    return {}\n")
    assert main(["run", str(plan), "--policy", str(policy), "--tools", str(tools), "--run", "",
                 "--journal", str(tmp_path / "j.db")]) == 2
    assert "`--run` needs a run id" in capsys.readouterr().err
    assert not (tmp_path / "j.db").exists()


def test_a_check_calling_an_uncatalogued_tool_says_why_it_counts_as_irreversible() -> None:
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    result = check_sources([SourceFile("c.plan", "plan c { check v { call mystery.tool() } }")],
                           [SourceFile("u.policy", "policy u { unknown_tools warn tool t.* { risk read_only } }")])
    (message,) = [d.message for d in result.diagnostics if d.name == "check-not-read-only"]
    assert message == "check `v` calls `mystery.tool`, which the catalogue does not list, so it counts as `irreversible`"


def test_the_script_ends_a_reading_command_with_its_output_written(tmp_path) -> None:
    """`console` ends a reading command with `os._exit`: everything must be written first."""
    report = tmp_path / "report.json"
    completed = subprocess.run([sys.executable, "-m", "plangate", "check", str(ROOT / "examples" / "deploy.plan"),
                                "--policy", str(ROOT / "policies" / "baseline.policy"), "--format", "json",
                                "--output", str(report)], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(report.read_text())["summary"] == {"errors": 0, "warnings": 0, "files": 1}
    piped = subprocess.run([sys.executable, "-m", "plangate", "explain", "PG101"], capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0 and piped.stdout.startswith("## PG101 unknown-step") and piped.stdout.endswith("\n")


def test_a_closed_stdout_changes_nothing_about_the_exit_code(files: Path) -> None:
    """`plangate check … >&-`: the report has nowhere to go, but the command still does its job (and
    writes `--output`), with its exit code and no traceback."""
    import os

    def closed_stdout(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([*plangate_command(), *argv], cwd=files, capture_output=False, text=True,
                              stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))

    clean = closed_stdout("check", "clean.plan", "--policy", "tools.policy")
    assert (clean.returncode, clean.stderr) == (0, "")
    broken = closed_stdout("check", "broken.plan", "--format", "sarif", "--output", "out.sarif")
    assert (broken.returncode, broken.stderr) == (1, "")
    assert json.loads((files / "out.sarif").read_text(encoding="utf-8"))["version"] == "2.1.0"


def test_a_file_name_that_is_not_utf8_is_shown_with_its_bytes_escaped(files: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import os

    name = os.fsdecode(b"bad\xffname.plan")  # as the command line gives it: a surrogate for the byte
    (files / name).write_text(BROKEN, encoding="utf-8")
    for fmt in FORMATS:
        code, out, err = run(capsys, "check", name, "--policy", "tools.policy", "--format", fmt)
        assert code == 1 and err == "", (fmt, err)
        out.encode("utf-8")  # no surrogate reaches the output
        assert any(shown in out for shown in ("bad\\xffname.plan", "bad\\\\xffname.plan", "bad%5Cxffname.plan")), fmt
    code, _, _ = run(capsys, "check", name, "--format", "json", "--output", "report.json")
    assert code == 1 and json.loads((files / "report.json").read_text(encoding="utf-8"))["summary"]["errors"] == 1


def test_a_policy_given_among_the_plans_and_with_policy_is_read_once(files: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (files / "bad.policy").write_text("policy bad {\n  tool a.b { risk nope }\n}\n", encoding="utf-8")
    code, out, _ = run(capsys, "check", "bad.policy", "clean.plan", "--policy", "bad.policy", "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["summary"]["files"] == 2
    assert [d["file"] for d in report["diagnostics"] if d["name"] == "unknown-risk"] == ["bad.policy"]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_file_that_claims_no_size_is_read_only_up_to_the_bound() -> None:
    from plangate.driver import read_source

    found = read_source("/dev/zero")
    assert not hasattr(found, "text") and found.name == "input-too-large"
    assert "more than 33,554,432 bytes" in found.message


def test_the_approval_prompt_shows_reordering_and_invisible_characters_as_escapes() -> None:
    """`"\u202e\u2066ecila"` displays as `alice…` reversed on a terminal that applies bidi: what is
    approved must read as it is."""
    from plangate.diagnostics.render import unspoofed

    assert unspoofed('pay.send({"to":"\u202e\u2066ecila\u200b"})') == 'pay.send({"to":"\\u202e\\u2066ecila\\u200b"})'
    assert unspoofed("café ✓ 日本") == "café ✓ 日本"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_output_the_system_refuses_is_named_as_such_not_an_internal_error() -> None:
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "plangate", "check", "examples/deploy.plan", "--format", "json"],
                              stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.startswith("plangate: could not finish: ")
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_read_once_written_and_not_waited_for_for_ever(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`mkfifo f.plan; plangate check f.plan` used to wait forever in `open()`: a pipe nothing writes
    to is `unreadable-input` after `PIPE_WAIT`; one a writer opens a little later is read."""
    import threading

    from plangate import driver

    monkeypatch.setattr(driver, "PIPE_WAIT", 0.3)
    pipe = tmp_path / "f.plan"
    os.mkfifo(pipe)
    for argv in (["check", str(pipe)], ["check", "--policy", str(pipe), str(pipe)], ["test", str(pipe)]):
        code, out, _ = run(capsys, *argv)
        assert code == 2 and "is a named pipe that nothing wrote to within 0.3 seconds" in out, (argv, out)

    def write() -> None:
        time.sleep(0.1)  # after the reader has opened the pipe
        with open(pipe, "w") as handle:
            handle.write("plan p { step a { call t.x() } }")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, out, _ = run(capsys, "check", str(pipe))
    writer.join(5)
    assert code == 0 and "no policy was given" in out, out
    if os.path.isdir("/dev/fd"):  # an anonymous pipe (`<(make-plan)`) is waited for as long as its writer takes
        reading, writing = os.pipe()

        def slow() -> None:
            time.sleep(0.6)  # longer than PIPE_WAIT
            with open(writing, "w") as handle:
                handle.write("plan p { step a { call t.x() } }")

        producer = threading.Thread(target=slow, daemon=True)
        producer.start()
        try:
            code, out, _ = run(capsys, "check", f"/dev/fd/{reading}")
        finally:
            producer.join(5)
            os.close(reading)
        assert code == 0 and "no policy was given" in out, out
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(20):  # a folder given as a plan leaks no descriptor
        run(capsys, "check", str(tmp_path))
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) <= before + 1


def _tool_run(tmp_path: Path, tool_body: str) -> list[str]:
    """A plan of one read-only step `s` calling `t.x`, whose body is `tool_body`, and the
    `run` arguments for it (run id `r1`, journal `j.db` in `tmp_path`)."""
    (tmp_path / "p.plan").write_text("plan p { step s { call t.x() risk read_only } }\n")
    (tmp_path / "p.policy").write_text("policy p { tool t.* { risk read_only } }\n")
    (tmp_path / "tools.py").write_text("from plangate import tool\n\n\n@tool('t.x')\ndef x() -> dict:\n"
                                       + textwrap.indent(tool_body, "    ") + "\n")
    return ["run", str(tmp_path / "p.plan"), "--policy", str(tmp_path / "p.policy"), "--tools",
            str(tmp_path / "tools.py"), "--run", "r1", "--journal", str(tmp_path / "j.db")]


def test_run_status_and_log_show_what_a_tool_said_as_text_a_terminal_cannot_act_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tool's error message reached the terminal raw: an escape sequence (`\\x1b[31m`) was acted
    on and a newline broke the step's line. Control characters are shown as `check` shows them,
    and reordering ones as `approve` does; JSON keeps the text as it is."""
    journal = ["--journal", str(tmp_path / "j.db")]
    assert main(_tool_run(tmp_path, 'raise RuntimeError("boom\\n\\x1b[31mred\\u202eevil")')) == 1
    shown = "RuntimeError: boom␊␛[31mred\\u202eevil"
    outputs = [capsys.readouterr().out]
    assert main(["status", "r1", *journal]) == 0
    outputs.append(capsys.readouterr().out)
    assert main(["log", "r1", *journal]) == 0
    outputs.append(capsys.readouterr().out)
    for out in outputs:
        assert "\x1b" not in out and "\u202e" not in out and shown in out, out
    for out in outputs[:2]:
        (line,) = [line for line in out.splitlines() if line.startswith("  s ")]
        assert line.endswith(f"attempt 1 failed: {shown}")
    assert main(["status", "r1", "--format", "json", "--reasons", *journal]) == 0
    reasons = json.loads(capsys.readouterr().out)["reasons"]
    assert reasons["s"] == "attempt 1 failed: RuntimeError: boom\n\x1b[31mred\u202eevil"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only directory: permissions do not apply")
def test_status_and_log_read_a_journal_in_a_directory_they_cannot_write(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`status` and `log` open the journal read-only, yet failed in a read-only directory: SQLite could
    not create the WAL index (`-shm`) beside it."""
    archive = tmp_path / "archive"
    archive.mkdir()
    arguments = _tool_run(tmp_path, "return {'id': 'x-1'}")
    arguments[-1] = str(archive / "j.db")
    done = subprocess.run([*plangate_command(), *arguments], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # in a process of its own: its connections are closed when it ends
    assert sorted(os.listdir(archive)) == ["j.db", "j.db.locks"]
    os.chmod(archive, 0o555)
    try:
        assert main(["status", "r1", "--journal", arguments[-1]]) == 0
        assert "run r1: succeeded" in capsys.readouterr().out
        assert main(["log", "r1", "--verify", "--journal", arguments[-1]]) == 0
        assert "result ref=x-1" in (out := capsys.readouterr().out) and "journal verified" in out
        assert sorted(os.listdir(archive)) == ["j.db", "j.db.locks"]
    finally:
        os.chmod(archive, 0o755)


def test_flags_are_not_abbreviated_and_an_unknown_flag_shows_its_commands_usage(files: Path, capsys) -> None:
    code, out, err = run(capsys, "check", "clean.plan", "--out", "r.json")
    assert code == 2 and "unrecognized arguments: --out r.json" in err and not (files / "r.json").exists()
    assert err.startswith("usage: plangate check ")
    code, _, err = run(capsys, "check", "--bogus", "clean.plan")
    assert code == 2 and err.startswith("usage: plangate check ") and "--bogus" in err
    code, _, err = run(capsys, "policy", "diff", "a.policy", "b.policy", "--bogus")
    assert code == 2 and err.startswith("usage: plangate policy diff ")
    code, _, err = run(capsys, "check", "clean.plan", "--form", "json")
    assert code == 2 and "--form" in err


@pytest.mark.parametrize("typed, meant", [("PG1O1", "PG101"), ("PG3O4", "PG304"), ("pg3l1", "PG311"),
                                          ("aproval-missing", "approval-missing"), ("PG31", None)])
def test_explain_suggests_the_code_fewest_edits_away(capsys, typed: str, meant: str | None) -> None:
    code, _, err = run(capsys, "explain", typed)
    assert code == 2
    if meant is not None:
        assert err.strip().endswith(f"did you mean `{meant}`?"), err


def test_a_suggestion_from_no_candidates_is_none() -> None:
    from plangate.suggest import closest

    assert closest("step", []) is None and closest("stpe", ["step"]) == "step"


def test_test_listings_and_policy_diffs_show_control_characters_as_check_does(tmp_path, monkeypatch, capsys) -> None:
    """A test's or a rule's name is the policy's text: an escape sequence in it must not reach the
    terminal (rewrite a FAIL line to read `ok`, set the window's title)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spoof.policy").write_text('policy p {\n  tool t.l { risk read_only }\n  deny "no" when call.tool == "t.l"\n'
                                           '  test "\\rok \\u001b[K" {\n    call t.l()\n    expect allow\n  }\n}\n')
    (tmp_path / "old.policy").write_text('policy p {\n  tool t.l { risk read_only }\n'
                                         '  deny "x\\u001b]0;pwned\\u0007" when call.tool == "t.l"\n}\n')
    (tmp_path / "new.policy").write_text('policy p {\n  tool t.l { risk read_only }\n}\n')
    code, out, _ = run(capsys, "test", "spoof.policy")
    assert code == 1 and "FAIL p › ␍ok ␛[K" in out and "\x1b" not in out and "\r" not in out
    code, out, _ = run(capsys, "policy", "diff", "old.policy", "new.policy")
    assert code == 0 and "deny rule `x␛]0;pwned␇` was removed" in out and "\x1b" not in out and "\x07" not in out

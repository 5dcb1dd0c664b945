"""The interpreter end to end, through the Python API and the `plangate` command line.

The demo tools (examples/tools/local.py) act on a temporary folder and write `ledger.jsonl`, one
line per real effect: the tests read it as the outside world's record of what happened. A few tests
use tools of their own (a `Toolbox` whose answers and failures the test sets) under a small policy.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import closing
from typing import Any

import pytest

from plangate.runtime.canonical import content_hash
from plangate.runtime.host import RunError, Runtime
from plangate.runtime.tools import ToolRegistry, tool
from runtime_support import (
    DEMO_TOOLS,
    ROOT,
    baseline,
    cli,
    example,
    ledger,
    run_id,
    runtime_at,
)

TEST_POLICY = """
policy runtime_tests {
  version 1
  tool t.read  { risk read_only }
  tool t.write { risk reversible_write }
  tool t.send  { risk external_write }
  unknown_tools deny
  require approval when step.risk >= external_write by role "operator" within 1h
  limit concurrency <= 4
}
"""


class Toolbox:
    """Tools whose answers the test sets (`values`, `failures`) and whose calls it sees (`calls`)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.failures: dict[str, int] = {}
        self.calls: list[tuple[str, str, str | None]] = []

    def registry(self) -> ToolRegistry:
        @tool("t.read")
        def read(key: str, **_ignored: Any) -> dict:
            self.calls.append(("t.read", key, None))
            self._maybe_fail(key)
            return {"value": self.values.get(key)}

        @tool("t.write")
        def write(name: str, idempotency_key: str, value: Any = None) -> dict:
            self.calls.append(("t.write", name, idempotency_key))
            self._maybe_fail(name)
            return {"name": name, "value": value}

        @tool("t.send")
        def send(to: str, idempotency_key: str) -> dict:
            self.calls.append(("t.send", to, idempotency_key))
            return {"to": to}

        registry = ToolRegistry()
        for each in (read, write, send):
            registry.register(each)
        return registry

    def _maybe_fail(self, name: str) -> None:
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise ConnectionError(f"{name} is unreachable")


@pytest.fixture
def runtime(tmp_path, demo):
    with runtime_at(tmp_path / "journal.db") as opened:
        yield opened


@pytest.fixture
def box(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    toolbox = Toolbox()
    with runtime_at(tmp_path / "journal.db", toolbox.registry()) as opened:
        yield toolbox, opened


def plan_text(body: str, version: int = 1) -> str:
    return f"plan t {{\n  version {version}\n{body}\n}}\n"


def start_plan(runtime, body: str) -> str:
    return runtime.start(plan_text(body), "t.plan", [("t.policy", TEST_POLICY)])


def kinds(runtime, run: str, kind: str, step: str | None = None) -> list:
    return [r for r in runtime.journal.records(run) if r.kind == kind and (step is None or r.step == step)]


def crash_after_intent(runtime, run: str, name: str, key: str) -> None:
    """The journal as a crash right after step `w`'s intent leaves it: its call `t.write(name)`,
    with `key`, may or may not have happened, and no answer is recorded."""
    runtime.journal.append(run, "intent", {"tool": "t.write", "args": {"name": name}, "idempotency_key": key,
                                           "attempt": 1}, step="w")


def write_with_hook(reconcile, calls: list[str] | None = None) -> ToolRegistry:
    """A registry of one tool, `t.write(name)` (each name it is called with appended to `calls`),
    whose reconcile hook is `reconcile`."""

    @tool("t.write")
    def write(name: str, idempotency_key: str) -> dict:
        if calls is not None:
            calls.append(name)
        return {"name": name}

    write.reconcile(reconcile)
    registry = ToolRegistry()
    registry.register(write)
    return registry


def advance_dying_at(runtime, monkeypatch, run: str, step: str, boundary: str) -> None:
    """`advance` in a process that dies at `step`'s `boundary` (the fault hook raises there, as
    `PLANGATE_FAULT` would kill it); the hook is then put back."""
    real = runtime.fault

    def fault(at_step: str, at_boundary: str) -> None:
        if (at_step, at_boundary) == (step, boundary):
            raise KeyboardInterrupt
        real(at_step, at_boundary)

    monkeypatch.setattr(runtime, "fault", fault)
    with pytest.raises(KeyboardInterrupt):
        runtime.advance(run)
    monkeypatch.setattr(runtime, "fault", real)


def cli_in(tmp_path, demo):
    """`plangate …` in a subprocess on this test's journal and demo folder."""
    journal = str(tmp_path / "journal.db")

    def call(*args: str, fault: str | None = None):
        command = args[0]
        extra = ["--journal", journal] if command in ("run", "resume", "approve", "reconcile", "status",
                                                      "log", "abort") else []
        return cli(*args, *extra, cwd=ROOT, demo_dir=demo, fault=fault)

    return call


# ------------------------------------------------------------------ the demo, to success
def test_deploy_runs_to_success_through_its_two_approvals(runtime, demo):
    run = runtime.start(*example("deploy"), baseline())
    report = runtime.advance(run)
    assert report.state == "paused" and report.exit_code == 3
    assert report.steps["route"]["state"] == "waiting_for_approval"
    assert 'role "operator"' in report.steps["route"]["reason"]
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]

    runtime.approve(run, "route", "alice", "operator")
    report = runtime.advance(run)
    assert report.state == "paused" and report.steps["announce"]["state"] == "waiting_for_approval"

    runtime.approve(run, "announce", "alice", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded" and report.exit_code == 0
    assert all(info["state"] == "succeeded" and info["attempts"] == 1 for info in report.steps.values())
    effects = ledger(demo)
    assert [e["tool"] for e in effects] == ["deploy.preview", "dns.route", "chat.post"]
    assert effects[1]["args"] == {"host": "v2.example.com", "target": effects[0]["result"]["id"]}
    evidence = kinds(runtime, run, "evidence")
    assert len(evidence) == 7 and all(e.body["passed"] for e in evidence)
    assert {e.body["step"] for e in evidence} == {"build", "unit_tests", "preview", "preview_up", "route_live",
                                                  "announced"}


def test_cli_run_pauses_then_approve_and_resume_go_on_to_success(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    tools = str(DEMO_TOOLS)
    started = plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", tools)
    assert started.returncode == 3, started.stderr
    run = run_id(started.stdout)
    assert 'waiting for 1 more approval(s) by role "operator"' in started.stdout

    approved = plangate("approve", run, "route", "--as", "alice", "--role", "operator", "--yes")
    assert approved.returncode == 0, approved.stderr
    preview = ledger(demo)[0]["result"]["id"]
    assert f'dns.route({{"host":"v2.example.com","target":"{preview}"}})' in approved.stdout
    assert "version 4" in approved.stdout

    resumed = plangate("resume", run, "--tools", tools)
    assert resumed.returncode == 3 and "announce" in resumed.stdout  # announce asks an operator too
    assert plangate("approve", run, "announce", "--as", "alice", "--role", "operator", "--yes").returncode == 0
    finished = plangate("resume", run, "--tools", tools)
    assert finished.returncode == 0, finished.stdout + finished.stderr

    status = plangate("status", run, "--format", "json")
    assert status.returncode == 0
    shown = json.loads(status.stdout)
    assert set(shown) == {"run", "state", "steps"} and shown["run"] == run and shown["state"] == "succeeded"
    assert list(shown["steps"]) == ["build", "unit_tests", "preview", "preview_up", "route", "route_live",
                                    "announce", "announced"]
    for info in shown["steps"].values():
        assert info == {"state": "succeeded", "attempts": 1}  # exactly the contract's shape
    with_reasons = json.loads(plangate("status", run, "--format", "json", "--reasons").stdout)
    assert set(with_reasons) == {"run", "state", "steps", "reasons", "message"}
    assert with_reasons["steps"] == shown["steps"]
    assert with_reasons["message"] == "every step succeeded or was skipped"


def test_approve_refuses_a_role_the_step_does_not_need(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    run = run_id(plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools",
                          str(DEMO_TOOLS), "--run", "r1").stdout)
    refused = plangate("approve", run, "route", "--as", "mallory", "--role", "intern", "--yes")
    assert refused.returncode == 2 and 'needs no approval by role "intern"' in refused.stderr
    assert 'it needs "operator"' in refused.stderr


# ------------------------------------------------------------------ decisions at run time
def test_a_deny_on_concrete_arguments_blocks_the_step_with_the_rules_reason(tmp_path, demo):
    plan = tmp_path / "query.plan"
    plan.write_text("""
plan query_from_note {
  version 1
  step load      { call notes.get(path: "nightly.sql") risk read_only }
  step run_query { call db.query(database: "orders", env: "prod", sql: load.result.text) risk read_only }
}
""")
    (demo / "notes").mkdir(parents=True)
    (demo / "notes" / "nightly.sql").write_text("DELETE FROM orders WHERE created_at < now()")
    plangate = cli_in(tmp_path, demo)
    result = plangate("run", str(plan), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "denied by `query-reads-only`: db.query is catalogued read_only" in result.stdout
    status = json.loads(plangate("status", run_id(result.stdout), "--format", "json").stdout)
    assert status["state"] == "blocked"
    assert status["steps"]["run_query"] == {**status["steps"]["run_query"], "state": "blocked", "attempts": 0}


def test_an_open_decision_pauses_the_run_before_any_step(tmp_path, demo):
    text, _ = example("deploy")
    plan = tmp_path / "undecided.plan"
    plan.write_text(text.replace('decision  "canary size" resolved "all of v2: it has no traffic yet"',
                                 'decision  "canary size" pending'))
    plangate = cli_in(tmp_path, demo)
    result = plangate("run", str(plan), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "the decision `canary size` is still open" in result.stdout
    assert ledger(demo) == []
    status = json.loads(plangate("status", run_id(result.stdout), "--format", "json").stdout)
    assert status["state"] == "paused"
    assert all(info["attempts"] == 0 for info in status["steps"].values())


def test_status_names_an_open_decision_and_how_a_new_version_settles_it(tmp_path, demo):
    text, _ = example("deploy")
    resolved = 'decision  "canary size" resolved "all of v2: it has no traffic yet"'
    undecided = tmp_path / "undecided.plan"
    undecided.write_text(text.replace(resolved, 'decision  "canary size" pending\n  decision "region" pending'))
    plangate = cli_in(tmp_path, demo)
    started = plangate("run", str(undecided), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS),
                       "--run", "r1")
    assert started.returncode == 3, started.stdout + started.stderr
    how = ("the decisions `canary size`, `region` are still open: settle them in a new version of the plan (a "
           "higher `version`) that marks each `resolved \"…\"`, then `plangate run NEW.plan --run r1 --policy … "
           "--tools …`")
    assert how in started.stdout
    status = plangate("status", "r1")
    assert status.returncode == 0 and how in status.stdout and "the run can go on" not in status.stdout
    shown = json.loads(plangate("status", "r1", "--format", "json", "--reasons").stdout)
    assert shown["state"] == "paused" and shown["reasons"] == {} and shown["message"] == how
    assert set(json.loads(plangate("status", "r1", "--format", "json").stdout)) == {"run", "state", "steps"}
    resumed = plangate("resume", "r1", "--tools", str(DEMO_TOOLS))
    assert resumed.returncode == 3 and how in resumed.stdout and ledger(demo) == []

    decided = tmp_path / "decided.plan"
    decided.write_text(text.replace("version   4", "version   5"))
    settled = plangate("run", str(decided), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS),
                       "--run", "r1")
    assert settled.returncode == 3 and "still open" not in settled.stdout  # on to `route`'s approval
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]


# ------------------------------------------------------------------ failures, retries, skips
@pytest.mark.parametrize("failures, attempts, state", [(99, 3, "failed"), (1, 2, "succeeded")])
def test_a_failing_tool_is_retried_up_to_retry_with_the_same_key(box, failures, attempts, state):
    toolbox, runtime = box
    toolbox.failures["disk"] = failures
    run = start_plan(runtime, """
  step save { call t.write(name: "disk", value: 1) risk reversible_write retry 2 idempotency "save-disk-1" }
""")
    report = runtime.advance(run)
    assert report.steps["save"] == {**report.steps["save"], "state": state, "attempts": attempts}
    assert toolbox.calls == [("t.write", "disk", "save-disk-1")] * attempts
    intents = kinds(runtime, run, "intent", "save")
    assert [i.body["attempt"] for i in intents] == list(range(1, attempts + 1))
    assert {i.body["idempotency_key"] for i in intents} == {"save-disk-1"}
    failed = kinds(runtime, run, "attempt_failed", "save")
    assert [f.body["error"] for f in failed] == ["ConnectionError: disk is unreachable"] * min(failures, attempts)
    assert report.exit_code == (1 if state == "failed" else 0)


def test_an_exception_naming_an_undecodable_file_fails_the_attempt_and_is_journaled(tmp_path):
    """`os.fsdecode` holds a byte that is not UTF-8 as a lone surrogate, which JSON in UTF-8 cannot
    keep: the message is journaled with the surrogate escaped, the attempt fails and is retried, and
    a reconcile hook's failure is journaled the same way."""
    undecodable = os.fsdecode(b"/data/\xff.json")
    attempts: list[str] = []

    @tool("t.read")
    def read(key: str) -> dict:
        attempts.append(key)
        if len(attempts) == 1:
            raise FileNotFoundError(f"cannot open {undecodable}")
        return {"value": 1}

    def hook(idempotency_key: str) -> dict | None:
        raise RuntimeError(f"cannot open {undecodable}")

    registry = ToolRegistry()
    registry.register(read)
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        run = start_plan(runtime, '  step look { call t.read(key: "a") retry 1 }')
        assert runtime.advance(run).state == "succeeded" and len(attempts) == 2
        (failed,) = kinds(runtime, run, "attempt_failed", "look")
        assert failed.body["error"] == "FileNotFoundError: cannot open /data/\\udcff.json"
    with runtime_at(tmp_path / "journal2.db", write_with_hook(hook)) as runtime:
        run = start_plan(runtime, '  step w { call t.write(name: "n") risk reversible_write idempotency "k" }')
        crash_after_intent(runtime, run, "n", "k")
        assert runtime.advance(run).steps["w"]["state"] == "outcome_unknown"
        assert kinds(runtime, run, "outcome_unknown", "w")[-1].body["reason"] == (
            "the call may have happened, and the reconcile hook failed: RuntimeError: cannot open /data/\\udcff.json "
            "(`plangate reconcile` settles it by hand)")


def test_a_retried_step_without_a_key_gets_one_stable_derived_key(box):
    toolbox, runtime = box
    toolbox.failures["cache"] = 1
    run = start_plan(runtime, '  step warm { call t.read(key: "cache") retry 1 }')
    assert runtime.advance(run).state == "succeeded" and len(toolbox.calls) == 2
    keys = [intent.body["idempotency_key"] for intent in kinds(runtime, run, "intent", "warm")]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith(f"{run}:warm:")


def test_duration_and_timestamp_arguments_reach_the_tool_as_their_canonical_text(box):
    toolbox, runtime = box
    run = start_plan(runtime, '  step w { call t.write(name: "n", value: [duration("90m"), '
                              'timestamp("2024-01-01T10:00:00+02:00")]) idempotency "k" }\n'
                              '  check v after w { call t.read(key: "n") }')
    assert runtime.advance(run).state == "succeeded"
    intent = kinds(runtime, run, "intent", "w")[0]
    assert intent.body["args"]["value"] == ["5400s", "2024-01-01T08:00:00Z"]


def test_a_failed_step_cancels_its_dependents_and_nothing_else(box):
    toolbox, runtime = box
    toolbox.failures["db"] = 99
    toolbox.values["x"] = 1
    run = start_plan(runtime, """
  step migrate  { call t.write(name: "db") risk reversible_write idempotency "m" }
  step verify   after migrate { call t.read(key: "x") }
  step announce { call t.write(name: "note", value: verify.result.value) risk reversible_write idempotency "a" }
  step side     { call t.read(key: "x") }
""")
    report = runtime.advance(run)
    states = {step: info["state"] for step, info in report.steps.items()}
    assert states == {"migrate": "failed", "verify": "cancelled", "announce": "cancelled", "side": "succeeded"}
    assert "`migrate` did not succeed (failed)" in report.steps["verify"]["reason"]
    assert report.state == "failed" and report.exit_code == 1
    assert [c[1] for c in toolbox.calls if c[0] == "t.write"] == ["db"]


@pytest.mark.parametrize("error_rate, ran, skipped", [
    (0.02, ["ticket", "ticketed"], ["page", "paged"]),
    (0.09, ["page"], ["ticket", "ticketed"]),
])
def test_when_false_skips_the_step_and_the_dependents_that_use_its_result(runtime, demo, error_rate, ran, skipped):
    demo.mkdir()
    (demo / "metrics.json").write_text(json.dumps({"service": "checkout", "error_rate": error_rate}))
    run = runtime.start(*example("incident_triage"), baseline())
    report = runtime.advance(run)
    for step in skipped:
        assert report.steps[step]["state"] == "skipped" and report.steps[step]["attempts"] == 0
    assert report.steps[skipped[0]]["reason"] == "`when` is false"
    assert "which was skipped" in report.steps[skipped[1]]["reason"]
    assert report.steps[ran[0]]["state"] in ("succeeded", "waiting_for_approval")
    if error_rate > 0.05:  # paging asks an operator
        assert report.state == "paused"
        runtime.approve(run, "page", "alice", "operator")
        report = runtime.advance(run)
    assert report.state == "succeeded"
    assert [e["tool"] for e in ledger(demo)] == ["tickets.create" if "ticket" in ran else "pager.page"]


def test_a_step_after_a_skipped_step_runs_when_it_does_not_use_its_result(box):
    toolbox, runtime = box
    toolbox.values["mode"] = "stop"
    run = start_plan(runtime, """
  step probe { call t.read(key: "mode") }
  step act   { when probe.result.value == "go"  call t.write(name: "act") risk reversible_write idempotency "act" }
  step use   { call t.write(name: "use", value: act.result.name) risk reversible_write idempotency "use" }
  step tidy  after act { call t.read(key: "tidy") }
""")
    report = runtime.advance(run)
    assert {s: i["state"] for s, i in report.steps.items()} == {
        "probe": "succeeded", "act": "skipped", "use": "skipped", "tidy": "succeeded"}
    assert report.state == "succeeded"


def test_a_failed_expect_writes_evidence_with_passed_false(box):
    toolbox, runtime = box
    toolbox.values["replicas"] = 2
    run = start_plan(runtime, """
  step count { call t.read(key: "replicas") retry 1 expect result.value == 3 }
""")
    report = runtime.advance(run)
    assert report.steps["count"]["state"] == "failed" and report.steps["count"]["attempts"] == 2
    assert "expectation failed: result.value == 3" in report.steps["count"]["reason"]
    evidence = [record.body for record in kinds(runtime, run, "evidence")]
    assert len(evidence) == 2
    for body in evidence:
        assert body["passed"] is False and body["step"] == "count"
        assert body["what"] == "expect result.value == 3" and body["observed"] == {"value": 2}
        assert body["proves"].endswith("does not hold") and body["when"] and body["how"]


# ------------------------------------------------------------------ budgets
def test_the_call_budget_stops_the_run_before_the_call_that_would_break_it(box):
    toolbox, runtime = box
    body = """
  budget { calls <= 4 }
  step a { call t.read(key: "a") }
  step b after a { call t.read(key: "%s") }
  step c after b { call t.read(key: "c") }
  step notify after c { call t.send(to: "ops") idempotency "notify" approval by role "operator" }
"""
    run = start_plan(runtime, body % "b")
    assert runtime.advance(run).steps["notify"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(body % "b2", version=2), "t.plan")  # `b` changed: its call runs again
    runtime.approve(run, "notify", "alice", "operator")
    report = runtime.advance(run)
    assert report.steps["b"] == {**report.steps["b"], "state": "succeeded", "attempts": 1}  # attempts of its new call
    assert report.steps["notify"]["state"] == "blocked"
    assert report.steps["notify"]["reason"] == "one more call would make 5, over the plan's budget of 4 calls"
    assert report.state == "blocked" and report.exit_code == 1
    assert [call[1] for call in toolbox.calls] == ["a", "b", "c", "b2"]
    assert len(kinds(runtime, run, "intent")) == 4


def test_the_cost_budget_stops_the_run_and_names_its_currency(box):
    toolbox, runtime = box
    body = """
  budget { cost <= 5 usd }
  step a { call t.read(key: "%s") cost 3 usd }
  step b after a { call t.send(to: "ops") idempotency "b" approval by role "operator" }
"""
    run = start_plan(runtime, body % "a")
    assert runtime.advance(run).steps["b"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(body % "a2", version=2), "t.plan")  # `a` changed: its call runs again
    report = runtime.advance(run)
    assert report.steps["a"]["state"] == "blocked"
    assert report.steps["a"]["reason"] == "one more call would bring the cost to 6 usd, over the plan's budget of 5 usd"


def test_the_time_budget_is_enforced_on_elapsed_time(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    now = [1_000_000.0]
    toolbox = Toolbox()
    with runtime_at(tmp_path / "journal.db", toolbox.registry(), clock=lambda: now[0]) as runtime:
        run = start_plan(runtime, """
  budget { time <= 10m }
  step a { call t.read(key: "a") time 1m }
  step b after a { call t.send(to: "ops") time 1m idempotency "b" approval by role "operator" }
""")
        assert runtime.advance(run).steps["b"]["state"] == "waiting_for_approval"
        now[0] += 11 * 60
        runtime.approve(run, "b", "alice", "operator")
        report = runtime.advance(run)
    assert report.steps["b"]["state"] == "blocked" and "over the plan's budget of 600s" in report.steps["b"]["reason"]
    assert [call[0] for call in toolbox.calls] == ["t.read"]


# ------------------------------------------------------------------ the journal
def test_log_verify_detects_an_edited_journal(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    run = run_id(plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools",
                          str(DEMO_TOOLS)).stdout)
    clean = plangate("log", run, "--verify")
    assert clean.returncode == 0 and "journal verified: the hash chain is whole" in clean.stdout
    timeline = json.loads(plangate("log", run, "--format", "json").stdout)
    assert [r["kind"] for r in timeline["records"]][:2] == ["run_started", "intent"]

    with closing(sqlite3.connect(tmp_path / "journal.db")) as raw:  # an edit past the journal's API
        raw.execute("DROP TRIGGER records_are_not_updated")
        changed = raw.execute("UPDATE records SET body = replace(body, 'pv-', 'px-') "
                              "WHERE kind = 'result' AND step = 'preview'").rowcount
        raw.commit()
    assert changed == 1
    shown = plangate("log", run)  # without --verify: shown, with a warning
    assert shown.returncode == 0 and "record-altered" not in shown.stdout
    assert f"warning: the journal of run `{run}` does not verify (1 problem(s))" in shown.stderr
    damaged = plangate("log", run, "--verify")
    assert damaged.returncode == 1 and "journal damaged" in damaged.stdout and "record-altered" in damaged.stdout
    refused = plangate("resume", run, "--tools", str(DEMO_TOOLS))
    assert refused.returncode == 2 and "is damaged" in refused.stderr

    with closing(sqlite3.connect(tmp_path / "journal.db")) as raw:  # every record gone, the head left
        raw.execute("DROP TRIGGER IF EXISTS records_are_not_deleted")
        raw.execute("DELETE FROM records WHERE run = ?", (run,))
        raw.commit()
    emptied = plangate("log", run, "--verify")
    assert emptied.returncode == 1 and "head-mismatch" in emptied.stdout, emptied.stdout + emptied.stderr
    assert plangate("log", "no-such-run").returncode == 2


def test_run_refuses_a_plan_with_errors_and_counts_the_plan_not_its_policies(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    bad = tmp_path / "bad.plan"
    bad.write_text('plan bad {\n  step a { call no.such() risk read_only }\n}\n')
    refused = plangate("run", str(bad), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS))
    assert refused.returncode == 2 and refused.stdout == ""
    assert "unknown-tool" in refused.stderr and "1 error in 1 file\n" in refused.stderr
    assert "the plan or its policies have errors; nothing was run" in refused.stderr


def test_a_run_is_proven_once_and_read_back_without_proving_it_again(tmp_path, demo, monkeypatch, capsys):
    """`plangate run` checks the plan once (the check it shows is the one the run starts from), and
    commands that read a run back (`status`, `resume`…) only parse it: it passed when recorded."""
    from plangate.checks import budget
    from plangate.cli import main
    from plangate.runtime import host

    proofs: list[str] = []
    real = budget.check
    monkeypatch.setattr(budget, "check", lambda ctx: (proofs.append(ctx.plan.id), real(ctx))[1])
    monkeypatch.setattr(host, "_CHECKED", {})
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PLANGATE_DEMO_DIR", str(demo))
    journal = str(tmp_path / "journal.db")
    code = main(["run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS),
                 "--journal", journal])
    run = run_id(capsys.readouterr().out)
    assert code == 3 and proofs == ["deploy_web_v2"]
    monkeypatch.setattr(host, "_CHECKED", {})  # as a new process
    assert main(["status", run, "--journal", journal]) == 0 and proofs == ["deploy_web_v2"]


def test_run_with_the_id_of_an_existing_run_resumes_it(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    arguments = ("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS),
                 "--run", "deploy-1")
    first = plangate(*arguments)
    again = plangate(*arguments)
    assert first.returncode == again.returncode == 3
    assert run_id(again.stdout) == "deploy-1"
    with runtime_at(tmp_path / "journal.db") as runtime:
        assert runtime.journal.runs() == ["deploy-1"]
        assert len(kinds(runtime, "deploy-1", "run_started")) == 1
        assert len(kinds(runtime, "deploy-1", "intent", "build")) == 1
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]


# ------------------------------------------------------------------ plan versions
def test_a_new_plan_version_keeps_completed_effects_and_a_changed_step_needs_a_new_approval(runtime, demo):
    text, name = example("deploy")
    run = runtime.start(text, name, baseline())
    runtime.advance(run)
    runtime.approve(run, "route", "alice", "operator")
    assert runtime.advance(run).steps["announce"]["state"] == "waiting_for_approval"
    old_approval = runtime.approve(run, "announce", "alice", "operator")

    v5 = text.replace("version   4", "version   5").replace(
        'text: "v2.example.com now serves abc123"', 'text: "v2.example.com now serves abc123 (plan v5)"')
    new_hash = runtime.new_version(run, v5, name)
    assert new_hash != old_approval["plan_hash"]
    report = runtime.advance(run)
    assert report.steps["announce"]["state"] == "waiting_for_approval"
    for step in ("build", "unit_tests", "preview", "preview_up", "route", "route_live"):
        assert report.steps[step] == {**report.steps[step], "state": "succeeded", "attempts": 1}

    runtime.approve(run, "announce", "alice", "operator")
    assert runtime.advance(run).state == "succeeded"
    effects = ledger(demo)
    assert [e["tool"] for e in effects] == ["deploy.preview", "dns.route", "chat.post"]
    assert effects[2]["args"]["text"].endswith("(plan v5)")
    posted = kinds(runtime, run, "intent", "announce")[0].body
    assert content_hash(posted["args"]) != old_approval["args_hash"]


def test_a_new_plan_version_must_raise_the_version(runtime, demo):
    from plangate.runtime.host import RunError

    text, name = example("deploy")
    run = runtime.start(text, name, baseline())
    assert runtime.new_version(run, text, name) == runtime.view(run).plan_hash  # the same plan: nothing to do
    with pytest.raises(RunError, match="higher `version` than 4"):
        runtime.new_version(run, text.replace("objective ", 'non_goal "x"\n  objective '), name)


def test_a_new_plan_version_of_an_ended_run_is_refused(box):
    from plangate.runtime.host import RunError

    _, runtime = box
    run = start_plan(runtime, '  step a { call t.read(key: "a") }')
    assert runtime.advance(run).state == "succeeded"
    with pytest.raises(RunError, match="has ended \\(succeeded\\)"):
        runtime.new_version(run, plan_text('  step a { call t.read(key: "a2") }', version=2), "t.plan")


# ------------------------------------------------------------------ abort and rollback
NOTES_PLAN = """
plan notes_pair {
  version 1
  step first { call notes.save(path: "a.md", text: "A") risk reversible_write idempotency "note-a"
               rollback notes.delete(path: "a.md") }
  check first_saved after first { call notes.get(path: "a.md") expect result.text == "A" }
  step second after first_saved { call notes.save(path: "b.md", text: "B") risk reversible_write
               idempotency "note-b" rollback notes.delete(path: "b.md") }
  check second_saved after second { call notes.get(path: "b.md") expect result.text == "B" }
  step publish after second_saved { call chat.post(channel: "#notes", text: "a.md and b.md are saved")
               risk external_write idempotency "notes-published" approval by role "operator" within 30m }
  check published after publish { call chat.get_message(channel: "#notes", id: publish.result.id) }
}
"""


def test_abort_with_rollback_undoes_completed_reversible_steps_in_reverse_order(tmp_path, demo):
    plan = tmp_path / "notes.plan"
    plan.write_text(NOTES_PLAN)
    plangate = cli_in(tmp_path, demo)
    started = plangate("run", str(plan), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS))
    assert started.returncode == 3
    run = run_id(started.stdout)
    assert sorted(p.name for p in (demo / "notes").iterdir()) == ["a.md", "b.md"]

    aborted = plangate("abort", run, "--rollback", "--tools", str(DEMO_TOOLS))
    assert aborted.returncode == 0, aborted.stderr
    assert [(e["tool"], e["args"]["path"]) for e in ledger(demo)] == [
        ("notes.save", "a.md"), ("notes.save", "b.md"), ("notes.delete", "b.md"), ("notes.delete", "a.md")]
    assert list((demo / "notes").iterdir()) == []

    status = json.loads(plangate("status", run, "--format", "json").stdout)
    assert status["state"] == "aborted"
    states = {step: info["state"] for step, info in status["steps"].items()}
    assert states == {"first": "compensated", "first_saved": "succeeded", "second": "compensated",
                      "second_saved": "succeeded", "publish": "cancelled", "published": "cancelled"}
    with runtime_at(tmp_path / "journal.db") as runtime:
        rollbacks = [r for r in runtime.journal.records(run) if r.kind in ("intent", "result") and r.body.get("rollback")]
    assert [(r.kind, r.step, r.body.get("tool")) for r in rollbacks] == [
        ("intent", "second", "notes.delete"), ("result", "second", None),
        ("intent", "first", "notes.delete"), ("result", "first", None)]


def test_a_changed_call_gets_a_new_derived_key_and_fresh_attempts_and_unchanged_keys_stay(box):
    toolbox, runtime = box
    body = """
  step a { call t.read(key: "%s") retry 1 }
  step c { call t.read(key: "c") retry %d }
  step n after a { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    toolbox.failures["c"] = 2
    run = start_plan(runtime, body % ("a1", 1))
    report = runtime.advance(run)
    assert report.steps["c"] == {**report.steps["c"], "state": "failed", "attempts": 2}
    assert report.steps["n"]["state"] == "waiting_for_approval"

    toolbox.failures["a2"] = 1  # the new call of `a` fails once: its retry allows one more attempt
    runtime.new_version(run, plan_text(body % ("a2", 2), version=2), "t.plan")  # and `c` may retry once more
    report = runtime.advance(run)
    assert report.steps["a"] == {**report.steps["a"], "state": "succeeded", "attempts": 2}
    assert report.steps["c"] == {**report.steps["c"], "state": "succeeded", "attempts": 3}
    keys = {step: [i.body["idempotency_key"] for i in kinds(runtime, run, "intent", step)] for step in ("a", "c")}
    assert len(keys["a"]) == 3 and keys["a"][0] != keys["a"][1] == keys["a"][2]  # a new call, a new key
    assert [i.body["attempt"] for i in kinds(runtime, run, "intent", "a")] == [1, 1, 2]
    assert len(keys["c"]) == 3 and len(set(keys["c"])) == 1  # the same call keeps its key across versions


def test_a_new_version_that_drops_a_step_keeps_its_unknown_outcome_until_settled(box):
    toolbox, runtime = box
    run = start_plan(runtime, """
  step w { call t.write(name: "w") risk reversible_write idempotency "w" }
  step r { call t.read(key: "r") }
""")
    crash_after_intent(runtime, run, "w", "w")
    runtime.new_version(run, plan_text('  step r { call t.read(key: "r") }', version=2), "t.plan")
    report = runtime.advance(run)
    assert report.state == "paused" and report.exit_code == 3
    assert report.steps["w"]["state"] == "outcome_unknown" and report.steps["r"]["state"] == "succeeded"
    assert runtime.report(run, runtime.view(run), record=False).steps["w"]["state"] == "outcome_unknown"
    from plangate.runtime.host import RunError

    with pytest.raises(RunError, match="not JSON that plangate can keep"):
        runtime.reconcile(run, "w", True, "ops", {"total": float("nan")})  # nothing recorded
    runtime.reconcile(run, "w", True, "ops", {"name": "w"})
    report = runtime.advance(run)
    assert report.state == "succeeded"
    assert report.steps["w"]["state"] == "succeeded" and "no longer in the plan" in report.steps["w"]["reason"]
    assert [call[0] for call in toolbox.calls] == ["t.read"]


def test_a_new_version_that_drops_a_completed_step_keeps_it_and_an_abort_rolls_it_back(box):
    toolbox, runtime = box
    body = """
  step g { call t.read(key: "g") }
  step w after g { call t.write(name: "w") risk reversible_write idempotency "w"
                   rollback t.write(name: "undo-" + result.name + "-" + string(g.result.value)) }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    toolbox.values["g"] = 7
    run = start_plan(runtime, body)
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(body.replace(body[body.index("  step w"):body.index("  step n")], ""),
                                       version=2), "t.plan")
    report = runtime.advance(run)
    assert report.state == "paused"
    assert report.steps["w"] == {"state": "succeeded", "attempts": 1,
                                 "reason": "it succeeded; the step is no longer in the plan"}
    assert runtime.report(run, runtime.view(run), record=False).steps["w"]["state"] == "succeeded"  # status
    assert runtime.view(run).results["w"] == {"name": "w", "value": None}
    from plangate.runtime.host import RunError

    with pytest.raises(RunError, match="step `w` of run `.*` is no longer in the plan \\(version 2\\)"):
        runtime.approve(run, "w", "olga", "operator")  # status lists it: not "has no step"
    report = runtime.abort(run, rollback=True)
    assert report.state == "aborted"
    assert report.steps["w"] == {"state": "compensated", "attempts": 1, "reason": "rolled back by `t.write`"}
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"] == ["w", "undo-w-7"]


@pytest.mark.parametrize("then", ["dropped", "changed"])
def test_a_step_held_back_by_one_version_then_dropped_or_changed_by_the_next_keeps_its_effect(box, then):
    """The held-back step's effect is completed work: dropped by the next version, the step is kept
    ("no longer in the plan"); its call changed, the effect is listed apart (`w@1`). Either way an
    abort undoes it."""
    toolbox, runtime = box
    body = """
  step g { call t.read(key: "%s") }
  step w { call t.write(name: "%s" + string(g.result.value)) risk reversible_write idempotency "w-%s"
           rollback t.write(name: "undo-" + result.name) }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    toolbox.values["g1"] = 7
    run = start_plan(runtime, body % ("g1", "w-", "1"))
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(body % ("g2", "w-", "1"), version=2), "t.plan")  # `g` runs again: `w` held back
    assert "w" in runtime.view(run).recheck
    held = runtime.report(run, runtime.view(run), record=False).steps["w"]
    assert held["state"] == "ready" and held["attempts"] == 1 and held["reason"].startswith("held back: it ran under")
    if then == "dropped":
        third = body.replace(body[body.index("  step w"):body.index("  step n")], "") % "g2"
    else:
        third = body % ("g2", "v-", "3")
    runtime.new_version(run, plan_text(third, version=3), "t.plan")
    kept = "w" if then == "dropped" else "w@1"
    view = runtime.view(run)
    assert view.states[kept] == "succeeded" and (then == "dropped") == ("no longer in the plan" in view.reasons[kept])
    assert then == "dropped" or "w" not in view.states  # the changed step runs afresh, if ever
    report = runtime.abort(run, rollback=True)
    assert report.steps[kept] == {"state": "compensated", "attempts": 1, "reason": "rolled back by `t.write`"}
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"] == ["w-7", "undo-w-7"]


def test_a_held_back_step_after_a_step_that_failed_under_the_new_version_lets_nothing_after_it_run(box):
    """In `a` → `check ca` → `b` → `n`, a new call of `a` that `ca` finds wrong must not let `n` run
    on the strength of `b`, which ran on the old one: `b` stays held back, `n` waits behind it, and
    the run fails; an abort then undoes `b`'s effect."""
    toolbox, runtime = box
    toolbox.values["a-one"], toolbox.values["a-two"] = "ok", "bad"
    body = """
  step a { call t.read(key: "%s") }
  check ca after a { call t.read(key: "c") expect a.result.value == "ok" }
  step b after ca { call t.write(name: "b") risk reversible_write idempotency "b" rollback t.write(name: "undo-b") }
  step n after b { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    run = start_plan(runtime, body % "a-one")
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(body % "a-two", version=2), "t.plan")
    runtime.approve(run, "n", "alice", "operator")  # its call is known; it still may not run
    report = runtime.advance(run)
    assert report.steps["ca"]["state"] == "failed" and report.state == "failed"
    assert report.steps["b"]["reason"].startswith("held back") and report.steps["n"]["state"] == "ready"
    assert [call[1] for call in toolbox.calls if call[0] != "t.read"] == ["b"]
    assert runtime.abort(run, rollback=True).steps["b"]["state"] == "compensated"


def test_a_held_back_step_after_a_blocked_step_is_kept_once_a_later_version_unblocks_it(box):
    """Held back behind a step the new version blocks, a step is neither decided nor made again:
    the version after, which lets that step run, has it rechecked, and the same call is kept."""
    toolbox, runtime = box
    toolbox.values.update({"g1": 7, "g2": 7})
    body = """
  %s
  step g { call t.read(key: "%s") }
  step s { call t.send(to: "ops-" + string(g.result.value)) idempotency "s" approval by role "operator" }
  step n after s { call t.send(to: "last") idempotency "n" approval by role "operator" }
"""
    run = start_plan(runtime, body % ('step e { call t.read(key: "e") }', "g1"))
    runtime.advance(run)
    runtime.approve(run, "s", "al", "operator")
    runtime.advance(run)  # sends ops-7
    runtime.new_version(run, plan_text(body % ("budget { calls <= 3 }", "g2"), version=2), "t.plan")
    report = runtime.advance(run)  # `g` would be the 4th call: blocked; `s` stays held back
    assert report.steps["g"]["state"] == "blocked" and report.steps["s"]["reason"].startswith("held back")
    runtime.new_version(run, plan_text(body % ("", "g2"), version=3), "t.plan")
    report = runtime.advance(run)  # `g` runs again, reads 7: `s` is the same call, kept
    assert report.steps["s"]["state"] == "succeeded" and "its call is the same" in report.steps["s"]["reason"]
    assert [call[1] for call in toolbox.calls if call[0] == "t.send"] == ["ops-7"]


def test_a_step_that_comes_back_after_what_it_reads_ran_again_is_computed_anew(box):
    toolbox, runtime = box
    body = """
  step g { call t.read(key: "%s") }
  step w { call t.write(name: "w-" + string(g.result.value)) risk reversible_write idempotency "w" }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    without_w = body.replace(body[body.index("  step w"):body.index("  step n")], "")
    toolbox.values["g1"], toolbox.values["g2"] = 7, 8
    run = start_plan(runtime, body % "g1")
    runtime.advance(run)
    runtime.new_version(run, plan_text(body % "g2", version=2), "t.plan")  # `w` held back
    runtime.new_version(run, plan_text(without_w % "g2", version=3), "t.plan")  # dropped
    runtime.advance(run)  # `g` runs again: 8
    runtime.new_version(run, plan_text(body % "g2", version=4), "t.plan")  # `w` is back, as written in v1
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "succeeded"
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"] == ["w-7", "w-8"]


def test_a_step_after_a_rerun_step_through_a_kept_one_waits_and_the_check_verifies_the_new_call(box):
    """`a` → `check ca` → `b`: the new version changes `a`'s call. `ca`'s own call is the same, but
    it verified the old effect, and `b` comes after `a` through it: `b` waits for `a`'s new call,
    and `ca` verifies again before `b` runs."""
    toolbox, runtime = box
    body = """
  step a { call t.write(name: "%s") risk reversible_write idempotency "a" %s }
  check ca after a { call t.read(key: "ca") }
  step b after ca { call t.send(to: "ops") idempotency "b" approval by role "operator" }
"""
    run = start_plan(runtime, body % ("a1", ""))
    report = runtime.advance(run)
    assert report.steps["ca"]["state"] == "succeeded" and report.steps["b"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(body % ("a2", 'approval by role "operator"'), version=2), "t.plan")
    runtime.approve(run, "b", "olga", "operator")
    report = runtime.advance(run)
    assert report.state == "paused" and report.steps["a"]["state"] == "waiting_for_approval"
    assert report.steps["b"]["state"] not in ("succeeded", "waiting_for_approval"), report.steps["b"]
    assert [call[0] for call in toolbox.calls] == ["t.write", "t.read"]  # nothing after `a` ran
    runtime.approve(run, "a", "olga", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded", report.steps
    assert [(call[0], call[1]) for call in toolbox.calls] == [
        ("t.write", "a1"), ("t.read", "ca"), ("t.write", "a2"), ("t.read", "ca"), ("t.send", "ops")]
    assert report.steps["ca"]["attempts"] == 1  # verified afresh: a new step, with fresh attempts
    recheck = kinds(runtime, run, "recheck", "ca")
    assert [record.body["kept"] for record in recheck] == [False]
    assert recheck[0].body["reason"] == "what it verifies changed: `a` ran again since it verified it"  # its own call is the same


def test_a_check_of_a_step_whose_new_call_failed_is_cancelled_not_kept(box):
    toolbox, runtime = box
    body = """
  step a { call t.write(name: "%s") risk reversible_write idempotency "a" }
  check ca after a { call t.read(key: "ca") }
  step b after ca { call t.send(to: "ops") idempotency "b" approval by role "operator" }
"""
    run = start_plan(runtime, body % "a1")
    runtime.advance(run)
    runtime.new_version(run, plan_text(body % "a2", version=2), "t.plan")
    toolbox.failures["a2"] = 1
    runtime.approve(run, "b", "olga", "operator")
    report = runtime.advance(run)
    assert report.state == "failed"
    assert {step: report.steps[step]["state"] for step in ("a", "ca", "b")} == {
        "a": "failed", "ca": "cancelled", "b": "cancelled"}
    assert [call[0] for call in toolbox.calls] == ["t.write", "t.read", "t.write"]  # no t.send


def test_a_plan_version_recorded_before_steps_were_held_back_through_after_folds_as_it_ran(box):
    """A `plan_version` record without `hold` (as an earlier plangate wrote it) holds back readers
    only, so a run recorded then reads as it ran; one with it holds back followers too."""
    _, runtime = box
    body = """
  step a { call t.write(name: "%s") risk reversible_write idempotency "a" }
  check ca after a { call t.read(key: "ca") }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    run = start_plan(runtime, body % "a1")
    assert runtime.advance(run).state == "paused"
    older = {"plan_hash": "sha256:" + "0" * 64, "plan_version": 2, "plan_text": plan_text(body % "a2", version=2),
             "plan_file": "t.plan"}
    runtime.journal.append(run, "plan_version", older)
    view = runtime.view(run)
    assert "ca" not in view.recheck and view.states["ca"] == "succeeded" and "a" not in view.states
    runtime.new_version(run, plan_text(body % "a3", version=3), "t.plan")
    assert kinds(runtime, run, "plan_version")[-1].body["hold"] == "followers, settled"
    assert "ca" in runtime.view(run).recheck


@pytest.mark.parametrize("settled", ["before the pass", "after the pass"])
@pytest.mark.parametrize("new_value", ["x", "y"])
def test_an_unknown_outcome_settled_after_a_new_version_is_rechecked_like_a_completed_step(box, settled, new_value):
    """`c`'s call was made under version 1 (`to: "x"`) and its answer lost. Version 2 changes `a`,
    whose result `c` reads. Once `c` is settled as happened, its call is computed again from the
    new results: the same call keeps the effect; another is made afresh, with a new approval, and
    nothing after `c` runs on the old effect meanwhile. Whether it is settled before `a` ran again
    or after changes nothing."""
    toolbox, runtime = box
    toolbox.values.update({"a1": "x", "a2": new_value})
    body = """
  step a { call t.read(key: "%s") }
  step c { call t.send(to: a.result.value) idempotency "c" approval by role "operator" }
  step d after c { call t.read(key: "d") }
"""
    run = start_plan(runtime, body % "a1")
    assert runtime.advance(run).steps["c"]["state"] == "waiting_for_approval"
    runtime.approve(run, "c", "olga", "operator")
    made = {"to": "x"}  # a crash after the call: its intent is journaled, its answer is not
    runtime.journal.append(run, "intent", {"tool": "t.send", "args": made, "idempotency_key": "c", "attempt": 1,
                                           "args_hash": content_hash(made), "plan_hash": runtime.view(run).plan_hash},
                           step="c")
    runtime.new_version(run, plan_text(body % "a2", version=2), "t.plan")
    if settled == "after the pass":
        report = runtime.advance(run)
        assert report.steps["c"]["state"] == "outcome_unknown" and report.steps["a"]["state"] == "succeeded"
    runtime.reconcile(run, "c", True, "bob", {"to": "x"})
    report = runtime.advance(run)
    sent = [call for call in toolbox.calls if call[0] == "t.send"]
    if new_value == "x":  # the call it would make is the one that happened: kept
        assert report.state == "succeeded" and sent == []
        assert [call[1] for call in toolbox.calls] == ["a1", "a2", "d"]
        return
    assert report.steps["c"]["state"] == "waiting_for_approval" and sent == []
    assert "d" not in [call[1] for call in toolbox.calls]
    runtime.approve(run, "c", "olga", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded"
    assert [call[:2] for call in toolbox.calls] == [("t.read", "a1"), ("t.read", "a2"), ("t.send", "y"), ("t.read", "d")]


def test_a_run_recorded_before_a_check_that_now_refuses_its_plan_can_still_be_read(box, monkeypatch):
    from plangate.checks import step_shape
    from plangate.runtime import host

    _, runtime = box
    monkeypatch.setattr(step_shape, "RESERVED", {})  # as plangate was before `reserved-step-id`
    run = start_plan(runtime, '  step result { call t.read(key: "r") }')
    monkeypatch.undo()
    host._CHECKED.clear()
    assert runtime.advance(run).state == "succeeded"
    assert runtime.view(run).states["result"] == "succeeded"
    with pytest.raises(host.RunError, match="reserved-step-id"):
        start_plan(runtime, '  step result { call t.read(key: "r") }')


def test_a_check_that_failed_on_the_old_call_verifies_the_new_one(box):
    toolbox, runtime = box
    body = """
  step a { call t.write(name: "%s") risk reversible_write idempotency "a" }
  check ca after a { call t.read(key: "ca") expect result.value == 2 }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    toolbox.values["ca"] = 1
    run = start_plan(runtime, body % "a1")
    report = runtime.advance(run)
    assert report.steps["ca"]["state"] == "failed" and report.steps["n"]["state"] == "waiting_for_approval"
    toolbox.values["ca"] = 2  # the new call of `a` has the effect the check looks for
    runtime.new_version(run, plan_text(body % "a2", version=2), "t.plan")
    runtime.approve(run, "n", "olga", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded", report.steps
    calls = [(call[0], call[1]) for call in toolbox.calls]
    assert calls[:3] == [("t.write", "a1"), ("t.read", "ca"), ("t.write", "a2")]  # then `n` and `ca`, in any order
    assert sorted(calls[3:]) == [("t.read", "ca"), ("t.send", "ops")]


def test_a_step_after_a_kept_step_whose_predecessors_are_kept_too_is_not_held_back(box):
    toolbox, runtime = box
    body = """
  step a { call t.write(name: "a") risk reversible_write idempotency "a" }
  check ca after a { call t.read(key: "ca") }
  step b after ca { call t.send(to: "%s") idempotency "b" approval by role "operator" }
"""
    run = start_plan(runtime, body % "ops")
    runtime.advance(run)
    runtime.new_version(run, plan_text(body % "team", version=2), "t.plan")  # only `b` changed
    assert runtime.view(run).recheck == {}
    runtime.approve(run, "b", "olga", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded"
    assert [call[0] for call in toolbox.calls] == ["t.write", "t.read", "t.send"]


def test_an_unknown_outcome_changed_by_one_version_and_dropped_by_the_next_can_be_rolled_back(box):
    toolbox, runtime = box
    step_w = '  step w { call t.write(name: "%s") risk reversible_write idempotency "w" rollback t.write(name: "undo-" + result.name) }\n'
    step_n = '  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }\n'
    run = start_plan(runtime, step_w % "one" + step_n)
    crash_after_intent(runtime, run, "one", "w")
    runtime.new_version(run, plan_text(step_w % "two" + step_n, version=2), "t.plan")  # the call changes
    runtime.new_version(run, plan_text(step_n, version=3), "t.plan")  # then the step goes
    runtime.reconcile(run, "w", True, "ops", {"name": "one"})  # the first call had happened
    report = runtime.abort(run, rollback=True)
    assert report.steps["w"] == {"state": "compensated", "attempts": 1, "reason": "rolled back by `t.write`"}
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"] == ["undo-one"]


SUPERSEDED_BODY = """
  step g { call t.read(key: "%s") }
  step w { call t.write(name: %s) risk reversible_write idempotency "w-" + string(%s)
           rollback t.write(name: "undo-" + result.name) }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""


@pytest.mark.parametrize("how", ["its text", "what it reads"])
def test_an_effect_whose_call_a_new_version_changes_is_kept_and_rolled_back_too(box, how):
    """A completed write whose call a new version changes runs again; the first call's effect
    stands in the world, so it is kept as `w@1` (its result and its rollback), and an abort with
    rollback undoes both effects, the newer first."""
    toolbox, runtime = box
    toolbox.values.update({"g1": 1, "g2": 2})
    if how == "its text":
        first, second = (SUPERSEDED_BODY % ("g1", '"one"', '"one"'), SUPERSEDED_BODY % ("g1", '"two"', '"two"'))
    else:  # the same text, computed from a result that changes
        first = SUPERSEDED_BODY % ("g1", '"w-" + string(g.result.value)', "g.result.value")
        second = SUPERSEDED_BODY % ("g2", '"w-" + string(g.result.value)', "g.result.value")
    run = start_plan(runtime, first)
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    runtime.new_version(run, plan_text(second, version=2), "t.plan")
    report = runtime.advance(run)
    made = [call[1] for call in toolbox.calls if call[0] == "t.write"]
    assert len(made) == 2 and made[0] != made[1]
    assert report.steps["w"]["state"] == "succeeded"
    assert report.steps["w@1"] == {"state": "succeeded", "attempts": 1,
                                   "reason": "the effect of `w`'s earlier call: plan version 2 changed its call, "
                                             "and the effect stands"}
    assert runtime.view(run).results["w@1"]["name"] == made[0]
    runtime.new_version(run, plan_text(second, version=3), "t.plan")  # no version has a step `w@1`: kept as it is
    assert runtime.view(run).reasons["w@1"] == report.steps["w@1"]["reason"]
    report = runtime.abort(run, rollback=True)
    assert report.state == "aborted"
    assert {step: report.steps[step]["state"] for step in ("w", "w@1")} == {"w": "compensated", "w@1": "compensated"}
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"][2:] == [f"undo-{made[1]}", f"undo-{made[0]}"]


def test_an_unknown_outcome_of_a_changed_call_settled_as_happened_is_kept_and_rolled_back(box):
    toolbox, runtime = box
    step_w = '  step w { call t.write(name: "%s") risk reversible_write idempotency "w-%s" rollback t.write(name: "undo-" + result.name) }\n'
    step_n = '  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }\n'
    run = start_plan(runtime, step_w % ("one", "one") + step_n)
    crash_after_intent(runtime, run, "one", "w-one")
    runtime.new_version(run, plan_text(step_w % ("two", "two") + step_n, version=2), "t.plan")  # the call changes
    runtime.reconcile(run, "w", True, "ops", {"name": "one"})  # the first call had happened
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "succeeded" and report.steps["w@1"]["state"] == "succeeded"
    report = runtime.abort(run, rollback=True)
    assert report.steps["w@1"]["state"] == "compensated" and report.steps["w"]["state"] == "compensated"
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"] == ["two", "undo-two", "undo-one"]


def test_an_aborted_run_can_still_be_rolled_back_and_a_failed_rollback_tried_again(box):
    """`abort` and then `abort --rollback` undoes what the run did; a rollback that failed is
    made again by the next `abort --rollback`, with the same key; one that succeeded never is."""
    toolbox, runtime = box
    run = start_plan(runtime, """
  step w { call t.write(name: "w") risk reversible_write idempotency "w" rollback t.write(name: "undo-w") }
  step v { call t.write(name: "v") risk reversible_write idempotency "v" rollback t.write(name: "undo-v") }
  step n after w, v { call t.send(to: "ops") idempotency "n" approval by role "operator" }
""")
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    assert runtime.abort(run, rollback=False).state == "aborted"
    toolbox.failures["undo-v"] = 1
    report = runtime.abort(run, rollback=True)
    assert report.state == "aborted"
    assert report.steps["w"]["state"] == "compensated" and report.steps["v"]["state"] == "succeeded"
    assert "failed (ConnectionError: undo-v is unreachable)" in report.steps["v"]["reason"]
    report = runtime.abort(run, rollback=True)
    assert {step: report.steps[step]["state"] for step in ("w", "v", "n")} == {
        "w": "compensated", "v": "compensated", "n": "cancelled"}
    undone = [(call[1], call[2]) for call in toolbox.calls if call[1].startswith("undo-")]
    assert sorted(name for name, _ in undone) == ["undo-v", "undo-v", "undo-w"]
    assert len({key for name, key in undone if name == "undo-v"}) == 1  # the same key: the same rollback
    assert runtime.abort(run, rollback=True).state == "aborted"  # nothing left to undo: nothing called
    assert len([call for call in toolbox.calls if call[1].startswith("undo-")]) == 3


@pytest.mark.parametrize("version_two", ["changed", "dropped"])
def test_an_abort_waits_for_an_unknown_call_a_new_version_changed_or_dropped_and_undoes_it(box, version_two):
    """The call of `w` (version 1) has no recorded answer when version 2 changes or drops it: an
    abort with rollback waits until it is settled, then undoes it with version 1's rollback."""
    toolbox, runtime = box
    step_w = ('  step w { call t.write(name: "%s") risk reversible_write idempotency "w-%s" '
              'rollback t.write(name: "undo-%s-" + result.name) }\n')
    step_n = '  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }\n'
    run = start_plan(runtime, step_w % ("one", "one", "v1") + step_n)
    crash_after_intent(runtime, run, "one", "w-one")
    second = step_w % ("two", "two", "v2") + step_n if version_two == "changed" else step_n
    runtime.new_version(run, plan_text(second, version=2), "t.plan")
    report = runtime.abort(run, rollback=True)
    assert report.state == "aborting" and report.exit_code == 3  # no hook: it waits for an answer
    runtime.reconcile(run, "w", True, "ops", {"name": "one"})
    report = runtime.abort(run, rollback=True)  # (or `resume`): finishes the abort
    assert report.state == "aborted"
    assert report.steps["w"]["state"] == "compensated"
    assert [call[1] for call in toolbox.calls if call[0] == "t.write"] == ["undo-v1-one"]  # never "two"


def test_a_call_changed_back_to_an_earlier_one_is_that_effect_and_is_undone_once(box):
    """v1 writes "one", v2 "two", v3 "one" again: v3's call has v1's key, so an idempotent tool
    gives back v1's effect — `w@1` is `w`'s own again, and each of the two effects is undone once."""
    toolbox, runtime = box
    body = ('  step w {{ call t.write(name: "{}") risk reversible_write rollback t.write(name: "undo-" + result.name) }}\n'
            '  step n after w {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}\n')
    run = start_plan(runtime, body.format("one"))
    for version, name in ((2, "two"), (3, "one")):
        runtime.advance(run)
        runtime.new_version(run, plan_text(body.format(name), version=version), "t.plan")
    report = runtime.advance(run)
    assert sorted(step for step in report.steps if "@" in step) == ["w@2"]
    keys = [call[2] for call in toolbox.calls if call[0] == "t.write"]
    assert keys[0] == keys[2] != keys[1]  # "one" twice, with one key: one effect
    report = runtime.abort(run, rollback=True)
    undone = sorted(call[1] for call in toolbox.calls if call[1].startswith("undo-"))
    assert undone == ["undo-one", "undo-two"]


def test_the_rules_see_a_kept_earlier_effect_s_rollback_as_its_step_s(box):
    """A deny rule on `step.id == "w"` refuses the rollback of `w@1` as it refuses `w`'s."""
    toolbox, runtime = box
    policy = TEST_POLICY.rstrip().rstrip("}") + '  deny "keep-w" when step.id == "w" && args.name.startsWith("undo-")\n}\n'
    body = ('  step w {{ call t.write(name: "{}") risk reversible_write rollback t.write(name: "undo-" + result.name) }}\n'
            '  step n after w {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}\n')
    run = runtime.start(plan_text(body.format("one")), "t.plan", [("t.policy", policy)])
    runtime.advance(run)
    runtime.new_version(run, plan_text(body.format("two"), version=2), "t.plan")
    runtime.advance(run)
    report = runtime.abort(run, rollback=True)
    assert {step: report.steps[step]["state"] for step in ("w", "w@1")} == {"w": "succeeded", "w@1": "succeeded"}
    assert "denied by `keep-w`" in report.steps["w@1"]["reason"]
    assert not [call for call in toolbox.calls if call[1].startswith("undo-")]


def test_an_earlier_effect_is_undone_with_the_results_and_the_rollback_its_call_was_made_with(box):
    """`w` reads `g`; v2 makes `g` read another key, so `w`'s call changes while its text does not,
    and v2 also rewrites its rollback. `w@1` is undone as v1 wrote the rollback, with the `g` that
    v1's call saw; `w` with v2's."""
    toolbox, runtime = box
    toolbox.values.update({"g1": 1, "g2": 2})
    body = """
  step g {{ call t.read(key: "{key}") }}
  step w {{ call t.write(name: "w-" + string(g.result.value)) risk reversible_write idempotency "w-" + string(g.result.value)
           rollback t.write(name: "{undo}-" + result.name + "-" + string(g.result.value)) }}
  step n {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}
"""
    run = start_plan(runtime, body.format(key="g1", undo="undo"))
    runtime.advance(run)
    runtime.new_version(run, plan_text(body.format(key="g2", undo="v2undo"), version=2), "t.plan")
    report = runtime.advance(run)
    assert report.steps["w@1"]["state"] == "succeeded"
    runtime.abort(run, rollback=True)
    assert [call[1] for call in toolbox.calls if "undo" in call[1]] == ["v2undo-w-2-2", "undo-w-1-1"]


def test_an_abort_undoes_a_step_held_back_by_a_new_version_and_one_whose_expect_was_not_evaluated(box, monkeypatch):
    """A completed step held back for a recheck (what it reads runs again) stands for the call it
    made: an abort undoes it rather than cancel it. So does a step whose call returned (its result
    journaled) when the process died before its `expect` was evaluated."""
    toolbox, runtime = box
    toolbox.values.update({"g1": 1, "g2": 2})
    body = """
  step g {{ call t.read(key: "{key}") {approval} }}
  step w {{ call t.write(name: "w-" + string(g.result.value)) risk reversible_write idempotency "w"
           rollback t.write(name: "undo-" + result.name) }}
  step n {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}
"""
    run = start_plan(runtime, body.format(key="g1", approval=""))
    runtime.advance(run)
    runtime.new_version(run, plan_text(body.format(key="g2", approval='approval by role "operator"'), version=2), "t.plan")
    assert "w" in runtime.advance(run).steps and "w" in runtime.view(run).recheck  # `g` waits: `w` is held back
    report = runtime.abort(run, rollback=True)
    assert report.steps["w"]["state"] == "compensated"
    assert [call[1] for call in toolbox.calls if call[1].startswith("undo-")] == ["undo-w-1"]

    again = start_plan(runtime, body.format(key="g1", approval=""))
    advance_dying_at(runtime, monkeypatch, again, "w", "after_result")  # once `w`'s result is journaled
    assert runtime.view(again).states["w"] == "verifying"
    report = runtime.abort(again, rollback=True)
    assert report.steps["w"]["state"] == "compensated"
    assert "its call returned; the run was aborted before its `expect` was evaluated" in [
        r.body.get("reason") for r in runtime.journal.records(again) if r.kind == "state"]


def test_an_unknown_call_settled_after_what_it_read_ran_again_is_undone_with_what_it_read(box, monkeypatch):
    """`w` reads `a`; the process dies after `w`'s call, a new version runs `a` again, and `w`'s
    outcome is settled after that: its effect is undone with the `a` its call read, not the new one."""
    toolbox, runtime = box
    body = """
  step a {{ call t.write(name: "{a}") risk reversible_write rollback t.write(name: "undo-" + result.name) }}
  step w {{ call t.write(name: "w-" + a.result.name) risk reversible_write
           rollback t.write(name: "undo-w-" + a.result.name{extra}) }}
  step n after w {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}
"""
    run = start_plan(runtime, body.format(a="a1", extra=""))
    advance_dying_at(runtime, monkeypatch, run, "w", "after_call")
    runtime.new_version(run, plan_text(body.format(a="a2", extra=""), version=2), "t.plan")
    runtime.advance(run)
    runtime.reconcile(run, "w", True, "ops", {"name": "w-a1"})
    runtime.advance(run)
    report = runtime.abort(run, rollback=True)
    assert report.state == "aborted"
    undone = [call[1] for call in toolbox.calls if call[1].startswith("undo-")]
    assert sorted(undone) == ["undo-a1", "undo-a2", "undo-w-a1", "undo-w-a2"], undone


def test_a_rollback_a_new_version_rewrote_may_read_a_step_the_call_did_not(box):
    """v2 keeps `w`'s call and rewrites its rollback to read `b`: the rollback reads `b`'s result."""
    toolbox, runtime = box
    body = """
  step b {{ call t.read(key: "b") }}
  step w {{ call t.write(name: "w1") risk reversible_write rollback t.write(name: "undo-" + result.name{extra}) }}
  step n after w {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}
"""
    toolbox.values["b"] = 7
    run = start_plan(runtime, body.format(extra=""))
    runtime.advance(run)
    runtime.new_version(run, plan_text(body.format(extra=' + "-" + string(b.result.value)'), version=2), "t.plan")
    runtime.advance(run)
    report = runtime.abort(run, rollback=True)
    assert report.steps["w"]["state"] == "compensated", report.steps["w"]
    assert [call[1] for call in toolbox.calls if call[1].startswith("undo-")] == ["undo-w1-7"]


def test_a_call_changed_back_and_settled_during_an_abort_leaves_nothing_listed_to_undo_twice(box, monkeypatch):
    """v1 `one`, v2 `two`, v3 `one` whose outcome is unknown when the abort starts: settled as
    happened, it is `w@1`'s effect again — `w@1` leaves the abort's list, and each effect is undone
    once, so the abort ends with every listed step compensated (what `plangate abort` exits 0 on)."""
    toolbox, runtime = box
    body = ('  step w {{ call t.write(name: "{}") risk reversible_write rollback t.write(name: "undo-" + result.name) }}\n'
            '  step n after w {{ call t.send(to: "ops") idempotency "n" approval by role "operator" }}\n')
    run = start_plan(runtime, body.format("one"))
    runtime.advance(run)
    runtime.new_version(run, plan_text(body.format("two"), version=2), "t.plan")
    runtime.advance(run)
    runtime.new_version(run, plan_text(body.format("one"), version=3), "t.plan")
    advance_dying_at(runtime, monkeypatch, run, "w", "after_call")
    assert runtime.abort(run, rollback=True).state == "aborting"
    runtime.reconcile(run, "w", True, "ops", {"name": "one"})
    report = runtime.abort(run, rollback=True)
    view = runtime.view(run)
    assert report.state == "aborted" and "w@1" not in view.to_roll_back
    assert all(view.states.get(step) in ("compensated", "cancelled") for step in view.to_roll_back), view.to_roll_back
    assert sorted(call[1] for call in toolbox.calls if call[1].startswith("undo-")) == ["undo-one", "undo-two"]


def test_run_with_the_id_of_a_run_of_another_plan_is_refused(box, tmp_path, demo):
    from plangate.runtime.host import RunError

    _, runtime = box
    run = start_plan(runtime, '  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }')
    runtime.advance(run)
    other = 'plan other {\n  version 2\n  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }\n}\n'
    with pytest.raises(RunError, match="run `%s` runs plan `t`, not `other`" % run):
        runtime.new_version(run, other, "other.plan")
    assert not kinds(runtime, run, "plan_version")

    plangate = cli_in(tmp_path, demo)
    assert plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS),
                    "--run", "r1").returncode == 3
    refused = plangate("run", "examples/refund.plan", "--policy", "policies/baseline.policy", "--tools",
                       str(DEMO_TOOLS), "--run", "r1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "run `r1` runs plan `deploy_web_v2`, not `" in refused.stderr


def test_a_new_version_whose_tools_are_not_loaded_is_not_recorded(box, tmp_path):
    from plangate.runtime.host import RunError

    toolbox, runtime = box
    body = """
  step a { call t.read(key: "a") }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    run = start_plan(runtime, body)
    runtime.advance(run)
    full = toolbox.registry()
    partial = ToolRegistry()
    for name in ("t.read", "t.send"):
        partial.register(full.get(name))
    with runtime_at(tmp_path / "journal.db", partial) as short:
        v2 = plan_text(body + '  step w { call t.write(name: "w") risk reversible_write idempotency "w" }', version=2)
        with pytest.raises(RunError, match="do not include `t.write` \\(step `w`\\).*the new plan version was not "
                                           "recorded"):
            short.new_version(run, v2, "t.plan")
        assert not kinds(short, run, "plan_version")
        assert short.new_version(run, plan_text(body.replace('"ops"', '"dev"'), version=2), "t.plan")  # its tools are


@pytest.mark.parametrize("happened", [True, False])
def test_an_unknown_outcome_of_a_changed_call_is_settled_before_the_new_call_runs(box, happened):
    toolbox, runtime = box
    body = '  step w { call t.write(name: "%s") risk reversible_write }'
    run = start_plan(runtime, body % "old")
    view = runtime.view(run)
    crash_after_intent(runtime, run, "old", "k-old")
    runtime.new_version(run, plan_text(body % "new", version=2), "t.plan")
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "outcome_unknown" and toolbox.calls == []
    runtime.reconcile(run, "w", happened, "ops", {"name": "old"} if happened else None)
    report = runtime.advance(run)
    assert report.state == "succeeded" and report.steps["w"]["attempts"] == 1
    assert [call[1] for call in toolbox.calls] == ["new"] and toolbox.calls[0][2] != "k-old"
    assert view.plan_version == 1


DENY_POLICY = TEST_POLICY.replace("limit concurrency", 'deny "no-bad" when call.tool == "t.write" && '
                                  'args.name == "bad"\n  limit concurrency')


def test_a_new_version_decides_blocked_cancelled_and_skipped_steps_again(box):
    toolbox, runtime = box
    toolbox.values.update({"g1": "bad", "g2": "good"})
    body = """
  step g { call t.read(key: "%s") }
  step w { call t.write(name: g.result.value) risk reversible_write idempotency "w-" + g.result.value }
  step c after w { call t.read(key: "c") }
  step s { when g.result.value == "good"  call t.read(key: "s") }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""
    run = runtime.start(plan_text(body % "g1"), "t.plan", [("t.policy", DENY_POLICY)])
    report = runtime.advance(run)
    assert {step: info["state"] for step, info in report.steps.items()} == {
        "g": "succeeded", "w": "blocked", "c": "cancelled", "s": "skipped", "n": "waiting_for_approval"}
    runtime.new_version(run, plan_text(body % "g2", version=2), "t.plan")
    runtime.approve(run, "n", "alice", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded", report.message
    assert ("t.write", "good", "w-good") in toolbox.calls
    assert sorted(call[1] for call in toolbox.calls if call[0] == "t.read") == ["c", "g1", "g2", "s"]


# ------------------------------------------------------------------ tools that are missing or misbehave
def test_a_constant_call_that_does_not_fit_its_tool_stops_the_run_before_anything_is_called(box):
    toolbox, runtime = box
    with pytest.raises(RunError, match="could not start: step `w`: argument `name` of t.write must be str, not int 5 "
                                       "\\(the call does not fit the tool loaded for it; the run was not recorded\\)"):
        start_plan(runtime, """
  step r { call t.read(key: "r") }
  step w after r { call t.write(name: 5) risk reversible_write idempotency "w" }
""")
    assert toolbox.calls == [] and runtime.journal.runs() == []


@pytest.mark.parametrize("guard", ['when false', 'when r.result.value == 99', 'idempotency "w-" + r.result.value'])
def test_a_step_that_may_never_call_does_not_stop_the_run_for_a_call_that_would_not_fit(box, guard):
    """Only a step sure to call (no `when`, reading no result, so never skipped) is fitted before
    the start: one that may be skipped is fitted at its turn, if it comes."""
    toolbox, runtime = box
    toolbox.values["r"] = 5
    run = start_plan(runtime, f"""
  step r {{ call t.read(key: "r") }}
  step w after r {{ call t.write(name: 5) risk reversible_write {guard} {'' if 'idempotency' in guard else 'idempotency "w"'} }}
""")
    report = runtime.advance(run)
    expected = "failed" if "idempotency" in guard else "skipped"  # read `r`'s result: fitted at its turn
    assert report.steps["r"]["state"] == "succeeded" and report.steps["w"]["state"] == expected
    assert [call[0] for call in toolbox.calls] == ["t.read"]


def test_a_computed_call_that_does_not_fit_its_tool_fails_its_step_without_an_intent_or_a_retry(box):
    toolbox, runtime = box
    toolbox.values["r"] = 5
    run = start_plan(runtime, """
  step r { call t.read(key: "r") }
  step w after r { call t.write(name: r.result.value) risk reversible_write idempotency "w" retry 2 }
""")
    report = runtime.advance(run)
    assert report.state == "failed" and report.steps["w"]["state"] == "failed"
    assert report.steps["w"]["reason"] == "the call does not fit its tool: argument `name` of t.write must be str, not int 5"
    assert report.steps["w"]["attempts"] == 0 and kinds(runtime, run, "intent", "w") == []
    assert toolbox.calls == [("t.read", "r", None)]


def test_a_run_does_not_start_without_the_tools_its_pending_steps_need(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    partial = tmp_path / "partial.py"
    partial.write_text(f"import importlib.util\nspec = importlib.util.spec_from_file_location('demo', {str(DEMO_TOOLS)!r})\n"
                       "demo = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(demo)\n"
                       "build, preview = demo.build, demo.preview\n")
    fresh = plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(partial),
                     "--run", "r1")
    assert fresh.returncode == 2 and "could not start: the tools loaded do not include `ci.test`" in fresh.stderr
    assert "there is no run `r1`" in plangate("status", "r1").stderr  # nothing was recorded

    started = plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools",
                       str(DEMO_TOOLS), "--run", "r1")
    assert started.returncode == 3
    assert plangate("approve", "r1", "route", "--as", "alice", "--role", "operator", "--yes").returncode == 0
    short = plangate("resume", "r1", "--tools", str(partial))
    assert short.returncode == 2, short.stdout + short.stderr
    assert "`dns.route` (step `route`)" in short.stderr and "`chat.post` (step `announce`)" in short.stderr
    assert "`ci.build`" not in short.stderr  # a succeeded step needs no tool
    with runtime_at(tmp_path / "journal.db") as runtime:
        assert runtime.view("r1").states["route"] == "waiting_for_approval"
        assert kinds(runtime, "r1", "state", "route")[-1].body["state"] == "waiting_for_approval"
    finished = plangate("resume", "r1", "--tools", str(DEMO_TOOLS))
    assert finished.returncode == 3 and "`announce`: waiting" in finished.stdout


def test_a_tool_that_calls_sys_exit_fails_its_attempt_and_a_tools_file_that_does_cannot_load(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    (tmp_path / "exits.py").write_text("import sys\nfrom plangate import tool\n\n@tool('t.read')\n"
                                       "def read(key: str) -> dict:\n    sys.exit(7)\n")
    (tmp_path / "t.policy").write_text(TEST_POLICY)
    (tmp_path / "t.plan").write_text(plan_text('  step a { call t.read(key: "a") retry 1 }'))
    ran = plangate("run", str(tmp_path / "t.plan"), "--policy", str(tmp_path / "t.policy"),
                   "--tools", str(tmp_path / "exits.py"), "--run", "r1")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "attempt 2 failed: SystemExit: 7" in ran.stdout
    with runtime_at(tmp_path / "journal.db") as runtime:
        assert [r.body["error"] for r in kinds(runtime, "r1", "attempt_failed")] == ["SystemExit: 7"] * 2

    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(5)\n")
    refused = plangate("resume", "r1", "--tools", str(tmp_path / "exits_at_import.py"))
    assert refused.returncode == 2
    assert "cannot load the tools: loading tools from" in refused.stderr and "SystemExit: 5" in refused.stderr


def test_what_tools_and_hooks_print_goes_to_stderr_and_the_run_id_stays_the_first_line(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    (tmp_path / "noisy.py").write_text(
        "import sys\nfrom plangate import tool\n\nprint('loading the noisy tools')\n\n"
        "@tool('t.read')\ndef read(key: str) -> dict:\n    print('reading', key)\n"
        "    sys.stdout.write('written by ' + key + '\\n')\n    return {'value': key}\n\n"
        "@tool('t.write')\ndef write(name: str, idempotency_key: str) -> dict:\n    print('writing', name)\n"
        "    return {'name': name}\n\n"
        "@write.reconcile\ndef asked(idempotency_key: str) -> None:\n    print('asked about', idempotency_key)\n")
    (tmp_path / "t.policy").write_text(TEST_POLICY)
    (tmp_path / "t.plan").write_text(plan_text(
        '  step a { call t.read(key: "a") }\n  step b { call t.read(key: "b") }\n'
        '  step w after a, b { call t.write(name: "w") risk reversible_write }'))
    args = ("run", str(tmp_path / "t.plan"), "--policy", str(tmp_path / "t.policy"),
            "--tools", str(tmp_path / "noisy.py"))
    ran = plangate(*args, "--run", "r1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines()[0] == "r1" and ran.stdout.splitlines()[1] == "run r1: succeeded"
    for said in ("loading the noisy tools", "reading a", "written by b", "writing w"):
        assert said in ran.stderr and said not in ran.stdout

    assert plangate(*args, "--run", "r2", fault="w:after_intent").returncode == -9  # killed mid-call of `w`
    resumed = plangate("resume", "r2", "--tools", str(tmp_path / "noisy.py"))  # the hook says it did not happen
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.startswith("run r2: succeeded") and "asked about" not in resumed.stdout
    assert "asked about r2:w:" in resumed.stderr and "writing w" in resumed.stderr


def test_calls_printing_at_once_on_worker_threads_leave_standard_output_as_it_was(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    both_in = threading.Barrier(2, timeout=10)

    @tool("t.read")
    def read(key: str) -> dict:
        both_in.wait()  # both calls run at once: each switch of `sys.stdout` overlaps the other
        print("reading", key)
        return {"value": key}

    registry = ToolRegistry()
    registry.register(read)
    stdout = sys.stdout
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        run = start_plan(runtime, '  step a { call t.read(key: "a") }\n  step b { call t.read(key: "b") }')
        assert runtime.advance(run).state == "succeeded"
    print("plangate's own line")
    assert sys.stdout is stdout
    out, err = capsys.readouterr()
    assert out == "plangate's own line\n" and "reading a" in err and "reading b" in err


def test_a_plan_key_that_its_tool_cannot_take_is_warned_of_and_the_journal_says_it_was_not_passed(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    (tmp_path / "keyless.py").write_text(
        "from plangate import tool\n\n"
        "@tool('t.write')\ndef write(name: str, **more) -> dict:\n    return {'name': name, 'more': sorted(more)}\n\n"
        "@tool('t.send')\ndef send(to: str, idempotency_key: str) -> dict:\n    return {'to': to}\n")
    (tmp_path / "t.policy").write_text(TEST_POLICY.replace("require approval", "# require approval"))
    (tmp_path / "t.plan").write_text(plan_text(
        '  step w { call t.write(name: "w") risk reversible_write idempotency "w-1" }\n'
        '  step s { call t.send(to: "ops") risk external_write idempotency "s-1" }\n'
        '  step v { call t.write(name: "v") risk reversible_write }'))
    ran = plangate("run", str(tmp_path / "t.plan"), "--policy", str(tmp_path / "t.policy"),
                   "--tools", str(tmp_path / "keyless.py"), "--run", "r1")
    assert ran.returncode == 0 and run_id(ran.stdout) == "r1", ran.stdout + ran.stderr
    assert ran.stderr == ("plangate: warning: step `w` has an `idempotency` key, but its tool t.write takes no "
                          "`idempotency_key` parameter: the key is not passed to it, so a retry or a resume after a "
                          "crash may repeat the effect\n")  # not `s`, whose tool takes it, nor `v`, which has no key
    with runtime_at(tmp_path / "journal.db") as runtime:
        passed = {r.step: r.body["key_passed"] for r in kinds(runtime, "r1", "intent")}
        assert runtime.view("r1").results["w"] == {"name": "w", "more": []}  # not even through `**more`
    assert passed == {"w": False, "s": True, "v": False}
    log = plangate("log", "r1").stdout
    assert 'call t.write({"name":"w"}) key=w-1 (not passed: the tool takes no `idempotency_key`) attempt 1' in log
    assert 'call t.send({"to":"ops"}) key=s-1 attempt 1' in log
    assert plangate("resume", "r1", "--tools", str(tmp_path / "keyless.py")).stderr == ""  # nothing left to run


def console_script(*args: str, cwd, demo):
    """The installed `plangate` console script (which, unlike `python -m`, does not put the
    current directory on `sys.path`)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "plangate"
    if not script.is_file():
        pytest.skip("no `plangate` console script beside this Python")
    env = {**os.environ, "PLANGATE_DEMO_DIR": str(demo)}
    env.pop("PLANGATE_FAULT", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_console_script_loads_tools_by_module_name_from_the_current_directory_and_each_once(tmp_path, demo):
    journal = str(tmp_path / "journal.db")
    ran = console_script("run", "examples/deploy.plan", "--policy", "policies/baseline.policy",
                         "--tools", "examples.tools.local", "--tools", "examples/tools/local.py",
                         "--tools", "examples/tools/local.py", "--journal", journal, cwd=ROOT, demo=demo)
    assert ran.returncode == 3, ran.stdout + ran.stderr  # paused at `route`: every tool was found, once
    (tmp_path / "plangate_here_tools.py").write_text(
        "from plangate import tool\n\n@tool('t.read')\ndef read(key: str) -> dict:\n    return {'value': key}\n")
    (tmp_path / "t.policy").write_text(TEST_POLICY)
    (tmp_path / "t.plan").write_text(plan_text('  step a { call t.read(key: "a") }'))
    here = console_script("run", "t.plan", "--policy", "t.policy", "--tools", "plangate_here_tools",
                          "--journal", journal, cwd=tmp_path, demo=demo)
    assert here.returncode == 0, here.stdout + here.stderr


def test_a_closed_output_pipe_keeps_the_commands_exit_code(tmp_path, demo):
    import os
    import subprocess
    import sys

    journal = str(tmp_path / "journal.db")

    def with_closed_stdout(*args: str) -> subprocess.CompletedProcess:
        reader, writer = os.pipe()
        os.close(reader)  # the reader has gone before the command writes anything
        try:
            env = {**os.environ, "PLANGATE_DEMO_DIR": str(demo)}
            env.pop("PLANGATE_FAULT", None)
            return subprocess.run([sys.executable, "-m", "plangate.cli", *args, "--journal", journal], cwd=ROOT,
                                  env=env, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(writer)

    ran = with_closed_stdout("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools",
                             str(DEMO_TOOLS), "--run", "r1")
    assert (ran.returncode, ran.stderr) == (3, "")  # paused, as with a reader; no traceback either
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]  # the run went on after its first line
    assert with_closed_stdout("resume", "r1", "--tools", str(DEMO_TOOLS)).returncode == 3
    assert with_closed_stdout("log", "r1", "--verify").returncode == 0
    assert with_closed_stdout("status", "nope").returncode == 2


def test_only_run_creates_the_journal_and_it_prints_the_bare_run_id_as_the_docs_show(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    for args in (("resume", "r1", "--tools", str(DEMO_TOOLS)), ("approve", "r1", "route", "--as", "a", "--role", "operator",
                 "--yes"), ("reconcile", "r1", "route", "--happened", "--as", "a"), ("abort", "r1"), ("status", "r1")):
        refused = plangate(*args)
        assert refused.returncode == 2 and "there is no journal at" in refused.stderr, args
        assert not (tmp_path / "journal.db").exists()
    cli_doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "Only `run` creates the file" in cli_doc
    for doc in (ROOT / "examples" / "tools" / "README.md", ROOT / "docs" / "cli.md"):
        lines = doc.read_text(encoding="utf-8").splitlines()
        shown = [lines[n + 1] for n, line in enumerate(lines) if line.startswith("$ plangate run ")]
        assert shown and all(run_id(line) for line in shown), doc  # the run id alone, as `run` prints it


def test_a_file_that_is_not_a_journal_is_refused_untouched_and_a_damaged_one_is_named(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    (tmp_path / "journal.db").write_bytes(b"")
    for args in (("resume", "r1", "--tools", str(DEMO_TOOLS)), ("approve", "r1", "route", "--as", "a", "--role", "operator",
                 "--yes"), ("reconcile", "r1", "route", "--happened", "--as", "a"), ("status", "r1")):
        refused = plangate(*args)
        assert refused.returncode == 2 and "not a plangate journal" in refused.stderr, args
        assert (tmp_path / "journal.db").read_bytes() == b""
    (tmp_path / "journal.db").unlink()
    ran = plangate("run", "examples/research.plan", "--policy", "policies/baseline.policy", "--tools",
                   str(DEMO_TOOLS), "--run", "r1")
    assert ran.returncode == 0, ran.stderr
    with open(tmp_path / "journal.db", "r+b") as journal:  # a page of the records zeroed
        journal.seek(4096)
        journal.write(bytes(4096))
    for args in (("status", "r1"), ("resume", "r1", "--tools", str(DEMO_TOOLS)), ("log", "r1")):
        damaged = plangate(*args)
        assert damaged.returncode == 2 and "internal error" not in damaged.stderr, args
        assert "damaged" in damaged.stderr or "malformed" in damaged.stderr, damaged.stderr


@pytest.mark.parametrize("run_id", ["a\nb", " r1", "r1\t", "r\x1b1"])
def test_a_run_id_with_control_characters_or_outer_blanks_is_refused(tmp_path, demo, run_id):
    refused = cli_in(tmp_path, demo)("run", "examples/research.plan", "--policy", "policies/baseline.policy",
                                       "--tools", str(DEMO_TOOLS), "--run", run_id)
    assert refused.returncode == 2 and "run id" in refused.stderr
    assert not (tmp_path / "journal.db").exists()


# ------------------------------------------------------------------ rollbacks and time under the policy
def test_rollbacks_are_decided_by_the_policy_and_count_in_the_budgets(box):
    toolbox, runtime = box
    policy = TEST_POLICY.replace("limit concurrency", 'deny "no-undo-b" when call.tool == "t.write" && '
                                 'args.name == "undo-b" because "b stays"\n  limit concurrency')
    run = runtime.start(plan_text("""
  budget { calls <= 4 }
  step a { call t.write(name: "a") risk reversible_write idempotency "a" rollback t.write(name: "undo-a") }
  step b after a { call t.write(name: "b") risk reversible_write idempotency "b" rollback t.write(name: "undo-b") }
  step c after b { call t.write(name: "c") risk reversible_write idempotency "c" rollback t.write(name: "undo-c") }
  step n after c { call t.send(to: "ops") idempotency "n" approval by role "operator" }
"""), "t.plan", [("t.policy", policy)])
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    report = runtime.abort(run, rollback=True)
    states = {step: (info["state"], info["reason"]) for step, info in report.steps.items()}
    assert states["c"] == ("compensated", "rolled back by `t.write`")  # the 4th call: within the budget
    assert states["b"] == ("succeeded", "its rollback by `t.write` was not made: denied by `no-undo-b`: b stays; "
                                        "the effect stands")
    assert states["a"] == ("succeeded", "its rollback by `t.write` was not made: one more call would make 5, "
                                        "over the plan's budget of 4 calls; the effect stands")
    assert [call[1] for call in toolbox.calls] == ["a", "b", "c", "undo-c"]
    [decision] = [r for r in kinds(runtime, run, "decision")]
    assert decision.step == "b" and decision.body["rollback"] is True and decision.body["denied_by"] == ["no-undo-b"]


def test_a_rollback_that_does_not_fit_its_tool_is_not_made_nor_counted(box):
    toolbox, runtime = box
    run = start_plan(runtime, """
  step a { call t.write(name: "a") risk reversible_write idempotency "a" rollback t.write(name: 7) }
  step n after a { call t.send(to: "ops") idempotency "n" approval by role "operator" }
""")
    assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
    report = runtime.abort(run, rollback=True)
    assert report.steps["a"] == {**report.steps["a"], "state": "succeeded", "reason": (
        "its rollback by `t.write` was not made: the call does not fit its tool: argument `name` of t.write "
        "must be str, not int 7; the effect stands")}
    assert [r for r in kinds(runtime, run, "intent") if r.body.get("rollback")] == []
    assert runtime.view(run).calls == 1 and [call[1] for call in toolbox.calls] == ["a"]


def slow_rollbacks(release: threading.Event, undone: list[str], hook_wait: float = 0) -> ToolRegistry:
    """`t.write`, `t.send`, and `t.undo`, which answers once `release` is set (within 10 s), noting
    each key it was called with in `undone`; its reconcile hook (after waiting `hook_wait` seconds)
    says a rollback happened when `t.undo` has returned for its key."""

    @tool("t.write")
    def write(name: str, idempotency_key: str) -> dict:
        return {"name": name}

    @tool("t.undo")
    def undo(name: str, idempotency_key: str) -> dict:
        release.wait(10)
        undone.append(idempotency_key)
        return {"undone": name}

    @tool("t.send")
    def send(to: str, idempotency_key: str) -> dict:
        return {"to": to}

    def reconcile(idempotency_key: str) -> dict | None:
        time.sleep(hook_wait)
        return {"undone": "a"} if idempotency_key in undone else None

    undo.reconcile(reconcile)
    registry = ToolRegistry()
    for each in (write, undo, send):
        registry.register(each)
    return registry


SLOW_UNDO_POLICY = TEST_POLICY.replace("tool t.send", "tool t.undo  { risk reversible_write time <= 1s }\n  tool t.send")
SLOW_UNDO_PLAN = plan_text("""
  step a { call t.write(name: "a") risk reversible_write idempotency "a" rollback t.undo(name: "a") }
  step n after a { call t.send(to: "ops") idempotency "n" approval by role "operator" }
""")


def test_a_rollback_with_no_answer_within_its_tools_time_cap_is_an_unknown_outcome(tmp_path, monkeypatch):
    """A rollback is bounded as a call is: by its tool's `time <=` cap. Past it the abort does not
    hang: the rollback may have happened, so the run stays `aborting` until the rollback tool's
    reconcile hook (asked only once the call has returned) or an operator settles it."""
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    release, undone = threading.Event(), []
    with runtime_at(tmp_path / "journal.db", slow_rollbacks(release, undone)) as runtime:
        run = runtime.start(SLOW_UNDO_PLAN, "t.plan", [("t.policy", SLOW_UNDO_POLICY)])
        assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
        started = time.monotonic()
        report = runtime.abort(run, rollback=True)
        assert time.monotonic() - started < 5
        assert report.state == "aborting" and report.exit_code == 3
        assert "its rollback by `t.undo` gave no answer within 1s (the time cap of its tool) and may have happened" \
            in report.steps["a"]["reason"]
        assert runtime.abort(run, rollback=True).state == "aborting"  # still running here: nothing is asked
        with pytest.raises(RunError, match="still running in this process"):
            runtime.reconcile(run, "a", True, "ops")
        release.set()
        deadline = time.monotonic() + 10
        while runtime._abandoned(run) and time.monotonic() < deadline:
            time.sleep(0.05)
        report = runtime.abort(run, rollback=True)  # returned: the hook says it happened
    assert report.state == "aborted" and report.steps["a"]["state"] == "compensated"
    assert undone == [f"{run}:a:rollback"]


def test_a_rollback_interrupted_while_waited_for_stays_on_the_books(tmp_path, monkeypatch):
    """Ctrl-C while waiting for a rollback leaves its call running: it is held as a timed-out call
    is, so an abort asked again in the same process neither settles nor repeats it."""
    import signal

    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    release, undone = threading.Event(), []
    policy = SLOW_UNDO_POLICY.replace("time <= 1s", "time <= 30s")
    with runtime_at(tmp_path / "journal.db", slow_rollbacks(release, undone)) as runtime:
        run = runtime.start(SLOW_UNDO_PLAN, "t.plan", [("t.policy", policy)])
        runtime.advance(run)
        main = threading.main_thread().ident
        threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT)).start()  # Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            runtime.abort(run, rollback=True)
        assert [step for step, _ in runtime._abandoned(run).values()] == ["a"]
        assert runtime.abort(run, rollback=True).state == "aborting"
        release.set()
        deadline = time.monotonic() + 10
        while runtime._abandoned(run) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runtime.abort(run, rollback=True).state == "aborted"
    assert undone == [f"{run}:a:rollback"]  # made once


def test_a_rollback_tools_reconcile_hook_is_bounded_by_that_tools_time_cap(tmp_path, monkeypatch):
    """Later (another process), the rollback's unknown outcome is put to the rollback tool's hook,
    which must answer within that tool's cap, or the outcome stays unknown (the step's own call
    has no bound at all: the hook was once waited for as long as it took)."""
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    release, undone = threading.Event(), []
    journal = tmp_path / "journal.db"
    with runtime_at(journal, slow_rollbacks(release, undone)) as runtime:
        run = runtime.start(SLOW_UNDO_PLAN, "t.plan", [("t.policy", SLOW_UNDO_POLICY)])
        runtime.advance(run)
        assert runtime.abort(run, rollback=True).state == "aborting"
        release.set()
        deadline = time.monotonic() + 10
        while runtime._abandoned(run) and time.monotonic() < deadline:
            time.sleep(0.05)
    with runtime_at(journal, slow_rollbacks(threading.Event(), [], hook_wait=5)) as other:  # another process
        started = time.monotonic()
        report = other.abort(run, rollback=True)
    assert time.monotonic() - started < 4
    assert report.state == "aborting" and "the reconcile hook failed: it gave no answer within 1s" \
        in report.steps["a"]["reason"]


def test_abort_with_rollback_refuses_without_the_rollback_tools(tmp_path, demo):
    plan = tmp_path / "notes.plan"
    plan.write_text(NOTES_PLAN)
    plangate = cli_in(tmp_path, demo)
    run = run_id(plangate("run", str(plan), "--policy", "policies/baseline.policy", "--tools", str(DEMO_TOOLS)).stdout)
    refused = plangate("abort", run, "--rollback")
    assert refused.returncode == 2
    assert "could not roll back: the tools loaded do not include `notes.delete`" in refused.stderr
    assert json.loads(plangate("status", run, "--format", "json").stdout)["state"] == "paused"  # nothing was done


@pytest.mark.parametrize("budget, policy_limit, who", [
    ("budget { time <= 10m }", "", "the plan's budget of 600s"),
    ("", "limit time <= 10m", "the policy's limit of 600s"),
])
def test_the_time_budget_stops_a_call_whose_time_bound_would_break_it(tmp_path, monkeypatch, budget, policy_limit,
                                                                      who):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    now = [1_000_000.0]
    toolbox = Toolbox()
    with runtime_at(tmp_path / "journal.db", toolbox.registry(), clock=lambda: now[0]) as runtime:
        run = runtime.start(plan_text(f"""
  {budget}
  step a {{ call t.read(key: "a") time 1m }}
  step b after a {{ call t.send(to: "ops") time 5m idempotency "b" approval by role "operator" }}
"""), "t.plan", [("t.policy", TEST_POLICY.replace("limit concurrency", policy_limit + "\n  limit concurrency"))])
        assert runtime.advance(run).steps["b"]["state"] == "waiting_for_approval"
        now[0] += 6 * 60 + 0.04  # 6 minutes in: b's 5 minutes would end past the 10
        runtime.approve(run, "b", "alice", "operator")
        report = runtime.advance(run)
    assert report.steps["b"]["state"] == "blocked"
    assert report.steps["b"]["reason"] == (f"the call may take 300s: after 360.1s so far the run could take 660.1s, "
                                           f"over {who}")
    assert [call[0] for call in toolbox.calls] == ["t.read"]


def hanging(release: threading.Event) -> ToolRegistry:
    """`t.read` and `t.write`, which answer only once `release` is set (within 30 s)."""

    @tool("t.read")
    def read(key: str) -> dict:
        release.wait(30)
        return {"value": key}

    @tool("t.write")
    def write(name: str, idempotency_key: str) -> dict:
        release.wait(30)
        return {"name": name}

    registry = ToolRegistry()
    for each in (read, write):
        registry.register(each)
    return registry


def let_abandoned_calls_return(runtime, run: str, release: threading.Event) -> None:
    release.set()
    deadline = time.monotonic() + 10
    while runtime._abandoned(run) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("budget, policy_limit, who, step, state", [
    ("budget { time <= 1s }", "", "the plan's budget of 1s", 't.read(key: "k") retry 1', "blocked"),
    ("", "limit time <= 1s", "the policy's limit of 1s", 't.write(name: "w") idempotency "w"', "outcome_unknown"),
    ("budget { time <= 1s }", "limit time <= 5s", "the plan's budget of 1s", 't.read(key: "k")', "failed"),
])
def test_the_time_budget_ends_the_wait_for_a_call_with_no_time_bound(tmp_path, monkeypatch, budget, policy_limit,
                                                                     who, step, state):
    """A call with no `time` and no tool cap was waited for forever: a tool that hung held the run
    (and `plangate run`) for good, whatever the budget. What the tighter time budget leaves bounds
    the wait: a read's attempt fails (its retry is then blocked by the budget), a write's outcome is
    unknown, and the reason says the time budget ran out."""
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    release = threading.Event()
    policy = TEST_POLICY.replace("limit concurrency", policy_limit + "\n  limit concurrency")
    with runtime_at(tmp_path / "journal.db", hanging(release)) as runtime:
        run = runtime.start(plan_text(f"  {budget}\n  step s {{ call {step} }}"), "t.plan", [("t.policy", policy)])
        started = time.monotonic()
        report = runtime.advance(run)
        waited = time.monotonic() - started
        records = runtime.journal.records(run)
        let_abandoned_calls_return(runtime, run, release)
    assert waited < 5
    ran_out = f"no answer within 1s, when the time budget ran out ({who})"
    assert report.steps["s"]["state"] == state
    if state == "outcome_unknown":
        assert report.steps["s"]["reason"] == ran_out and report.exit_code == 3
    else:
        (failed,) = [r for r in records if r.kind == "attempt_failed"]
        assert failed.body["error"] == f"{ran_out} (a read-only call: no effect to settle)"
        assert report.exit_code == 1
    if state == "blocked":  # the retry would start with the budget spent
        assert report.steps["s"]["reason"].startswith("the run has taken 1") and report.steps["s"]["reason"].endswith(
            f"over {who}")
    assert len([r for r in records if r.kind == "intent"]) == 1


def test_a_rollback_with_no_time_cap_is_waited_for_only_as_long_as_the_time_budget_leaves(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    release, undone = threading.Event(), []
    policy = TEST_POLICY.replace("tool t.send", "tool t.undo  { risk reversible_write }\n  tool t.send") \
        .replace("limit concurrency", "limit time <= 2s\n  limit concurrency")
    with runtime_at(tmp_path / "journal.db", slow_rollbacks(release, undone)) as runtime:
        run = runtime.start(SLOW_UNDO_PLAN, "t.plan", [("t.policy", policy)])
        assert runtime.advance(run).steps["n"]["state"] == "waiting_for_approval"
        started = time.monotonic()
        report = runtime.abort(run, rollback=True)
        waited = time.monotonic() - started
        let_abandoned_calls_return(runtime, run, release)
    assert waited < 5
    assert report.state == "aborting" and report.steps["a"]["state"] == "outcome_unknown"
    reason = report.steps["a"]["reason"]
    assert reason.startswith("its rollback by `t.undo` gave no answer within ")
    assert reason.endswith(", when the time budget ran out (the policy's limit of 2s) and may have happened")


def test_plangate_run_ends_when_the_time_budget_runs_out_on_a_tool_that_hangs(tmp_path):
    (tmp_path / "tools.py").write_text("import time\nfrom plangate import tool\n\n\n@tool('x.hang')\n"
                                       "def hang() -> dict:\n    time.sleep(3600)\n    return {}\n")
    (tmp_path / "p.policy").write_text("policy p { tool x.* { risk read_only } limit time <= 2s }\n")
    (tmp_path / "q.plan").write_text("plan q { step s { call x.hang() risk read_only } }\n")
    started = time.monotonic()
    done = cli("run", "q.plan", "--policy", "p.policy", "--tools", "tools.py", "--journal", "j.db", cwd=tmp_path,
               demo_dir=tmp_path)
    assert time.monotonic() - started < 60
    assert done.returncode == 1, done.stdout + done.stderr
    assert "when the time budget ran out (the policy's limit of 2s)" in done.stdout


def nested(depth: int, inside: Any = None) -> Any:
    """`inside` in `depth` lists, one inside another."""
    value = inside
    for _ in range(depth):
        value = [value]
    return value


def test_a_result_nested_past_the_bound_fails_its_attempt_instead_of_breaking_the_run(box):
    """A result 600 lists deep was journaled, and every pass that gave it to a later step then
    failed with an internal error (a RecursionError): the run was stuck for good."""
    toolbox, runtime = box
    body = """
  step a { call t.read(key: "%s") }
  step b { call t.write(name: "b", value: a.result.value) idempotency "b" }
"""
    toolbox.values = {"deep": nested(600), "fits": nested(63, 1)}  # `{"value": …}`: 601 and 64 levels
    run = start_plan(runtime, body % "deep")
    report = runtime.advance(run)
    assert report.state == "failed" and report.steps["b"]["state"] == "cancelled"
    assert report.steps["a"]["reason"] == ("attempt 1 failed: tool t.read returned a result that is not JSON that "
                                           "plangate can keep: it is nested more than 64 levels deep in lists and "
                                           "maps, the most a run keeps")
    assert not kinds(runtime, run, "result")
    fits = start_plan(runtime, body % "fits")
    assert runtime.advance(fits).state == "succeeded"
    (intent,) = kinds(runtime, fits, "intent", "b")
    assert intent.body["args"]["value"] == nested(63, 1)


def test_a_result_settled_by_hand_is_held_to_the_bounds_of_a_tools_result(box, capsys):
    from plangate.cli import main

    toolbox, runtime = box
    run = start_plan(runtime, '  step w { call t.write(name: "w") risk reversible_write idempotency "w" }')
    crash_after_intent(runtime, run, "w", "w")
    assert runtime.advance(run).steps["w"]["state"] == "outcome_unknown"
    with pytest.raises(RunError, match="not JSON that plangate can keep: it is nested more than 64 levels deep"):
        runtime.reconcile(run, "w", True, "ops", {"l": nested(64)})
    with pytest.raises(RunError, match="its canonical JSON text is over 16 MiB, the most a run keeps"):
        runtime.reconcile(run, "w", True, "ops", {"s": "x" * (16 * 1024 * 1024)})
    journal = str(runtime.journal.path)
    settle = ["reconcile", run, "w", "--happened", "--as", "ops", "--journal", journal, "--result"]
    assert main([*settle, json.dumps({"l": nested(200)})]) == 2
    assert "it is nested more than 64 levels deep in lists and maps" in capsys.readouterr().err
    assert not kinds(runtime, run, "reconciled")  # nothing recorded
    assert main([*settle, json.dumps({"l": nested(63)})]) == 0
    assert runtime.view(run).results["w"] == {"l": nested(63)}


def forge(path, run: str, seq: int, edit) -> None:
    """Edit record `seq` of `run` with `edit(body) -> body text` and rebuild every hash after it
    and the head, as someone who knows the format could: the chain then verifies."""
    from plangate.runtime.journal import _SCHEMA

    with closing(sqlite3.connect(path)) as connection:
        connection.executescript("DROP TRIGGER records_are_not_updated; DROP TRIGGER records_are_not_deleted;")
        rows = connection.execute("SELECT seq, run, kind, step, body, at, prev_hash FROM records WHERE run = ? "
                                  "ORDER BY seq", (run,)).fetchall()
        previous = None
        for row in rows:
            row = list(row)
            if row[0] == seq:
                row[4] = edit(json.loads(row[4]))
            if previous is not None:
                row[6] = previous
            previous = content_hash(row)
            connection.execute("UPDATE records SET body = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                               (row[4], row[6], previous, row[0]))
        connection.execute("UPDATE heads SET last_hash = ? WHERE run = ?", (previous, run))
        connection.executescript(_SCHEMA)
        connection.commit()


@pytest.mark.parametrize("field, value", [("plan_text", 5), ("policy_texts", [["a"]]), ("started_at", "x")])
def test_a_journal_edited_with_its_hashes_rebuilt_is_reported_as_damaged_by_record(tmp_path, field, value):
    toolbox = Toolbox()
    path = tmp_path / "journal.db"
    with runtime_at(path, toolbox.registry()) as runtime:
        run = start_plan(runtime, '  step r { call t.read(key: "k") }')
        first = runtime.journal.records(run)[0].seq
    forge(path, run, first, lambda body: json.dumps({**body, field: value}))
    with runtime_at(path, toolbox.registry()) as runtime:
        assert runtime.journal.verify(run) == []  # the chain cannot tell
        with pytest.raises(RunError, match=rf"the journal of run `{run}` is damaged: record #{first} \(run_started\) "
                                           "holds what plangate never writes"):
            runtime.view(run)


def test_a_run_state_of_another_type_is_malformed(tmp_path, box):
    toolbox, runtime = box
    run = start_plan(runtime, '  step r { call t.read(key: "k") }')
    runtime.advance(run)
    last = runtime.journal.records(run)[-1]
    assert last.kind == "run_state"
    forge(runtime.journal.path, run, last.seq, lambda body: json.dumps({**body, "state": ["succeeded"]}))
    assert [problem.code for problem in runtime.journal.verify(run)] == ["malformed-record"]


def test_a_journal_record_holding_nan_is_malformed(tmp_path, box):
    toolbox, runtime = box
    run = start_plan(runtime, '  step r { call t.read(key: "k") }')
    runtime.advance(run)
    (result,) = kinds(runtime, run, "result", "r")
    forge(runtime.journal.path, run, result.seq, lambda body: '{"external_ref":null,"result":{"value":NaN}}')
    assert [problem.code for problem in runtime.journal.verify(run)] == ["malformed-record"]


# ------------------------------------------------------------------ one runtime, many threads
def test_a_runtime_made_in_one_thread_runs_and_approves_from_others(box):
    """An agent's runtime is shared: its journal gives each thread its own connection."""
    toolbox, runtime = box
    run = start_plan(runtime, '  step send { call t.send(to: "ops") idempotency "k" approval by role "operator" }')
    outcomes: list[Any] = []

    def in_thread(work) -> None:
        thread = threading.Thread(target=lambda: outcomes.append(work()))
        thread.start()
        thread.join()

    in_thread(lambda: runtime.advance(run).state)
    in_thread(lambda: runtime.approve(run, "send", "al", "operator")["approver"])
    in_thread(lambda: runtime.advance(run).state)
    assert outcomes == ["paused", "al", "succeeded"] and toolbox.calls == [("t.send", "ops", "k")]
    assert runtime.journal.verify(run) == []


def test_two_threads_of_one_runtime_never_run_one_run_at_once(tmp_path):
    """The run's lock excludes another thread of the same runtime as it excludes another process:
    the second `advance` waits, then is refused naming the thread, and the call is made once."""
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    @tool("t.write")
    def write(name: str, idempotency_key: str) -> dict:
        calls.append(name)
        entered.set()
        release.wait(10)
        return {"name": name}

    registry = ToolRegistry()
    registry.register(write)
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        run = start_plan(runtime, '  step w { call t.write(name: "n") risk reversible_write idempotency "k" }')
        first = threading.Thread(target=runtime.advance, args=(run,))
        first.start()
        assert entered.wait(10)
        with pytest.raises(RunError, match="is being executed by another thread of process"):
            runtime.advance(run)
        assert runtime.view(run).held_by == f"another thread of process {os.getpid()}"
        assert runtime.view(run).states["w"] == "running"
        release.set()
        first.join()
        assert calls == ["n"] and runtime.view(run).states["w"] == "succeeded"


def test_two_runs_advance_at_once_from_two_threads_of_one_runtime(tmp_path):
    both_inside = threading.Barrier(2, timeout=10)  # each call returns only once both are being made

    @tool("t.write")
    def write(name: str, idempotency_key: str) -> dict:
        both_inside.wait()
        return {"name": name}

    registry = ToolRegistry()
    registry.register(write)
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        runs = [start_plan(runtime, f'  step w {{ call t.write(name: "{name}") risk reversible_write idempotency "{name}" }}')
                for name in ("a", "b")]
        states: list[str] = []
        threads = [threading.Thread(target=lambda run=run: states.append(runtime.advance(run).state)) for run in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert states == ["succeeded", "succeeded"]
        assert all(runtime.journal.verify(run) == [] for run in runs)


def test_views_folded_by_many_threads_at_once_agree_with_the_journal(box):
    """Threads share the runtime's folded state of a run: views taken while it grows are each the
    fold of the journal up to their head (two views of one head agree), and the last is a fresh fold's."""
    toolbox, runtime = box
    run = start_plan(runtime, "\n".join(f'  step r{i} {{ call t.read(key: "k{i}") }}' for i in range(30)))
    views: list[Any] = []
    advancing = threading.Thread(target=runtime.advance, args=(run,))

    def watch() -> None:
        while advancing.is_alive():
            views.append(runtime.view(run))

    threads = [threading.Thread(target=watch) for _ in range(3)]
    advancing.start()
    for thread in threads:
        thread.start()
    for thread in [advancing, *threads]:
        thread.join()
    final = runtime.view(run)
    assert set(final.states.values()) == {"succeeded"} and len(final.states) == 30
    with runtime_at(runtime.journal.path, toolbox.registry()) as fresh:  # folded afresh from the journal
        assert fresh.view(run).states == final.states and fresh.view(run).head == final.head
    by_head: dict[tuple[int, str], dict[str, str]] = {}
    for view in views:
        assert by_head.setdefault(view.head, view.states) == view.states
    assert len(by_head) > 1  # the views saw the run grow


def test_closing_the_journal_while_threads_advance_runs_refuses_them_with_a_run_error(tmp_path):
    """Each thread's connection is closed by that thread, never under a statement it runs (closing
    them all from one thread crashed the process): the others get a `JournalError`, a `RunError`."""
    @tool("t.write")
    def write(n: int, idempotency_key: str) -> dict:
        return {"n": n}

    registry = ToolRegistry()
    registry.register(write)
    plan = "".join(f'  step s{i} {{ call t.write(n: {i}) risk reversible_write idempotency "{i}" }}\n' for i in range(40))
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        runs = [start_plan(runtime, plan) for _ in range(4)]
        failures: list[BaseException] = []

        def advance(run: str) -> None:
            try:
                runtime.advance(run)
            except BaseException as error:  # noqa: BLE001 - the test looks at what escaped
                failures.append(error)

        threads = [threading.Thread(target=advance, args=(run,)) for run in runs]
        for thread in threads:
            thread.start()
        threading.Event().wait(0.1)
        runtime.journal.close()
        for thread in threads:
            thread.join(30)
        assert all(isinstance(error, RunError) for error in failures)
        with pytest.raises(RunError, match="is closed"):
            runtime.view(runs[0])


def test_misused_runtime_arguments_are_type_errors(tmp_path, box):
    toolbox, runtime = box
    with pytest.raises(TypeError, match="`tools` is a ToolRegistry"):
        Runtime(tmp_path / "other.db", [toolbox.registry()])  # type: ignore[arg-type]
    run = start_plan(runtime, '  step send { call t.send(to: "ops") idempotency "k" approval by role "operator" }')
    runtime.advance(run)
    with pytest.raises(TypeError, match="an approver and a role are strings, not NoneType and str"):
        runtime.approve(run, "send", None, "operator")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`shown` is the dict `approval_call` returned, not str"):
        runtime.approve(run, "send", "al", "operator", shown="x")  # type: ignore[arg-type]
    with pytest.raises(RunError, match=r"the approver's name `al\\udcff` holds a byte that is not UTF-8 text"):
        runtime.approve(run, "send", "al\udcff", "operator")
    with pytest.raises(RunError, match=r"the run id `r\\udcff` holds a byte that is not UTF-8 text; no run has it"):
        runtime.view("r\udcff")
    crash_after_intent(runtime, run, "n", "k2")
    with pytest.raises(TypeError, match="`happened` is a bool and `by` a str, not str and str"):
        runtime.reconcile(run, "w", "no", "bob")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not bool and NoneType"):
        runtime.reconcile(run, "w", False, None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ how a run ends, and its evidence
def test_a_failed_step_makes_the_run_exit_1_even_while_another_step_waits(box, capsys):
    toolbox, runtime = box
    toolbox.failures["f"] = 1
    run = start_plan(runtime, """
  step f { call t.read(key: "f") }
  step n { call t.send(to: "ops") idempotency "n" approval by role "operator" }
""")
    report = runtime.advance(run)
    assert report.state == "failed" and report.exit_code == 1
    assert report.message == ("`f` failed: attempt 1 failed: ConnectionError: f is unreachable; "
                              'still waiting: `n`: waiting for 1 more approval(s) by role "operator"')
    assert kinds(runtime, run, "run_state") == []  # the run has not ended: `n` may still be approved
    runtime.approve(run, "n", "alice", "operator")
    report = runtime.advance(run)
    assert report.steps["n"]["state"] == "succeeded" and report.state == "failed" and report.exit_code == 1
    assert [r.body["state"] for r in kinds(runtime, run, "run_state")] == ["failed"]


def test_every_completed_check_writes_evidence_and_evidence_names_its_step(box):
    toolbox, runtime = box
    run = start_plan(runtime, """
  step w { call t.write(name: "w") risk reversible_write idempotency "w" expect result.name == "w" }
  check seen after w { call t.read(key: "w") }
""")
    assert runtime.advance(run).state == "succeeded"
    evidence = kinds(runtime, run, "evidence")
    assert [(r.step, r.body["step"]) for r in evidence] == [("w", "w"), ("seen", "seen")]
    check = evidence[1].body
    assert check["what"] == 'check `seen`: t.read({"key":"w"})' and check["observed"] == {"value": None}
    assert check["proves"] == "verifies `w` — the check's call returned (it has no `expect`)" and check["passed"]


def test_a_check_whose_call_fails_writes_evidence_that_it_showed_nothing(box):
    toolbox, runtime = box
    toolbox.failures["probe"] = 2
    run = start_plan(runtime, """
  step w { call t.write(name: "w") risk reversible_write idempotency "w" }
  check seen after w { call t.read(key: "probe") retry 1 expect result.value == null }
""")
    report = runtime.advance(run)
    assert report.steps["seen"]["state"] == "failed" and report.state == "failed"
    evidence = [r.body for r in kinds(runtime, run, "evidence") if r.step == "seen"]
    assert [(body["passed"], body["observed"]) for body in evidence] == [(False, None), (False, None)]
    assert [body["how"] for body in evidence] == [
        f"`t.read`: attempt {n} failed: ConnectionError: probe is unreachable" for n in (1, 2)]
    assert evidence[0]["proves"] == "verifies `w` — not shown: the call failed"
    assert evidence[0]["what"] == "check `seen`: t.read" and evidence[0]["step"] == "seen"


def test_a_check_failing_across_a_crash_writes_its_evidence_once(tmp_path, monkeypatch):
    """The evidence of a failed check and the step's new state are one transaction: a crash
    between the failure and the state leaves neither, and the resumed run writes both once."""
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    toolbox = Toolbox()
    toolbox.failures["probe"] = 1
    journal = tmp_path / "journal.db"
    body = '  check seen { call t.read(key: "probe") }'
    with runtime_at(journal, toolbox.registry()) as runtime:
        run = start_plan(runtime, body)
        append_many = runtime.journal.append_many

        def dying_at_the_state(run_id, entries, **kwargs):
            if any(kind == "state" and entry["state"] == "failed" for kind, entry, _ in entries):
                raise KeyboardInterrupt  # the process dies as the step's state is written
            return append_many(run_id, entries, **kwargs)

        monkeypatch.setattr(runtime.journal, "append_many", dying_at_the_state)
        with pytest.raises(KeyboardInterrupt):
            runtime.advance(run)
        assert kinds(runtime, run, "evidence") == []
    with runtime_at(journal, toolbox.registry()) as runtime:
        assert runtime.advance(run).steps["seen"]["state"] == "failed"
        [evidence] = kinds(runtime, run, "evidence")
    assert evidence.body["passed"] is False and evidence.body["how"].startswith("`t.read`: attempt 1 failed: ")


def test_a_check_whose_call_does_not_fit_its_tool_writes_evidence_that_it_was_not_made(box):
    toolbox, runtime = box
    toolbox.values["k"] = 7
    run = start_plan(runtime, """
  step r { call t.read(key: "k") }
  check seen after r { call t.read(key: r.result.value) }
""")
    report = runtime.advance(run)
    assert report.steps["seen"]["state"] == "failed" and kinds(runtime, run, "intent", "seen") == []
    [evidence] = kinds(runtime, run, "evidence", "seen")
    assert evidence.body["passed"] is False and evidence.body["how"] == (
        "`t.read`: the call does not fit its tool: argument `key` of t.read must be str, not int 7 (not made)")


@pytest.mark.parametrize("reads", ['when r.result.value == "go"', 'idempotency "n-" + r.result.value',
                                   'expect r.result.value == "go"'])
def test_a_call_of_constants_may_be_approved_before_the_steps_its_other_clauses_read(box, reads):
    """An approval binds to the call (tool and arguments): a `when`, `idempotency` or `expect`
    that reads an unfinished step's result does not change it, so it may be approved ahead."""
    toolbox, runtime = box
    toolbox.values["r"] = "go"
    key = "" if "idempotency" in reads else 'idempotency "n"'
    run = start_plan(runtime, f"""
  step gate {{ call t.send(to: "first") idempotency "g" approval by role "operator" }}
  step r after gate {{ call t.read(key: "r") }}
  step n after r {{ call t.send(to: "ops") {key} {reads} approval by role "operator" }}
  step m after r {{ call t.send(to: r.result.value) idempotency "m" approval by role "operator" }}
""")
    assert runtime.advance(run).steps["gate"]["state"] == "waiting_for_approval"
    runtime.approve(run, "n", "alice", "operator")  # its call is known: `send(to: "ops")`
    with pytest.raises(RunError, match="step `m` cannot be approved yet: its call uses the result of `r`"):
        runtime.approve(run, "m", "alice", "operator")
    runtime.approve(run, "gate", "alice", "operator")
    report = runtime.advance(run)
    assert report.steps["n"]["state"] == "succeeded" and report.steps["m"]["state"] == "waiting_for_approval"


def test_a_call_made_again_after_it_did_not_happen_is_counted_and_charged_again(box):
    """The first call may have reached the tool (a timeout, a process that died inside it): the
    run-time budget bounds the calls made, so a re-call after `--not-happened` counts, and a run
    that timed out and re-called forever could not escape `calls`."""
    toolbox, runtime = box
    run = start_plan(runtime, """
  budget { calls <= 2  cost <= 11 usd }
  step w { call t.write(name: "w") risk reversible_write idempotency "w" cost 5 usd }
  step r after w { call t.read(key: "r") cost 1 usd }
""")
    crash_after_intent(runtime, run, "w", "w")
    assert runtime.advance(run).steps["w"]["state"] == "outcome_unknown"
    runtime.reconcile(run, "w", False, "ops")
    assert (runtime.view(run).calls, runtime.view(run).cost) == (1, 5.0)
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "succeeded" and report.steps["w"]["attempts"] == 1
    assert report.steps["r"]["state"] == "blocked" and report.state == "blocked" and report.exit_code == 1
    assert "one more call would make 3, over the plan's budget of 2 calls" in report.steps["r"]["reason"]
    assert (runtime.view(run).calls, runtime.view(run).cost) == (2, 10.0)
    assert [call[:2] for call in toolbox.calls] == [("t.write", "w")]


def test_a_hand_settled_result_is_credited_to_the_operator_and_a_failing_hook_is_reported(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)

    def unreachable(idempotency_key: str) -> dict | None:
        raise TimeoutError("the ledger is unreachable")

    with runtime_at(tmp_path / "journal.db", write_with_hook(unreachable)) as runtime:
        run = start_plan(runtime, '  step w { call t.write(name: "w") risk reversible_write idempotency "w" '
                                  'expect result.name == "w" }')
        crash_after_intent(runtime, run, "w", "w")
        report = runtime.advance(run)
        assert report.state == "paused" and report.steps["w"]["state"] == "outcome_unknown"
        assert report.steps["w"]["reason"] == ("the call may have happened, and the reconcile hook failed: "
                                               "TimeoutError: the ledger is unreachable (`plangate reconcile` "
                                               "settles it by hand)")
        assert kinds(runtime, run, "outcome_unknown")[-1].body["reason"] == report.steps["w"]["reason"]
        runtime.reconcile(run, "w", True, "ops", {"name": "w"})
        assert runtime.advance(run).state == "succeeded"
        [evidence] = kinds(runtime, run, "evidence")
    assert evidence.body["how"] == "result reported by `ops` through `plangate reconcile`"


@pytest.mark.parametrize("answer", [True, False])
def test_a_reconcile_hook_that_answers_a_bool_leaves_the_outcome_unknown(tmp_path, monkeypatch, answer):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    calls: list[str] = []
    with runtime_at(tmp_path / "journal.db", write_with_hook(lambda idempotency_key: answer, calls)) as runtime:
        run = start_plan(runtime, '  step w { call t.write(name: "w") risk reversible_write idempotency "w" }')
        crash_after_intent(runtime, run, "w", "w")
        report = runtime.advance(run)
        assert report.state == "paused" and report.steps["w"]["state"] == "outcome_unknown"
        assert report.steps["w"]["reason"] == (
            f"the call may have happened, and the reconcile hook failed: the reconcile hook of tool t.write returned "
            f"{str(answer).lower()}, a bool: it must return the call's result if the call happened, or None if it did "
            "not (`plangate reconcile` settles it by hand)")
        assert kinds(runtime, run, "result") == [] and kinds(runtime, run, "reconciled") == [] and calls == []
        runtime.reconcile(run, "w", False, "ops")  # the operator still can
        assert runtime.advance(run).state == "succeeded" and calls == ["w"]


def test_a_results_external_reference_is_journaled_and_shown_by_plangate_log(tmp_path, monkeypatch, capsys):
    from plangate.cli import main

    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    answers = {"a": {"id": "pv-42", "url": "https://pv-42.example.com"}, "b": {"ref": 7, "url": "https://b"},
               "c": {"id": True, "url": "https://c"}, "d": {"status": "ok"},
               "e": {"id": "internal-9", "external_ref": "ticket-3"}}

    @tool("t.read")
    def read(key: str) -> dict:
        return answers[key]

    registry = ToolRegistry()
    registry.register(read)
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        run = start_plan(runtime, "\n".join(f'  step {key} {{ call t.read(key: "{key}") }}' for key in answers))
        assert runtime.advance(run).state == "succeeded"
        refs = {r.step: r.body["external_ref"] for r in kinds(runtime, run, "result")}
    assert refs == {"a": "pv-42", "b": 7, "c": "https://c", "d": None,  # the first of external_ref, id, ref, url
                    "e": "ticket-3"}
    capsys.readouterr()
    assert main(["log", run, "--journal", str(tmp_path / "journal.db")]) == 0
    lines = {line.split()[2]: line for line in capsys.readouterr().out.splitlines() if line.split()[1] == "result"}
    assert lines["a"].endswith('result ref=pv-42 {"id":"pv-42","url":"https://pv-42.example.com"}')
    assert lines["b"].endswith('result ref=7 {"ref":7,"url":"https://b"}')
    assert lines["d"].endswith('result {"status":"ok"}')


def test_a_time_budget_message_never_reads_as_equal_to_the_budget(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    now = [1_000_000.0]
    toolbox = Toolbox()
    with runtime_at(tmp_path / "journal.db", toolbox.registry(), clock=lambda: now[0]) as runtime:
        run = start_plan(runtime, """
  budget { time <= 5s }
  step b { call t.send(to: "ops") idempotency "b" approval by role "operator" }
""")
        runtime.advance(run)
        now[0] += 5.04
        runtime.approve(run, "b", "alice", "operator")
        report = runtime.advance(run)
    assert report.steps["b"]["reason"] == "the run has taken 5.1s, over the plan's budget of 5s"


def test_a_call_whose_arguments_do_not_fit_the_catalogue_is_blocked_before_the_rules(box):
    """A deny rule over a `double` must not be dodged by a string: the schema is checked first."""
    toolbox, runtime = box
    policy = """
policy schema {
  tool t.read  { risk read_only }
  tool t.write { risk reversible_write args { name: string, value: double? } }
  deny "cap" when call.tool == "t.write" && has(args.value) && args.value > 500.0
}
"""
    toolbox.values["amount"] = "900"
    run = runtime.start(plan_text('  step r { call t.read(key: "amount") }\n'
                                  '  step w { call t.write(name: "n", value: r.result.value) idempotency "k" }'),
                        "t.plan", [("schema.policy", policy)])
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "blocked"
    assert "does not fit its tool's `args`" in report.steps["w"]["reason"] and "must be `double`" in report.steps["w"]["reason"]
    assert [call[0] for call in toolbox.calls] == ["t.read"]


def test_an_argument_with_no_json_form_fails_the_step_instead_of_the_run(box):
    toolbox, runtime = box
    toolbox.values["zero"] = 0.0
    run = start_plan(runtime, '  step r { call t.read(key: "zero") }\n'
                              '  step w { call t.write(name: "n", value: r.result.value / 0.0) idempotency "k" }')
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "failed" and "cannot be passed to a tool" in report.steps["w"]["reason"]
    assert runtime.advance(run).steps["w"]["state"] == "failed"  # and the run can still be read and resumed


def test_an_idempotency_key_that_reads_the_steps_own_result_falls_back_to_the_derived_key(box):
    """The key is needed before the call; `result` is known only after it."""
    toolbox, runtime = box
    run = start_plan(runtime, '  step w { call t.write(name: "n") idempotency "k-" + result.name }')
    assert runtime.advance(run).state == "succeeded"
    assert toolbox.calls[0][2].startswith(f"{run}:w:")


@pytest.mark.parametrize("expression, key", [
    ('"k-1"', "k-1"), ("42", "42"), ("true", "true"), ('{"b": [1, 2.5], "a": null}', '{"a":null,"b":[1,2.5]}')])
def test_an_idempotency_key_is_a_string_as_it_is_other_values_as_canonical_json(box, expression, key):
    toolbox, runtime = box
    run = start_plan(runtime, f'  step w {{ call t.write(name: "n") idempotency {expression} }}')
    assert runtime.advance(run).state == "succeeded" and toolbox.calls[0][2] == key


@pytest.mark.parametrize("value", ["", None])
def test_an_idempotency_key_that_is_empty_or_null_at_run_time_fails_the_step_before_its_call(box, value):
    """(A constant one is refused before the run: `invalid-value`.)"""
    toolbox, runtime = box
    toolbox.values["k"] = value
    run = start_plan(runtime, '  step r { call t.read(key: "k") }\n'
                              '  step w after r { call t.write(name: "n") idempotency r.result.value }')
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "failed" and [call[0] for call in toolbox.calls] == ["t.read"]
    assert "which names no call" in report.steps["w"]["reason"]


def test_a_finished_run_has_nothing_to_abort_but_may_be_rolled_back(box):
    from plangate.runtime.host import RunError

    toolbox, runtime = box
    run = start_plan(runtime, '  step r { call t.read(key: "k") }')
    assert runtime.advance(run).state == "succeeded"
    with pytest.raises(RunError, match="has ended"):
        runtime.abort(run, rollback=False)
    assert runtime.report(run, runtime.view(run), record=False).state == "succeeded"
    assert runtime.abort(run, rollback=True).state == "aborted"  # nothing reversible here: ends aborted


def test_run_with_an_existing_id_takes_its_policies_in_any_order_and_once(tmp_path, demo):
    plangate = cli_in(tmp_path, demo)
    strict = str(ROOT / "policies" / "strict.policy")
    baseline = str(ROOT / "policies" / "baseline.policy")
    first = plangate("run", "examples/deploy.plan", "--policy", baseline, "--policy", strict,
                     "--tools", str(DEMO_TOOLS), "--run", "r1")
    assert first.returncode == 3, first.stdout + first.stderr
    again = plangate("run", "examples/deploy.plan", "--policy", strict, "--policy", baseline, "--policy", strict,
                     "--tools", str(DEMO_TOOLS), "--run", "r1")
    assert again.returncode == 3 and "another policy" not in again.stderr, again.stdout + again.stderr


def test_the_rules_see_a_duration_argument_as_a_duration_though_the_tool_gets_its_text(box):
    """A deny over `args.value > duration("1h")` must fire at run time on a value known only then."""
    toolbox, runtime = box
    policy = """
policy windows {
  tool t.read  { risk read_only }
  tool t.write { risk reversible_write args { name: string, value: duration? } }
  deny "long" when has(args.value) && args.value > duration("1h")
}
"""
    toolbox.values.update({"long": "2h", "short": "30m"})
    run = runtime.start(plan_text(
        '  step a { call t.read(key: "long") }\n'
        '  step b { call t.read(key: "short") }\n'
        '  step w { call t.write(name: "n", value: duration(a.result.value)) idempotency "k" }\n'
        '  step s { call t.write(name: "m", value: duration(b.result.value)) idempotency "j" }'),
        "t.plan", [("windows.policy", policy)])
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "blocked" and "denied by `long`" in report.steps["w"]["reason"]
    assert report.steps["s"]["state"] == "succeeded"
    assert [call for call in toolbox.calls if call[0] == "t.write"] == [("t.write", "m", "j")]


def test_a_step_freed_by_a_skipped_step_starts_without_waiting_for_an_unrelated_call(tmp_path):
    import threading
    import time

    from plangate.runtime.host import Runtime
    from plangate.runtime.journal import Journal

    released = threading.Event()
    started: dict[str, float] = {}
    registry = ToolRegistry()

    @tool("t.slow")
    def slow() -> dict:
        released.wait(5)
        return {}

    @tool("t.fast")
    def fast(name: str) -> dict:
        started[name] = time.monotonic()
        if name == "d":
            released.set()  # `a` ends only once `d` has started: before the fix, `d` waited for `a`
        return {}

    registry.register(slow)
    registry.register(fast)
    policy = "policy p { tool t.* { risk read_only } limit concurrency <= 4 }"
    plan = """plan t {
  step a { call t.slow() time 10s }
  step c { call t.fast(name: "c") when 1 > 2 }
  step d after c { call t.fast(name: "d") }
}"""
    with Journal.open(tmp_path / "j.db") as journal:
        runtime = Runtime(journal, registry)
        run = runtime.start(plan, "t.plan", [("p.policy", policy)])
        begun = time.monotonic()
        report = runtime.advance(run)
    assert {step: item["state"] for step, item in report.steps.items()} == {
        "a": "succeeded", "c": "skipped", "d": "succeeded"}
    assert started["d"] - begun < 2.0


def test_misuse_of_the_runtime_api_is_a_clear_type_error(tmp_path):
    from plangate import RunError, Runtime

    @tool("t.r")
    def read() -> dict:
        return {}

    registry = ToolRegistry()
    registry.register(read)
    runtime = Runtime(tmp_path / "journal.db", registry)
    policy = "policy p { tool t.r { risk read_only } }"
    plan = "plan p { step s { call t.r() } }"
    with pytest.raises(TypeError, match="the policy texts are a list of SourceFile or"):
        runtime.start(plan, "p.plan", policy)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the plan text must be a str"):
        runtime.start(plan.encode(), "p.plan", [("p.policy", policy)])  # type: ignore[arg-type]
    for misused in (runtime.advance, runtime.view):
        with pytest.raises(TypeError, match="a run id is a str, not NoneType"):
            misused(None)  # type: ignore[arg-type]
    with pytest.raises(RunError, match="already exists"):
        runtime.start(plan, "p.plan", [("p.policy", policy)], run="r1")
        runtime.start(plan, "p.plan", [("p.policy", policy)], run="r1")


@pytest.mark.parametrize("happened, state", [(False, "cancelled"), (True, "succeeded")])
def test_an_unknown_outcome_settled_after_an_abort_ends_as_the_aborted_run_does(box, happened, state):
    """An abort leaves an unknown outcome as it is; settled afterwards, nothing will call or verify
    the step again: it is not left `ready` or `verifying` in an ended run."""
    toolbox, runtime = box
    run = start_plan(runtime, '  step w { call t.write(name: "w") risk reversible_write idempotency "w" }\n'
                              '  step r after w { call t.read(key: "r") }')
    crash_after_intent(runtime, run, "w", "w")  # a crash after the call
    aborted = runtime.abort(run, rollback=False)
    assert aborted.state == "aborted" and aborted.steps["w"]["state"] == "outcome_unknown"
    assert aborted.needs_reconcile == ("w",)  # `resume` asks no hook of an ended run: `reconcile` settles it
    runtime.reconcile(run, "w", happened, "bob", {"name": "w"} if happened else None)
    report = runtime.advance(run)
    assert report.state == "aborted" and report.steps["w"]["state"] == state and toolbox.calls == []
    assert "aborted" in report.steps["w"]["reason"]


@pytest.mark.parametrize("happened", [True, False])
def test_an_abort_with_rollback_waits_for_an_unknown_outcome_and_rolls_it_back_if_it_happened(box, happened):
    """`w` may have happened when the run is aborted with `--rollback`: the abort cannot say the
    effect is undone, so it stays `aborting` until `w` is settled; then it rolls `w` back if it
    happened (and cancels it if not), and only then is the run `aborted`."""
    toolbox, runtime = box

    class Crash(BaseException):
        pass

    def crash_after_w(step: str, boundary: str) -> None:
        if (step, boundary) == ("w", "after_call"):
            raise Crash  # the process ends after `w`'s call took effect, before its answer is recorded

    run = start_plan(runtime, '  step v { call t.write(name: "v") risk reversible_write idempotency "v" '
                              'rollback t.write(name: "undo-" + result.name) }\n'
                              '  step w after v { call t.write(name: "w") risk reversible_write idempotency "w" '
                              'rollback t.write(name: "undo-" + result.name) }')
    with pytest.raises(Crash):
        Runtime(runtime.journal, runtime.tools, fault=crash_after_w).advance(run)
    toolbox.calls.clear()
    aborted = runtime.abort(run, rollback=True)
    assert aborted.state == "aborting" and aborted.exit_code == 3
    assert aborted.steps["w"]["state"] == "outcome_unknown" and aborted.needs_reconcile == ("w",)
    assert "if it happened, the abort rolls it back" in aborted.message
    assert aborted.steps["v"]["state"] == "succeeded" and toolbox.calls == []  # the last completed first: `w`
    runtime.reconcile(run, "w", happened, "bob", {"name": "w"} if happened else None)
    report = runtime.advance(run)  # `resume` finishes the abort
    assert report.state == "aborted"
    assert report.steps["w"]["state"] == ("compensated" if happened else "cancelled")
    assert report.steps["v"]["state"] == "compensated"
    assert [call[1] for call in toolbox.calls] == (["undo-w", "undo-v"] if happened else ["undo-v"])


def test_an_abort_with_rollback_asks_the_reconcile_hook_about_an_unknown_outcome(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    calls: list[str] = []
    with runtime_at(tmp_path / "journal.db", write_with_hook(lambda idempotency_key: {"name": "w"}, calls)) as runtime:  # it happened
        run = start_plan(runtime, '  step w { call t.write(name: "w") risk reversible_write idempotency "w" '
                                  'rollback t.write(name: "undo-" + result.name) }')
        crash_after_intent(runtime, run, "w", "w")
        report = runtime.abort(run, rollback=True)
        assert report.state == "aborted" and report.steps["w"]["state"] == "compensated" and calls == ["undo-w"]


@pytest.mark.parametrize("happened", [True, False])
def test_an_unknown_outcome_of_a_changed_call_settled_after_an_abort_is_never_made_again(box, happened):
    """`w`'s call changed under version 2 while its outcome was unknown; then the run was aborted.
    Settled afterwards, the new call will never be made (never `ready`): the step stands for the
    call that happened (`succeeded`, its effect kept), or is `cancelled` if it did not happen."""
    toolbox, runtime = box
    body = '  step w {{ call t.write(name: "{}") risk reversible_write idempotency "w" }}'
    run = start_plan(runtime, body.format("w1"))
    crash_after_intent(runtime, run, "w1", "w")
    runtime.new_version(run, plan_text(body.format("w2"), version=2), "t.plan")
    assert runtime.abort(run, rollback=False).steps["w"]["state"] == "outcome_unknown"
    runtime.reconcile(run, "w", happened, "bob", {"name": "w1"} if happened else None)
    report = runtime.advance(run)
    assert report.state == "aborted" and toolbox.calls == []
    assert report.steps["w"]["state"] == ("succeeded" if happened else "cancelled")
    if happened:
        assert report.steps["w"]["reason"] == ("the call of an earlier plan version happened (settled after the run "
                                               "was aborted); the new call was never made")


def test_a_run_recorded_under_the_legacy_policy_hash_is_still_read(box):
    """Runs recorded before catalogue entries said which policies give them name their policy by
    `legacy_hash`: they are read as before; another hash is refused."""
    from plangate.runtime.host import RunError

    _, runtime = box
    run = start_plan(runtime, '  step a { call t.read(key: "a") }')
    first = runtime.journal.records(run)[0].body
    legacy = runtime.view(run).policy.legacy_hash()
    runtime.journal.append("older", "run_started", {**first, "policy_hash": legacy})
    assert runtime.advance("older").state == "succeeded"
    runtime.journal.append("forged", "run_started", {**first, "policy_hash": "sha256:" + "0" * 64})
    with pytest.raises(RunError, match="no longer compiles to its hash"):
        runtime.view("forged")


def test_a_checks_evidence_does_not_claim_to_verify_a_step_that_was_skipped(box):
    toolbox, runtime = box
    toolbox.values["x"] = 0
    run = start_plan(runtime, """
  step x { call t.read(key: "x") }
  step w { when x.result.value == 1 call t.write(name: "w") risk reversible_write idempotency "w" }
  check cw after w { call t.read(key: "cw") expect result.value == null }
""")
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "skipped" and report.steps["cw"]["state"] == "succeeded"
    [evidence] = kinds(runtime, run, "evidence", "cw")
    assert evidence.body["proves"] == "verifies no earlier step (`w` skipped: nothing of it to verify) — holds"


def test_run_takes_two_policy_files_with_one_text_as_one_policy(tmp_path, demo):
    """A copied policy beside its original: `check` and the gate count the text once, so must `run`."""
    plangate = cli_in(tmp_path, demo)
    baseline = (ROOT / "policies" / "baseline.policy").read_text()
    (tmp_path / "copy.policy").write_text(baseline)
    (tmp_path / "original.policy").write_text(baseline)
    both = plangate("run", "examples/deploy.plan", "--policy", str(tmp_path / "original.policy"),
                    "--policy", str(tmp_path / "copy.policy"), "--tools", str(DEMO_TOOLS), "--run", "r2")
    assert both.returncode == 3 and "internal error" not in both.stderr, both.stdout + both.stderr
    alone = plangate("run", "examples/deploy.plan", "--policy", str(tmp_path / "copy.policy"),
                     "--tools", str(DEMO_TOOLS), "--run", "r2")
    assert alone.returncode == 3 and "another policy" not in alone.stderr, alone.stdout + alone.stderr


def test_the_api_does_not_record_a_run_whose_tools_are_not_loaded(tmp_path):
    """`Runtime.start` refuses as `plangate run` does: before anything is journaled."""
    with runtime_at(tmp_path / "journal.db", ToolRegistry()) as empty:
        with pytest.raises(RunError, match=r"could not start: the tools loaded do not include `t\.read` "
                                           r"\(step `a`\); load the tools that define them \(`--tools`; "
                                           r"the run was not recorded\)"):
            empty.start(plan_text('  step a { call t.read(key: "k") }'), "t.plan", [("t.policy", TEST_POLICY)])
        assert empty.journal.runs() == []

"""The runtime and the compiled policy agree on the details: limits that bound approvals and
concurrency, tool caps as costs, decisions journaled, and a run that keeps its policy."""

from __future__ import annotations

from datetime import datetime

import pytest

from plangate.driver import check_sources
from plangate.runtime.journal import Journal
from plangate.runtime.host import Runtime
from plangate.runtime.tools import ToolRegistry, tool
from plangate.source import SourceFile

POLICY = """
policy p {
  tool ops.write { risk external_write  cost <= 7 usd }
  tool ops.read  { risk read_only }
  require approval when step.risk >= external_write by role "operator" within 2h
  warn "noisy" when call.tool == "ops.read"
  limit approval_within <= 30m
  limit cost <= 10 usd
}
"""

PLAN = """
plan p {
  step look { call ops.read() }
  step act after look { call ops.write(n: 1) idempotency "act-1" approval by role "operator" }
  check seen after act { call ops.read() }
}
"""


@tool("ops.read")
def read() -> dict:
    return {"ok": True}


@tool("ops.write")
def write(n: int, idempotency_key: str) -> dict:
    return {"id": f"w-{n}"}


def _runtime(tmp_path, clock=lambda: 1_000_000.0):
    registry = ToolRegistry()
    registry.register(read)
    registry.register(write)
    return Runtime(Journal.open(tmp_path / "journal.db"), registry, clock=clock)


def test_approval_within_limit_caps_the_expiry_and_the_plan(tmp_path):
    runtime = _runtime(tmp_path)
    run = runtime.start(PLAN, "p.plan", [("p.policy", POLICY)], run="r1")
    assert runtime.advance(run).state == "paused"
    body = runtime.approve(run, "act", "alice", "operator")
    expires = datetime.fromisoformat(body["expires_at"]).timestamp()
    assert expires - 1_000_000.0 == 30 * 60  # the policy's 2h requirement is capped by approval_within
    longer = PLAN.replace('by role "operator" }', 'by role "operator" within 1h }')
    found = check_sources([SourceFile("p.plan", longer)], [SourceFile("p.policy", POLICY)]).diagnostics
    assert [(d.name, d.message) for d in found if d.name == "limit-exceeded"] == [
        ("limit-exceeded", "step `act` lets an approval last 1h, over `limit approval_within <= 30m` of policy `p`")]


def test_decisions_are_journaled_and_tool_caps_count_as_costs(tmp_path):
    runtime = _runtime(tmp_path)
    run = runtime.start(PLAN, "p.plan", [("p.policy", POLICY)], run="r1")
    runtime.advance(run)
    runtime.approve(run, "act", "alice", "operator")
    report = runtime.advance(run)
    assert report.state == "succeeded", report.message
    decisions = [r.body for r in runtime.journal.records(run) if r.kind == "decision"]
    assert {d["step"] for d in decisions} == {"look", "seen"} and all(d["warned_by"] == ["noisy"] for d in decisions)
    assert runtime.view(run).cost == 7.0  # `act` declares no cost: its tool's cap is what it may cost


def test_a_second_write_would_break_the_cost_limit_through_the_cap(tmp_path):
    twice = PLAN.replace("check seen after act { call ops.read() }",
                         'step again after act { call ops.write(n: 2) idempotency "act-2" approval by role "operator" }')
    found = check_sources([SourceFile("p.plan", twice)], [SourceFile("p.policy", POLICY)]).diagnostics
    assert "budget-exceeded" in {d.name for d in found}  # 2 × 7 usd of caps over `limit cost <= 10 usd`


def test_concurrency_must_be_positive_and_limits_share_a_currency():
    bad = POLICY.replace("limit cost <= 10 usd", "limit cost <= 10 usd\n  limit concurrency <= 0")
    names = {d.name for d in check_sources([], [SourceFile("p.policy", bad)]).diagnostics}
    assert "invalid-value" in names
    other = "policy q { limit cost <= 900 jpy }"
    found = check_sources([SourceFile("p.plan", PLAN)], [SourceFile("p.policy", POLICY), SourceFile("q.policy", other)])
    flagged = {d.file for d in found.diagnostics if d.name == "currency-mismatch"}
    assert len(flagged) == 1 and flagged <= {"p.policy", "q.policy"}  # one limit is kept, the other flagged


def test_a_run_keeps_the_policy_it_started_with(tmp_path, capsys):
    from plangate.cli import main

    (tmp_path / "p.plan").write_text(PLAN)
    (tmp_path / "p.policy").write_text(POLICY)
    (tmp_path / "q.policy").write_text(POLICY.replace("limit cost <= 10 usd", "limit cost <= 20 usd"))
    tools = tmp_path / "tools.py"
    tools.write_text("from plangate import tool\n\n@tool('ops.read')\ndef read() -> dict:\n    return {'ok': True}\n\n"
                     "@tool('ops.write')\ndef write(n: int, idempotency_key: str) -> dict:\n    return {'id': n}\n")
    common = ["--tools", str(tools), "--journal", str(tmp_path / "j.db"), "--run", "r1"]
    assert main(["run", str(tmp_path / "p.plan"), "--policy", str(tmp_path / "p.policy"), *common]) == 3
    assert main(["run", str(tmp_path / "p.plan"), "--policy", str(tmp_path / "q.policy"), *common]) == 2
    assert "a run keeps its policy" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "p.plan"), "--policy", str(tmp_path / "p.policy"), *common]) == 3


SLOW_POLICY = "policy p { tool ops.slow { risk reversible_write } unknown_tools deny }"


def _slow_write(release, happened: list[str], wait: float) -> ToolRegistry:
    """A write `ops.slow` that answers only once `release` is set (or after `wait` s), recording
    each key it acted on; its reconcile hook says whether a key's call happened."""

    @tool("ops.slow")
    def slow(idempotency_key: str) -> dict:
        release.wait(wait)
        happened.append(idempotency_key)
        return {"id": "s-1"}

    @slow.reconcile
    def slow_reconcile(idempotency_key: str) -> dict | None:
        return {"id": "s-1"} if idempotency_key in happened else None

    registry = ToolRegistry()
    registry.register(slow)
    return registry


def _advance_once_returned(runtime: Runtime, run: str, happened: list[str]):
    """`runtime.advance(run)` once the `_slow_write` call has returned and its process let go of
    the run (a while at most); the report."""
    import threading

    from plangate.runtime.host import RunError

    for _ in range(100):
        if happened:
            try:
                return runtime.advance(run)
            except RunError:
                pass
        threading.Event().wait(0.05)
    raise AssertionError("the call never returned, or the run stayed held")


def test_a_call_past_its_time_is_left_unknown_and_settled_by_the_hook(tmp_path):
    import threading

    release = threading.Event()
    happened: list[str] = []
    registry = _slow_write(release, happened, 5)
    policy = SLOW_POLICY
    plan = 'plan p { step s { call ops.slow() time 1s retry 1 idempotency "slow-1" } }'
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = runtime.start(plan, "p.plan", [("p.policy", policy)], run="r1")
    report = runtime.advance(run)
    assert report.state == "paused" and report.steps["s"]["state"] == "outcome_unknown"
    assert report.steps["s"]["attempts"] == 1  # not retried blindly
    release.set()
    for _ in range(50):
        if happened:
            break
        threading.Event().wait(0.05)
    assert runtime.advance(run).state == "succeeded"  # the hook says it happened: its result is taken
    assert happened == ["slow-1"] and runtime.view(run).results["s"] == {"id": "s-1"}


def test_approve_asks_and_records_only_on_yes(tmp_path, capsys, monkeypatch):
    import io

    from plangate.cli import main

    (tmp_path / "p.plan").write_text(PLAN)
    (tmp_path / "p.policy").write_text(POLICY)
    tools = tmp_path / "tools.py"
    tools.write_text("from plangate import tool\n\n@tool('ops.read')\ndef read() -> dict:\n    return {'ok': True}\n\n"
                     "@tool('ops.write')\ndef write(n: int, idempotency_key: str) -> dict:\n    return {'id': n}\n")
    journal = ["--journal", str(tmp_path / "j.db")]
    assert main(["run", str(tmp_path / "p.plan"), "--policy", str(tmp_path / "p.policy"), "--tools", str(tools),
                 "--run", "r1", *journal]) == 3
    approve = ["approve", "r1", "act", "--as", "alice", "--role", "operator", *journal]
    for answer, code in (("", 1), ("n\n", 1), ("y\n", 0)):
        monkeypatch.setattr("sys.stdin", io.StringIO(answer))
        capsys.readouterr()
        assert main(approve) == code
        shown = capsys.readouterr().out
        assert 'call:      ops.write({"n":1})' in shown  # the exact call is shown before anything is recorded
    assert main(["resume", "r1", "--tools", str(tools), *journal]) == 0


def test_the_runtime_opens_a_journal_from_its_path(tmp_path):
    from plangate import Runtime as PublicRuntime

    registry = ToolRegistry()
    registry.register(read)
    registry.register(write)
    runtime = PublicRuntime(tmp_path / "nested" / "journal.db", registry)
    run = runtime.start(PLAN, "p.plan", [("p.policy", POLICY)])
    assert runtime.advance(run).state == "paused" and (tmp_path / "nested" / "journal.db").is_file()


def test_a_timed_out_call_still_in_flight_keeps_the_run_held_until_it_returns(tmp_path):
    import threading

    import pytest

    from plangate.runtime.host import RunError

    release = threading.Event()
    happened: list[str] = []
    registry = _slow_write(release, happened, 10)
    policy = SLOW_POLICY
    plan = 'plan p { step s { call ops.slow() time 1s idempotency "slow-1" } }'
    first = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    other = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = first.start(plan, "p.plan", [("p.policy", policy)], run="r1")
    assert first.advance(run).steps["s"]["state"] == "outcome_unknown"  # abandoned, but still running
    with pytest.raises(RunError, match="run `r1` is being executed by process"):
        other.advance(run)  # it would ask the hook, hear "not happened" and call again
    assert other.view(run).states["s"] == "running"
    release.set()
    assert _advance_once_returned(other, run, happened).state == "succeeded" and happened == ["slow-1"]


def test_calls_in_flight_when_an_advance_is_interrupted_keep_the_run_held_until_they_return(tmp_path, monkeypatch):
    """An interrupt (or a journal error) that ends `advance` while another call runs must not let
    anyone ask that call's hook "did it happen?" before it is done: the answer would be no, and the
    call would be made twice."""
    import threading

    from plangate.runtime.host import RunError

    release = threading.Event()
    happened: list[str] = []
    registry = _slow_write(release, happened, 10)

    @tool("ops.quick")
    def quick() -> dict:
        return {}

    registry.register(quick)
    policy = "policy p { tool ops.slow { risk reversible_write } tool ops.quick { risk read_only } }"
    plan = 'plan p { step s { call ops.slow() idempotency "slow-1" } step q { call ops.quick() } }'
    first = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    other = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = first.start(plan, "p.plan", [("p.policy", policy)], run="r1")
    real_finish = first._finish

    def interrupted(view, step_id, call, outcome):  # q answers while s still runs: the interrupt comes then
        real_finish(view, step_id, call, outcome)
        raise KeyboardInterrupt

    monkeypatch.setattr(first, "_finish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        first.advance(run)
    with pytest.raises(RunError, match="run `r1` is being executed by process"):
        other.advance(run)
    release.set()
    assert _advance_once_returned(other, run, happened).state == "succeeded" and happened == ["slow-1"]


def test_a_journal_error_while_a_timeout_is_recorded_neither_waits_for_the_call_nor_lets_go_of_it(tmp_path, monkeypatch):
    """The timed-out call is on the books before anything about it is written: a failure while
    writing it neither makes `advance` wait for the call (it may never return) nor frees the run."""
    import threading

    from plangate.runtime.host import RunError
    from plangate.runtime.journal import JournalError

    release = threading.Event()
    happened: list[str] = []
    registry = _slow_write(release, happened, 10)
    plan = 'plan p { step s { call ops.slow() time 1s idempotency "slow-1" } }'
    first = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    other = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = first.start(plan, "p.plan", [("p.policy", SLOW_POLICY)], run="r1")
    real_append = first.journal.append

    def failing(run_id, kind, body, step=None, **options):
        if kind == "outcome_unknown":
            raise JournalError("the disk is full")
        return real_append(run_id, kind, body, step, **options)

    monkeypatch.setattr(first.journal, "append", failing)
    with pytest.raises(JournalError, match="the disk is full"):
        first.advance(run)
    assert happened == []  # it did not wait for the call
    with pytest.raises(RunError, match="run `r1` is being executed by process"):
        other.advance(run)
    release.set()
    assert _advance_once_returned(other, run, happened).state == "succeeded" and happened == ["slow-1"]


def test_a_read_only_call_that_times_out_is_a_failed_attempt_retried_not_an_unknown_outcome(tmp_path):
    """A read has no effect to settle: its timeout is retried (if the step allows), or fails the
    step; it never waits for a reconciliation as a write's timeout does."""
    import threading

    release = threading.Event()
    calls: list[int] = []

    @tool("ops.lookup")
    def lookup() -> dict:
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            release.wait(10)  # the first call hangs past the step's `time`
        return {"attempt": len(calls)}

    registry = ToolRegistry()
    registry.register(lookup)
    policy = "policy p { tool ops.lookup { risk read_only } unknown_tools deny }"
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    try:
        retried = runtime.start('plan p { step s { call ops.lookup() time 1s retry 1 } }', "p.plan",
                                [("p.policy", policy)], run="r1")
        report = runtime.advance(retried)
        assert report.state == "succeeded", report
        assert report.steps["s"]["state"] == "succeeded" and report.steps["s"]["attempts"] == 2
        assert runtime.view(retried).results["s"] == {"attempt": 2}
        calls.clear()
        once = runtime.start('plan q { step s { call ops.lookup() time 1s } }', "q.plan", [("p.policy", policy)], run="r2")
        report = runtime.advance(once)
        assert report.steps["s"]["state"] == "failed" and "no answer within 1s" in runtime.view(once).reasons["s"]
    finally:
        release.set()


BOUNDED_POLICY = """
policy p {
  tool ops.read  { risk read_only }
  tool ops.write { risk reversible_write args { text: string } }
  deny "no-secret" when call.tool == "ops.write" && (args.text + args.text).contains("secret")
}
"""


def test_a_deny_rule_stopped_by_the_evaluators_bounds_blocks_the_call_instead_of_letting_it_through(tmp_path):
    """Whoever makes a result large enough must not slip a call past a rule: a condition that
    runs out of the evaluator's bounds (here, a string over its size bound) counts as firing."""
    @tool("ops.read")
    def big_read() -> dict:
        return {"text": "x" * 600_000 + "secret"}

    written: list[int] = []

    @tool("ops.write")
    def guarded_write(text: str, idempotency_key: str) -> dict:
        written.append(len(text))
        return {"ok": True}

    registry = ToolRegistry()
    registry.register(big_read)
    registry.register(guarded_write)
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    plan = 'plan p { step r { call ops.read() } step w { call ops.write(text: r.result.text) idempotency "w" } }'
    run = runtime.start(plan, "p.plan", [("p.policy", BOUNDED_POLICY)], run="r1")
    report = runtime.advance(run)
    assert report.steps["w"]["state"] == "blocked" and written == []
    reason = runtime.view(run).reasons["w"]
    assert reason.startswith("denied by `no-secret`: its condition could not be evaluated on these arguments")
    assert "longer than 1,000,000" in reason
    decisions = [record.body for record in runtime.journal.records(run) if record.kind == "decision"]
    assert decisions and decisions[-1]["denied_by"] == ["no-secret"]


def test_bounded_conditions_fail_closed_in_the_gate_and_the_static_check():
    from plangate import Gate

    policy = BOUNDED_POLICY.replace("\n}", '\n  require approval when (args.text + args.text).size() > 0 by role "operator"\n}')
    gate = Gate.from_sources([("p.policy", policy)])
    denied = gate.decide("ops.write", {"text": "x" * 600_000})
    assert not denied.allowed and denied.denied_by == ["no-secret"]
    assert [need.role for need in denied.approvals] == ["operator"]  # the requirement applies too
    assert gate.decide("ops.write", {"text": "short"}).allowed
    plan = 'plan p { step w { call ops.write(text: "%s") idempotency "w" approval by role "operator" } }' % ("x" * 600_000)
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)]).diagnostics
    denies = [d for d in found if d.severity.value == "error"]
    assert [d.name for d in denies] == ["policy-deny"]
    assert any("counts as firing, here and at run time" in note for note in denies[0].notes)


HANGING_TOOLS = """
import time
from plangate import tool

@tool("ops.hang")
def hang(v: str, idempotency_key: str) -> dict:
    time.sleep(3600)
    return {"ok": True}

@hang.reconcile
def hang_reconcile(idempotency_key: str):
    time.sleep(3600)
    return None
"""


def test_a_hung_call_and_a_hung_reconcile_hook_do_not_hold_the_command_past_the_steps_time(tmp_path):
    """`time` bounds the call and the hook alike; the command then ends (exit 3: the outcome is
    unknown), though the tool's thread is still asleep."""
    import subprocess
    import sys

    (tmp_path / "tools.py").write_text(HANGING_TOOLS)
    (tmp_path / "p.policy").write_text("policy p { tool ops.hang { risk reversible_write } }")
    (tmp_path / "p.plan").write_text('plan h { step h { call ops.hang(v: "a") time 1s idempotency "k" } }')

    def plangate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "plangate", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)

    started = plangate("run", "p.plan", "--policy", "p.policy", "--tools", "tools.py", "--run", "r1")
    assert started.returncode == 3, started.stderr
    assert "outcome_unknown" in started.stdout and "no answer within 1s" in started.stdout
    resumed = plangate("resume", "r1", "--tools", "tools.py")
    assert resumed.returncode == 3, resumed.stderr
    assert "the reconcile hook failed: it gave no answer within 1s" in resumed.stdout


READERS_POLICY = """
policy p {
  tool ops.put { risk reversible_write }
  require approval when step.id == "z" by role "operator"
}
"""

READERS_PLAN = """
plan readers {
  version 1
  step a { call ops.put(v: "x1") idempotency "ka-x1" }
  step b { call ops.put(v: a.result.id) idempotency "kb-" + a.result.id }
  step c { call ops.put(v: b.result.id) idempotency "kc-" + b.result.id }
  step same { call ops.put(v: a.result.stem) idempotency "ks" }
  step z after c, same { call ops.put(v: "z") idempotency "kz" approval by role "operator" }
}
"""


def _readers_paused(tmp_path) -> tuple[Runtime, str, list[str]]:
    """`READERS_PLAN` run to its approval: every step but `z` succeeded; the list of the values
    `ops.put` is called with, emptied, for what comes next."""
    calls: list[str] = []

    @tool("ops.put")
    def put(v: str, idempotency_key: str) -> dict:
        calls.append(v)
        return {"id": f"w-{v}", "stem": v[:1]}

    registry = ToolRegistry()
    registry.register(put)
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = runtime.start(READERS_PLAN, "p.plan", [("p.policy", READERS_POLICY)], run="r1")
    assert runtime.advance(run).state == "paused"  # z waits for its approval
    assert sorted(calls) == ["w-w-x1", "w-x1", "x", "x1"]
    calls.clear()
    return runtime, run, calls


def test_a_new_version_runs_again_a_completed_step_whose_call_reads_a_result_that_changed(tmp_path):
    """`a` changes, so it runs again; `b` read its result, so its call changed too and it runs again,
    and so does `c`, which read `b`'s; `same` reads a part of `a`'s result that stayed the same,
    so its call is the one it made and it is kept, not called twice."""
    runtime, run, calls = _readers_paused(tmp_path)

    runtime.new_version(run, READERS_PLAN.replace("version 1", "version 2").replace("x1", "x2"), "p.plan")
    report = runtime.advance(run)
    assert report.state == "paused"
    assert sorted(calls) == ["w-w-x2", "w-x2", "x2"]  # `same` was not called again
    view = runtime.view(run)
    assert view.results["b"] == {"id": "w-w-x2", "stem": "w"} and view.results["c"]["id"] == "w-w-w-x2"
    assert view.states["same"] == "succeeded" and "its call is the same" in view.reasons["same"]
    assert [report.steps[s]["attempts"] for s in ("a", "b", "c", "same")] == [1, 1, 1, 1]
    rechecks = {r.step: r.body["kept"] for r in runtime.journal.records(run) if r.kind == "recheck"}
    assert rechecks == {"b": False, "c": False, "same": True}


def test_abort_exits_1_when_a_rollback_it_was_asked_for_is_refused(tmp_path, capsys):
    """The rollback tool's cost cap is over the plan's budget, so the rollback is refused; the
    effect stands, the report says why, and the exit code says it too."""
    from plangate.cli import main

    (tmp_path / "tools.py").write_text(
        "from plangate import tool\n\n"
        "@tool('ops.make')\ndef make(idempotency_key: str) -> dict:\n    return {'id': 'm-1'}\n\n"
        "@tool('ops.unmake')\ndef unmake(id: str, idempotency_key: str) -> dict:\n    return {}\n")
    (tmp_path / "p.policy").write_text("policy p { tool ops.make { risk reversible_write }\n"
                                       "  tool ops.unmake { risk reversible_write cost <= 5 usd } }")
    (tmp_path / "p.plan").write_text(
        'plan p { budget { cost <= 3 usd } step m { call ops.make() idempotency "m" rollback ops.unmake(id: result.id) }\n'
        '         step wait after m { call ops.make() idempotency "w" approval by role "operator" } }')
    journal = ["--journal", str(tmp_path / "j.db")]
    tools = ["--tools", str(tmp_path / "tools.py")]
    plan, policy = str(tmp_path / "p.plan"), str(tmp_path / "p.policy")
    assert main(["run", plan, "--policy", policy, *tools, "--run", "r1", *journal]) == 3  # `wait` waits
    capsys.readouterr()
    assert main(["abort", "r1", "--rollback", *tools, *journal]) == 1
    out = capsys.readouterr().out
    assert "run r1: aborted" in out and "budget" in out


def test_a_completed_reader_of_a_step_the_new_version_skips_keeps_its_effect(tmp_path):
    runtime, run, calls = _readers_paused(tmp_path)
    skipping = READERS_PLAN.replace("version 1", "version 2").replace(
        'step a { call ops.put(v: "x1")', 'step a { when false call ops.put(v: "x2")')
    runtime.new_version(run, skipping, "p.plan")
    report = runtime.advance(run)
    assert calls == [] and report.steps["a"]["state"] == "skipped"
    for reader in ("b", "c", "same"):  # they ran under version 1: their effects stand
        assert report.steps[reader]["state"] == "succeeded", report.steps[reader]


def test_a_tools_time_cap_is_its_calls_timeout_when_the_step_gives_none(tmp_path):
    """The static time bound counts a tool's `time <=` cap for a step without `time`; the run holds
    the call to it too."""
    import threading

    release = threading.Event()

    @tool("ops.slow")
    def slow() -> dict:
        release.wait(10)
        return {}

    registry = ToolRegistry()
    registry.register(slow)
    policy = "policy p { tool ops.slow { risk read_only time <= 1s } }"
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    try:
        run = runtime.start("plan p { step s { call ops.slow() } }", "p.plan", [("p.policy", policy)], run="r1")
        report = runtime.advance(run)
        assert report.steps["s"]["state"] == "failed"
        assert runtime.view(run).reasons["s"].endswith("no answer within 1s (the time cap of its tool)")
    finally:
        release.set()


UNDECLARED_POLICY = """
policy p {
  tool src.get   { risk read_only }
  tool lock.hold { risk reversible_write }
  deny "too-long" when call.tool == "lock.hold" && args.v > duration("30m")
  deny "evil-bytes" when call.tool == "lock.hold" && args.v == bytes("evil")
}
"""


@pytest.mark.parametrize("argument, result, passed", [
    ("duration(s.result.v)", "2h", None), ("duration(s.result.v)", "10m", "600s"),
    ("bytes(s.result.v)", "evil", None), ("bytes(s.result.v)", "good", "good"),
])
def test_rules_see_a_computed_argument_as_computed_when_the_tool_declares_no_args(tmp_path, argument, result, passed):
    """The checker reasons about `duration(…)` as a duration; the runtime must decide on the same
    value, not on the text the tool is given (on which `>` fails, so the rule would not fire)."""
    held: list[object] = []

    @tool("src.get")
    def get() -> dict:
        return {"v": result}

    @tool("lock.hold")
    def hold(v, idempotency_key: str) -> dict:
        held.append(v)
        return {"held": v}

    registry = ToolRegistry()
    registry.register(get)
    registry.register(hold)
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    plan = f'plan p {{ step s {{ call src.get() }} step h {{ call lock.hold(v: {argument}) idempotency "h" }} }}'
    run = runtime.start(plan, "p.plan", [("p.policy", UNDECLARED_POLICY)], run="r1")
    report = runtime.advance(run)
    if passed is None:
        assert report.steps["h"]["state"] == "blocked" and held == []
        assert runtime.view(run).reasons["h"].startswith("denied by `")
    else:  # the rule does not fire, and the tool is given the value's text
        assert report.steps["h"]["state"] == "succeeded" and held == [passed]
        decisions = [record.body for record in runtime.journal.records(run) if record.kind == "decision"]
        assert all(decision["denied_by"] == [] for decision in decisions)


@pytest.mark.parametrize("result, state", [("good", "succeeded"), ("evil", "blocked"), (7, "blocked")])
def test_a_result_text_passed_for_a_declared_bytes_argument_is_its_utf8_bytes(tmp_path, result, state):
    """As the gate: a tool is given bytes as text, so text where `bytes` is declared is those bytes
    for the rules and the schema; anything else is refused before the call."""
    held: list[object] = []

    @tool("src.get")
    def get() -> dict:
        return {"v": result}

    @tool("up.load")
    def load(blob) -> dict:
        held.append(blob)
        return {}

    registry = ToolRegistry()
    registry.register(get)
    registry.register(load)
    policy = """policy p { tool src.get { risk read_only } tool up.load { risk read_only args { blob: bytes } }
                deny "magic" when args.blob == bytes("evil") }"""
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = runtime.start("plan p { step s { call src.get() } step u { call up.load(blob: s.result.v) } }",
                        "p.plan", [("p.policy", policy)], run="r1")
    report = runtime.advance(run)
    assert report.steps["u"]["state"] == state
    assert held == (["good"] if state == "succeeded" else [])


def test_a_computed_map_with_a_key_other_than_a_string_is_not_passed_to_a_tool(tmp_path):
    """`{s.result.n: "evil"}` with n = 1 would reach the tool as `{"1": "evil"}`; it fails the step."""
    given: list[object] = []

    @tool("src.get")
    def get() -> dict:
        return {"n": 1}

    @tool("cfg.set")
    def cfg_set(v) -> dict:
        given.append(v)
        return {}

    registry = ToolRegistry()
    registry.register(get)
    registry.register(cfg_set)
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    policy = "policy p { tool src.get { risk read_only } tool cfg.set { risk read_only } }"
    plan = 'plan p { step s { call src.get() } step c { call cfg.set(v: {s.result.n: "evil"}) } }'
    run = runtime.start(plan, "p.plan", [("p.policy", policy)], run="r1")
    assert runtime.advance(run).steps["c"]["state"] == "failed" and given == []
    assert "string keys" in runtime.view(run).reasons["c"] and "`1`" in runtime.view(run).reasons["c"]


@pytest.mark.parametrize("declared, argument", [
    ("map", '{"t": duration(s.result.v)}'), ("dyn", "duration(s.result.v)"), ("list", "[duration(s.result.v)]"),
])
def test_rules_see_computed_values_under_a_schema_too_at_any_depth(tmp_path, declared, argument):
    held: list[object] = []

    @tool("src.get")
    def get() -> dict:
        return {"v": "2h"}

    @tool("lock.hold")
    def hold(v, idempotency_key: str) -> dict:
        held.append(v)
        return {}

    registry = ToolRegistry()
    registry.register(get)
    registry.register(hold)
    reads = {"map": "args.v.t", "dyn": "args.v", "list": "args.v[0]"}[declared]
    policy = f"""policy p {{ tool src.get {{ risk read_only }}
      tool lock.hold {{ risk reversible_write args {{ v: {declared} }} }}
      deny "too-long" when call.tool == "lock.hold" && {reads} > duration("30m") }}"""
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    plan = f'plan p {{ step s {{ call src.get() }} step h {{ call lock.hold(v: {argument}) idempotency "h" }} }}'
    run = runtime.start(plan, "p.plan", [("p.policy", policy)], run="r1")
    assert runtime.advance(run).steps["h"]["state"] == "blocked" and held == []
    assert runtime.view(run).reasons["h"].startswith("denied by `too-long`")


@pytest.mark.parametrize("value, declared", [
    (2**63, ""), (-(2**63) - 1, ""), (2**70, ""), ([2**63], ""), ({"x": 2**70}, ""), (-(10**400), "double"),
], ids=["2**63", "-2**63-1", "2**70", "in-a-list", "in-a-map", "-10**400-double"])
def test_a_computed_argument_no_cel_value_holds_blocks_the_call_as_the_gate_refuses_it(tmp_path, value, declared):
    """`args.amount + 0 > 1000` errs on 2**63 (no CEL int holds it), so the rule would not fire: the
    runtime refuses such an argument before any rule, as the gate does, and the tool is not called."""
    paid: list[object] = []

    @tool("src.get")
    def get() -> dict:
        return {"v": value}

    @tool("pay.send")
    def send(amount, idempotency_key: str) -> dict:
        paid.append(amount)
        return {}

    registry = ToolRegistry()
    registry.register(get)
    registry.register(send)
    schema, zero = (f" args {{ amount: {declared} }}", "0.0") if declared else ("", "0")
    policy = f"""policy p {{ tool src.get {{ risk read_only }} tool pay.send {{ risk reversible_write{schema} }}
                deny "cap" when call.tool == "pay.send" && args.amount + {zero} > 1000 }}"""
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), registry)
    run = runtime.start('plan p { step s { call src.get() } step pay { call pay.send(amount: s.result.v) idempotency "p" } }',
                        "p.plan", [("p.policy", policy)], run="r1")
    assert runtime.advance(run).steps["pay"]["state"] == "blocked" and paid == []
    assert "the rules cannot see the call's arguments" in runtime.view(run).reasons["pay"]


def test_clauses_for_one_role_merge_in_the_check_as_in_the_run(tmp_path):
    """`by 2 of role "operator" within 20m` and `by role "operator" within 28m`: the run waits for
    two approvals valid 20 minutes, which covers a policy asking for two within 25m; the longer
    clause weakens nothing, so the check finds nothing either."""
    policy = POLICY.replace('by role "operator" within 2h', 'by 2 of role "operator" within 25m')
    plan = PLAN.replace('approval by role "operator" }',
                        'approval by 2 of role "operator" within 20m approval by role "operator" within 28m }')
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)]).diagnostics
    assert [d.name for d in found if d.severity.value == "error"] == []
    runtime = _runtime(tmp_path)
    run = runtime.start(plan, "p.plan", [("p.policy", policy)], run="r1")
    assert runtime.advance(run).state == "paused"
    body = runtime.approve(run, "act", "alice", "operator")
    assert datetime.fromisoformat(body["expires_at"]).timestamp() - 1_000_000.0 == 20 * 60
    assert runtime.advance(run).state == "paused"  # one approver of two
    runtime.approve(run, "act", "bob", "operator")
    assert runtime.advance(run).state == "succeeded"
    # A clause without `within` takes the policy's: merged with a longer one, nothing is too long.
    unbounded = PLAN.replace('by role "operator" }', 'by 2 of role "operator" approval by role "operator" within 40m }')
    found = check_sources([SourceFile("p.plan", unbounded)], [SourceFile("p.policy", policy)]).diagnostics
    assert not [d for d in found if d.name.startswith("approval")], [d.message for d in found]
    # Merged, the clauses still fall short where each does: one approver too few, or too long a life.
    for short, message in [('by role "operator" within 20m approval by role "operator" within 25m }',
                            "asks for 1 approver of role `operator`, but 2 are required"),
                           ('by 2 of role "operator" within 30m approval by role "operator" within 40m }',
                            "lets an approval by role `operator` last 30m, longer than the 25m required")]:
        weaker = PLAN.replace('by role "operator" }', short)
        found = check_sources([SourceFile("p.plan", weaker)], [SourceFile("p.policy", policy)]).diagnostics
        assert [(d.name, message in d.message) for d in found if d.name.startswith("approval")] == [
            ("approval-insufficient", True)], [d.message for d in found]


def _overlap_tools(release, active: list[int], peak: list[int], calls: list[str]) -> ToolRegistry:
    """Writes `ops.slow(name)`: each counts the calls running at once (`peak`); `x` answers only
    once `release` is set. The hook says a key's call happened once that call has returned."""
    import threading

    mutex = threading.Lock()
    returned: set[str] = set()

    @tool("ops.slow")
    def slow(name: str, idempotency_key: str) -> dict:
        with mutex:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            calls.append(name)
        if name == "x":
            release.wait(10)
        with mutex:
            active[0] -= 1
            returned.add(idempotency_key)
        return {"name": name}

    @slow.reconcile
    def slow_reconcile(idempotency_key: str) -> dict | None:
        return {"name": "x"} if idempotency_key in returned else None

    registry = ToolRegistry()
    registry.register(slow)
    return registry


def _until_returned(active: list[int], seconds: float = 5.0) -> None:
    """Wait (a while at most) until no `_overlap_tools` call runs any more."""
    import threading

    for _ in range(int(seconds / 0.05)):
        if not active[0]:
            return
        threading.Event().wait(0.05)


OVERLAP_POLICY = "policy p { tool ops.slow { risk reversible_write } unknown_tools deny limit concurrency <= 1 }"
OVERLAP_PLAN = """plan p {
  step x { call ops.slow(name: "x") time 1s idempotency "kx" }
  step y { call ops.slow(name: "y") time 5s idempotency "ky" }
}"""


def test_a_call_that_timed_out_still_holds_its_worker_under_the_concurrency_limit(tmp_path):
    """`limit concurrency <= 1`: `x` times out after 1s but runs on; `y` starts only once it has
    returned, never beside it."""
    import threading

    release, active, peak, calls = threading.Event(), [0], [0], []
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), _overlap_tools(release, active, peak, calls))
    run = runtime.start(OVERLAP_PLAN, "p.plan", [("p.policy", OVERLAP_POLICY)], run="r1")
    threading.Timer(1.5, release.set).start()  # `x` answers half a second after its timeout
    report = runtime.advance(run)
    assert peak == [1] and calls == ["x", "y"]
    assert report.steps["x"]["state"] == "outcome_unknown" and report.steps["y"]["state"] == "succeeded"
    assert runtime.advance(run).state == "succeeded"  # the hook now says `x` happened
    assert calls == ["x", "y"]


def test_calls_that_timed_out_and_hold_every_worker_pause_the_run_after_a_while(tmp_path, monkeypatch):
    import threading

    import plangate.runtime.host as host

    monkeypatch.setattr(host, "ABANDONED_WAIT", 0)  # wait only the step's own `time` (1s) more
    release, active, peak, calls = threading.Event(), [0], [0], []
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), _overlap_tools(release, active, peak, calls))
    run = runtime.start(OVERLAP_PLAN, "p.plan", [("p.policy", OVERLAP_POLICY)], run="r1")
    try:
        report = runtime.advance(run)
        assert report.state == "paused" and report.exit_code == 3 and calls == ["x"]
        assert "the calls of `x` timed out and still run, holding the 1 worker(s)" in report.message
        assert report.steps["y"]["state"] == "ready"
    finally:
        release.set()
    _until_returned(active)
    assert runtime.advance(run).state == "succeeded" and calls == ["x", "y"]


def test_a_call_still_in_flight_in_this_process_is_never_settled_or_repeated_here(tmp_path):
    """A second `advance` in the process whose call timed out does not ask the hook (the call has
    not returned: "not happened" would be a guess) nor call again; settling it by hand is refused
    until it returns."""
    import threading

    import pytest

    from plangate.runtime.host import RunError

    release, active, peak, calls = threading.Event(), [0], [0], []
    runtime = Runtime(Journal.open(tmp_path / "journal.db"), _overlap_tools(release, active, peak, calls))
    plan = 'plan p { step x { call ops.slow(name: "x") time 1s idempotency "kx" } }'
    run = runtime.start(plan, "p.plan", [("p.policy", OVERLAP_POLICY)], run="r1")
    try:
        assert runtime.advance(run).steps["x"]["state"] == "outcome_unknown"
        assert runtime.advance(run).steps["x"]["state"] == "outcome_unknown"
        with pytest.raises(RunError, match="timed out and is still running in this process"):
            runtime.reconcile(run, "x", False, "ops")
        assert calls == ["x"] and not kinds_of(runtime, run, "reconciled")
    finally:
        release.set()
    _until_returned(active)
    assert runtime.advance(run).state == "succeeded" and calls == ["x"]


def kinds_of(runtime: Runtime, run: str, kind: str) -> list:
    return [record for record in runtime.journal.records(run) if record.kind == kind]


def test_a_check_whose_condition_differs_only_in_the_sign_of_a_zero_may_be_skipped():
    """`x / 0.0 > 0.0` and `x / -0.0 > 0.0` read alike as syntax trees (-0.0 == 0.0) but not at run
    time (one is +inf, the other -inf): the check's condition is another one, so it may be skipped."""
    policy = "policy p { tool ops.write { risk reversible_write } tool ops.read { risk read_only } " \
             "require check when step.risk >= reversible_write }"
    plan = """plan p {
      step look { call ops.read() }
      step w { when look.result.n / 0.0 > 0.0  call ops.write() idempotency "w" }
      check c after w { when look.result.n / -0.0 > 0.0  call ops.read() }
    }"""
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)]).diagnostics
    assert [d.name for d in found if d.severity.value == "error"] == ["check-missing"]
    same = plan.replace("/ -0.0", "/ 0.0")
    found = check_sources([SourceFile("p.plan", same)], [SourceFile("p.policy", policy)]).diagnostics
    assert [d.name for d in found if d.severity.value == "error"] == []

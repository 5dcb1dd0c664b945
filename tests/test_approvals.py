"""Approvals bind to one exact call, and any doubt about one means the step waits (fail closed).

An approval counts only while the run, plan hash and version, step, tool, canonical arguments, role
and expiry all still match the call about to be made, and N-of approvals need N distinct approvers.
Each test below breaks one of these bindings, through the runtime or by appending records with the
journal's own API (so the hash chain stays whole and only the binding is wrong), and checks that the
step stays `waiting_for_approval`, the run pauses (exit 3) and the tool was not called: the demo
tools' ledger has no line for it.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from plangate.runtime.canonical import content_hash
from plangate.runtime.host import RunError
from plangate.runtime.tools import ToolRegistry, tool
from runtime_support import baseline, example, ledger, runtime_at

MINUTE = 60.0


@pytest.fixture
def clock():
    return [1_800_000_000.0]


@pytest.fixture
def runtime(tmp_path, demo, clock):
    with runtime_at(tmp_path / "journal.db", clock=lambda: clock[0]) as opened:
        yield opened


def paused_at_route(runtime) -> str:
    run = runtime.start(*example("deploy"), baseline())
    assert runtime.advance(run).steps["route"]["state"] == "waiting_for_approval"
    return run


def assert_still_waits(runtime, run: str, step: str, demo, tool_name: str, missing: str = "1 more approval(s)"):
    report = runtime.advance(run)
    assert report.state == "paused" and report.exit_code == 3
    assert report.steps[step]["state"] == "waiting_for_approval"
    assert missing in report.steps[step]["reason"]
    assert tool_name not in [effect["tool"] for effect in ledger(demo)]


def test_an_approval_counts_for_the_exact_call_it_names(runtime, demo):
    run = paused_at_route(runtime)
    approval = runtime.approve(run, "route", "alice", "operator")
    view = runtime.view(run)
    call = runtime.exact_call(view, view.plan.step("route"))
    assert approval["args"] == call["args"] and approval["args_hash"] == content_hash(call["args"])
    assert approval["plan_hash"] == view.plan_hash and approval["plan_version"] == 4 and approval["run"] == run
    assert runtime.advance(run).steps["route"]["state"] == "succeeded"
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview", "dns.route"]


# ------------------------------------------------------------------ the call changed
def test_arguments_computed_from_a_result_that_changed_after_the_approval(runtime, demo):
    run = paused_at_route(runtime)
    runtime.approve(run, "route", "alice", "operator")
    preview = runtime.view(run).results["preview"]
    changed = {**preview, "id": "pv-elsewhere", "url": "https://pv-elsewhere.preview.example.com"}
    runtime.journal.append(run, "result", {"result": changed, "external_ref": changed["id"]}, step="preview")
    assert_still_waits(runtime, run, "route", demo, "dns.route")


POLICY = """
policy approvals_tests {
  version 1
  tool cfg.read { risk read_only }
  tool dns.set  { risk external_write }
  unknown_tools deny
  require approval when step.risk >= external_write by role "operator" within 1h
}
"""

RETARGET = """
plan retarget {
  version %d
  step lookup { call cfg.read(%s) }
  step point  { call dns.set(host: "www", target: lookup.result.value) idempotency "point-" + lookup.result.value
                approval by role "operator" }
}
"""


def test_a_new_version_reruns_the_step_whose_result_the_approved_call_used(tmp_path, monkeypatch):
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    world: dict[str, Any] = {"target": "blue"}
    routed: list[str] = []

    @tool("cfg.read")
    def read(name: str, **_options: Any) -> dict:
        return {"value": world[name]}

    @tool("dns.set")
    def point(host: str, target: str, idempotency_key: str) -> dict:
        routed.append(target)
        return {"host": host, "target": target}

    registry = ToolRegistry()
    registry.register(read)
    registry.register(point)
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        run = runtime.start(RETARGET % (1, 'name: "target"'), "retarget.plan", [("t.policy", POLICY)])
        assert runtime.advance(run).steps["point"]["state"] == "waiting_for_approval"
        approval = runtime.approve(run, "point", "alice", "operator")
        assert approval["args"] == {"host": "www", "target": "blue"}

        world["target"] = "green"  # the step is read again under the new version, and reads another value
        runtime.new_version(run, RETARGET % (2, 'name: "target", fresh: true'), "retarget.plan")
        report = runtime.advance(run)
        assert report.steps["lookup"] == {**report.steps["lookup"], "state": "succeeded", "attempts": 1}  # its new call
        assert report.steps["point"]["state"] == "waiting_for_approval" and routed == []
        view = runtime.view(run)
        now = runtime.exact_call(view, view.plan.step("point"))
        assert now["args"] == {"host": "www", "target": "green"}
        assert content_hash(now["args"]) != approval["args_hash"]

        runtime.approve(run, "point", "alice", "operator")
        assert runtime.advance(run).state == "succeeded" and routed == ["green"]


def test_an_approval_of_another_plan_version_does_not_count(runtime, demo):
    text, name = example("deploy")
    run = paused_at_route(runtime)
    runtime.approve(run, "route", "alice", "operator")
    runtime.new_version(run, text.replace("version   4", "version   5")
                        .replace('objective "Route', 'objective "Now route'), name)
    assert_still_waits(runtime, run, "route", demo, "dns.route")
    assert runtime.approve(run, "route", "alice", "operator")["plan_version"] == 5
    assert runtime.advance(run).steps["route"]["state"] == "succeeded"


def test_a_waiting_step_says_which_approvals_a_new_version_or_a_changed_call_voided(runtime, demo):
    text, name = example("deploy")
    run = paused_at_route(runtime)
    runtime.approve(run, "route", "alice", "operator")
    runtime.approve(run, "route", "bob", "operator")
    runtime.new_version(run, text.replace("version   4", "version   5"), name)
    voided = "was given under plan version 4 (a new plan version needs new approvals)"
    assert_still_waits(runtime, run, "route", demo, "dns.route",
                       f'waiting for 1 more approval(s) by role "operator"; the approval by `alice` {voided}; '
                       f"the approval by `bob` {voided}")

    runtime.approve(run, "route", "Bob", "operator")  # bob again, for this version: his latest approval is named
    preview = runtime.view(run).results["preview"]
    other = {**preview, "id": "pv-elsewhere"}  # `route`'s target is computed from this result
    runtime.journal.append(run, "result", {"result": other, "external_ref": other["id"]}, step="preview")
    assert_still_waits(runtime, run, "route", demo, "dns.route",
                       'waiting for 1 more approval(s) by role "operator"; the approval by `Bob` approved the call '
                       "with other arguments (results it is computed from have changed since); the approval by "
                       "`alice` was given under plan version 4")


# ------------------------------------------------------------------ who and when
def test_an_expired_approval_does_not_count(runtime, demo, clock):
    run = paused_at_route(runtime)
    approval = runtime.approve(run, "route", "alice", "operator")
    assert approval["expires_at"] == "2027-01-15T08:30:00+00:00"  # the plan's `within 30m`, under the policy's 1h
    clock[0] += 31 * MINUTE
    assert_still_waits(runtime, run, "route", demo, "dns.route",
                       '1 more approval(s) by role "operator"; the approval by `alice` expired at 2027-01-15T08:30:00+00:00')
    runtime.approve(run, "route", "alice", "operator")  # a fresh approval, at the new time
    assert runtime.advance(run).steps["route"]["state"] == "succeeded"


def test_an_approval_in_the_wrong_role_is_refused_and_a_recorded_one_does_not_count(runtime, demo):
    run = paused_at_route(runtime)
    with pytest.raises(RunError, match='needs no approval by role "viewer"'):
        runtime.approve(run, "route", "mallory", "viewer")
    body = runtime.approve(run, "route", "alice", "operator")
    other_run = paused_at_route(runtime)
    runtime.journal.append(other_run, "approval", {**body, "run": other_run, "role": "viewer"}, step="route")
    assert_still_waits(runtime, other_run, "route", demo, "dns.route")


@pytest.mark.parametrize("change", [{"expires_at": "tomorrow"}, {"expires_at": None}, {"approver": ["alice"]}])
def test_an_unreadable_approval_does_not_count(runtime, demo, change):
    run = paused_at_route(runtime)
    view = runtime.view(run)
    call = runtime.exact_call(view, view.plan.step("route"))
    body = {"plan_hash": view.plan_hash, "plan_version": view.plan_version, "tool": call["tool"],
            "args_hash": content_hash(call["args"]), "args": call["args"], "approver": "alice",
            "role": "operator", "expires_at": "2099-01-01T00:00:00+00:00", "run": run}
    runtime.journal.append(run, "approval", {**body, **change}, step="route")
    assert_still_waits(runtime, run, "route", demo, "dns.route")


def test_the_same_approver_twice_counts_once(runtime, demo):
    run = runtime.start(*example("refund"), baseline())
    assert runtime.advance(run).steps["refund"]["state"] == "waiting_for_approval"
    runtime.approve(run, "refund", "alice", "operator")
    bob = runtime.approve(run, "refund", "bob", "approver")
    runtime.approve(run, "refund", " bob ", "approver")  # bob again, through the runtime (names are trimmed)
    runtime.journal.append(run, "approval", bob, step="refund")  # and his record replayed
    assert_still_waits(runtime, run, "refund", demo, "payments.refund", '1 more approval(s) by role "approver"')
    runtime.approve(run, "refund", "carol", "approver")
    report = runtime.advance(run)
    assert report.steps["refund"]["state"] == "succeeded"
    assert [e["tool"] for e in ledger(demo)] == ["payments.refund"]


def test_names_that_differ_only_in_case_width_or_invisible_characters_are_one_approver(runtime, demo):
    run = runtime.start(*example("refund"), baseline())
    assert runtime.advance(run).steps["refund"]["state"] == "waiting_for_approval"
    runtime.approve(run, "refund", "alice", "operator")
    for name in ("bob", "Bob", "bob\u200b", "\u200dBOB", "ｂｏｂ"):  # zero-width space and joiner, full width
        assert runtime.approve(run, "refund", name, "approver")["approver"] == name  # journaled as given
    assert_still_waits(runtime, run, "refund", demo, "payments.refund", '1 more approval(s) by role "approver"')
    with pytest.raises(RunError, match="not blanks"):
        runtime.approve(run, "refund", "\u200b\u2060", "approver")  # invisible characters alone name no one
    runtime.approve(run, "refund", "Carol", "approver")
    assert runtime.advance(run).steps["refund"]["state"] == "succeeded"


# ------------------------------------------------------------------ which run
def test_an_approval_copied_from_another_run_does_not_count(runtime, demo):
    first, second = paused_at_route(runtime), paused_at_route(runtime)
    body = runtime.approve(first, "route", "alice", "operator")
    runtime.journal.append(second, "approval", body, step="route")  # same plan, tool and arguments
    assert_still_waits(runtime, second, "route", demo, "dns.route")
    assert runtime.advance(first).steps["route"]["state"] == "succeeded"


def test_two_runs_of_one_plan_do_not_share_an_approval(runtime, demo):
    first, second = paused_at_route(runtime), paused_at_route(runtime)
    runtime.approve(first, "route", "alice", "operator")
    assert_still_waits(runtime, second, "route", demo, "dns.route")
    assert runtime.advance(first).steps["route"]["state"] == "succeeded"
    assert runtime.advance(second).steps["route"]["state"] == "waiting_for_approval"


def test_two_copies_of_one_journal_share_its_approval_but_not_its_effect(tmp_path, demo):
    """A byte-for-byte copy of a journal cannot be told from the original: both copies hold the
    approval and both go on. The idempotency key is what keeps the effect single."""
    with runtime_at(tmp_path / "journal.db") as runtime:
        run = paused_at_route(runtime)
        runtime.approve(run, "route", "alice", "operator")
    shutil.copy(tmp_path / "journal.db", tmp_path / "copy.db")
    for path in ("journal.db", "copy.db"):
        with runtime_at(tmp_path / path) as runtime:
            assert runtime.advance(run).steps["route"]["state"] == "succeeded"
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview", "dns.route"]


# ------------------------------------------------------------------ what was shown is what is recorded
def test_an_approval_binds_to_the_call_shown_and_is_refused_when_the_call_changed(runtime, demo):
    text, name = example("deploy")
    run = paused_at_route(runtime)
    shown = runtime.approval_call(run, "route", "operator")
    runtime.new_version(run, text.replace("version   4", "version   5")
                        .replace('host: "v2.example.com"', 'host: "v3.example.com"'), name)
    with pytest.raises(RunError, match="the call of step `route` changed since it was shown .*plan_hash, "
                                       "plan_version, args_hash.*nothing was recorded"):
        runtime.approve(run, "route", "alice", "operator", shown=shown)
    assert [r for r in runtime.journal.records(run) if r.kind == "approval"] == []
    assert_still_waits(runtime, run, "route", demo, "dns.route")


def test_plangate_approve_refuses_when_a_new_version_lands_during_the_prompt(tmp_path, demo, monkeypatch, capsys):
    from plangate.cli import main

    text, name = example("deploy")
    journal = tmp_path / "journal.db"
    with runtime_at(journal) as runtime:
        run = paused_at_route(runtime)

    class AnswerAfterANewVersion:
        def readline(self, limit: int = -1) -> str:
            with runtime_at(journal) as other:  # another operator records version 5 meanwhile
                other.new_version(run, text.replace("version   4", "version   5")
                                  .replace('host: "v2.example.com"', 'host: "v3.example.com"'), name)
            return "y\n"

    monkeypatch.setattr("sys.stdin", AnswerAfterANewVersion())
    code = main(["approve", run, "route", "--as", "alice", "--role", "operator", "--journal", str(journal)])
    shown = capsys.readouterr()
    assert code == 2
    assert 'dns.route({"host":"v2.example.com"' in shown.out and "version 4" in shown.out
    assert "the call of step `route` changed since it was shown" in shown.err
    assert 'dns.route({"host":"v3.example.com"' in shown.err
    with runtime_at(journal) as runtime:
        assert [r for r in runtime.journal.records(run) if r.kind == "approval"] == []


@pytest.mark.parametrize("approver, role", [("  ", "operator"), ("alice", "")])
def test_approve_with_a_blank_name_or_role_shows_no_call_and_asks_nothing(tmp_path, capsys, monkeypatch,
                                                                          approver, role):
    from plangate.cli import main

    journal = tmp_path / "journal.db"
    with runtime_at(journal) as runtime:
        run = paused_at_route(runtime)
    monkeypatch.setattr("sys.stdin", None)  # reading an answer would fail the command
    code = main(["approve", run, "route", "--as", approver, "--role", role, "--journal", str(journal)])
    shown = capsys.readouterr()
    assert code == 2 and shown.out == "" and "not blanks" in shown.err


@pytest.mark.parametrize("answer, approved", [("y\n", True), ("YES\n", True), ("y", True), ("yes", True),
                                               ("", False), ("n\n", False),
                                               ("\0" * 10_000_000, False), ("y" * 100 + "\n", False)])
def test_approve_reads_a_bounded_answer(tmp_path, capsys, monkeypatch, answer, approved):
    """The confirmation is one short line: an endless answer (`< /dev/zero`) is read a bounded way
    (1 Mi characters) and is a no, as no answer is; the rest of a long line is read, not left over."""
    import io

    from plangate.cli import main

    journal = tmp_path / "journal.db"
    with runtime_at(journal) as runtime:
        run = paused_at_route(runtime)
    stdin = io.StringIO(answer)
    monkeypatch.setattr("sys.stdin", stdin)
    code = main(["approve", run, "route", "--as", "alice", "--role", "operator", "--journal", str(journal)])
    shown = capsys.readouterr()
    assert code == (0 if approved else 1), shown
    assert ("approved; valid until" in shown.out) == approved and stdin.tell() <= (1 << 20) + 64
    assert stdin.tell() == min(len(answer), (1 << 20))
    with runtime_at(journal) as runtime:
        assert len([r for r in runtime.journal.records(run) if r.kind == "approval"]) == approved


def test_approve_refuses_an_ended_run(runtime, demo):
    run = paused_at_route(runtime)
    runtime.abort(run, rollback=False)
    with pytest.raises(RunError, match=f"run `{run}` has ended \\(aborted\\)"):
        runtime.approve(run, "route", "alice", "operator")


def test_a_blank_approver_or_role_is_refused(tmp_path, demo):
    from plangate.runtime.host import RunError
    from runtime_support import baseline, example, runtime_at

    with runtime_at(tmp_path / "journal.db") as runtime:
        run = runtime.start(*example("deploy"), baseline())
        runtime.advance(run)
        for approver, role in (("", "operator"), ("   ", "operator"), ("alice", " ")):
            with pytest.raises(RunError, match="not blanks"):
                runtime.approve(run, "route", approver, role)


def test_approve_refuses_a_step_whose_call_will_not_be_made(runtime, demo):
    run = paused_at_route(runtime)
    with pytest.raises(RunError, match="step `build` is succeeded .*: an approval would not change that"):
        runtime.approve(run, "build", "alice", "operator")
    runtime.journal.append(run, "state", {"state": "blocked", "reason": "denied by `no-star`"}, step="route")
    with pytest.raises(RunError, match="step `route` is blocked \\(denied by `no-star`\\): an approval would not "
                                       "change that; a new plan version decides it again"):
        runtime.approve(run, "route", "alice", "operator")

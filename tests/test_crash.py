"""Crash tests: the process dies at each effect boundary, and a resumed run neither repeats, loses
nor invents an effect.

A run is advanced in a child process with `PLANGATE_FAULT=step:boundary`, so that the fault hook
kills it with SIGKILL (`before_intent`, `after_intent`, `after_call`, `after_result`); where the
child pauses for an approval the parent approves and starts another child. The parent then resumes
in-process, approving what waits, and checks the invariants against the ledger that the demo tools
write (one line per real effect, examples/tools/local.py):
- no effect twice: no (tool, idempotency key) appears twice in the ledger;
- no effect without a matching approval: every effect of a step that asks for approvals has them,
  recorded before its first intent, for the same tool and canonical arguments, by enough distinct
  approvers of each role;
- no completed effect lost: every succeeded write has its ledger line, with the result the journal
  holds; the effects are exactly those of an uninterrupted run;
- every unknown outcome is reconciled (a `reconciled` record after it) or shown as
  `outcome_unknown` in the status.

The children are forked from the test process (no interpreter start-up, so the matrix stays fast);
the matrix and the randomised runs are marked `slow`. Two tests run the `plangate` command itself
in a subprocess, one of them with a tool that has no reconcile hook, so that the run waits for
`plangate reconcile`.
"""

from __future__ import annotations

import json
import random
import re
import signal
import textwrap

import pytest

from plangate.ir.nodes import Risk
from plangate.runtime.canonical import content_hash
from plangate.runtime.host import BOUNDARIES
from runtime_support import (
    DEMO_TOOLS,
    ROOT,
    advance_in_child,
    approve_waiting,
    baseline,
    cli,
    demo_registry,
    drive,
    example,
    ledger,
    runtime_at,
)

RUN = "crash"
KILLED = -signal.SIGKILL
EXAMPLES = ("deploy", "refund", "db_migration")


def steps_of(text: str) -> list[str]:
    return re.findall(r"^\s*(?:step|check)\s+(\w+)", text, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def registry():
    return demo_registry()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, registry):
    """The ledger of each example run without a crash: (tool, key, args) of every effect."""
    found = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PLANGATE_FAULT", raising=False)
        for name in EXAMPLES:
            folder = tmp_path_factory.mktemp(name)
            patch.setenv("PLANGATE_DEMO_DIR", str(folder / "demo"))
            with runtime_at(folder / "journal.db", registry) as runtime:
                runtime.start(*example(name), baseline(), RUN)
                assert drive(runtime, RUN).state == "succeeded"
            found[name] = effects(folder / "demo")
    return found


def effects(demo) -> list[tuple[str, str, str]]:
    return sorted((e["tool"], e["key"], json.dumps(e["args"], sort_keys=True)) for e in ledger(demo))


def writes(view, step_id: str) -> bool:
    """Whether the step's tool has an effect (the demo's writes are the tools catalogued above read_only)."""
    return view.policy.match(view.plan.step(step_id).call.tool).risk != Risk.read_only


def crash(journal, registry, fault: str, rounds: int = 6) -> int:
    """Advance in children with the fault set, approving between them, until one dies or ends."""
    for _ in range(rounds):
        code = advance_in_child(journal, RUN, registry, fault)
        if code != 3:
            return code
        with runtime_at(journal, registry) as runtime:
            if not approve_waiting(runtime, RUN):
                return code
    return code


def assert_invariants(runtime, demo, expected=None) -> None:
    found = ledger(demo)
    names = [(e["tool"], e["key"]) for e in found]
    assert len(names) == len(set(names)), f"an effect happened twice: {names}"
    records = runtime.journal.records(RUN)
    view = runtime.view(RUN)
    for effect in found:
        intents = [r for r in records if r.kind == "intent" and r.body["tool"] == effect["tool"]
                   and r.body["idempotency_key"] == effect["key"]]
        assert intents, f"no intent of the run made {effect}"
        first = intents[0]
        assert first.body["args"] == effect["args"]
        for spec in view.plan.step(first.step).approvals:
            approvers = {r.body["approver"] for r in records
                         if r.kind == "approval" and r.step == first.step and r.seq < first.seq
                         and r.body["role"] == spec.role and r.body["tool"] == effect["tool"]
                         and r.body["args_hash"] == content_hash(effect["args"])}
            assert len(approvers) >= spec.count, f"{effect['tool']} ran without {spec.count} {spec.role}(s)"
    by_name = {(e["tool"], e["key"]): e for e in found}
    for step_id, state in view.states.items():
        if state != "succeeded" or not writes(view, step_id):
            continue
        intent = view.last_intent[step_id]
        effect = by_name.get((intent["tool"], intent["idempotency_key"]))
        assert effect is not None, f"the effect of `{step_id}` is lost"
        assert effect["result"] == view.results[step_id]
    status = runtime.report(RUN, view, record=False).steps
    for record in records:
        if record.kind == "outcome_unknown":
            settled = any(r.kind == "reconciled" and r.step == record.step and r.seq > record.seq for r in records)
            assert settled or status[record.step]["state"] == "outcome_unknown"
    if expected is not None:
        assert effects(demo) == expected


MATRIX = [(name, step, boundary) for name in EXAMPLES for step in steps_of(example(name)[0])
          for boundary in BOUNDARIES]


@pytest.mark.slow
@pytest.mark.parametrize("name, step, boundary", MATRIX, ids=[f"{n}:{s}:{b}" for n, s, b in MATRIX])
def test_a_kill_at_any_boundary_of_any_step_is_recovered(tmp_path, demo, registry, uninterrupted, name, step, boundary):
    journal = tmp_path / "journal.db"
    with runtime_at(journal, registry) as runtime:
        runtime.start(*example(name), baseline(), RUN)
    assert crash(journal, registry, f"{step}:{boundary}") == KILLED

    with runtime_at(journal, registry) as runtime:
        report = drive(runtime, RUN)
        assert report.state == "succeeded", report.message
        assert_invariants(runtime, demo, uninterrupted[name])
        settled = [r.body for r in runtime.journal.records(RUN) if r.kind == "reconciled" and r.step == step]
        view = runtime.view(RUN)
    if boundary in ("after_intent", "after_call"):  # the call's answer was lost: the hook settles it
        happened = boundary == "after_call" and writes(view, step)
        assert [s["happened"] for s in settled] == [happened]
        assert {s["by"] for s in settled} == {"reconcile hook"}
        assert report.steps[step]["attempts"] == (1 if happened else 2)  # called again only if it did not happen
    else:
        assert settled == [] and report.steps[step]["attempts"] == 1


@pytest.mark.parametrize("retry, state, attempts", [(1, "succeeded", 2), (0, "failed", 1)])
def test_a_crash_after_a_failed_attempt_is_journaled_does_not_stall_the_run(tmp_path, demo, registry, retry,
                                                                           state, attempts):
    """The one gap between records that no fault boundary covers: the attempt's failure is journaled,
    the process dies before the step's next state is. Resume retries (or fails) the step."""
    text = f"""
plan flaky {{
  version 1
  step fetch {{ call web.fetch(url: "https://example.org/a") risk read_only retry {retry} }}
  step after_fetch after fetch {{ call web.fetch(url: "https://example.org/b") risk read_only }}
}}
"""
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        runtime.start(text, "flaky.plan", baseline(), RUN)
        runtime.journal.append(RUN, "intent", {"tool": "web.fetch", "args": {"url": "https://example.org/a"},
                                               "idempotency_key": "k", "attempt": 1}, step="fetch")
        runtime.journal.append(RUN, "attempt_failed", {"error": "TimeoutError"}, step="fetch")
        report = runtime.advance(RUN)
    assert report.steps["fetch"] == {**report.steps["fetch"], "state": state, "attempts": attempts}
    assert report.state == state


# ------------------------------------------------------------------ randomised
def generated_plan(rng: random.Random, seed: int) -> tuple[str, set[tuple[str, str]]]:
    """Two to four parallel branches of reads, saved notes (with their checks and rollbacks) and
    approved chat posts, joined by a summary that is saved last; and the effects a run must make."""
    lines, tails, writes = [], [], set()
    number = 0
    for _branch in range(rng.randint(2, 4)):
        previous = None
        for _unit in range(rng.randint(1, 3)):
            number += 1
            after = f" after {previous}" if previous else ""
            kind = rng.choice(["read", "note", "note", "post"])
            if kind == "read":
                lines.append(f'step r{number}{after} {{ call web.fetch(url: "https://example.org/{seed}/{number}") '
                             f'risk read_only retry {rng.randint(0, 1)} expect result.status == 200 }}')
                previous = f"r{number}"
            elif kind == "note":
                path = f"g{seed}/n{number}.md"
                lines.append(f'step w{number}{after} {{ call notes.save(path: "{path}", text: "note {number}") '
                             f'risk reversible_write retry {rng.randint(0, 1)} idempotency "note-{number}" '
                             f'rollback notes.delete(path: "{path}") }}')
                lines.append(f'check w{number}_ok after w{number} {{ call notes.get(path: "{path}") '
                             f'expect result.text == "note {number}" }}')
                writes.add(("notes.save", f"note-{number}"))
                previous = f"w{number}_ok"
            else:
                lines.append(f'step p{number}{after} {{ call chat.post(channel: "#gen", text: "post {number}") '
                             f'risk external_write idempotency "post-{number}" approval by role "operator" within 30m }}')
                lines.append(f'check p{number}_ok after p{number} {{ call chat.get_message(channel: "#gen", '
                             f'id: p{number}.result.id) expect result.text == "post {number}" }}')
                writes.add(("chat.post", f"post-{number}"))
                previous = f"p{number}_ok"
        tails.append(previous)
    documents = ", ".join(f"{tail}.result.text" for tail in tails)
    lines.append(f'step join {{ call llm.summarize(documents: [{documents}], instructions: "join", max_words: 40) '
                 f'risk read_only }}')
    lines.append(f'step save after join {{ call notes.save(path: "g{seed}/summary.md", text: join.result.text) '
                 f'risk reversible_write idempotency "summary" rollback notes.delete(path: "g{seed}/summary.md") }}')
    lines.append(f'check saved after save {{ call notes.get(path: "g{seed}/summary.md") '
                 f'expect result.text == join.result.text }}')
    writes.add(("notes.save", "summary"))
    body = textwrap.indent("\n".join(lines), "  ")
    return f"plan generated_{seed} {{\n  version 1\n{body}\n}}\n", writes


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_random_plans_survive_random_kills(tmp_path, demo, registry, seed):
    rng = random.Random(seed)
    text, writes = generated_plan(rng, seed)
    journal = tmp_path / "journal.db"
    with runtime_at(journal, registry) as runtime:
        runtime.start(text, f"generated_{seed}.plan", baseline(), RUN)
    kills = 0
    for _ in range(rng.randint(1, 3)):
        code = crash(journal, registry, f"{rng.choice(steps_of(text))}:{rng.choice(BOUNDARIES)}")
        kills += code == KILLED
        if code == 0:
            break
    with runtime_at(journal, registry) as runtime:
        report = drive(runtime, RUN)
        assert report.state == "succeeded", report.message
        assert_invariants(runtime, demo)
    assert {(e["tool"], e["key"]) for e in ledger(demo)} == writes
    assert kills >= 1  # every step runs, so the first crash point is always reached


# ------------------------------------------------------------------ the command line
def test_the_plangate_command_killed_mid_call_resumes_without_a_second_effect(tmp_path, demo):
    journal = str(tmp_path / "journal.db")
    common = ("--tools", str(DEMO_TOOLS), "--journal", journal)
    killed = cli("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--run", RUN, *common,
                 cwd=ROOT, demo_dir=demo, fault="preview:after_call")
    assert killed.returncode == KILLED
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]
    resumed = cli("resume", RUN, *common, cwd=ROOT, demo_dir=demo)
    assert resumed.returncode == 3 and "route" in resumed.stdout
    with runtime_at(tmp_path / "journal.db") as runtime:
        assert runtime.view(RUN).states["preview"] == "succeeded"
        assert_invariants(runtime, demo)
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]


NO_HOOK_TOOLS = """
import importlib.util

from plangate import tool
from plangate.runtime.tools import Tool

_spec = importlib.util.spec_from_file_location("demo_tools_without_a_preview_hook", {demo!r})
_demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_demo)
globals().update({{name: value for name, value in vars(_demo).items()
                  if isinstance(value, Tool) and value.name != "deploy.preview"}})
preview = tool("deploy.preview")(_demo.preview.function)  # the same effect, with no reconcile hook
"""


@pytest.mark.parametrize("boundary, answer", [("after_call", "--happened"), ("after_intent", "--not-happened")])
def test_without_a_reconcile_hook_the_run_waits_for_plangate_reconcile(tmp_path, demo, boundary, answer):
    tools = tmp_path / "no_hook.py"
    tools.write_text(NO_HOOK_TOOLS.format(demo=str(DEMO_TOOLS)))
    journal = str(tmp_path / "journal.db")

    def plangate(*args, fault=None):
        return cli(*args, "--journal", journal, cwd=ROOT, demo_dir=demo, fault=fault)

    killed = plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(tools),
                      "--run", RUN, fault=f"preview:{boundary}")
    assert killed.returncode == KILLED
    waiting = plangate("resume", RUN, "--tools", str(tools))
    assert waiting.returncode == 3, waiting.stdout + waiting.stderr
    status = json.loads(plangate("status", RUN, "--format", "json").stdout)
    assert status["state"] == "paused" and status["steps"]["preview"]["state"] == "outcome_unknown"
    assert status["steps"]["preview_up"]["attempts"] == 0

    assert plangate("reconcile", RUN, "preview_up", answer, "--as", "ops").returncode == 2  # nothing to settle
    settled = plangate("reconcile", RUN, "preview", answer, "--as", "ops")
    assert settled.returncode == 0, settled.stderr
    resumed = plangate("resume", RUN, "--tools", str(tools))
    assert resumed.returncode == 3 and "`route`: waiting for 1 more approval" in resumed.stdout
    assert [e["tool"] for e in ledger(demo)] == ["deploy.preview"]
    with runtime_at(tmp_path / "journal.db") as runtime:
        view = runtime.view(RUN)
        assert view.states["preview"] == "succeeded"
        reconciled = [r.body for r in runtime.journal.records(RUN) if r.kind == "reconciled"]
        assert reconciled == [{"happened": answer == "--happened", "by": "ops"}]
        assert_invariants(runtime, demo)


def test_a_hand_settled_call_can_carry_the_result_the_operator_saw(tmp_path, demo):
    tools = tmp_path / "no_hook.py"
    tools.write_text(NO_HOOK_TOOLS.format(demo=str(DEMO_TOOLS)))
    journal = str(tmp_path / "journal.db")

    def plangate(*args, fault=None):
        return cli(*args, "--journal", journal, cwd=ROOT, demo_dir=demo, fault=fault)

    assert plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(tools),
                    "--run", RUN, fault="preview:after_call").returncode == KILLED
    assert plangate("resume", RUN, "--tools", str(tools)).returncode == 3
    observed = {"id": "pv-seen", "url": "https://pv-seen.example.com"}
    refused = plangate("reconcile", RUN, "preview", "--not-happened", "--as", "ops", "--result", "{}")
    assert refused.returncode == 2 and "`--result` goes with `--happened`" in refused.stderr
    assert plangate("reconcile", RUN, "preview", "--happened", "--as", "ops", "--result", "{bad").returncode == 2
    settled = plangate("reconcile", RUN, "preview", "--happened", "--as", "ops", "--result", json.dumps(observed))
    assert settled.returncode == 0, settled.stderr
    with runtime_at(tmp_path / "journal.db") as runtime:
        view = runtime.view(RUN)
        assert view.results["preview"] == observed
        result = [r.body for r in runtime.journal.records(RUN) if r.kind == "result" and r.step == "preview"][-1]
        assert result["external_ref"] == "pv-seen" and result["settled_by"] == "ops"


# ------------------------------------------------------------------ one process per run
SLOW_TOOLS = """
import os, time
from plangate import tool

FOLDER = {folder!r}

@tool("slow.write")
def write(name: str, idempotency_key: str) -> dict:
    with open(os.path.join(FOLDER, "calls"), "a") as calls:
        calls.write(idempotency_key + "\\n")
    while not os.path.exists(os.path.join(FOLDER, "release")):
        time.sleep(0.02)
    with open(os.path.join(FOLDER, "done"), "a") as done:
        done.write(idempotency_key + "\\n")
    return {{"id": "w-" + name}}

@write.reconcile
def write_reconcile(idempotency_key: str):
    path = os.path.join(FOLDER, "done")
    done = open(path).read().split() if os.path.exists(path) else []
    return {{"id": "w-reconciled"}} if idempotency_key in done else None
"""
SLOW_POLICY = 'policy slow { version 1 tool slow.write { risk reversible_write } unknown_tools deny }'
SLOW_PLAN = 'plan slow { version 1 step w { call slow.write(name: "one") risk reversible_write } }'


def test_a_run_is_executed_by_one_process_at_a_time_and_a_killed_holder_does_not_block_it(tmp_path, demo):
    import subprocess
    import sys
    import time

    (tmp_path / "tools.py").write_text(SLOW_TOOLS.format(folder=str(tmp_path)))
    (tmp_path / "slow.policy").write_text(SLOW_POLICY)
    (tmp_path / "slow.plan").write_text(SLOW_PLAN)
    journal = str(tmp_path / "journal.db")
    tools = ("--tools", str(tmp_path / "tools.py"))

    def plangate(*args):
        return cli(*args, "--journal", journal, cwd=tmp_path, demo_dir=demo)

    first = subprocess.Popen([sys.executable, "-m", "plangate.cli", "run", "slow.plan", "--policy", "slow.policy",
                              *tools, "--run", RUN, "--journal", journal], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1000):
            if (tmp_path / "calls").exists():
                break
            time.sleep(0.02)
        assert (tmp_path / "calls").exists(), first.communicate(timeout=5)
        second = plangate("resume", RUN, *tools)
        assert second.returncode == 2
        assert f"run `{RUN}` is being executed by process {first.pid} on " in second.stderr
        status = json.loads(plangate("status", RUN, "--format", "json").stdout)
        assert status["state"] == "running"
        assert status["steps"]["w"]["state"] == "running" and f"process {first.pid}" in status["steps"]["w"]["reason"]
        settled = plangate("reconcile", RUN, "w", "--not-happened", "--as", "ops")
        assert settled.returncode == 2 and "is being executed by process" in settled.stderr
        assert plangate("abort", RUN).returncode == 2
        assert (tmp_path / "calls").read_text().count("\n") == 1  # nobody called the tool a second time
    finally:
        first.kill()
        first.wait()
    status = json.loads(plangate("status", RUN, "--format", "json").stdout)
    assert status["state"] == "paused" and status["steps"]["w"]["state"] == "outcome_unknown"
    (tmp_path / "release").touch()
    resumed = plangate("resume", RUN, *tools)  # the killed holder's lock died with it
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (tmp_path / "calls").read_text().count("\n") == 2  # the hook said the first call never finished


def test_a_second_runtime_refuses_a_run_that_another_holds(tmp_path, demo, registry):
    import os

    from plangate.runtime.host import RunError

    journal = tmp_path / "journal.db"
    with runtime_at(journal, registry) as holder, runtime_at(journal, registry) as other:
        run = holder.start(*example("deploy"), baseline())
        with holder.hold(run):
            with pytest.raises(RunError, match=f"run `{run}` is being executed by process {os.getpid()} on "):
                other.advance(run)
            assert holder.advance(run).state == "paused"  # the holder itself goes on (re-entrant)
        assert other.advance(run).state == "paused"

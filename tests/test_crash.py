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
import os
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
    in_child,
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
        intents = [r.body for r in runtime.journal.records(RUN) if r.kind == "intent" and r.step == step]
        view = runtime.view(RUN)
    if boundary in ("after_intent", "after_call"):  # the call's answer was lost: the hook settles it
        happened = boundary == "after_call" and writes(view, step)
        assert [s["happened"] for s in settled] == [happened]
        assert {s["by"] for s in settled} == {"reconcile hook"}
        # Called again only if it did not happen, as the same attempt: a call not made is no attempt.
        assert report.steps[step]["attempts"] == 1
        assert [i["attempt"] for i in intents] == ([1] if happened else [1, 1])
        assert len({i["idempotency_key"] for i in intents}) == 1
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


def test_an_intent_is_in_the_main_file_before_its_call_so_losing_the_log_cannot_lose_it(tmp_path, demo):
    """After a kill mid-call, the journal's main file alone (its write-ahead log lost, or not
    copied) still holds the intent: the step is an unknown outcome, never a call to make again."""
    journal = tmp_path / "journal.db"
    killed = cli("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--run", RUN, "--tools",
                 str(DEMO_TOOLS), "--journal", str(journal), cwd=ROOT, demo_dir=demo, fault="preview:after_call")
    assert killed.returncode == KILLED
    copy = tmp_path / "copy" / "journal.db"
    copy.parent.mkdir()
    copy.write_bytes(journal.read_bytes())  # the main file alone: no `-wal`, no `-shm`
    status = cli("status", RUN, "--format", "json", "--journal", str(copy), cwd=ROOT, demo_dir=demo)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["steps"]["preview"]["state"] == "outcome_unknown"
    assert cli("log", RUN, "--verify", "--journal", str(copy), cwd=ROOT, demo_dir=demo).returncode == 0


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


def killed_without_a_hook(tmp_path, demo, boundary: str):
    """`plangate run examples/deploy.plan` with tools whose `deploy.preview` has no reconcile hook,
    killed at `preview:BOUNDARY`; the tools file and `plangate …` on this test's journal."""
    tools = tmp_path / "no_hook.py"
    tools.write_text(NO_HOOK_TOOLS.format(demo=str(DEMO_TOOLS)))
    journal = str(tmp_path / "journal.db")

    def plangate(*args, fault=None):
        return cli(*args, "--journal", journal, cwd=ROOT, demo_dir=demo, fault=fault)

    killed = plangate("run", "examples/deploy.plan", "--policy", "policies/baseline.policy", "--tools", str(tools),
                      "--run", RUN, fault=f"preview:{boundary}")
    assert killed.returncode == KILLED
    return tools, plangate


@pytest.mark.parametrize("boundary, answer", [("after_call", "--happened"), ("after_intent", "--not-happened")])
def test_without_a_reconcile_hook_the_run_waits_for_plangate_reconcile(tmp_path, demo, boundary, answer):
    tools, plangate = killed_without_a_hook(tmp_path, demo, boundary)
    waiting = plangate("resume", RUN, "--tools", str(tools))
    assert waiting.returncode == 3, waiting.stdout + waiting.stderr
    # no hook can settle it: the command says how to, and `resume` alone would change nothing
    assert f"settle it with: plangate reconcile {RUN} preview --happened|--not-happened --as NAME" in waiting.stdout
    assert "go on with: plangate resume" not in waiting.stdout
    status = json.loads(plangate("status", RUN, "--format", "json").stdout)
    assert status["state"] == "paused" and status["steps"]["preview"]["state"] == "outcome_unknown"
    assert status["steps"]["preview_up"]["attempts"] == 0
    assert "settle it with" not in plangate("status", RUN).stdout  # no tools loaded: a hook may exist
    blank = plangate("reconcile", RUN, "preview", answer, "--as", "  ")
    assert blank.returncode == 2 and "not blanks" in blank.stderr

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


def test_abort_with_rollback_on_the_command_line_waits_for_an_unknown_preview_then_undoes_it(tmp_path, demo):
    """`deploy.preview` took effect and the process died; `abort --rollback` cannot undo a preview it
    does not know exists: exit 3 and how to settle it; once settled as happened, `resume` deletes it."""
    tools, plangate = killed_without_a_hook(tmp_path, demo, "after_call")
    [made] = [e for e in ledger(demo) if e["tool"] == "deploy.preview"]
    waiting = plangate("abort", RUN, "--rollback", "--tools", str(tools))
    assert waiting.returncode == 3, waiting.stdout + waiting.stderr
    assert "if it happened, the abort rolls it back" in waiting.stdout
    assert f"settle it with: plangate reconcile {RUN} preview --happened|--not-happened --as NAME" in waiting.stdout
    settled = plangate("reconcile", RUN, "preview", "--happened", "--result", json.dumps(made["result"]),
                       "--as", "ops")
    assert settled.returncode == 0, settled.stderr
    plangate("resume", RUN, "--tools", str(tools))
    status = json.loads(plangate("status", RUN, "--format", "json").stdout)
    assert status["state"] == "aborted" and status["steps"]["preview"]["state"] == "compensated"
    assert [e["tool"] for e in ledger(demo)][-1] == "deploy.delete_preview"
    again = plangate("abort", RUN, "--rollback", "--tools", str(tools))
    assert again.returncode == 0, again.stdout  # every step it was to undo is undone


def test_a_hand_settled_call_can_carry_the_result_the_operator_saw(tmp_path, demo):
    tools, plangate = killed_without_a_hook(tmp_path, demo, "after_call")
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
        status = json.loads(plangate("status", RUN, "--format", "json", "--reasons").stdout)
        assert status["state"] == "running"
        assert status["steps"]["w"]["state"] == "running" and f"process {first.pid}" in status["reasons"]["w"]
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


# ------------------------------------------------------------------ a crash during abort --rollback
UNDO_POLICY = """
policy undo {
  version 1
  tool t.read  { risk read_only }
  tool t.write { risk reversible_write }
  tool t.undo  { risk reversible_write }
  tool t.send  { risk external_write }
  unknown_tools deny
  require approval when step.risk >= external_write by role "operator" within 1h
}
"""
UNDO_PLAN = """
plan undo {
  version 1
  step r { call t.read(x: 1) }
  step w after r { call t.write(x: "a") risk reversible_write idempotency "k-a" rollback t.undo(id: result.id) }
  check cw after w { call t.read(x: 2) }
  step e after cw { call t.send(n: 3) risk external_write idempotency "e-3" approval by role "operator" }
}
"""


def undo_registry(folder, hook: str):
    """t.read, t.write, t.send and t.undo, each writing a line to `folder/effects` per effect;
    t.undo ends the process (os._exit) after its effect while `folder/crash` exists. The undo's
    reconcile hook: "finds" looks its key up in the effects, "none" always answers None, "absent"
    is no hook at all."""
    from plangate.runtime.tools import ToolRegistry, tool

    effects_file = folder / "effects"

    def effect(name: str, key: str | None = None, **args) -> None:
        with open(effects_file, "a") as out:
            out.write(json.dumps({"tool": name, "key": key, **args}) + "\n")

    @tool("t.read")
    def read(x: int) -> dict:
        effect("t.read", x=x)
        return {"v": x}

    @tool("t.write")
    def write(x: str, idempotency_key: str) -> dict:
        effect("t.write", idempotency_key, x=x)
        return {"id": "w-" + x}

    @tool("t.send")
    def send(n: int, idempotency_key: str) -> dict:
        effect("t.send", idempotency_key, n=n)
        return {"n": n}

    @tool("t.undo")
    def undo(id: str, idempotency_key: str) -> dict:
        effect("t.undo", idempotency_key, id=id)
        if (folder / "crash").exists():
            os._exit(9)
        return {"undone": id}

    if hook != "absent":
        @undo.reconcile
        def undo_reconcile(idempotency_key: str):
            if hook == "none":
                return None
            done = [e for e in undo_effects(folder) if e["key"] == idempotency_key]
            return {"undone": done[0]["id"], "by": "hook"} if done else None

    registry = ToolRegistry()
    for each in (read, write, send, undo):
        registry.register(each)
    return registry


def all_effects(folder) -> list[dict]:
    path = folder / "effects"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def undo_effects(folder) -> list[dict]:
    return [e for e in all_effects(folder) if e["tool"] == "t.undo"]


def aborted_mid_rollback(tmp_path, hook: str, fault: str | None = None):
    """A run paused at `e`'s approval whose `abort --rollback` died just after `t.undo` took effect
    (the tool ends the process), or at the rollback's `fault` point."""
    registry = undo_registry(tmp_path, hook)
    journal = tmp_path / "journal.db"
    with runtime_at(journal, registry) as runtime:
        runtime.start(UNDO_PLAN, "undo.plan", [("undo.policy", UNDO_POLICY)], RUN)
        assert runtime.advance(RUN).steps["e"]["state"] == "waiting_for_approval"
    if fault is None:
        (tmp_path / "crash").touch()
    code = in_child(journal, registry, lambda runtime: runtime.abort(RUN, rollback=True).exit_code, fault)
    assert code == (9 if fault is None else KILLED)
    if fault is None:
        (tmp_path / "crash").unlink()
    return registry, journal


@pytest.mark.parametrize("hook, fault, undos", [
    ("finds", None, 1), ("none", None, 2),
    ("finds", "w:rollback_after_intent", 1),  # killed before the call: the hook finds nothing, it is made
    ("finds", "w:rollback_after_call", 1)])
def test_a_crash_during_a_rollback_is_settled_by_the_rollback_hook_and_never_repeats_the_step(tmp_path, hook,
                                                                                               fault, undos):
    registry, journal = aborted_mid_rollback(tmp_path, hook, fault)
    with runtime_at(journal, registry) as runtime:
        assert runtime.view(RUN).run_state == "aborting"  # the decision was recorded before the rollback
        status = runtime.report(RUN, runtime.view(RUN), record=False)
        assert status.steps["w"]["state"] == "outcome_unknown" and "rollback" in status.steps["w"]["reason"]
        assert status.steps["e"]["state"] == "cancelled"
        report = runtime.advance(RUN)  # `resume`: only finishes the abort
        assert report.state == "aborted", report.message
        assert report.steps["w"]["state"] == "compensated" and report.steps["w"]["attempts"] == 1
        assert report.steps["e"]["state"] == "cancelled" and report.steps["e"]["attempts"] == 0
        assert runtime.view(RUN).results["w"] == {"id": "w-a"}  # the step's own result, not the undo's
        records = runtime.journal.records(RUN)
        settled = [r.body for r in records if r.kind == "reconciled"]
        assert settled and all(body["rollback"] is True for body in settled)
        assert runtime.advance(RUN).state == "aborted"  # nothing more to do
    assert [e["tool"] for e in all_effects(tmp_path)] == ["t.read", "t.write", "t.read"] + ["t.undo"] * undos
    assert {e["key"] for e in undo_effects(tmp_path)} == {f"{RUN}:w:rollback"}


@pytest.mark.parametrize("happened", [True, False])
def test_a_crashed_rollback_without_a_hook_waits_for_plangate_reconcile(tmp_path, happened):
    from plangate.runtime.host import RunError

    registry, journal = aborted_mid_rollback(tmp_path, "absent")
    with runtime_at(journal, registry) as runtime:
        waiting = runtime.advance(RUN)
        assert waiting.state == "aborting" and waiting.exit_code == 3
        assert "the abort is not finished" in waiting.message
        assert waiting.steps["w"]["state"] == "outcome_unknown" and "rollback" in waiting.steps["w"]["reason"]
        assert waiting.needs_reconcile == ("w",)  # `resume` says `settle it with: plangate reconcile …`
        with pytest.raises(RunError, match="has no unknown outcome"):
            runtime.reconcile(RUN, "r", True, "ops")
        with pytest.raises(RunError, match="is being aborted"):
            runtime.new_version(RUN, UNDO_PLAN.replace("version 1", "version 2"), "undo.plan")
        runtime.reconcile(RUN, "w", happened, "ops", {"undone": "w-a"} if happened else None)
        report = runtime.advance(RUN)
        assert report.state == "aborted", report.message
        assert report.steps["w"]["state"] == "compensated" and report.steps["w"]["attempts"] == 1
        [settled] = [r.body for r in runtime.journal.records(RUN) if r.kind == "reconciled"]
        assert settled == {"happened": happened, "by": "ops", "rollback": True}
    assert [e["tool"] for e in all_effects(tmp_path)].count("t.write") == 1
    assert len(undo_effects(tmp_path)) == (1 if happened else 2)


@pytest.mark.parametrize("happened", [True, False])
def test_an_abort_with_rollback_after_a_crash_mid_call_rolls_the_call_back_once_settled(tmp_path, happened):
    """Killed after `t.write` took effect, before its answer was recorded; then `abort --rollback`.
    The abort cannot undo what it does not know happened: it stays `aborting` (exit 3) until `w` is
    settled, then rolls `w` back if it happened — once — and never makes `w`'s call again."""
    registry = undo_registry(tmp_path, "absent")
    journal = tmp_path / "journal.db"
    with runtime_at(journal, registry) as runtime:
        runtime.start(UNDO_PLAN, "undo.plan", [("undo.policy", UNDO_POLICY)], RUN)
    assert advance_in_child(journal, RUN, registry, "w:after_call") == KILLED
    with runtime_at(journal, registry) as runtime:
        waiting = runtime.abort(RUN, rollback=True)
        assert waiting.state == "aborting" and waiting.exit_code == 3, waiting.message
        assert waiting.steps["w"]["state"] == "outcome_unknown" and waiting.needs_reconcile == ("w",)
        assert runtime.advance(RUN).state == "aborting"  # `resume` cannot finish it either
        runtime.reconcile(RUN, "w", happened, "ops", {"id": "w-a"} if happened else None)
        report = runtime.advance(RUN)
        assert report.state == "aborted", report.message
        assert report.steps["w"]["state"] == ("compensated" if happened else "cancelled")
        assert report.steps["e"]["state"] == "cancelled"
    assert [e["tool"] for e in all_effects(tmp_path)] == ["t.read", "t.write"] + ["t.undo"] * happened
    assert [e["id"] for e in undo_effects(tmp_path)] == ["w-a"] * happened


def test_a_rollback_is_not_an_attempt_of_its_step(tmp_path):
    registry = undo_registry(tmp_path, "finds")
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        runtime.start(UNDO_PLAN, "undo.plan", [("undo.policy", UNDO_POLICY)], RUN)
        runtime.advance(RUN)
        report = runtime.abort(RUN, rollback=True)
        assert report.state == "aborted"
        assert report.steps["w"] == {"state": "compensated", "attempts": 1, "reason": "rolled back by `t.undo`"}
        kinds = [r.body["state"] for r in runtime.journal.records(RUN) if r.kind == "run_state"]
        assert kinds[-2:] == ["aborting", "aborted"]
        assert runtime.journal.step_states(RUN)["w"] == ("compensated", 1)


# ------------------------------------------------------------------ a settled outcome and its result are one
SETTLE_PLAN = """
plan settle {
  version 1
  step w { call t.write(x: "a") risk reversible_write idempotency "k-a" expect result.id == "seen" }
  step r after w { call t.read(x: 1) }
}
"""


def die_writing_the_settled_result(monkeypatch_module) -> None:
    """In a child: end the process while the journal writes a `result` that settles an unknown
    outcome (after any record written before it in the same transaction, before its commit)."""
    from plangate.runtime import journal as journal_module

    real = journal_module.content_hash

    def content_hash(value):
        if isinstance(value, list) and len(value) == 7 and value[2] == "result" and '"settled_by"' in value[4]:
            os._exit(9)
        return real(value)

    monkeypatch_module.content_hash = content_hash


@pytest.mark.parametrize("by", ["hook", "operator"])
def test_a_crash_while_an_unknown_outcome_is_settled_loses_neither_the_settlement_nor_its_result(tmp_path, by):
    from plangate.runtime import journal as journal_module

    registry = undo_registry(tmp_path, "absent")
    if by == "hook":
        registry.get("t.write").reconcile(lambda idempotency_key: {"id": "seen"})
    journal = tmp_path / "journal.db"
    with runtime_at(journal, registry) as runtime:
        runtime.start(SETTLE_PLAN, "settle.plan", [("undo.policy", UNDO_POLICY)], RUN)
    assert advance_in_child(journal, RUN, registry, "w:after_call") == KILLED

    def settle(runtime) -> int:
        die_writing_the_settled_result(journal_module)
        if by == "hook":
            return runtime.advance(RUN).exit_code
        runtime.reconcile(RUN, "w", True, "ops", {"id": "seen"})
        return 0

    assert in_child(journal, registry, settle) == 9
    with runtime_at(journal, registry) as runtime:
        view = runtime.view(RUN)
        assert view.states["w"] == "outcome_unknown", view.reasons["w"]  # neither record, not half of them
        assert not [r for r in runtime.journal.records(RUN) if r.kind == "reconciled"]
        if by == "operator":
            runtime.reconcile(RUN, "w", True, "ops", {"id": "seen"})
        report = runtime.advance(RUN)
        assert report.state == "succeeded", report.message
        assert runtime.view(RUN).results["w"] == {"id": "seen"}
    assert [e["tool"] for e in all_effects(tmp_path)] == ["t.write", "t.read"]


def test_an_open_rollback_in_a_journal_without_the_aborting_record_never_resumes_the_steps(tmp_path):
    """A journal written before the abort was recorded first: its open rollback still means an abort."""
    registry = undo_registry(tmp_path, "finds")
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        runtime.start(UNDO_PLAN, "undo.plan", [("undo.policy", UNDO_POLICY)], RUN)
        runtime.advance(RUN)
        runtime.approve(RUN, "e", "alice", "operator")
        runtime.journal.append(RUN, "intent", {"tool": "t.undo", "args": {"id": "w-a"}, "attempt": 2, "rollback": True,
                                               "idempotency_key": f"{RUN}:w:rollback"}, step="w")
        report = runtime.advance(RUN)
        assert report.state == "aborted" and report.steps["e"]["state"] == "cancelled"
        assert report.steps["w"]["state"] == "succeeded" and report.steps["w"]["attempts"] == 1
    assert [e["tool"] for e in all_effects(tmp_path)] == ["t.read", "t.write", "t.read"]


# ------------------------------------------------------------------ a result journaled before results were bounded
DEEP_PLAN = """
plan deep {
  version 1
  step a { call t.read() }
  step b { call t.sink(l: a.result.l) }
}
"""
DEEP_POLICY = "policy deep { tool t.* { risk read_only } }"


def test_a_run_whose_journal_holds_a_result_nested_past_the_bound_goes_on(tmp_path):
    """A result 600 lists deep, journaled by a plangate that did not bound results (its process then
    died before the step was marked done), ended every pass that passed it on to a step in a
    RecursionError: the run was stuck for good. Values are made plain without recursion now."""
    from plangate.runtime.tools import ToolRegistry, tool

    deep: list = []
    for _ in range(599):
        deep = [deep]
    received = []

    @tool("t.read")
    def read() -> dict:
        raise AssertionError("its result is journaled: it is never called again")

    @tool("t.sink")
    def sink(l: list) -> dict:  # noqa: E741
        received.append(l)
        return {"ok": True}

    registry = ToolRegistry()
    for each in (read, sink):
        registry.register(each)
    with runtime_at(tmp_path / "journal.db", registry) as runtime:
        runtime.start(DEEP_PLAN, "deep.plan", [("deep.policy", DEEP_POLICY)], RUN)
        runtime.journal.append(RUN, "intent", {"tool": "t.read", "args": {}, "idempotency_key": "k", "attempt": 1},
                               step="a")
        runtime.journal.append(RUN, "result", {"result": {"l": deep}, "external_ref": None}, step="a")
        report = runtime.advance(RUN)
    assert report.state == "succeeded", report.message
    (given,) = received
    levels = 0
    while given:
        (given,) = given
        levels += 1
    assert levels == 599 and given == []

"""The interpreter: runs a checked plan under the same compiled policy, step by step.

One host object (`Runtime`) holds the compiled policy, the tool registry, the journal, the clock
and the concurrency limit; everything about a run lives in the journal. `start` records the plan
and policy texts with their hashes, so `resume` needs nothing but the run id: each pass re-reads the
journal, re-parses the plan and policy it recorded (parsed and checked once per text, then
memoised), checks their hashes, and folds the records into the run's state. Nothing about a run is
kept only in memory.

Whatever executes or changes a run (`start`, `advance`, `new_version`, `abort`, `reconcile`) holds
the run's exclusive lock (`runlock.py`) for as long as it does; another process is refused with a
message naming the holder. The lock dies with its holder. A reader's view probes it: an intent with
no answer is `running` while another live process holds the run, else `outcome_unknown`. `approve`
takes no lock: it computes the call and appends the approval with a compare-and-append on the run's
chain head, so the approval is recorded only if the call it checked is still the run's call.

A pass (`advance`) pauses at once while the plan has a pending decision (the report names it and
how a new plan version settles it: `_open_decisions`); else it takes the steps in topological order
and, for each that is not finished:
- waits while an earlier step it depends on is unfinished; is `cancelled` after one that failed,
  was blocked or cancelled; is `skipped` when a step whose result it uses was skipped, or when its
  `when` is false;
- evaluates its arguments and idempotency key in CEL over earlier results;
- asks the compiled policy about the concrete call: a deny makes it `blocked` (with the rule's
  reason); approvals required by the policy or asked for by the plan must be recorded and still
  bound to this exact call (plan hash and version, step, tool, canonical arguments, role, expiry,
  distinct approvers by normalised name: `_approver_key`), else the step is `waiting_for_approval`
  and the run pauses, its reason saying why the approvals given do not count;
- stops before a call that would break a budget (actual calls and declared costs so far, elapsed
  time) — the step is `blocked`;
- then, around the effect: (1) journal the intent with the exact call and the idempotency key
  (and whether the tool is given it: only a tool with an `idempotency_key` parameter is, and
  `keys_not_passed` warns of a plan key that its tool cannot take); (2) call the tool;
  (3) journal the result and its external reference (`_external_ref`: the result's `id`, `ref`,
  `external_ref` or `url`, the first that is a string or an integer) or the failure; (4) evaluate
  `expect` and journal evidence; (5) only then mark the step `succeeded`. A failed attempt is
  retried while `retry` allows, with the same key. A call is waited for until its step's time
  bound runs out, or what the time budget leaves when it starts, whichever is first
  (`_wait_bound`): a call with no bound of its own is never waited for past the budget.
Calls of steps that are ready together run in a thread pool of the policy's concurrency limit; the
journal is written only from the host's thread.

A new plan version (a `plan_version` record) replaces the plan in the fold; `_revise` decides what
each step keeps: an unknown outcome always (until settled; if its call changed or the step was
dropped, the settled effect is not taken for the new call), a completed step unless its call
changed (one the version drops stays `succeeded`, "no longer in the plan", its step as it was kept
for a rollback), and a blocked, cancelled, skipped, waiting or retryable failed step is decided
again; a completed step after one that runs again is held back until that one is finished
(`_hold_back_followers`), then kept or run afresh (`Runtime._recheck`). A new version must keep
the plan's id, and is recorded only if the loaded tools can run what it leaves to do. A step whose
call changed starts with no state, result or attempts. The derived idempotency key hashes the
concrete call, so an unchanged call keeps its key across attempts and versions, and a changed one
never reuses it.

An abort is decided before anything is undone: `abort` journals the run `aborting`, with the
steps it will roll back (succeeded `reversible_write` steps with a `rollback`, dropped ones
included, and such a step whose call's outcome is unknown, taken as the last made; the last
completed first, none before an unknown one is settled), cancels what is not finished, makes each rollback (a call
under the policy and the budgets, its records marked `"rollback": true`: never an attempt or a
result of the step), and then journals the run `aborted`. A run left `aborting` by a crash is only
ever finished (`_finish_abort`): its unanswered rollback is settled by the rollback tool's hook or
by `reconcile` (happened: `compensated`; not: made again with the same key), the rollbacks not yet
made are made, and no step's own call is made again.

After a crash, an intent with no result is `outcome_unknown`. The host never calls again blindly:
it asks the tool's reconcile hook with the key (a result: it happened; None: it did not, and the
step is safe to call; anything else — an exception, a bool — settles nothing, and the reason says
so), else the run pauses until `plangate reconcile` settles it by hand. A step
left `running` with no open intent had its failed attempt journaled just before a crash: the pass
records that failure (retry or `failed`) before anything else. A reconciliation that says a call
happened is journaled with its result in one transaction (`Journal.append_many`), so a crash never
leaves a call settled as happened without the result it settled on.

Fault injection (for the crash tests): with `PLANGATE_FAULT=step:boundary` in the environment, the
process kills itself with SIGKILL at that boundary: `before_intent`, `after_intent`, `after_call`,
`after_result`; around a rollback's call, `rollback_after_intent` and `rollback_after_call`.
"""

from __future__ import annotations

import hashlib
import math
import os
import signal
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, NamedTuple, Sequence

from plangate.budget import DEFAULT_WORKERS
from plangate.cel import ast as cel
from plangate.diagnostics import backticked
from plangate.cel.evaluate import CelError, compile_expr, reads_a_name
from plangate.driver import CheckResult, as_sources, check_sources  # before plangate.policy.facts: it loads the checks first
from plangate.ir.nodes import Plan, Risk, Step, ToolCall
from plangate.policy.compiled import CatalogueEntry, CompiledPolicy, format_seconds
from plangate.policy.decide import evaluator_for
from plangate.checks.catalogue import not_in_catalogue, refusal_before_rules, typed_arguments
from plangate.policy.facts import StepFacts, effective_risk, rule_activation
from plangate.runtime.canonical import call_value, canonical_json, content_hash, idempotency_key, kept_json, plain, undecodable
from plangate.runtime.canonical_plan import canonical, plan_hash
from plangate.runtime.errors import RunError
from plangate.runtime.journal import Journal, Record, StaleHead
from plangate.runtime.runlock import RunBusy, RunLocks
from plangate.runtime.tools import Outcome, ToolRegistry, bind, invoke, invoke_reconcile
from plangate.source import SourceFile

DEFAULT_APPROVAL_SECONDS = 24 * 3600  # how long an approval lasts when neither plan nor policy says
_HELD_BACK = ("held back: it ran under an earlier plan version, and its call is computed again (and kept if "
              "the same) once the steps before it are done")
_NOT_CALLED = frozenset({None, "ready", "waiting_for_approval"})  # states of a step whose call is still to make
FINISHED = frozenset({"succeeded", "skipped", "failed", "blocked", "cancelled", "compensated"})
ENDED = frozenset({"aborted", "succeeded", "failed"})  # run states after which nothing runs
# Step states in which the step's call will not be made as things stand: nothing to approve.
_NOT_APPROVABLE = frozenset({"succeeded", "failed", "skipped", "blocked", "cancelled", "compensated",
                             "outcome_unknown", "verifying", "running"})
GOOD = frozenset({"succeeded", "skipped"})
BAD = frozenset({"failed", "blocked", "cancelled", "compensated"})
ABORTED = frozenset({"aborting", "aborted"})  # run states after which no step's own call is made
BOUNDARIES = ("before_intent", "after_intent", "after_call", "after_result")
HOOK = "reconcile hook"  # who settled an unknown outcome when the tool's hook did
# How long, at least, a run waits for calls that timed out and still hold every worker `limit
# concurrency` allows, while a step is ready to start (their step's time bound, if longer), before
# it pauses.
ABANDONED_WAIT = 10
# What a `plan_version` record holds back (`_hold_back_followers`): completed steps after one that
# runs again, also through `after`; since this version, also a call of an earlier version whose
# unknown outcome is settled after it.
HOLD_FOLLOWERS, HOLD_SETTLED = "followers", "followers, settled"
UNANSWERED = "the call may have happened: its answer was never recorded"
BY_HAND = "`plangate reconcile` settles it by hand"  # said of an unknown outcome that a hook failed to settle


@dataclass
class RunView:
    """The run as folded from its journal records; each `Runtime.view` hands out a fresh copy."""

    run: str
    plan: Plan
    plan_text: str
    plan_file: str
    plan_hash: str
    plan_version: int
    policy: CompiledPolicy
    policy_texts: list[list[str]]
    started_at: float
    states: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    open_intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    marked_unknown: set[str] = field(default_factory=set)
    # Steps whose unknown outcome belongs to a call that a later plan version changed or dropped:
    # kept until settled, then run again under the new call (or, dropped, kept only if it happened);
    # each with the step as it was when that call was made (for its rollback, should it be dropped).
    stale: dict[str, Step | None] = field(default_factory=dict)
    last_intent: dict[str, dict[str, Any]] = field(default_factory=dict)
    approvals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: int = 0
    cost: float = 0.0
    run_state: str = "running"
    held_by: str | None = None  # another live process that holds the run's lock (it is executing)
    head: tuple[int, str] = (0, "")  # the (seq, hash) of the last record folded into this view
    settled_by: dict[str, str] = field(default_factory=dict)  # step → who settled its last result by hand or hook
    # Completed steps that a later plan version dropped: the step as it was, for its rollback.
    dropped: dict[str, Step] = field(default_factory=dict)
    # The effects of calls that a later plan version changed, each kept under its own id (`b@1`,
    # `b@2`…: no plan step can be named so) as a dropped step is, for its rollback on abort. An id
    # stays here once made (numbering never reuses one), even when its effect proves to be the
    # step's own again (`_fold`'s `result`).
    superseded: set[str] = field(default_factory=set)
    # Per completed step with a `rollback`: the step as its call was made, the results of the steps
    # it reads at that moment, and the call's idempotency key — what its rollback is computed from,
    # whatever later versions change, and which effect it is.
    made: dict[str, tuple[Step, dict[str, Any], str | None]] = field(default_factory=dict)
    # Per step with a `rollback` whose call was made: the results of the steps it reads, as they
    # were when its intent was written (a call settled later read these, whatever ran since).
    read_at_call: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Completed steps whose call reads the result of a step that a later plan version runs again:
    # their state and reason, held back until their call can be computed anew (`_prepare`).
    recheck: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    completed_at: dict[str, int] = field(default_factory=dict)  # step → seq of its result (rollback order)
    # Whether the last plan version also holds back a step whose unknown outcome, of a call made
    # under an earlier version, is settled as happened after it (`_fold`'s `result`; journals
    # written before it did record no such `hold`, and are folded as they were written).
    holds_settled: bool = False
    # The abort: the steps to roll back (recorded with the `aborting` run state), in order.
    to_roll_back: list[str] = field(default_factory=list)
    rollback_intents: dict[str, dict[str, Any]] = field(default_factory=dict)  # open: no answer recorded
    rollback_calls: dict[str, dict[str, Any]] = field(default_factory=dict)  # the latest rollback intent
    rollback_unknown: dict[str, str] = field(default_factory=dict)  # why an open rollback is still unknown
    rolled_back: set[str] = field(default_factory=set)  # steps whose rollback is decided (made, failed, refused)


@dataclass
class RunReport:
    run: str
    state: str  # succeeded | failed | paused | blocked | aborting | aborted | running (another process holds it)
    message: str
    steps: dict[str, dict[str, Any]]
    needs_reconcile: tuple[str, ...] = ()  # unknown outcomes no loaded reconcile hook can settle

    @property
    def exit_code(self) -> int:
        return {"succeeded": 0, "paused": 3, "running": 3, "aborting": 3}.get(self.state, 1)


def new_run_id() -> str:
    return "run-" + uuid.uuid4().hex[:12]


def _seconds(value: float) -> str:
    """A duration for a message, rounded up to a tenth of a second (so 5.04 s over 5 s reads 5.1s)."""
    return f"{math.ceil(value * 10) / 10:g}s"


def _now_iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


def _unexpired(expires_at: Any, now: float) -> bool:
    """Whether an approval's expiry is still ahead; an unreadable expiry is not (fail closed)."""
    try:
        return datetime.fromisoformat(expires_at).timestamp() > now
    except (TypeError, ValueError):
        return False


def _fault(step: str, boundary: str) -> None:
    wanted = os.environ.get("PLANGATE_FAULT")
    if wanted and wanted == f"{step}:{boundary}":
        os.kill(os.getpid(), signal.SIGKILL)


class Runtime:
    def __init__(self, journal: "Journal | str | os.PathLike[str]", tools: ToolRegistry | None = None, *,
                 clock: Callable[[], float] = time.time,
                 fault: Callable[[str, str], None] = _fault) -> None:
        """`journal` is an open `Journal` or the path of one (opened, and created if need be)."""
        if tools is not None and not isinstance(tools, ToolRegistry):
            raise TypeError(f"`tools` is a ToolRegistry (`ToolRegistry().register(...)` or `.load(...)`), "
                            f"not {type(tools).__name__}")
        self.journal = journal if isinstance(journal, Journal) else Journal.open(journal)
        self.tools = tools if tools is not None else ToolRegistry()
        self.clock = clock
        self.fault = fault
        self._locks = RunLocks(self.journal.path)
        # run → (state folded from the journal, (seq, hash) of the last record folded): a cache
        # of what the journal says, checked against the chain on every read, never a second truth.
        self._folded: dict[str, tuple[RunView, tuple[int, str]]] = {}
        self._fold_locks: dict[str, threading.Lock] = {}  # per run: a first fold of one never holds up another
        self._fold_locks_mutex = threading.Lock()
        # run → the calls this process abandoned past their timeout that have not returned yet, each
        # with its step and how long a run waits for it when nothing else can start: such a call
        # still takes a worker under `limit concurrency` and may still take effect, so its step's
        # outcome is not settled while it runs (`_abandon`; emptied from the calls' own threads).
        self._abandoned_calls: dict[str, dict[Future, tuple[str, float]]] = {}
        self._abandoned_mutex = threading.Lock()

    @contextmanager
    def hold(self, run: str) -> Iterator[None]:
        """Hold the run's lock (re-entrant) for the block; a `RunError` naming the holder when
        another live process executes or changes the run."""
        _require_run_id(run)
        try:
            with self._locks.hold(run):
                yield
        except RunBusy as busy:
            raise RunError(str(busy)) from None

    # ------------------------------------------------------------------ starting
    def start(self, plan_text: str, plan_file: str, policy_texts: list[tuple[str, str]],
              run: str | None = None) -> str:
        """Record a new run (the plan must have been checked clean); returns the run id. The
        policies are (name, text) pairs or `SourceFile`s; a `TypeError` for other values."""
        _require_text(plan_text, plan_file)
        policy_texts = [(source.name, source.text) for source in as_sources(policy_texts, "policy")]
        if run is not None:
            _require_run_id(run)
        plan, policy = _load(plan_text, plan_file, policy_texts)
        self.require_tools(plan, {}, "the run was not recorded")
        run = run or new_run_id()
        with self.hold(run):
            return self._start(run, plan, policy, plan_text, plan_file, policy_texts)

    def _start(self, run: str, plan: Plan, policy: CompiledPolicy, plan_text: str, plan_file: str,
               policy_texts: list[tuple[str, str]]) -> str:
        if run in self.journal.runs():
            raise RunError(f"run `{run}` already exists")
        mission = {"objective": plan.objective, "non_goals": list(plan.non_goals), "scope": list(plan.scope),
                   "success": list(plan.success), "constraints": list(plan.constraints),
                   "open_decisions": [d.question for d in plan.decisions if d.pending]}
        self.journal.append(run, "run_started", {
            "mission": mission, "plan_hash": plan_hash(plan), "plan_version": plan.version or 0,
            "policy_hash": policy.hash, "plan_text": plan_text, "plan_file": plan_file,
            "policy_texts": [list(item) for item in policy_texts], "started_at": self.clock(),
        })
        return run

    def new_version(self, run: str, plan_text: str, plan_file: str) -> str:
        """Replace the plan of a run in progress; completed effects and unknown outcomes stay."""
        _require_text(plan_text, plan_file)
        with self.hold(run):
            return self._new_version(run, plan_text, plan_file)

    def _new_version(self, run: str, plan_text: str, plan_file: str) -> str:
        view = self.view(run)
        plan, _ = _load(plan_text, plan_file, [tuple(item) for item in view.policy_texts])
        new_hash = plan_hash(plan)
        if new_hash == view.plan_hash:
            return view.plan_hash
        if view.run_state in ENDED:  # `advance` would never run it
            raise RunError(f"run `{run}` has ended ({view.run_state}): a new plan version applies only to "
                                "a run in progress; start a new run")
        if view.run_state == "aborting":
            raise RunError(f"run `{run}` is being aborted: a new plan version applies only to a run in progress; "
                           "`plangate resume` finishes the abort")
        if plan.id != view.plan.id:
            raise RunError(f"run `{run}` runs plan `{view.plan.id}`, not `{plan.id}`: a new version must keep the "
                           "plan's id; start a new run for another plan")
        version = plan.version or 0
        if version <= view.plan_version:
            raise RunError(f"the new plan must have a higher `version` than {view.plan_version}, not {version}")
        body = {"plan_hash": new_hash, "plan_version": version, "plan_text": plan_text, "plan_file": plan_file,
                "hold": HOLD_SETTLED}  # what `_hold_back_followers` holds back: see there
        revised = _copy_view(view)  # what the run would be under the new version, to check its tools first
        _fold(revised, Record(0, run, "plan_version", None, body, "", "", ""))
        self.require_tools(revised.plan, revised.states, "the new plan version was not recorded")
        self.journal.append(run, "plan_version", body)
        return new_hash

    # ------------------------------------------------------------------ reading
    def view(self, run: str) -> RunView:
        """The run folded from its journal. The first view of a run in this process verifies the
        whole chain; later ones read and verify only the records appended since, and fold them
        into a copy of the last folded state (which is derived from the journal alone)."""
        _require_run_id(run)
        with self._fold_lock(run):  # threads sharing this runtime fold into one cached state per run
            cached = self._folded.get(run)
            if cached is None:
                folded, last = self._fold_whole(run)
            else:
                folded, (seq, record_hash) = cached
                records, problems = self.journal.records_since(run, seq, record_hash)
                if problems:
                    self._folded.pop(run, None)
                    raise RunError("the journal of run `%s` is damaged: %s" % (run, "; ".join(map(str, problems[:3]))))
                if records:  # into a copy: a fold stopped half-way (a damaged record, an interrupt) leaves the cache whole
                    folded = _copy_view(folded)
                    for record in records:
                        with _reading(record):
                            _fold(folded, record)
                last = (records[-1].seq, records[-1].hash) if records else (seq, record_hash)
            self._folded[run] = (folded, last)
            view = _copy_view(folded)
        view.head = last
        view.held_by = self._locks.holder(run)
        for step_id in view.open_intents:
            if view.held_by is not None:  # the process that holds the run is making this call now
                view.states[step_id] = "running"
                view.reasons[step_id] = f"the call is in progress in {view.held_by}"
            elif view.states.get(step_id) != "outcome_unknown":  # a call with no answer recorded: it may have happened
                view.states[step_id] = "outcome_unknown"
                view.reasons[step_id] = UNANSWERED
        for step_id, intent in view.rollback_intents.items():  # a rollback with no answer recorded
            if view.held_by is not None:
                view.states[step_id] = "running"
                view.reasons[step_id] = f"its rollback by `{intent['tool']}` is in progress in {view.held_by}"
            else:
                view.states[step_id] = "outcome_unknown"
                view.reasons[step_id] = view.rollback_unknown.get(step_id) or (
                    f"its rollback by `{intent['tool']}` may have happened: its answer was never recorded")
        return view

    def _fold_lock(self, run: str) -> threading.Lock:
        with self._fold_locks_mutex:
            return self._fold_locks.setdefault(run, threading.Lock())

    def _fold_whole(self, run: str) -> tuple[RunView, tuple[int, str]]:
        problems = self.journal.verify(run)
        if problems:
            raise RunError("the journal of run `%s` is damaged: %s" % (run, "; ".join(map(str, problems[:3]))))
        records = self.journal.records(run)
        if not records or records[0].kind != "run_started":
            raise RunError(f"there is no run `{run}` in {self.journal.path}")
        with _reading(records[0]):
            first = records[0].body
            policy_texts = first["policy_texts"]
            plan, policy = _load(first["plan_text"], first["plan_file"], [tuple(p) for p in policy_texts], recorded=True)
            if policy.hash != first["policy_hash"] and policy.legacy_hash() != first["policy_hash"]:
                raise RunError(f"the policy recorded for run `{run}` no longer compiles to its hash")
            view = RunView(run=run, plan=plan, plan_text=first["plan_text"], plan_file=first["plan_file"],
                           plan_hash=first["plan_hash"], plan_version=first["plan_version"], policy=policy,
                           policy_texts=policy_texts, started_at=float(first.get("started_at", 0)))
        for record in records[1:]:
            with _reading(record):
                _fold(view, record)
        return view, (records[-1].seq, records[-1].hash)

    # ------------------------------------------------------------------ running
    def advance(self, run: str) -> RunReport:
        """Run every step that can run now, holding the run's lock; returns how the run stands
        afterwards."""
        with self.hold(run):
            return self._advance(run)

    def _advance(self, run: str) -> RunReport:
        view = self.view(run)
        if view.run_state in ENDED:
            return self.report(run, view)
        if view.run_state == "aborting":  # an abort that did not finish: finish it, never call a step
            return self._finish_abort(run)
        self.require_tools(view.plan, view.states)
        undecided = _open_decisions(view.plan, run)
        if undecided:
            return self._pause(view, undecided)
        self._reconcile_unknown(view)
        limit = view.policy.limit("concurrency")
        # The policy's limit, which calls that timed out and still run count against; without one,
        # every ready step may run (the static time bound assumes so).
        allowed = limit.count if limit is not None else None
        limited = bool(allowed)
        workers = allowed if allowed else max(1, min(len(view.plan.steps), DEFAULT_WORKERS))
        pool = ThreadPoolExecutor(max_workers=workers)
        # call → (step, intent, deadline, how long it was given: `_wait_bound`'s text)
        running: dict[Future, tuple[str, dict[str, Any], float, str]] = {}
        frontier = _Frontier(_index(view.plan), view.states)
        try:
            while True:
                view = self.view(run)
                frontier.update(view.states)
                progressed = settled = starved = False
                in_flight = {name for name, *_ in running.values()}
                held = len(self._abandoned(run)) if limited else 0  # workers still taken by timed-out calls
                for step_id in frontier.candidates():
                    if view.states.get(step_id) in FINISHED | {"outcome_unknown"} or step_id in in_flight:
                        continue
                    if len(running) + held >= workers:
                        starved = limited
                        break
                    action = self._prepare(view, step_id)
                    if action is None:
                        continue
                    progressed = True
                    if action == "changed":  # decided without a call (skipped, blocked…): done at once
                        settled = True
                        continue
                    self.fault(step_id, "after_intent")
                    within = self._wait_bound(view, _step(view.plan, step_id))  # type: ignore[arg-type]
                    deadline = time.monotonic() + within[0] if within else float("inf")
                    running[pool.submit(_call_tool, self.tools, action)] = (step_id, action, deadline,
                                                                            within[1] if within else "")
                abandoned = self._abandoned(run) if starved or running else {}
                if not running and not abandoned:
                    if not progressed and not starved:
                        break
                    continue
                if settled:  # steps after those may be ready now: start them before waiting on a call
                    continue
                if not running:  # calls that timed out hold every worker: wait a while for one to return
                    if min(grace for _, grace in abandoned.values()) <= time.monotonic():
                        return self.report(run, self.view(run), _held_workers(abandoned, workers))
                    soonest = min(grace for _, grace in abandoned.values())
                else:
                    soonest = min(deadline for _, _, deadline, _ in running.values())
                timeout = None if soonest == float("inf") else max(0.0, soonest - time.monotonic())
                done, _ = wait([*running, *abandoned], timeout=timeout, return_when=FIRST_COMPLETED)
                for future in done:
                    if future in abandoned:  # returned at last: a worker is free (its outcome is settled
                        continue             # as any unknown one is, by the next `resume`)
                    step_id, call, *_ = running.pop(future)
                    self.fault(step_id, "after_call")
                    self._finish(self.view(run), step_id, call, future.result())
                if self._time_out(run, running):  # their threads stay busy: later calls get fresh ones (`_abandoned` counts them)
                    pool.shutdown(wait=False)
                    pool = ThreadPoolExecutor(max_workers=workers)
        finally:
            # Calls still in flight when an exception ends the loop (an interrupt, a journal error)
            # are kept on the books as timed-out ones are: they hold the run until they return, so
            # no one asks a hook "did it happen?" of a call not yet done and makes it again.
            in_flight_now = [(future, step_id, deadline) for future, (step_id, _, deadline, _) in running.items()
                             if not future.done()]
            for future, step_id, deadline in in_flight_now:
                left = deadline - time.monotonic()
                self._abandon(run, step_id, future, int(left) if left != float("inf") else 0)
            # Every call this pool ran has answered or is on the books as abandoned: nothing to wait for
            # (waiting on an abandoned call could wait forever).
            pool.shutdown(wait=False, cancel_futures=True)
        return self.report(run, self.view(run))

    def _abandoned(self, run: str) -> dict[Future, tuple[str, float]]:
        """The calls of `run` that this process abandoned past their timeout and that still run."""
        with self._abandoned_mutex:
            return {future: entry for future, entry in self._abandoned_calls.get(run, {}).items() if not future.done()}

    def _abandoned_steps(self, run: str) -> set[str]:
        return {step_id for step_id, _ in self._abandoned(run).values()}

    def _abandon(self, run: str, step_id: str, future: Future, bound: int) -> None:
        """Keep an abandoned call on the books until it returns: it holds a worker, and the run,
        until then (a run whose ready steps find no free worker waits `bound` more seconds, at
        least `ABANDONED_WAIT`, for it); then its thread takes it off."""
        release_lock = self._locks.pin(run)
        with self._abandoned_mutex:
            self._abandoned_calls.setdefault(run, {})[future] = (step_id, time.monotonic() + max(bound, ABANDONED_WAIT))

        def returned(_done: Future) -> None:
            with self._abandoned_mutex:
                calls = self._abandoned_calls.get(run, {})
                calls.pop(future, None)
                if not calls:
                    self._abandoned_calls.pop(run, None)
            release_lock()
        future.add_done_callback(returned)

    def require_tools(self, plan: Plan, states: dict[str, str], nothing_done: str = "nothing was run") -> None:
        """Refuse to start (a `RunError`, nothing journaled) unless every tool that a step not yet
        finished may call is loaded, and takes the arguments of each step that is sure to call it
        (not called yet, not conditional, reading no result) where they are constants: a missing
        tool, or one whose signature such a call cannot fit, is the command's mistake (the wrong
        --tools), not the step's."""
        missing: dict[str, list[str]] = {}
        for step in plan.steps:
            if step.call is not None and states.get(step.id) not in FINISHED and self.tools.get(step.call.tool) is None:
                missing.setdefault(step.call.tool, []).append(step.id)
        if missing:
            named = "; ".join(f"`{tool}` (step {backticked(steps)})" for tool, steps in missing.items())
            raise RunError(f"could not start: the tools loaded do not include {named}; load the tools that "
                           f"define them (`--tools`; {nothing_done})")
        misfits = [f"step `{step.id}`: {'; '.join(errors)}" for step in plan.steps
                   if states.get(step.id) in _NOT_CALLED and (errors := _constant_misfits(self.tools, step))]
        if misfits:
            raise RunError(f"could not start: {'; '.join(misfits)} (the call does not fit the tool loaded for it; "
                           f"{nothing_done})")

    def keys_not_passed(self, plan: Plan, states: dict[str, str]) -> list[str]:
        """A warning for each step not yet finished whose plan gives an `idempotency` key that the
        tool loaded for it cannot be given (it has no `idempotency_key` parameter): the key is then
        journaled with the call but never reaches the tool, so a retry, or a call made again after
        a crash settled as not happened, may repeat the effect. Said, not refused: a tool may be
        idempotent by its arguments alone."""
        warnings = []
        for step in plan.steps:
            tool = self.tools.get(step.call.tool) if step.call is not None else None
            if step.idempotency is not None and states.get(step.id) not in FINISHED and tool is not None \
                    and not tool.takes_idempotency_key:
                warnings.append(f"step `{step.id}` has an `idempotency` key, but its tool {tool.name} takes no "
                                f"`idempotency_key` parameter: the key is not passed to it, so a retry or a resume "
                                "after a crash may repeat the effect")
        return warnings

    def _time_out(self, run: str, running: dict[Future, tuple[str, dict[str, Any], float, str]]) -> int:
        """Calls past the time they were given (`_wait_bound`: their step's time bound, or what the
        run's time budget had left): the step becomes `outcome_unknown` (the call may still
        take effect), to be settled by the tool's reconcile hook or by hand — never called again
        blindly. A read-only call has no effect to repeat, so its timeout is a failed attempt
        instead, retried if the step allows. The abandoned call's answer, if it ever comes, is not
        recorded. Returns how many calls were abandoned. The run stays held until each abandoned
        call returns: it may still take effect, so no other process may settle or repeat it meanwhile."""
        now = time.monotonic()
        abandoned = 0
        for future, (step_id, call, deadline, within) in list(running.items()):
            if now < deadline or future.done():  # (one that answered meanwhile is finished by the next wait)
                continue
            view = self.view(run)
            step = _step(view.plan, step_id)
            assert step is not None and step.call is not None
            self._abandon(run, step_id, future, _time_bound(view.policy, step))
            del running[future]  # only now: should anything above fail, the call is still on the books
            reason = f"no answer within {within}"
            if effective_risk(step, view.policy.match(step.call.tool)) == Risk.read_only:
                self.journal.append(run, "attempt_failed", {"error": f"{reason} (a read-only call: no effect to "
                                                                     f"settle)"}, step=step_id)
                self._after_failure(view, step, reason)
            else:
                self.journal.append(run, "outcome_unknown", {"idempotency_key": call["idempotency_key"],
                                                             "reason": reason}, step=step_id)
            abandoned += 1
        return abandoned

    def _reconcile_unknown(self, view: RunView, only: list[str] | None = None) -> None:
        """Mark each call with no recorded answer `outcome_unknown` and ask its tool's reconcile hook
        (every open call, or those of the steps `only`)."""
        still_running = self._abandoned_steps(view.run)
        for step_id, intent in list(view.open_intents.items()):
            if only is not None and step_id not in only:
                continue
            if step_id in still_running:  # timed out, and still running here: no answer yet can be true
                continue
            if step_id not in view.marked_unknown:
                self.journal.append(view.run, "outcome_unknown", {"idempotency_key": intent["idempotency_key"]}, step=step_id)
            tool = self.tools.get(intent["tool"])
            if tool is None or tool.reconcile_hook is None:
                continue
            outcome = invoke_reconcile(tool, intent["idempotency_key"], _answer_within(view.policy, _step(view.plan, step_id)))
            if not outcome.ok:  # the outcome stays unknown; say why, in the journal and the status
                self.journal.append(view.run, "outcome_unknown", {
                    "idempotency_key": intent["idempotency_key"],
                    "reason": f"the call may have happened, and the reconcile hook failed: {outcome.error} "
                              f"({BY_HAND})"},
                    step=step_id)
                continue
            if outcome.result is None:
                self.journal.append(view.run, "reconciled", {"happened": False, "by": HOOK}, step=step_id)
            else:  # the reconciliation and the result it settles on: one transaction
                self.journal.append_many(view.run, [
                    ("reconciled", {"happened": True, "by": HOOK}, step_id),
                    ("result", {"result": outcome.result, "settled_by": HOOK,
                                "external_ref": _external_ref(outcome.result)}, step_id)])

    def _set(self, view: RunView, step_id: str, state: str, reason: str, rollback: bool = False,
             evidence: dict[str, Any] | None = None) -> None:
        """Journal a step's state (a rollback's outcome with `"rollback": true`) unless it is already
        so; with `evidence`, that record first, in the same transaction (a crash leaves both or
        neither, so the state is never decided again with the evidence written twice)."""
        if view.states.get(step_id) == state and view.reasons.get(step_id) == reason and not rollback:
            return
        body: dict[str, Any] = {"state": state, "reason": reason}
        if rollback:
            body["rollback"] = True
        entries = [("evidence", evidence, step_id)] if evidence is not None else []
        self.journal.append_many(view.run, [*entries, ("state", body, step_id)])
        view.states[step_id] = state
        view.reasons[step_id] = reason

    def _pause(self, view: RunView, reason: str) -> RunReport:
        if view.run_state != "paused":
            self.journal.append(view.run, "run_state", {"state": "paused", "reason": reason})
        return self.report(view.run, self.view(view.run), reason)

    def _prepare(self, view: RunView, step_id: str) -> dict[str, Any] | str | None:
        """Decide one step; the call to make, "changed" when only its state moved, or None."""
        plan = view.plan
        step = _step(plan, step_id)
        assert step is not None and step.call is not None
        state = view.states.get(step_id)
        if state == "verifying":  # the call returned before a crash: finish it without calling
            self._finish(view, step_id, view.last_intent.get(step_id, {}), Outcome(True, view.results.get(step_id)))
            return "changed"
        if state == "running":  # no call in flight: its last attempt failed just before a crash
            self._after_failure(view, step, "its error was journaled just before a crash (see `plangate log`)")
            return "changed"
        predecessors = _predecessors(plan, step)
        if step_id in view.recheck:  # completed under an earlier version: once what it reads is done
            if any(view.states.get(name) not in FINISHED for name in predecessors):
                return None
            if step.kind != "check" and any(view.states.get(name) in BAD for name in predecessors):
                return None  # an effect after a step that did not succeed stays held back: nothing after
            return self._recheck(view, step, predecessors)  # it runs; a later version may still keep it
        for name, kind in predecessors.items():
            other = view.states.get(name)
            if other in BAD:
                self._set(view, step_id, "cancelled", f"`{name}` did not succeed ({other})")
                return "changed"
            if other not in GOOD:
                return None
            if other == "skipped" and kind == "reference":
                self._set(view, step_id, "skipped", f"it uses the result of `{name}`, which was skipped")
                return "changed"
        scope = {name: {"result": view.results.get(name)} for name in predecessors}
        if step.when is not None:
            value = compile_expr(step.when)(scope)
            if isinstance(value, CelError) or value is not True:
                why = value.message if isinstance(value, CelError) else f"`when` is {_show(value)}"
                self._set(view, step_id, "skipped", why)
                return "changed"
        arguments = _concrete_args(step.call, scope)
        if isinstance(arguments, tuple):
            self._set(view, step_id, "failed", f"argument `{arguments[0]}`: {arguments[1].message}")
            return "changed"
        args = arguments.plain
        key = self._idempotency_key(view, step, scope, args)
        if isinstance(key, CelError):
            self._set(view, step_id, "failed", f"idempotency key: {key.message}")
            return "changed"
        refusal, requirements = self._policy_verdict(view, step, arguments)
        refusal = refusal or self._budget_problem(view, step)
        if refusal:
            self._set(view, step_id, "blocked", refusal)
            return "changed"
        tool = self.tools.get(step.call.tool)
        misfits = bind(tool, args, key)[1] if tool is not None else []
        if misfits:  # no call is made, so no intent is written; the same call would fit no better on a retry
            why = "the call does not fit its tool: " + "; ".join(misfits)
            self._set(view, step_id, "failed", why, evidence=self._unobserved(view, step, why + " (not made)"))
            return "changed"
        missing = self._missing_approvals(view, step, args, requirements)
        if missing:
            self._set(view, step_id, "waiting_for_approval", missing)
            return None
        self.fault(step_id, "before_intent")
        attempt = view.attempts.get(step_id, 0) + 1
        intent = {"tool": step.call.tool, "args": args, "idempotency_key": key, "attempt": attempt,
                  "args_hash": content_hash(args), "plan_hash": view.plan_hash,
                  "key_passed": tool is not None and tool.takes_idempotency_key}
        _fold(view, self.journal.append(view.run, "intent", intent, step=step_id))  # later steps of this pass count it
        return intent

    def _recheck(self, view: RunView, step: Step, predecessors: dict[str, str]) -> str:
        """A completed step held back by a new plan version, once every step before it is finished
        (and, but for a `check`, none failed, was blocked or cancelled: until then it stays held
        back, so nothing after it runs on the strength of the old run, and a later version may still
        let it be kept): its call, computed from the new results, is compared with the call it made.
        The same call keeps the step and its result; another forgets it, so it runs afresh (fresh
        attempts, approvals of the new call). Where the new version would not call it (a step before
        it was skipped; its `when` no longer holds; an argument fails), its effect stands and it is
        kept. A `check` step whose evidence is about a step that has run again since (its result is
        newer, or it has none: it failed, was blocked or skipped) is not kept: it is decided afresh,
        so it verifies the new call, or is cancelled or skipped as any step after such a step is."""
        assert step.call is not None
        made = view.last_intent.get(step.id, {})
        verified_at = view.completed_at.get(step.id, 0)  # a predecessor run again has no result yet, or a newer one
        rerun = [name for name in predecessors if view.completed_at.get(name, verified_at + 1) > verified_at]
        outdated = step.kind == "check" and bool(rerun)
        ran = [name for name in rerun if name in view.completed_at]  # the others have no result now
        scope = {name: {"result": view.results.get(name)} for name in predecessors}
        called = all(view.states.get(name) == "succeeded" or (kind == "after" and view.states.get(name) == "skipped")
                     for name, kind in predecessors.items()) \
            and (step.when is None or compile_expr(step.when)(scope) is True)
        arguments = _concrete_args(step.call, scope) if called else None
        args_hash = content_hash(arguments.plain) if isinstance(arguments, Arguments) else None
        kept = not outdated and (
            args_hash is None or (made.get("tool") == step.call.tool and made.get("args_hash") == args_hash))
        record: dict[str, Any] = {"kept": kept, "args_hash": args_hash}
        if outdated:
            reasons = [backticked(ran) + " ran again since it verified it"] if ran else []
            if len(ran) < len(rerun):
                reasons.append(backticked([name for name in rerun if name not in ran])
                               + " has no result now (skipped, failed, or to run again)")
            record["reason"] = "what it verifies changed: " + "; ".join(reasons)
        _fold(view, self.journal.append(view.run, "recheck", record, step=step.id))
        return "changed"

    def _policy_verdict(self, view: RunView, step: Step, arguments: Arguments,
                        rollback: bool = False) -> tuple[str | None, list]:
        """Why the compiled policy refuses this concrete call (None when it does not), and the
        requirements it makes of it. A deny, warn or rule error is journaled as a `decision`."""
        assert step.call is not None
        entry = view.policy.match(step.call.tool)
        if entry is None and view.policy.unknown_tools == "deny":
            return not_in_catalogue(step.call.tool), []
        args = arguments.plain
        typed = arguments.for_rules(entry)
        refused = refusal_before_rules(step.call.tool, entry, typed)
        if refused is not None:
            return str(refused), []
        facts = StepFacts(step=step, entry=entry, declared_risk=step.risk.level if step.risk else None,
                          effective_risk=effective_risk(step, entry), args=typed)
        decision = evaluator_for(view.policy).decide_call(rule_activation(facts, view.plan))
        if decision.denied_by or decision.warned_by or decision.errors:
            self.journal.append(view.run, "decision", {
                "step": step.id, "tool": step.call.tool, "args_hash": content_hash(args), "rollback": rollback,
                "denied_by": [rule.name for rule in decision.denied_by],
                "warned_by": [rule.name for rule in decision.warned_by],
                "errors": [{"rule": name, "error": message} for name, message in decision.errors]}, step=step.id)
        if decision.denied_by:
            return decision.denial(decision.denied_by[0]), decision.requirements
        return None, decision.requirements

    def _idempotency_key(self, view: RunView, step: Step, scope: dict[str, Any],
                         args: dict[str, Any]) -> str | CelError:
        """The plan's `idempotency` expression as a string (one that reads the step's own `result`
        cannot be known before the call, so such a step is keyed as one without); without one, `RUN:STEP:` and 24 hex
        digits of SHA-256 over the run, the step and the canonical concrete call (tool and
        arguments): the same for every attempt of one call, another for a call that changed.
        A string is the key as it is; a number, bool, list or map, its canonical JSON text; an
        empty string or `null` names nothing, so it is an error (the step fails)."""
        if step.idempotency is not None and cel.uses_bare_result(step.idempotency) is None:
            value = compile_expr(step.idempotency)(scope)
            if isinstance(value, CelError):
                return value
            try:
                return idempotency_key(value)
            except ValueError as error:
                return CelError(str(error))
        call = canonical_json({"tool": step.call.tool, "args": args})  # type: ignore[union-attr]
        digest = hashlib.sha256(f"{view.run}\0{step.id}\0{call}".encode()).hexdigest()[:24]
        return f"{view.run}:{step.id}:{digest}"

    def _budget_problem(self, view: RunView, step: Step) -> str | None:
        """Why one more call of `step` would break the plan's budget or a policy limit: one more
        call, its declared cost, or the time it may take (its bound) on top of the time elapsed."""
        cost = _declared_cost(view.policy, step)
        bound = _time_bound(view.policy, step)
        elapsed = self.clock() - view.started_at
        for budget in _run_budgets(view):
            who, calls, money, seconds = budget.who, budget.calls, budget.cost, budget.seconds
            if calls is not None and view.calls + 1 > calls:
                return f"one more call would make {view.calls + 1}, over {who} of {calls} calls"
            if money is not None and view.cost + cost > money + 1e-9:
                return (f"one more call would bring the cost to {budget.money(view.cost + cost)}, "
                        f"over {who} of {budget.money(money)}")
            if seconds is not None and elapsed + bound > seconds:
                if not bound:
                    return f"the run has taken {_seconds(elapsed)}, over {who} of {seconds}s"
                return (f"the call may take {bound}s: after {_seconds(elapsed)} so far the run could take "
                        f"{_seconds(elapsed + bound)}, over {who} of {seconds}s")
        return None

    def _time_left(self, view: RunView) -> tuple[float, str] | None:
        """The seconds the run's tightest time budget (the plan's `budget { time }` or the policy's
        `limit time`) leaves, on the elapsed time `_budget_problem` counts, and that budget as its
        messages name it; None without one."""
        budgets = [(bound.seconds, bound.who) for bound in _run_budgets(view) if bound.seconds is not None]
        if not budgets:
            return None
        seconds, who = min(budgets)
        return seconds - (self.clock() - view.started_at), f"{who} of {seconds}s"

    def _wait_bound(self, view: RunView, step: Step) -> tuple[float, str] | None:
        """How long a call of `step` (or its rollback, as `_as_rollback` gives it) is waited for, in
        seconds and as its reason says once it has not answered: its time bound (`_time_bound`), or
        the time the run's time budget leaves (`_time_left`), whichever ends first; None when
        neither bounds it. `_budget_problem` lets no call start whose bound would outlast the
        budget, so the budget is what ends the wait of a call with no bound of its own, which a
        tool that hangs would otherwise hold forever."""
        bound = _time_bound(view.policy, step)
        left = self._time_left(view)
        if left is not None and (not bound or left[0] < bound):
            seconds = max(left[0], 0.0)
            return seconds, f"{_seconds(seconds)}, when the time budget ran out ({left[1]})"
        return (float(bound), _bound_text(view.policy, step)) if bound else None

    def required_approvals(self, view: RunView, step: Step, requirements: list) -> dict[str, tuple[int, int | None]]:
        """role → (approvers needed, the longest validity in seconds), from the policy and the plan."""
        needs: dict[str, tuple[int, int | None]] = {}

        def add(role: str, count: int, within: int | None) -> None:
            old_count, old_within = needs.get(role, (0, None))
            candidates = [w for w in (old_within, within) if w is not None]
            needs[role] = (max(old_count, count), min(candidates) if candidates else None)

        for requirement in requirements:
            if requirement.kind == "approval" and requirement.approval is not None:
                spec = requirement.approval
                add(spec.role, spec.count, spec.within.seconds if spec.within else None)
        for spec in step.approvals:
            add(spec.role, spec.count, spec.within.seconds if spec.within else None)
        return needs

    def _missing_approvals(self, view: RunView, step: Step, args: dict[str, Any], requirements: list) -> str | None:
        """Why the step's call waits for approvals (None when it need not): per role, how many more
        distinct approvers (`_approver_key`) must approve this exact call, and why the approvals of
        the others given in this run do not count: each one's latest expired (or has no readable
        expiry), was given under an earlier plan version (a new version needs new approvals), or
        approved another call (the tool, or arguments computed from results that changed)."""
        needs = self.required_approvals(view, step, requirements)
        if not needs:
            return None
        now = self.clock()
        args_hash = content_hash(args)

        def why_not(approval: dict[str, Any]) -> str | None:
            """Why an approval of the step by a role it needs does not bind to the call; None if it does."""
            if approval["plan_version"] != view.plan_version:
                return (f"was given under plan version {approval['plan_version']} (a new plan version needs new "
                        "approvals)")
            if approval["plan_hash"] != view.plan_hash:
                return f"was given under another text of plan version {approval['plan_version']}"
            if approval["tool"] != step.call.tool:  # type: ignore[union-attr]
                return f"approved a call of another tool (`{approval['tool']}`)"
            if approval["args_hash"] != args_hash:
                return "approved the call with other arguments (results it is computed from have changed since)"
            return None

        missing = []
        for role, (count, _within) in sorted(needs.items()):
            given = [(approval, _approver_key(approval["approver"])) for approval in view.approvals.get(step.id, [])
                     if approval["role"] == role and approval.get("run") == view.run
                     and isinstance(approval["approver"], str)]
            approvers = {key for approval, key in given if key and why_not(approval) is None
                         and _unexpired(approval["expires_at"], now)}
            if len(approvers) < count:
                uncounted: dict[str, tuple[str, str]] = {}  # approver → (name as given, why): the latest approval's
                for approval, key in given:
                    if key and key not in approvers:
                        at = approval["expires_at"]
                        uncounted[key] = (approval["approver"], why_not(approval) or (
                            "expired at " + at if _unexpired(at, float("-inf")) else "has no readable expiry"))
                why = "".join(f"; the approval by `{name}` {reason}" for name, reason in sorted(uncounted.values()))
                missing.append(f'{count - len(approvers)} more approval(s) by role "{role}"{why}')
        return ("waiting for " + ", ".join(missing)) if missing else None

    def _finish(self, view: RunView, step_id: str, call: dict[str, Any], outcome: Outcome) -> None:
        step = _step(view.plan, step_id)
        assert step is not None
        if view.states.get(step_id) != "verifying":
            if not outcome.ok:
                self.journal.append(view.run, "attempt_failed", {"error": outcome.error or "failed"}, step=step_id)
                self._after_failure(view, step, outcome.error or "failed")
                return
            self.journal.append(view.run, "result", {"result": outcome.result,
                                                     "external_ref": _external_ref(outcome.result)}, step=step_id)
            self.fault(step_id, "after_result")
        scope = {name: {"result": view.results.get(name)} for name in _predecessors(view.plan, step)}
        scope["result"] = outcome.result
        settled_by = view.settled_by.get(step_id)
        if settled_by is None:
            how = f"result of `{step.call.tool}` (attempt {view.attempts.get(step_id, 0) or 1})"
        elif settled_by == HOOK:
            how = f"result given by the reconcile hook of `{step.call.tool}`"
        else:
            how = f"result reported by `{settled_by}` through `plangate reconcile`"
        verifies = _verifies(view, step)
        failed = []
        for expectation in step.expects:
            value = compile_expr(expectation.expr)(scope)
            passed = value is True
            self.journal.append(view.run, "evidence", {
                "what": f"expect {cel.to_source(expectation.expr)}",
                "observed": _evidence_value(outcome.result),
                "when": _now_iso(self.clock()),
                "how": how,
                "proves": (verifies if step.kind == "check" else f"postcondition of `{step_id}`")
                          + (" — holds" if passed else " — does not hold"),
                "step": step_id, "passed": passed,
            }, step=step_id)
            if not passed:
                failed.append(cel.to_source(expectation.expr)
                              + (f" ({value.message})" if isinstance(value, CelError) else ""))
        if failed:
            self._after_failure(view, step, "expectation failed: " + "; ".join(failed), after_result=True)
            return
        if step.kind == "check" and not step.expects:  # a check's result is evidence, expectations or not
            self.journal.append(view.run, "evidence", {
                "what": f"check `{step_id}`: {step.call.tool}({canonical_json(call.get('args', {}))})",
                "observed": _evidence_value(outcome.result), "when": _now_iso(self.clock()), "how": how,
                "proves": f"{verifies} — the check's call returned (it has no `expect`)",
                "step": step_id, "passed": True,
            }, step=step_id)
        settled = view.settled_by.get(step_id)
        returned = "the call returned" if settled is None else (
            "its reconcile hook says the call happened" if settled == HOOK else f"`{settled}` says the call happened")
        self._set(view, step_id, "succeeded", returned + (" and every `expect` holds" if step.expects else ""))

    def _after_failure(self, view: RunView, step: Step, error: str, after_result: bool = False) -> None:
        attempts = self.view(view.run).attempts.get(step.id, 0)
        evidence = None if after_result else self._unobserved(view, step, f"attempt {attempts or 1} failed: {error}")
        if attempts <= step.retry:
            self._set(view, step.id, "ready", f"attempt {attempts} failed: {error}; retrying", evidence=evidence)
        else:
            self._set(view, step.id, "failed", f"attempt {attempts} failed: {error}", evidence=evidence)

    def _unobserved(self, view: RunView, step: Step, why: str) -> dict[str, Any] | None:
        """For a `check` step whose call failed or was never made: the evidence that it showed
        nothing (a rejection is evidence too), written with the step's new state; None for others."""
        if step.kind != "check":
            return None
        return {"what": f"check `{step.id}`: {step.call.tool}", "observed": None,  # type: ignore[union-attr]
                "when": _now_iso(self.clock()), "how": f"`{step.call.tool}`: {why}",  # type: ignore[union-attr]
                "proves": f"{_verifies(view, step)} — not shown: the call failed",
                "step": step.id, "passed": False}

    # ------------------------------------------------------------------ operators
    def approval_call(self, run: str, step_id: str, role: str) -> dict[str, Any]:
        """The exact call an approval of `step_id` by `role` would bind to now: tool, arguments,
        their canonical hash, plan hash and version, and how long it would last. Refuses an ended
        run, an unknown step, a call not yet known and a role the step does not need."""
        return self._approval_call(self.view(run), step_id, role)

    def _approval_call(self, view: RunView, step_id: str, role: str) -> dict[str, Any]:
        run = view.run
        if view.run_state in ENDED:
            raise RunError(f"run `{run}` has ended ({view.run_state}): there is nothing left to approve")
        if view.run_state == "aborting":
            raise RunError(f"run `{run}` is being aborted: there is nothing left to approve")
        step = _step(view.plan, step_id)
        if step is None and step_id in view.states:  # a step an earlier version had, kept as it ended
            raise RunError(f"step `{step_id}` of run `{run}` is no longer in the plan (version {view.plan.version}): "
                           f"there is nothing of it to approve")
        if step is None or step.call is None:
            raise RunError(f"run `{run}` has no step `{step_id}`")
        state = view.states.get(step_id)
        if state in _NOT_APPROVABLE:
            raise RunError(f"step `{step_id}` is {state} ({view.reasons.get(step_id) or 'no reason recorded'}): "
                           f"an approval would not change that" + (
                               "; a new plan version decides it again" if state in ("blocked", "cancelled", "skipped")
                               else ""))
        arguments = self._exact_arguments(view, step)
        call = self._exact_call(view, step, arguments)
        needs = self.required_approvals(view, step, self._requirements(view, step, arguments))
        if role not in needs:
            wanted = ", ".join(f'"{r}"' for r in needs) or "no role"
            raise RunError(f"step `{step_id}` needs no approval by role \"{role}\" (it needs {wanted})")
        lasts = view.policy.approval_lasts(needs[role][1])
        return {**call, "within": lasts if lasts is not None else DEFAULT_APPROVAL_SECONDS}

    def approve(self, run: str, step_id: str, approver: str, role: str,
                shown: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record an approval bound to the exact call the step would make now. With `shown` (what
        `approval_call` returned when the call was displayed) it binds to that call and is refused
        if the step's call is no longer that one. The check and the record are one atomic step: the
        record is appended only if no other record of the run came in between (else both again)."""
        if shown is not None and not isinstance(shown, dict):
            raise TypeError(f"`shown` is the dict `approval_call` returned, not {type(shown).__name__}")
        approver, role = approver_and_role(approver, role)
        for _ in range(50):
            view = self.view(run)
            call, head = self._approval_call(view, step_id, role), view.head
            if shown is not None:
                changed = [what for what in ("plan_hash", "plan_version", "tool", "args_hash")
                           if shown.get(what) != call[what]]
                if changed:
                    raise RunError(f"the call of step `{step_id}` changed since it was shown ({', '.join(changed)}): "
                                   f"it is now {call['tool']}({canonical_json(call['args'])}) under plan version "
                                   f"{call['plan_version']} ({call['plan_hash']}); nothing was recorded, approve again")
            body = {"plan_hash": call["plan_hash"], "plan_version": call["plan_version"], "tool": call["tool"],
                    "args_hash": call["args_hash"], "args": call["args"], "approver": approver, "role": role,
                    "expires_at": _now_iso(self.clock() + call["within"]), "run": run}
            try:
                self.journal.append(run, "approval", body, step=step_id, after=head)
            except StaleHead:
                continue  # the run moved on between the check and the record: check again
            return body
        raise RunError(f"run `{run}` kept changing while the approval was being recorded; nothing was recorded, "
                       "try again")

    def exact_call(self, view: RunView, step: Step) -> dict[str, Any]:
        """The call `step` would make now: tool, arguments as the tool is given them, plan."""
        return self._exact_call(view, step, self._exact_arguments(view, step))

    @staticmethod
    def _exact_call(view: RunView, step: Step, arguments: Arguments) -> dict[str, Any]:
        assert step.call is not None
        args = arguments.plain
        return {"tool": step.call.tool, "args": args, "args_hash": content_hash(args), "plan_hash": view.plan_hash,
                "plan_version": view.plan_version}

    def _exact_arguments(self, view: RunView, step: Step) -> Arguments:
        """The call's arguments as they would be now; refused while one reads the result of a step
        that has not succeeded (a `when`, `idempotency` or `expect` reading one does not change the
        call an approval binds to)."""
        read = {name: None for argument in step.call.args  # type: ignore[union-attr]
                for name, _span in cel.step_references(argument.value)}
        unfinished = [name for name in read if view.states.get(name) != "succeeded"]
        if unfinished:
            raise RunError(f"step `{step.id}` cannot be approved yet: its call uses the result of "
                                + backticked(unfinished) + ", which has not succeeded")
        scope = {name: {"result": view.results.get(name)} for name in read}
        arguments = _concrete_args(step.call, scope)
        if isinstance(arguments, tuple):
            raise RunError(f"argument `{arguments[0]}` of step `{step.id}`: {arguments[1].message}")
        return arguments

    def _requirements(self, view: RunView, step: Step, arguments: Arguments) -> list:
        entry = view.policy.match(step.call.tool)
        facts = StepFacts(step=step, entry=entry, declared_risk=step.risk.level if step.risk else None,
                          effective_risk=effective_risk(step, entry), args=arguments.for_rules(entry))
        return evaluator_for(view.policy).decide_call(rule_activation(facts, view.plan)).requirements

    def reconcile(self, run: str, step_id: str, happened: bool, by: str, result: Any = None) -> None:
        """Settle an unknown outcome by hand; `result` is what the operator observed (if it happened),
        which later steps and `expect` then see as the step's result. Refused while another process
        holds the run: its call may still be in flight."""
        if not isinstance(happened, bool) or not isinstance(by, str):
            raise TypeError(f"`happened` is a bool and `by` a str, not {type(happened).__name__} "
                            f"and {type(by).__name__}")
        with self.hold(run):
            self._reconcile(run, step_id, happened, by, result)

    def _reconcile(self, run: str, step_id: str, happened: bool, by: str, result: Any) -> None:
        by = _name_text(by, "name of the person settling it")
        if not by:
            raise RunError("settling an outcome needs the name of who settles it (`--as NAME`), not blanks")
        view = self.view(run)
        if step_id in self._abandoned_steps(run):
            raise RunError(f"the call of step `{step_id}` timed out and is still running in this process: "
                           "it may still take effect; settle it once it returns")
        if view.states.get(step_id) != "outcome_unknown":
            raise RunError(f"step `{step_id}` of run `{run}` has no unknown outcome to settle "
                                f"(it is {view.states.get(step_id, 'not started')})")
        try:
            kept_json(result)  # held to the bounds of a tool's result, which it stands for
        except (TypeError, ValueError) as error:
            raise RunError(f"the result to record is not JSON that plangate can keep: {error}") from None
        flag = {"rollback": True} if step_id in view.rollback_intents else {}  # the unknown is its rollback's
        records = [("reconciled", {"happened": happened, "by": by, **flag}, step_id)]
        if happened:  # with the result it settles on, in one transaction: a crash keeps both or neither
            records.append(("result", {"result": result, "external_ref": _external_ref(result), "settled_by": by,
                                       **flag}, step_id))
        self.journal.append_many(run, records)

    def abort(self, run: str, rollback: bool) -> RunReport:
        """Cancel what is not finished and end the run; with `rollback`, undo its reversible steps.
        An abort that did not finish (a crash during a rollback) is finished instead: its steps to
        roll back were decided when it began."""
        with self.hold(run):
            return self._abort(run, rollback)

    def _abort(self, run: str, rollback: bool) -> RunReport:
        view = self.view(run)
        if view.run_state == "aborting":
            return self._finish_abort(run)
        undo = self._to_roll_back(view) if rollback else []
        if view.run_state == "aborted" and not undo:
            return self.report(run, view)  # (an aborted run with steps still to undo: undone now, or again)
        if view.run_state in ENDED and not rollback:
            raise RunError(f"run `{run}` has ended ({view.run_state}): there is nothing to abort "
                           "(`--rollback` undoes its reversible steps)")
        self._require_rollback_tools(view, undo, "could not roll back", "nothing was done")
        # The decision first: whatever happens from here on, the run is being aborted, and a resume
        # only finishes the abort (its rollbacks), never a step's own call.
        self.journal.append(run, "run_state", {"state": "aborting", "reason": "aborted by an operator",
                                               "rollback": undo})
        return self._finish_abort(run)

    def _to_roll_back(self, view: RunView) -> list[str]:
        """The steps an abort with rollback undoes: every `reversible_write` step with a `rollback`
        (steps dropped by a later plan version included) that succeeded, or whose call's outcome is
        unknown (rolled back once settled as happened), the last completed first (an unknown call
        counts as the last made)."""
        position = {step_id: number for number, step_id in enumerate(_order(view.plan))}
        found = []
        held_back = {step_id: state for step_id, (state, _) in view.recheck.items()}
        for step_id, state in {**held_back, **view.states}.items():
            step = _step_as_made(view, step_id)
            if ((state in ("succeeded", "verifying") or _call_unknown(view, step_id)) and step is not None
                    and step.rollback is not None and step.call is not None
                    and effective_risk(step, view.policy.match(step.call.tool)) == Risk.reversible_write):
                found.append(step_id)
        latest = max(view.completed_at.values(), default=0) + 1
        return sorted(found, key=lambda s: (latest if _call_unknown(view, s) else view.completed_at.get(s, 0),
                                            position.get(s, -1)), reverse=True)

    @staticmethod
    def _unsettled(view: RunView) -> list[str]:
        """The steps an abort is to roll back whose own call's outcome is still unknown: the abort
        waits for them (rolled back if they happened, cancelled if not)."""
        return [step_id for step_id in view.to_roll_back if _call_unknown(view, step_id)]

    def _require_rollback_tools(self, view: RunView, step_ids: list[str], what: str, nothing_done: str) -> None:
        tools = set()
        for step_id in step_ids:
            step = _step_as_made(view, step_id)
            if step_id in view.rollback_calls:
                tools.add(view.rollback_calls[step_id]["tool"])
            elif step is not None and step.rollback is not None:
                tools.add(step.rollback.tool)
        missing = sorted(tool for tool in tools if self.tools.get(tool) is None)
        if missing:
            raise RunError(f"{what}: the tools loaded do not include " + backticked(missing)
                           + f"; load the tools that define them (`--tools`; {nothing_done})")

    def _finish_abort(self, run: str) -> RunReport:
        """Go on with an abort recorded as `aborting`: cancel what is not finished, settle each
        rollback whose answer was never recorded (by its tool's reconcile hook, else it waits for
        `plangate reconcile`), make the rollbacks not yet made, and, once none is unknown, record the
        run `aborted`. Never calls a step's own call."""
        view = self.view(run)
        left = [s for s in view.to_roll_back if s not in view.rolled_back]
        self._require_rollback_tools(view, left, "could not finish the abort", "nothing was done")
        for step_id in _order(view.plan):
            if view.states.get(step_id) == "verifying":  # its call returned: an effect to undo, not to cancel
                self._set(view, step_id, "succeeded", "its call returned; the run was aborted before its `expect` "
                                                      "was evaluated")
            elif view.states.get(step_id) not in FINISHED | {"outcome_unknown"}:
                self._set(view, step_id, "cancelled", "the run was aborted")
        still_running = self._abandoned_steps(run)
        for step_id, intent in list(view.rollback_intents.items()):
            if step_id not in still_running:  # timed out, and still running here: no answer yet can be true
                self._settle_rollback(view, step_id, intent)
        unsettled = self._unsettled(view)
        if unsettled:  # did their calls happen? ask the hooks first: what happened is rolled back
            self._reconcile_unknown(view, only=unsettled)
        for step_id in view.to_roll_back:
            view = self.view(run)  # fresh: the budgets count the rollbacks made so far
            if step_id in self._unsettled(view) or view.rollback_intents:
                break  # the last completed first: what came before it waits until it (or its rollback) is settled
            step = _step_as_made(view, step_id)
            if (step is not None and view.states.get(step_id) == "succeeded" and step_id not in view.rolled_back
                    and step_id not in view.rollback_intents):
                self._rollback(view, step)
        view = self.view(run)
        if not view.rollback_intents and not self._unsettled(view):
            self.journal.append(run, "run_state", {"state": "aborted", "reason": "aborted by an operator"})
            view = self.view(run)
        return self.report(run, view)

    def _settle_rollback(self, view: RunView, step_id: str, intent: dict[str, Any]) -> None:
        """Ask the rollback tool's reconcile hook whether an unanswered rollback happened."""
        key = intent["idempotency_key"]
        if step_id not in view.rollback_unknown:
            self.journal.append(view.run, "outcome_unknown", {"idempotency_key": key, "rollback": True}, step=step_id)
        tool = self.tools.get(intent["tool"])
        if tool is None or tool.reconcile_hook is None:
            return
        outcome = invoke_reconcile(tool, key, _rollback_within(view.policy, intent["tool"]))
        if not outcome.ok:
            self.journal.append(view.run, "outcome_unknown", {
                "idempotency_key": key, "rollback": True,
                "reason": f"its rollback by `{intent['tool']}` may have happened, and the reconcile hook failed: "
                          f"{outcome.error} ({BY_HAND})"}, step=step_id)
        elif outcome.result is None:  # it did not happen: it is made again, with the same key
            self.journal.append(view.run, "reconciled", {"happened": False, "by": HOOK, "rollback": True},
                                step=step_id)
        else:
            self.journal.append_many(view.run, [
                ("reconciled", {"happened": True, "by": HOOK, "rollback": True}, step_id),
                ("result", {"result": outcome.result, "external_ref": _external_ref(outcome.result),
                            "settled_by": HOOK, "rollback": True}, step_id)])

    def _rollback(self, view: RunView, step: Step) -> None:
        """Call the rollback of a succeeded step, as a call like any other: the policy is asked
        about its concrete call (a deny refuses it) and the budgets must allow it. A rollback not
        made, or failed, leaves the step `succeeded`, with the reason. Its records say
        `"rollback": true`: never an attempt or a result of the step itself."""
        assert step.rollback is not None
        tool_name = step.rollback.tool
        # What the steps it reads hold now, overridden by what its call read, whatever ran again since
        # (a rollback a later version rewrote may read a step the call did not).
        read = _results_read(view, step)
        made = view.made.get(step.id)
        if made is not None:
            read.update(made[1])
        scope: dict[str, Any] = {name: {"result": value} for name, value in read.items()}
        scope["result"] = view.results.get(step.id)
        arguments = _concrete_args(step.rollback, scope)
        if isinstance(arguments, tuple):
            self._set(view, step.id, "succeeded", f"its rollback by `{tool_name}` was not made: argument "
                                                  f"`{arguments[0]}`: {arguments[1].message}; the effect stands",
                      rollback=True)
            return
        args = arguments.plain
        undo = _as_rollback(step)
        if step.id in view.superseded:  # the rules see the step whose effect it undoes (`w`, not `w@1`)
            undo = undo.model_copy(update={"id": step.id.rpartition("@")[0]})
        refusal, _ = self._policy_verdict(view, undo, arguments, rollback=True)
        refusal = refusal or self._budget_problem(view, undo)
        if refusal:
            self._set(view, step.id, "succeeded", f"its rollback by `{tool_name}` was not made: {refusal}; "
                                                  "the effect stands", rollback=True)
            return
        tool = self.tools.get(tool_name)
        assert tool is not None, "abort checks the rollback tools first"
        key = f"{view.run}:{step.id}:rollback"
        kwargs, misfits = bind(tool, args, key)
        if misfits:  # no call is made, so no intent is written (nor a call counted)
            self._set(view, step.id, "succeeded", f"its rollback by `{tool_name}` was not made: the call does not "
                                                  f"fit its tool: {'; '.join(misfits)}; the effect stands", rollback=True)
            return
        self.journal.append(view.run, "intent", {"tool": tool_name, "args": args, "idempotency_key": key,
                                                 "attempt": view.rollback_calls.get(step.id, {}).get("attempt", 0) + 1,
                                                 "key_passed": tool.takes_idempotency_key, "rollback": True},
                            step=step.id)
        self.fault(step.id, "rollback_after_intent")
        within = self._wait_bound(view, undo)
        outcome = invoke(tool, kwargs) if within is None else self._invoke_within(view.run, step.id, tool, kwargs, within)
        if outcome is None:  # no answer in time: it may still happen, so it is settled as any unknown outcome
            self.journal.append(view.run, "outcome_unknown", {
                "idempotency_key": key, "rollback": True,
                "reason": f"its rollback by `{tool_name}` gave no answer within {within[1]} "  # type: ignore[index]
                          "and may have happened"}, step=step.id)
            return
        self.fault(step.id, "rollback_after_call")
        if outcome.ok:
            self.journal.append(view.run, "result", {"result": outcome.result, "external_ref": _external_ref(outcome.result),
                                                     "rollback": True}, step=step.id)
            self._set(view, step.id, "compensated", f"rolled back by `{tool_name}`", rollback=True)
        else:
            error = outcome.error or "rollback failed"
            self.journal.append(view.run, "attempt_failed", {"error": error, "rollback": True}, step=step.id)
            self._set(view, step.id, "succeeded", f"its rollback by `{tool_name}` failed ({error}): the effect stands",
                      rollback=True)

    def _invoke_within(self, run: str, step_id: str, tool: Any, kwargs: dict[str, Any],
                       within: tuple[float, str]) -> Outcome | None:
        """`invoke` on a thread of its own, waited for `within` seconds: its outcome, or None when it
        has not answered by then. Python cannot stop it: it is abandoned as a timed-out step's
        call is (`_abandon`: the run stays held until it returns, so nothing settles or repeats a
        call still in flight), on a daemon thread, which cannot hold the process open."""
        future: Future = Future()

        def call() -> None:
            try:
                future.set_result(invoke(tool, kwargs))
            except BaseException as error:  # a KeyboardInterrupt: raised again on the waiting thread
                future.set_exception(error)

        threading.Thread(target=call, name=f"plangate-rollback-{step_id}", daemon=True).start()
        try:
            return future.result(timeout=within[0])
        except FuturesTimeout:
            self._abandon(run, step_id, future, math.ceil(within[0]))
            return None
        except BaseException:  # interrupted while waiting (Ctrl-C): the call still runs, so on the books
            if not future.done():
                self._abandon(run, step_id, future, math.ceil(within[0]))
            raise

    # ------------------------------------------------------------------ reporting
    def report(self, run: str, view: RunView, reason: str | None = None, record: bool = True) -> RunReport:
        ids = [step.id for step in view.plan.steps]
        ids += sorted(set(view.states) - set(ids))  # dropped by a new version, with an unknown or settled outcome
        steps = {step_id: {"state": view.states.get(step_id, "ready"), "attempts": view.attempts.get(step_id, 0),
                           "reason": view.reasons.get(step_id) or (_HELD_BACK if step_id in view.recheck else None)}
                 for step_id in ids}
        states = [info["state"] for info in steps.values()]
        undecided = _open_decisions(view.plan, run)
        waits = reason or "; ".join([*([undecided] if undecided else []),
                                     *(f"`{k}`: {v['reason'] or v['state']}" for k, v in steps.items()
                                       if v["state"] in ("waiting_for_approval", "outcome_unknown"))])
        stopped = "; ".join(f"`{k}` {v['state']}: {v['reason']}" for k, v in steps.items()
                            if v["state"] in ("blocked", "failed"))
        if view.run_state == "aborted":
            state, message = "aborted", "the run was aborted"
        elif view.held_by is not None and view.run_state not in ENDED:
            state, message = "running", f"run `{run}` is being executed by {view.held_by}"
        elif view.run_state == "aborting":  # a crash ended the abort, or it waits for an outcome
            unknown = "; ".join(f"`{k}`: {steps[k]['reason']}" for k in view.rollback_intents if k in steps)
            unsettled = "; ".join(f"`{k}`: {steps[k]['reason']}" for k in self._unsettled(view) if k in steps)
            settle = "settle it (`plangate reconcile`, or the tool's reconcile hook on `plangate resume`)"
            waiting = [*([f"{unknown}; {settle}"] if unknown else []),
                       *([f"{unsettled}; {settle}: if it happened, the abort rolls it back"] if unsettled else [])]
            state = "aborting"
            message = "the abort is not finished: " + (
                "; ".join(waiting) or "`plangate resume` (or `plangate abort`) finishes it")
        elif all(s in GOOD for s in states):
            state, message = "succeeded", "every step succeeded or was skipped"
        elif stopped:  # a blocked or failed step decides the outcome, even while others wait
            state = "blocked" if "blocked" in states else "failed"
            message = stopped + (f"; still waiting: {waits}" if waits else "")
        elif waits:
            state, message = "paused", waits
        elif any(s in BAD for s in states):
            state, message = "failed", "; ".join(f"`{k}` {v['state']}: {v['reason']}" for k, v in steps.items()
                                                 if v["state"] in BAD)
        else:
            state, message = "paused", "the run can go on: `plangate resume`"
        # The run ends only when nothing waits: a step may still be approved or settled, or a new
        # version may change what was blocked or failed.
        if record and state in ("succeeded", "failed", "blocked") and not waits and view.run_state != state:
            self.journal.append(run, "run_state", {"state": state, "reason": message})
        tools_loaded = bool(self.tools.names())  # which hooks exist is known only then (`status` loads none)
        ended = view.run_state in ENDED  # `resume` asks no hook of an ended run: only `reconcile` settles
        needs_reconcile = tuple(  # a step's own call or, in an abort, its rollback
            step_id for step_id, intent in [*view.open_intents.items(), *view.rollback_intents.items()]
            if (tools_loaded or ended) and steps.get(step_id, {}).get("state") == "outcome_unknown"
            and (ended or getattr(self.tools.get(intent["tool"]), "reconcile_hook", None) is None))
        return RunReport(run, state, message, steps, needs_reconcile)


def _open_decisions(plan: Plan, run: str) -> str | None:
    """Why the run cannot go on while its plan has pending decisions, and how they are settled (a
    new plan version that resolves them, given to `run --run`: `resume` only pauses again); None
    when it has none."""
    pending = [decision.question for decision in plan.decisions if decision.pending]
    if not pending:
        return None
    named = backticked(pending)
    one = len(pending) == 1
    return (f"the decision{'' if one else 's'} {named} {'is' if one else 'are'} still open: settle "
            f"{'it' if one else 'them'} in a new version of the plan (a higher `version`) that marks "
            f"{'it' if one else 'each'} `resolved \"…\"`, then `plangate run NEW.plan --run {run} --policy … "
            "--tools …`")


class RunBudget(NamedTuple):
    """A bound a run's actual figures are held to: `who` as messages name it, and its calls, cost
    (in `currency`) and seconds, each None where it sets none."""

    who: str
    calls: int | None
    cost: float | None
    currency: str | None
    seconds: int | None

    def money(self, amount: float) -> str:
        return f"{amount:g} {self.currency}" if self.currency else f"{amount:g}"


def _run_budgets(view: RunView) -> list[RunBudget]:
    """The plan's `budget`, then the policy's limits."""
    budget, policy = view.plan.budget, view.policy
    bounds = []
    if budget is not None:
        bounds.append(RunBudget("the plan's budget", budget.calls, float(budget.cost.amount) if budget.cost else None,
                                budget.cost.currency if budget.cost else None,
                                budget.time.seconds if budget.time else None))
    calls_limit, cost_limit, time_limit = policy.limit("calls"), policy.limit("cost"), policy.limit("time")
    bounds.append(RunBudget("the policy's limit", calls_limit.count if calls_limit else None,
                            float(cost_limit.amount) if cost_limit and cost_limit.amount is not None else None,
                            cost_limit.currency if cost_limit else None, time_limit.seconds if time_limit else None))
    return bounds


def _held_workers(abandoned: dict[Future, tuple[str, float]], workers: int) -> str:
    steps = ", ".join(f"`{step_id}`" for step_id in sorted({step_id for step_id, _ in abandoned.values()}))
    return (f"the calls of {steps} timed out and still run, holding the {workers} worker(s) that `limit "
            "concurrency` allows: `plangate resume` goes on (a write whose outcome stays unknown is settled "
            "first, by its reconcile hook or `plangate reconcile`)")


def _declared_cost(policy: CompiledPolicy, step: Step) -> float:
    """What one attempt of `step` may cost: its declared high end, else its tool's cap, else 0."""
    if step.cost is not None:
        return float(step.cost.high.amount)
    return _tool_cost(policy, step.call.tool) if step.call is not None else 0.0


def _tool_cost(policy: CompiledPolicy, tool: str) -> float:
    entry = policy.match(tool)
    return float(entry.cost_cap) if entry is not None and entry.cost_cap is not None else 0.0


def _time_bound(policy: CompiledPolicy, step: Step) -> int:
    """How long one attempt of `step` may take: its `time`, else its tool's time cap, else 0."""
    if step.time is not None:
        return step.time.seconds
    return _tool_time_cap(policy, step.call.tool) if step.call is not None else 0


def _tool_time_cap(policy: CompiledPolicy, tool: str) -> int:
    """The `time <=` cap of `tool`'s catalogue entry in seconds; 0 without one."""
    entry = policy.match(tool)
    return entry.time_cap if entry is not None and entry.time_cap is not None else 0


def _rollback_within(policy: CompiledPolicy, tool: str) -> tuple[float, str] | None:
    """How long the reconcile hook of `tool` may take to answer about a rollback by it: the tool's
    `time <=` cap, in seconds and as written; None without one (waited for). Not the time budget,
    which bounds calls: a hook makes none, it says whether one happened."""
    seconds = _tool_time_cap(policy, tool)
    return (float(seconds), f"{format_seconds(seconds)} (the time cap of its tool)") if seconds else None


def _as_rollback(step: Step) -> Step:
    """The step as its rollback call: what the policy and the budgets see of that call (the
    rollback tool's catalogue risk, cost and time; none of the step's own clauses)."""
    return step.model_copy(update={"call": step.rollback, "risk": None, "cost": None, "time": None, "retry": 0,
                                   "expects": (), "idempotency": None, "rollback": None, "approvals": (),
                                   "when": None})


def _copy_view(view: RunView) -> RunView:
    """A copy whose containers can be changed without touching `view`."""
    return replace(view, states=dict(view.states), reasons=dict(view.reasons), attempts=dict(view.attempts),
                   results=dict(view.results), open_intents=dict(view.open_intents),
                   marked_unknown=set(view.marked_unknown), stale=dict(view.stale),
                   last_intent=dict(view.last_intent), settled_by=dict(view.settled_by),
                   dropped=dict(view.dropped), completed_at=dict(view.completed_at), recheck=dict(view.recheck),
                   to_roll_back=list(view.to_roll_back), rollback_intents=dict(view.rollback_intents),
                   rollback_calls=dict(view.rollback_calls), rollback_unknown=dict(view.rollback_unknown),
                   rolled_back=set(view.rolled_back), superseded=set(view.superseded), made=dict(view.made),
                   read_at_call=dict(view.read_at_call),
                   approvals={step: list(items) for step, items in view.approvals.items()})


def _call_unknown(view: RunView, step_id: str) -> bool:
    """Whether a call of the step (not its rollback; of this plan version, or of an earlier one
    that a new version changed or dropped: `stale`) may have happened with no answer recorded."""
    return view.states.get(step_id) == "outcome_unknown" and step_id in view.open_intents


def _require_text(plan_text: object, plan_file: object) -> None:
    """A caller's mistake in the texts given to the API, as a clear `TypeError`."""
    if not isinstance(plan_text, str):
        raise TypeError(f"the plan text must be a str (decode bytes first), not {type(plan_text).__name__}")
    if not isinstance(plan_file, str):
        raise TypeError(f"the plan's file name must be a str, not {type(plan_file).__name__}")


@contextmanager
def _reading(record: Record) -> Iterator[None]:
    """Fold `record` into a run's state; a record whose fields have other types than the runtime
    writes (a journal edited with its hashes rebuilt: the chain cannot tell) is a `RunError` that
    names it, never an internal error."""
    try:
        yield
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
        raise RunError(f"the journal of run `{record.run}` is damaged: record #{record.seq} ({record.kind}) "
                       f"holds what plangate never writes ({type(error).__name__}: {error})") from None


def approver_and_role(approver: str, role: str) -> tuple[str, str]:
    """The approver's name and the role as an approval records them (`_name_text`); refused when
    either is blank (before anything is shown or asked)."""
    if not isinstance(approver, str) or not isinstance(role, str):
        raise TypeError(f"an approver and a role are strings, not {type(approver).__name__} and {type(role).__name__}")
    approver, role = _name_text(approver, "approver's name"), _name_text(role, "role")
    if not _approver_key(approver) or not role:  # (a name of invisible characters alone is blank too)
        raise RunError("an approval needs an approver's name and a role (`--as NAME --role ROLE`), not blanks")
    return approver, role


def _approver_key(name: str) -> str:
    """Who an approver's name names, for counting distinct approvers: the name in Unicode NFKC,
    case-folded, without format characters (zero-width spaces and joiners, bidi marks) and without
    white space at its ends — `alice`, `Alice`, `ａｌｉｃｅ` and `alice` with a zero-width space are
    one person. Approvals journal the name as it was given; an empty key names no one."""
    visible = "".join(char for char in unicodedata.normalize("NFKC", name) if unicodedata.category(char) != "Cf")
    return unicodedata.normalize("NFKC", visible.casefold()).strip()


def _name_text(name: str, what: str) -> str:
    """A person's or role's name as journaled: stripped (`--as "al "` is `al`: one person, counted
    once); a `RunError` for one holding an undecodable byte (a command line in another encoding),
    which JSON text cannot keep."""
    name = name.strip()
    shown = undecodable(name)
    if shown is not None:
        raise RunError(f"the {what} `{shown}` holds a byte that is not UTF-8 text; nothing was recorded")
    return name


def _require_run_id(run: object) -> None:
    if not isinstance(run, str):
        raise TypeError(f"a run id is a str, not {type(run).__name__}")
    shown = undecodable(run)
    if shown is not None:
        raise RunError(f"the run id `{shown}` holds a byte that is not UTF-8 text; no run has it")


def _load(plan_text: str, plan_file: str, policy_texts: list[tuple[str, str]],
          recorded: bool = False) -> tuple[Plan, CompiledPolicy]:
    """The plan and compiled policy of these texts. A plan with errors is refused, except one read
    back from the journal (`recorded`): it passed when it was recorded, and a check added since
    must not make a run unreadable."""
    result = _checked(plan_text, plan_file, tuple(tuple(item) for item in policy_texts), not recorded)
    errors = [d for d in result.diagnostics if d.severity.value == "error"]
    if errors and not recorded:
        first = errors[0]
        raise RunError(f"the plan has {len(errors)} error(s) and cannot run; first: {first.name}: {first.message} "
                            "(run `plangate check` for all)")
    if len(result.plans) != 1 or result.policy is None:
        raise RunError("a run needs exactly one plan and at least one policy")
    return result.plans[0], result.policy


_CHECKED: dict[tuple, CheckResult] = {}  # (plan text, plan file, policy texts, plan checks) → its result
_CHECKED_MAX = 32
_CHECKED_MUTEX = threading.Lock()


def _checked(plan_text: str, plan_file: str, policy_texts: tuple[tuple[str, str], ...], plan_checks: bool) -> CheckResult:
    """Parse (and, with `plan_checks`, check) once per text: every pass re-reads a run, and the
    texts it recorded never change. A text read back from the journal passed its checks when it
    was recorded, so reading it again (`status`, `resume`, `approve`…) only parses it and compiles
    the policy: a plan whose proofs take the solver seconds is not proven again by every command."""
    result = _CHECKED.get((plan_text, plan_file, policy_texts, True))  # a full check serves either need
    if result is None and not plan_checks:
        result = _CHECKED.get((plan_text, plan_file, policy_texts, False))
    if result is None:
        result = check_sources([SourceFile(plan_file, plan_text)],
                               [SourceFile(name, text) for name, text in policy_texts], {"plan_checks": plan_checks})
        if not (plan_checks and result.errors):  # an error may pass (a solver's timeout): check again next time
            remember_check(plan_text, plan_file, policy_texts, result, plan_checks)
    return result


def remember_check(plan_text: str, plan_file: str, policy_texts: Sequence[Sequence[str]], result: CheckResult,
                   plan_checks: bool = True) -> None:
    """Let a run of these texts use `result`, their check (the command line has just made it to
    show its diagnostics), instead of checking them again."""
    with _CHECKED_MUTEX:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.pop(next(iter(_CHECKED)))  # the oldest
        _CHECKED[(plan_text, plan_file, tuple(tuple(item) for item in policy_texts), plan_checks)] = result


def _fold(view: RunView, record: Record) -> None:
    step, body = record.step, record.body
    kind = record.kind
    if kind == "plan_version":
        plan, _ = _load(body["plan_text"], body["plan_file"], [tuple(p) for p in view.policy_texts], recorded=True)
        old_plan = view.plan
        view.plan, view.plan_hash, view.plan_version = plan, body["plan_hash"], body["plan_version"]
        view.plan_text = body["plan_text"]
        for step_id in sorted(set(view.states) | set(view.attempts) | set(view.open_intents)):
            _revise(view, step_id, _step(old_plan, step_id) or view.dropped.get(step_id), _step(plan, step_id))
        view.holds_settled = body.get("hold") == HOLD_SETTLED
        _hold_back_followers(view, through_after=body.get("hold") in (HOLD_FOLLOWERS, HOLD_SETTLED))
    elif kind == "recheck":
        held = view.recheck.pop(step, None) if step is not None else None
        if body.get("kept") and held is not None:
            view.states[step] = held[0]
            view.reasons[step] = "it succeeded under an earlier plan version, and its call is the same"
        elif step is not None:
            if held is not None:  # its call, computed anew, is another: the earlier call's effect stands
                _supersede(view, step, f"plan version {view.plan_version} changed its call")
            _forget(view, step)
    elif kind == "run_state":
        view.run_state = body["state"]
        if body["state"] == "aborting":
            view.to_roll_back = [name for name in body.get("rollback", []) if isinstance(name, str)]
            view.rolled_back -= set(view.to_roll_back)  # a rollback that failed or was refused is tried again
            for held, (state, reason) in view.recheck.items():  # its new call will never be made: it
                view.states[held] = state                         # stands for the call it made
                if reason is not None:
                    view.reasons[held] = reason
            view.recheck.clear()
    elif step is None:
        return
    elif body.get("rollback") is True:
        _fold_rollback(view, step, kind, body)
    elif kind == "state":
        view.states[step] = body["state"]
        view.reasons[step] = body["reason"]
    elif kind == "intent":
        view.attempts[step] = view.attempts.get(step, 0) + 1
        view.open_intents[step] = body
        view.last_intent[step] = body
        view.marked_unknown.discard(step)
        view.settled_by.pop(step, None)
        view.states[step] = "running"
        view.calls += 1
        planned = _step(view.plan, step)
        if planned is not None:
            view.cost += _declared_cost(view.policy, planned)
            if planned.rollback is not None:  # what the call reads now is what its rollback will read
                view.read_at_call[step] = _results_read(view, planned)
    elif kind == "result":
        view.open_intents.pop(step, None)
        view.results[step] = body["result"]
        view.completed_at[step] = record.seq
        if "settled_by" in body:
            view.settled_by[step] = body["settled_by"]
        _record_made(view, step)
        if step in view.stale:  # an earlier version's call happened: settled, not this version's call
            made_under = view.stale.pop(step)
            if _step(view.plan, step) is not None and view.run_state in ABORTED:
                # its new call will never be made: the step stands for the call that was, which an
                # abort with rollback undoes as that version wrote its rollback
                if made_under is not None:
                    view.dropped[step] = made_under
                view.states[step] = "succeeded"
                view.reasons[step] = ("the call of an earlier plan version happened (settled after the run was "
                                      "aborted); the new call was never made")
            elif _step(view.plan, step) is not None:
                _supersede(view, step, "a later plan version changed its call while its outcome was unknown")
                _forget(view, step)
            else:
                view.states[step] = "succeeded"
                view.reasons[step] = "its call happened; the step is no longer in the plan"
        elif view.run_state in ABORTED:  # settled after the abort: nothing verifies it now
            view.states[step] = "succeeded"
            view.reasons[step] = "its call happened (settled after the run was aborted); its `expect` was not evaluated"
        else:
            view.states[step] = "verifying"
            if view.holds_settled and view.last_intent.get(step, {}).get("plan_hash") != view.plan_hash:
                # an unknown outcome of a call made under an earlier version, settled after the new
                # one: held back and rechecked as a completed step is (`_hold_back_followers`)
                view.recheck[step] = (view.states.pop(step), view.reasons.pop(step, None))
    elif kind == "attempt_failed" and step not in view.open_intents and step in view.rollback_intents:
        _fold_rollback(view, step, kind, body)  # a journal written before rollback failures were marked
    elif kind == "attempt_failed":
        view.open_intents.pop(step, None)
    elif kind == "outcome_unknown":
        view.states[step] = "outcome_unknown"
        view.reasons[step] = body.get("reason") or UNANSWERED
        view.marked_unknown.add(step)
    elif kind == "reconciled":
        view.open_intents.pop(step, None)
        if body["happened"]:  # its result follows in the same transaction (a stale call's settles it)
            view.states[step] = "verifying"
        else:
            if step in view.stale:  # an earlier version's call did not happen
                view.stale.pop(step)
                _forget(view, step)
            else:  # the call was not made: it was no attempt, and the next call makes that attempt again
                view.states[step] = "ready"
                view.attempts[step] = max(0, view.attempts.get(step, 0) - 1)
            if view.run_state in ABORTED:  # unless the run was aborted: nothing calls it now
                view.states[step] = "cancelled"
                view.reasons[step] = "its call did not happen, and the run was aborted"
    elif kind == "approval":
        view.approvals.setdefault(step, []).append(body)


def _fold_rollback(view: RunView, step: str, kind: str, body: dict[str, Any]) -> None:
    """A record of a step's rollback (`"rollback": true`): never an attempt of the step, never its
    result. Its intent is a call (counted in the budgets); its result, or a reconciliation saying it
    happened, makes the step `compensated`; a failure or a refusal leaves it `succeeded`; a
    reconciliation saying it did not happen leaves the rollback to be made again."""
    if kind == "intent":
        if view.run_state not in ABORTED:  # only an abort rolls back (an older journal
            view.run_state = "aborting"                    # may lack the `aborting` record)
        view.rollback_intents[step] = body
        view.rollback_calls[step] = body
        view.rollback_unknown.pop(step, None)
        view.calls += 1
        view.cost += _tool_cost(view.policy, body["tool"])
        return
    tool = view.rollback_calls.get(step, {}).get("tool", "its rollback tool")
    if kind == "state":  # refused, failed, or made: the state says which
        view.states[step] = body["state"]
        view.reasons[step] = body["reason"]
        view.rolled_back.add(step)
    elif kind == "result":
        view.rollback_intents.pop(step, None)
        view.rollback_unknown.pop(step, None)
        view.rolled_back.add(step)
        view.states[step] = "compensated"
        by = body.get("settled_by")
        view.reasons[step] = f"rolled back by `{tool}`" + (
            "" if by is None else " (its reconcile hook says so)" if by == HOOK
            else f" (reported by `{by}` through `plangate reconcile`)")
    elif kind == "attempt_failed":
        view.rollback_intents.pop(step, None)
        view.rolled_back.add(step)
        view.states[step] = "succeeded"
        view.reasons[step] = f"its rollback by `{tool}` failed ({body['error']}): the effect stands"
    elif kind == "outcome_unknown":
        view.rollback_unknown[step] = body.get("reason") or (
            f"its rollback by `{tool}` may have happened: its answer was never recorded")
    elif kind == "reconciled":
        view.rollback_intents.pop(step, None)
        view.rollback_unknown.pop(step, None)
        if body["happened"]:  # its result comes in the same transaction
            view.rolled_back.add(step)
            view.states[step] = "compensated"
            view.reasons[step] = f"rolled back by `{tool}`"


def _revise(view: RunView, step_id: str, old: Step | None, new: Step | None) -> None:
    """What a new plan version keeps of one step (`old` and `new` are its two versions, None
    where a version lacks it). An unknown outcome is kept whatever changed (if its call changed or
    the step was dropped, it is `stale`: settled first, then run again or, dropped, kept only if it
    happened). A completed step (`succeeded`, or `verifying`: its call returned) that the new
    version drops is kept as `succeeded`, "no longer in the plan", with its result and attempts, and
    its step as it was for a rollback on abort (`dropped`). A step whose call changed is forgotten:
    it runs again with fresh attempts. Of the others, a `blocked`, `cancelled`, `skipped` or
    `waiting_for_approval` step is decided again (what it waits for may have changed: the steps
    before it, the approvals it needs), and so is a `failed` one that the new `retry` allows another
    attempt; completed steps keep their state and result."""
    if step_id in view.superseded:
        return  # an earlier call's effect: no version has that step
    changed = old is None or new is None or canonical(old.call) != canonical(new.call)
    if step_id in view.open_intents or view.states.get(step_id) == "outcome_unknown":
        if changed:
            made_under = view.stale.setdefault(step_id, old)  # the first version to change it: the call's own
            if new is None and made_under is not None:
                view.dropped[step_id] = made_under  # if the call happened, it can be undone
        return
    held = view.recheck.pop(step_id, None) if new is None or changed else None
    if held is not None:  # held back until its call is computed again, and now dropped or changed: its
        view.states[step_id] = held[0]  # effect is completed work, kept as a dropped or changed step's is
        if held[1] is not None:
            view.reasons[step_id] = held[1]
    state = view.states.get(step_id)
    if new is None and old is not None and state in ("succeeded", "verifying"):
        view.dropped[step_id] = old
        view.states[step_id] = "succeeded"
        if view.reasons.get(step_id) is None or "no longer in the plan" not in view.reasons[step_id]:
            view.reasons[step_id] = ("it succeeded; the step is no longer in the plan" if state == "succeeded"
                                     else "its call happened; the step is no longer in the plan")
        return
    if changed:
        if state in ("succeeded", "verifying"):
            _supersede(view, step_id, f"plan version {view.plan_version} changed its call")
        _forget(view, step_id)
        return
    if view.dropped.pop(step_id, None) is not None:  # back in the plan with the same call: an ordinary step again
        view.reasons[step_id] = "it succeeded under an earlier plan version"
        if step_id in view.states and any(how == "reference" for how in _index(view.plan).predecessors[step_id].values()):
            # what it reads may have run again while it was out: held back until its call is computed anew
            view.recheck[step_id] = (view.states.pop(step_id), view.reasons.pop(step_id))
    if state in ("blocked", "cancelled", "skipped", "waiting_for_approval") or (
            state == "failed" and new is not None and view.attempts.get(step_id, 0) <= new.retry):
        view.states.pop(step_id, None)
        view.reasons.pop(step_id, None)


def _step_as_made(view: RunView, step_id: str) -> Step | None:
    """The step as it was when its call was made: as a later version dropped it, as it stood when a
    call that a later version changed was made, else as the plan has it."""
    return view.dropped.get(step_id) or view.stale.get(step_id) or _step(view.plan, step_id)


def _record_made(view: RunView, step_id: str) -> None:
    """On a step's result: keep what its rollback is computed from (`RunView.made`), and, where the
    call is one whose effect an earlier version's call made (the same idempotency key: a call
    changed back), let that kept effect be the step's own again, so it is undone once."""
    step = _step_as_made(view, step_id)
    if step is None or step.rollback is None:
        return
    scope = view.read_at_call.get(step_id)
    if scope is None:  # (a journal without an intent for it: what the steps it reads hold now)
        scope = _results_read(view, step)
    key = view.last_intent.get(step_id, {}).get("idempotency_key")
    view.made[step_id] = (step, scope, key)
    for kept in sorted(view.superseded):
        if key is not None and kept.rpartition("@")[0] == step_id and kept in view.states \
                and view.made.get(kept, (None, None, None))[2] == key:
            _forget(view, kept)
            if kept in view.to_roll_back:  # merged during an abort: undone as the step's own effect
                view.to_roll_back.remove(kept)


def _supersede(view: RunView, step_id: str, why: str) -> None:
    """Keep the effect of a step's call that happened before a new plan version changed the call,
    under an id of its own (`b@1`, then `b@2`…), as a dropped step is kept: `succeeded`, with its
    result, and the step and results its call was made with (`RunView.made`), so that an abort with
    rollback undoes it too, as that version wrote its rollback. Only a step with a `rollback` has an
    effect to undo: the others' effects simply stand, as the journal records."""
    made = view.made.get(step_id)
    if made is None or step_id not in view.results:
        return
    number = 1 + sum(1 for name in view.superseded if name.rpartition("@")[0] == step_id)
    kept = f"{step_id}@{number}"
    view.superseded.add(kept)
    view.made[kept] = made
    view.dropped[kept] = made[0].model_copy(update={"id": kept})
    view.states[kept] = "succeeded"
    view.reasons[kept] = f"the effect of `{step_id}`'s earlier call: {why}, and the effect stands"
    view.results[kept] = view.results[step_id]
    view.attempts[kept] = view.attempts.get(step_id, 0)
    if step_id in view.completed_at:
        view.completed_at[kept] = view.completed_at[step_id]


def _forget(view: RunView, step_id: str) -> None:
    """The step starts afresh: no state, result or attempts (its records stay in the journal)."""
    for known in (view.states, view.reasons, view.results, view.attempts, view.dropped, view.completed_at,
                  view.recheck, view.made):
        known.pop(step_id, None)


def _hold_back_followers(view: RunView, through_after: bool) -> None:
    """After a new plan version: a completed step that comes after a step that is not finished (one
    that will run again, or is held back, transitively) is held back in `recheck`, so it does not
    count as finished and nothing after it starts, until every step before it is finished again;
    then `_prepare` rechecks it (`Runtime._recheck`). A step that reads such a step's result cannot
    know yet whether its call changed, so it waits for a succeeded one. Without this, a step
    ordered after the rerun step only through a kept one (`a` → `check ca` → `b`) would run
    before `a`'s new call. Journals written before plangate held back steps ordered by `after`
    record no `hold` in their `plan_version` records (`through_after` False): they are folded as
    they were written, readers only, so their runs read as they ran. A `check` that failed after
    a step that runs again is decided afresh: its failure was about the old call's effect.

    An unknown outcome is no completed step when the version lands: it is kept until settled. Once
    settled as happened, its call was made under an earlier version, and the call the new version
    computes (from results that may have changed since, or change still) may differ: `_fold` holds
    it back then, whatever its predecessors' states, and it is rechecked the same way (kept, or run
    afresh with new approvals). Journals whose `plan_version` records say `hold: "followers"` were
    written before that, and are folded as they were written."""
    index = _index(view.plan)

    def follows_unfinished(step_id: str) -> bool:
        return any(name in view.recheck or view.states.get(name) not in (FINISHED if how == "after" else ("succeeded",))
                   for name, how in index.predecessors[step_id].items() if how == "reference" or through_after)

    for step_id in index.order:  # topological: a follower comes after what it follows
        state = view.states.get(step_id)
        if step_id in view.dropped:
            continue
        if state in ("succeeded", "verifying") and follows_unfinished(step_id):
            view.recheck[step_id] = (view.states.pop(step_id), view.reasons.pop(step_id, None))
        elif (state == "failed" and through_after and index.steps[step_id].kind == "check"
              and follows_unfinished(step_id)):
            _forget(view, step_id)  # it failed on the effect of a call that is made again: it verifies that one


@dataclass(frozen=True)
class _PlanIndex:
    order: list[str]
    steps: dict[str, Step]
    predecessors: dict[str, dict[str, str]]  # step → {earlier step: "after" | "reference"}


class _Frontier:
    """The steps whose predecessors have all finished, kept current as steps finish: a pass of
    `advance` looks only at these, so a run of n steps costs O(n) passes of O(ready) work rather
    than O(n²). Derived from the folded states on each pass; it holds nothing the journal lacks."""

    def __init__(self, index: "_PlanIndex", states: dict[str, str]) -> None:
        self.position = {step_id: number for number, step_id in enumerate(index.order)}
        self.successors: dict[str, list[str]] = {step_id: [] for step_id in index.order}
        self.waiting: dict[str, int] = {}
        for step_id in index.order:
            earlier = [name for name in index.predecessors[step_id] if name in self.position]
            for name in earlier:
                self.successors[name].append(step_id)
            self.waiting[step_id] = sum(1 for name in earlier if states.get(name) not in FINISHED)
        self.done = {step_id for step_id in index.order if states.get(step_id) in FINISHED}
        self.ready = {step_id for step_id in index.order if step_id not in self.done and not self.waiting[step_id]}

    def update(self, states: dict[str, str]) -> None:
        finished = [step_id for step_id in self.ready if states.get(step_id) in FINISHED]
        while finished:
            step_id = finished.pop()
            self.ready.discard(step_id)
            self.done.add(step_id)
            for later in self.successors[step_id]:
                self.waiting[later] -= 1
                if not self.waiting[later] and later not in self.done:
                    if states.get(later) in FINISHED:
                        finished.append(later)
                    else:
                        self.ready.add(later)

    def candidates(self) -> list[str]:
        return sorted(self.ready, key=self.position.__getitem__)


_INDEXES: dict[int, tuple[Plan, _PlanIndex]] = {}


def _index(plan: Plan) -> _PlanIndex:
    """Order, steps by id and predecessors of a plan, computed once per plan object."""
    known = _INDEXES.get(id(plan))
    if known is None or known[0] is not plan:
        from plangate.graph import build_graph, step_expressions

        predecessors: dict[str, dict[str, str]] = {}
        for step in plan.steps:
            found: dict[str, str] = {name.name: "after" for name in step.after}
            for _clause, expr in step_expressions(step):
                for name, _span in cel.step_references(expr):
                    if name != step.id:
                        found[name] = "reference"
            predecessors.setdefault(step.id, found)
        steps: dict[str, Step] = {}
        for step in plan.steps:
            steps.setdefault(step.id, step)
        known = (plan, _PlanIndex(build_graph(plan).topological_order(), steps, predecessors))
        if len(_INDEXES) >= 64:  # a long-lived process sees many plans: keep only recent ones
            _INDEXES.clear()
        _INDEXES[id(plan)] = known
    return known[1]


def _order(plan: Plan) -> list[str]:
    return _index(plan).order


def _step(plan: Plan, step_id: str) -> Step | None:
    return _index(plan).steps.get(step_id)


def _predecessors(plan: Plan, step: Step) -> dict[str, str]:
    return _index(plan).predecessors[step.id]


def _verifies(view: RunView, step: Step) -> str:
    """What a check's evidence is about: "verifies `a`, `b`" (the steps it comes after or reads, and
    that ran); a step before it that was skipped made no effect to verify, and is said so."""
    before = _predecessors(view.plan, step)
    ran = [name for name in before if view.states.get(name) != "skipped"]
    skipped = [name for name in before if name not in ran]
    said = ("verifies " + backticked(ran)) if ran else "verifies no earlier step"
    if skipped:
        said += " (" + backticked(skipped) + " skipped: nothing of " + \
                ("it" if len(skipped) == 1 else "them") + " to verify)"
    return said


def _results_read(view: RunView, step: Step) -> dict[str, Any]:
    """What the steps whose results `step` uses hold now, by step id."""
    return {name: view.results.get(name) for name in _predecessors_of(view.plan, step)}


def _predecessors_of(plan: Plan, step: Step) -> dict[str, str]:
    """The steps whose results `step` uses: from `plan` if it holds the step, else (a step a later
    version dropped) from the step's own expressions."""
    if _step(plan, step.id) is step:
        return _predecessors(plan, step)
    from plangate.graph import step_expressions

    found: dict[str, str] = {name.name: "after" for name in step.after}
    for _clause, expr in step_expressions(step):
        for name, _span in cel.step_references(expr):
            if name != step.id:
                found[name] = "reference"
    return found


def _answer_within(policy: CompiledPolicy, step: Step | None) -> tuple[float, str] | None:
    """A step's time bound (its `time`, else its tool's cap), in seconds and as written, for what
    must answer within it; None without one."""
    seconds = _time_bound(policy, step) if step is not None and step.call is not None else 0
    return (float(seconds), _bound_text(policy, step)) if seconds else None  # type: ignore[arg-type]


@dataclass(frozen=True)
class Arguments:
    """A call's evaluated arguments, two ways: `plain` as its tool is given them (JSON: what the
    journal records, and what keys, hashes and approvals bind to) and `computed` as CEL computed
    them (a `duration(...)` is a duration, a `bytes` value bytes)."""

    plain: dict[str, Any]
    computed: dict[str, Any]

    def for_rules(self, entry: CatalogueEntry | None) -> dict[str, Any]:
        """The arguments the rules (and the `args` check) see: the values as computed — a
        duration stays a duration, at any depth, which is what the checker reasoned about —
        typed by the entry's schema where it declares one (`typed_arguments`: an int for a
        `double` is that double). On the text a tool is given, `args.v > duration("30m")` would
        fail to evaluate and a deny the checker called possible would never fire."""
        return typed_arguments(entry, self.computed)


def _concrete_args(call: ToolCall, scope: dict[str, Any]) -> Arguments | tuple[str, CelError]:
    """The call's arguments evaluated over `scope`; or the first one that fails, by name, with its
    error (a value with no JSON form cannot be passed, so it fails too)."""
    plain: dict[str, Any] = {}
    computed: dict[str, Any] = {}
    for argument in call.args:
        value = compile_expr(argument.value)(scope)
        passed = call_value(value)
        if isinstance(passed, CelError):
            return argument.name, passed
        plain[argument.name] = passed
        computed[argument.name] = value
    return Arguments(plain, computed)


def _constant_misfits(tools: ToolRegistry, step: Step) -> list[str]:
    """Why `step`'s call does not fit the tool loaded for it (`bind`'s reasons), where the step is
    sure to make it: it has no `when` and reads no result anywhere (so it is never skipped) and its
    arguments are constants. Nothing for any other step (it may never call), for a call whose
    arguments fail to evaluate (its own failure at its turn), or whose tool is not loaded."""
    from plangate.graph import step_expressions

    tool = tools.get(step.call.tool) if step.call is not None else None
    if tool is None or step.when is not None:
        return []
    if any(cel.step_references(expr) for _clause, expr in step_expressions(step)) \
            or any(reads_a_name(argument.value) for argument in step.call.args):  # type: ignore[union-attr]
        return []
    arguments = _concrete_args(step.call, {})  # type: ignore[arg-type]
    return [] if isinstance(arguments, tuple) else bind(tool, arguments.plain, "")[1]


def _bound_text(policy: CompiledPolicy, step: Step) -> str:
    """The time bound of one attempt of `step` as the plan or the policy writes it."""
    if step.time is not None:
        return step.time.text
    return f"{format_seconds(_time_bound(policy, step))} (the time cap of its tool)"


def _call_tool(tools: ToolRegistry, intent: dict[str, Any]) -> Outcome:
    tool = tools.get(intent["tool"])
    assert tool is not None, "advance starts only when every tool it may call is loaded (require_tools)"
    kwargs, misfits = bind(tool, intent["args"], intent["idempotency_key"])
    assert not misfits, "_prepare fits every call to its tool before writing its intent"
    return invoke(tool, kwargs)


def _external_ref(result: Any) -> Any:
    """Where the effect can be found outside: the first of the result's `external_ref`, `id`, `ref`
    and `url` fields that is a string or an integer (not a bool); None for any other result."""
    if isinstance(result, dict):
        for key in ("external_ref", "id", "ref", "url"):
            if isinstance(result.get(key), (str, int)) and not isinstance(result[key], bool):
                return result[key]
    return None


def _evidence_value(value: Any) -> Any:
    text = canonical_json(value) if value is not None else "null"
    return value if len(text) <= 4096 else text[:4096] + "…"


def _show(value: Any) -> str:
    return "false" if value is False else canonical_json(plain(value)) if value is not None else "null"

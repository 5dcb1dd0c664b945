"""Solving SMT-LIB2 queries in a worker process, under a wall-clock bound that always holds.

Z3's own timeout is advisory: it is checked between steps of the search, and a query bounded to
20 s has been seen to run for over a minute. So no query runs in this process: each request goes
to a persistent child process (`worker.py`, which alone imports z3) over a pipe, and the parent
waits for the answer with `select` until the bound (plus a short grace for the pipe) has passed.
Then it kills the worker and answers "unknown" for every query of the request; the next request
starts a fresh worker. The worker also receives the bound and hands it to Z3 as its timeout, so a
hard query usually comes back as "unknown" without the kill.

Invariants:
- A request never takes longer than its bound + `GRACE` once the worker is up (starting it is
  bounded separately by `STARTUP_BOUND`).
- "unknown" is an answer with a reason (`Answer.reason`), never an exception and never a pass.
- Under `allowance(seconds)` (the driver's, per plan checked) all requests together take at most
  that long: each is bounded by what is left, and once nothing is left every query is "unknown"
  at once. Per-query bounds alone would let a plan of many hard conditions run for hours.
- A definite answer ("sat" with its model, "unsat") to a query text is remembered for the process
  (bounded in count and text) and given again without the solver; "unknown" never is.
- One worker per process, started on first use (or by `prepare()`, which lets the caller overlap
  the start with its own encoding); a forked child never talks to its parent's worker.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
GRACE = 0.25  # seconds the parent adds to a bound for the pipe and JSON before it kills
STARTUP_BOUND = 20.0


@dataclass(frozen=True)
class Query:
    """SMT-LIB2 text to check, and the constants (name, sort) to read in a model."""

    smt: str
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Answer:
    status: str  # "sat" | "unsat" | "unknown"
    model: dict[str, object] = field(default_factory=dict)
    reason: str | None = None


@dataclass(frozen=True)
class PatternGroup:
    """Assertions that define the Boolean constants `fires`; the worker finds which can hold together."""

    smt: str
    fires: tuple[str, ...]
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Pattern:
    fires: frozenset[int]  # positions in `PatternGroup.fires` that hold together, maximally
    model: dict[str, object]


@dataclass(frozen=True)
class Patterns:
    status: str  # "ok" | "unknown"
    patterns: tuple[Pattern, ...] = ()
    reason: str | None = None


class _Worker:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.owner = 0
        self.buffer = b""
        self.ready = False
        self.failure: str | None = None
        atexit.register(self.stop)

    def start(self) -> None:
        if self.process is not None and self.owner == os.getpid() and self.process.poll() is None:
            return
        self.process = subprocess.Popen([sys.executable, str(WORKER_SCRIPT)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.owner = os.getpid()
        self.buffer = b""
        self.ready = False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and self.owner == os.getpid():
            process.kill()
            process.wait()

    def request(self, message: dict, bound: float) -> dict | str:
        """The worker's reply, or the reason there is none (the worker was then stopped)."""
        self.start()
        assert self.process is not None and self.process.stdin is not None
        if not self.ready:
            reply = self._read(time.monotonic() + STARTUP_BOUND)
            if not isinstance(reply, dict) or "ready" not in reply:
                self.stop()
                return f"the solver did not start ({reply if isinstance(reply, str) else 'no greeting'})"
            self.ready = True
        try:
            self.process.stdin.write(json.dumps(message).encode("utf-8") + b"\n")
            self.process.stdin.flush()
        except OSError as error:
            self.stop()
            return f"the solver stopped ({error.strerror or error})"
        reply = self._read(time.monotonic() + bound + GRACE)
        if isinstance(reply, str):
            self.stop()
            return reply
        if reply.get("exiting"):  # its last reply (it ran out of memory): the next request starts afresh
            self.stop()
        if "error" in reply:
            return f"the solver rejected the query ({reply['error']})"
        return reply

    def _read(self, deadline: float) -> dict | str:
        assert self.process is not None and self.process.stdout is not None
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            readable, _, _ = select.select([descriptor], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(descriptor, 1 << 16)
            if not chunk:
                return f"the solver exited with status {self.process.wait()}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


_WORKER = _Worker()


def prepare() -> None:
    """Start the worker now, without waiting for it (the next request waits if it must)."""
    with _WORKER.lock:
        _WORKER.start()


class _Allowance(threading.local):
    left: float | None = None  # seconds of solving left to the current check; None: no overall bound
    total: float = 0.0


_ALLOWANCE = _Allowance()


TOTAL_BOUND = 30.0  # seconds of solving a whole command may spend (`allowance`), however many queries


@contextmanager
def allowance(seconds: float) -> Iterator[None]:
    """Bound all the solving done inside (in this thread) to `seconds` of wall time in all."""
    saved = (_ALLOWANCE.left, _ALLOWANCE.total)
    _ALLOWANCE.left, _ALLOWANCE.total = seconds, seconds
    try:
        yield
    finally:
        _ALLOWANCE.left, _ALLOWANCE.total = saved


def _request(message: dict, time_bound: float) -> tuple[dict | str, float]:
    """The worker's reply (or why there is none) within `time_bound` and what is left of the
    allowance, with the bound the query was given: the smaller of the two."""
    left = _ALLOWANCE.left
    if left is not None and left <= 0:
        return f"the solver time of {_ALLOWANCE.total:g}s in all is spent", 0.0
    bound = time_bound if left is None else min(time_bound, left)
    message["time_bound"] = bound
    started = time.monotonic()
    try:
        with _WORKER.lock:
            return _WORKER.request(message, bound), bound
    finally:
        if left is not None:
            _ALLOWANCE.left = left - (time.monotonic() - started)


MAX_REMEMBERED = 4096  # answers kept by `check`, the oldest forgotten first
MAX_REMEMBERED_TEXT = 16 * 1024 * 1024  # characters of query text kept with them, in all
MAX_REMEMBERED_QUERY = 256 * 1024  # a longer query's answer is not kept


_answers: dict[Query, Answer] = {}
_remembered_text = 0
_answers_lock = threading.Lock()


def forget_answers() -> None:
    """Drop the answers `check` remembers (a test that asks for a timeout must reach the solver)."""
    global _remembered_text
    with _answers_lock:
        _answers.clear()
        _remembered_text = 0


def _remember(query: Query, answer: Answer) -> None:
    """Keep `answer`, forgetting the oldest while the count or the text kept is over its bound
    (under `_answers_lock`)."""
    global _remembered_text
    _answers[query] = answer
    _remembered_text += len(query.smt)
    while len(_answers) > MAX_REMEMBERED or _remembered_text > MAX_REMEMBERED_TEXT:
        oldest = next(iter(_answers))
        _remembered_text -= len(oldest.smt)
        del _answers[oldest]


def check(queries: Sequence[Query], time_bound: float) -> list[Answer]:
    """Whether each query is satisfiable (with a model), all within `time_bound` seconds.

    A definite answer ("sat" with its model, "unsat") is remembered for the process: the encoder
    names its constants by their order (`x0`, `x1`…), not by the values they stand for, so the
    steps of a plan that ask one question of values of one shape (`size("app-" + sK.result.name)
    > 12` for each K) send one query text, which is solved once. Remembered answers cost no
    solver time, so they are given even once the allowance is spent."""
    if not queries:
        return []
    with _answers_lock:  # runs advance on several threads: the dict is read and changed under the lock
        known = {query: _answers[query] for query in queries if query in _answers}
    asked = [query for query in dict.fromkeys(queries) if query not in known]
    if asked:
        message = {"op": "check", "time_bound": time_bound,
                   "queries": [{"smt": query.smt, "values": query.values} for query in asked]}
        reply, granted = _request(message, time_bound)
        if isinstance(reply, str):
            fresh = {query: Answer("unknown", reason=_reason(reply, granted)) for query in asked}
        else:
            fresh = {query: Answer(result["status"], result.get("model", {}), _reason(result.get("reason"), granted))
                     for query, result in zip(asked, reply["results"])}
        with _answers_lock:
            for query, answer in fresh.items():
                if answer.status in ("sat", "unsat") and len(query.smt) <= MAX_REMEMBERED_QUERY:
                    _remember(query, answer)
        known.update(fresh)
    return [known[query] for query in queries]


def maximal_patterns(groups: Sequence[PatternGroup], time_bound: float, max_patterns: int = 256) -> list[Patterns]:
    """For each group, every maximal set of its `fires` that can hold together, with a model of each."""
    if not groups:
        return []
    message = {"op": "patterns", "time_bound": time_bound, "max_patterns": max_patterns,
               "groups": [{"smt": group.smt, "fires": group.fires, "values": group.values} for group in groups]}
    reply, granted = _request(message, time_bound)
    if isinstance(reply, str):
        return [Patterns("unknown", reason=_reason(reply, granted)) for _ in groups]
    return [Patterns(result["status"],
                     tuple(Pattern(frozenset(found["fires"]), found["model"]) for found in result.get("patterns", ())),
                     _reason(result.get("reason"), granted))
            for result in reply["results"]]


def _reason(reason: str | None, time_bound: float) -> str | None:
    if reason is None:
        return None
    if reason in ("timeout", "canceled", "interrupted from keyboard") or "timeout" in reason:
        return f"the solver timed out after {time_bound:.3g}s"
    if reason.startswith("the solver"):
        return reason
    return f"the solver gave up ({reason})"

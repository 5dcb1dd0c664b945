"""Worst-case budget figures of one execution of a plan: exact dynamic programmes over the DAG.

An execution is given by which steps run (`runs`); a step that does not run costs nothing, makes
no call, takes no time and counts as done as soon as its predecessors are. For one execution,
with `attempts = retry + 1` and every attempt taking its step's whole time:

- cost  = Σ attempts × cost over running steps (money as integers in the plan's smallest unit);
- calls = Σ attempts;  work = Σ attempts × seconds;
- critical path = the longest path by attempts × seconds: the makespan with no concurrency
  limit, found by one pass in topological order (`finish[s] = own + max finish[pred]`);
- `list_schedule`: the makespan with `workers` steps at a time when ready steps start in plan
  order, a failed attempt's step ready again (a heap of finish times, a heap of ready steps keyed
  by plan position), for any `Timing` (attempts made, seconds each takes);
- `longest_schedule`: a local search for a timing whose list schedule overruns a bound (shorter
  steps can make a longer schedule);
- `never_more_than`: whether m workers are never all busy with a step still waiting (a chain
  cover of the running steps by at most m chains), so the limit cannot bind;
- `graham_bound`: W/m + (1 − 1/m)·L, an upper bound on the makespan of *every* list schedule
  with m workers, whatever the actual times up to the worst ones (Graham 1969).

`worst_case(loads)` with every step possibly running is the exact worst case when conditions are
independent (each `when` can hold whatever the others do): all figures grow with the set of
running steps, so "every step that may run, runs" maximises each. Steps are indexed in
topological order and predecessors point backwards; every pass is linear.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Sequence

# Steps the runtime runs at once when the policy sets no `limit concurrency`: the time bound
# assumes as many, no more (a plan with more steps ready at once is bounded as under that limit).
DEFAULT_WORKERS = 64


@dataclass(frozen=True)
class Loads:
    """Per step, in topological order: its id, attempts, cost and seconds per attempt, predecessors."""

    steps: tuple[str, ...]
    attempts: tuple[int, ...]
    cost: tuple[int, ...]
    seconds: tuple[int, ...]
    predecessors: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class Totals:
    cost: int
    calls: int
    work: int


@dataclass(frozen=True)
class WorstCase:
    totals: Totals
    critical: int
    path: tuple[int, ...]  # the steps of one longest path, first to last


@dataclass(frozen=True)
class Schedule:
    makespan: int
    starts: tuple[tuple[int, int, int], ...]  # (step, start, end) for running steps, by start


def worst_case(loads: Loads, runs: Sequence[bool] | None = None) -> WorstCase:
    """The figures of the execution `runs` (default: every step runs)."""
    runs = runs if runs is not None else [True] * len(loads)
    critical, path = critical_path(loads, runs)
    return WorstCase(totals(loads, runs), critical, path)


def totals(loads: Loads, runs: Sequence[bool]) -> Totals:
    cost = calls = work = 0
    for attempts, unit_cost, seconds, running in zip(loads.attempts, loads.cost, loads.seconds, runs):
        if running:
            cost += attempts * unit_cost
            calls += attempts
            work += attempts * seconds
    return Totals(cost, calls, work)


def step_times(loads: Loads, runs: Sequence[bool]) -> list[int]:
    return [attempts * seconds if running else 0
            for attempts, seconds, running in zip(loads.attempts, loads.seconds, runs)]


def critical_path(loads: Loads, runs: Sequence[bool]) -> tuple[int, tuple[int, ...]]:
    """The longest path's length and steps."""
    own = step_times(loads, runs)
    finish = [0] * len(own)
    via = [-1] * len(own)
    for index, predecessors in enumerate(loads.predecessors):
        best, chosen = 0, -1
        for predecessor in predecessors:
            if finish[predecessor] > best:
                best, chosen = finish[predecessor], predecessor
        finish[index] = best + own[index]
        via[index] = chosen
    if not finish:
        return 0, ()
    end = max(range(len(finish)), key=finish.__getitem__)
    path = []
    while end >= 0:
        path.append(end)
        end = via[end]
    return finish[path[0]], tuple(reversed(path))


def longest_through(loads: Loads, runs: Sequence[bool]) -> list[int]:
    """For each step, the length of the longest path through it."""
    own = step_times(loads, runs)
    size = len(own)
    before = [0] * size
    for index, predecessors in enumerate(loads.predecessors):
        before[index] = own[index] + max((before[p] for p in predecessors), default=0)
    after = [0] * size
    for index in range(size - 1, -1, -1):
        after[index] += own[index]
        for predecessor in loads.predecessors[index]:
            if after[index] > after[predecessor]:
                after[predecessor] = after[index]
    return [before[i] + after[i] - own[i] for i in range(size)]


@dataclass(frozen=True)
class Timing:
    """How one execution's running steps behave: per step (topological order) the attempts it makes
    (1 to `retry + 1`), the seconds its last attempt takes (0 to its `time`) and those each attempt
    before it takes, which fails (`failing`; None: as the last). A step's `time` only bounds an
    attempt, a retried step may succeed early, and a failed attempt may fail at once while the
    next takes its whole time: all are the adversary's to choose."""

    attempts: tuple[int, ...]
    seconds: tuple[int, ...]
    failing: tuple[int, ...] | None = None

    @classmethod
    def worst(cls, loads: Loads) -> "Timing":
        """Every attempt is made and takes its whole time."""
        return cls(loads.attempts, loads.seconds)

    def failed_seconds(self, index: int) -> int:
        return self.seconds[index] if self.failing is None else self.failing[index]

    def shortened(self, loads: Loads) -> list[int]:
        """The steps that make fewer attempts, or take less time, than their worst."""
        return [index for index in range(len(loads))
                if self.attempts[index] < loads.attempts[index] or self.seconds[index] < loads.seconds[index]
                or (self.attempts[index] > 1 and self.failed_seconds(index) < loads.seconds[index])]


def list_schedule(loads: Loads, runs: Sequence[bool], workers: int, timing: Timing | None = None) -> Schedule:
    """Greedy list scheduling as the runtime does it (`Runtime.advance`): in passes over the ready
    steps in topological order (`loads` is in that order), each starts while a worker is free; a
    step that does not run is done at once, and the steps it frees are candidates of the next pass
    (made at once, before waiting on a call); after calls end, a new pass. An attempt that fails puts
    its step back among the ready ones, so its next attempt waits for a free worker like any other
    step. `starts` has one entry per attempt."""
    timing = timing or Timing.worst(loads)
    size = len(loads)
    left = list(timing.attempts)
    seconds = timing.seconds
    failing = timing.failing or seconds
    waiting = [len(predecessors) for predecessors in loads.predecessors]
    successors: list[list[int]] = [[] for _ in range(size)]
    for index, predecessors in enumerate(loads.predecessors):
        for predecessor in predecessors:
            successors[predecessor].append(index)
    ready = [i for i in range(size) if waiting[i] == 0]
    heapq.heapify(ready)
    freed: list[int] = []  # made ready by a step that did not run, during a pass: the next pass's
    running: list[tuple[int, int]] = []  # (end, step)
    starts: list[tuple[int, int, int]] = []
    now = 0

    def finish(index: int, into: list[int]) -> None:
        left[index] -= 1
        if left[index] > 0:  # a failed attempt: the step is ready again
            heapq.heappush(ready, index)
            return
        for successor in successors[index]:
            waiting[successor] -= 1
            if waiting[successor] == 0:
                into.append(successor)

    def release(found: list[int]) -> None:
        for index in found:
            heapq.heappush(ready, index)
        found.clear()

    while ready or running:
        skipped = True
        while skipped:  # the passes made before waiting on a call
            skipped = False
            while ready and len(running) < workers:
                index = heapq.heappop(ready)
                if not runs[index]:  # a skipped step takes no worker and is done at once
                    left[index] = 1
                    finish(index, freed)
                    skipped = True
                    continue
                took = seconds[index] if left[index] == 1 else failing[index]  # the last attempt, or one that fails
                starts.append((index, now, now + took))
                heapq.heappush(running, (now + took, index))
            release(freed)
        if not running:
            continue
        now, index = heapq.heappop(running)
        finish(index, freed)
        while running and running[0][0] == now:
            finish(heapq.heappop(running)[1], freed)
        release(freed)
    return Schedule(now, tuple(starts))


@dataclass
class Effort:
    """Attempts the schedule search may still simulate; one for all the time bounds of a check."""

    left: int

    def take(self, attempts: int) -> bool:
        if attempts > self.left:
            return False
        self.left -= attempts
        return True


def longest_schedule(loads: Loads, executions: Iterable[Sequence[bool]], workers: int, threshold: int,
                     effort: Effort) -> tuple[int, Schedule, Timing] | None:
    """A list schedule as long as can be found, of one of `executions`, to show that the runtime's
    order can overrun `threshold` (the position of the execution, its schedule and its timing);
    None when `effort` does not cover one simulation. `executions` is read lazily: none past the
    first whose schedule is over the threshold.

    A list schedule is not monotone (Graham 1969): a step that ends early, or a retry that is not
    needed, can let other steps take the workers first and delay a long one, so the schedule with
    every step at its worst is not the longest. The search: each execution with the worst timing,
    then, from the longest, a local search over the running steps in topological order — a step's
    attempts take no time, it succeeds at its first attempt, its failed attempts end at once or one
    second before another step ends while its first runs (and its last takes its whole time), or
    its attempts end one second before another step ends that ends while it runs (so the steps
    that one frees find a worker taken: `_early_ends`) — keeping every change that lengthens the schedule, pass after pass until none
    does, the schedule is over `threshold`, or `effort` is spent (each simulation costs the
    attempts it makes); then random timings (`_shaken`). It finds what it finds: a schedule over the threshold is a real execution;
    one within it proves nothing (Graham's bound decides the rest)."""
    worst = Timing.worst(loads)
    found: tuple[int, Schedule, Timing, Sequence[bool]] | None = None
    for number, runs in enumerate(executions):
        if not effort.take(_attempts_made(worst.attempts, runs)):
            break
        schedule = list_schedule(loads, runs, workers, worst)
        if found is None or schedule.makespan > found[1].makespan:
            found = (number, schedule, worst, runs)
        if found[1].makespan > threshold:
            break
    if found is None:
        return None
    number, best, timing, runs = found
    attempts, seconds, failing = list(worst.attempts), list(worst.seconds), list(worst.seconds)
    candidates = [index for index in range(len(loads)) if runs[index] and seconds[index] > 0]
    lengthened = True
    while lengthened and best.makespan <= threshold:
        lengthened = False
        for index in candidates:
            made, took, failed = attempts[index], seconds[index], failing[index]
            variants = [(made, 0, 0)] if took else []
            if made > 1:
                variants.append((1, took, failed))
                # the attempts that fail end early (at once, or just before another step ends) and
                # the last takes its whole time: the retry holds a worker later than it would
                variants += [(made, took, shorter) for shorter in [0, *_early_ends(best, index, failed, first=True)]
                             if shorter < failed]
            variants += [(made, shorter, shorter) for shorter in _early_ends(best, index, took)]
            for trial_attempts, trial_seconds, trial_failing in variants:
                attempts[index], seconds[index], failing[index] = trial_attempts, trial_seconds, trial_failing
                if not effort.take(_attempts_made(attempts, runs)):
                    attempts[index], seconds[index], failing[index] = made, took, failed
                    return number, best, timing
                trial = Timing(tuple(attempts), tuple(seconds), tuple(failing))
                schedule = list_schedule(loads, runs, workers, trial)
                if schedule.makespan > best.makespan:
                    best, timing, lengthened = schedule, trial, True
                    break
                attempts[index], seconds[index], failing[index] = made, took, failed
            if best.makespan > threshold:
                break
    if best.makespan <= threshold:
        best, timing = _shaken(loads, runs, workers, threshold, effort, best, timing)
    return number, best, timing


_SHAKES = 2_000  # random timings tried after the local search, at most


def _shaken(loads: Loads, runs: Sequence[bool], workers: int, threshold: int, effort: Effort,
            best: Schedule, timing: Timing) -> tuple[Schedule, Timing]:
    """The longest of `best` and random timings of `runs`: anomalies that need several steps to end
    early at once (Graham's example: every step one unit shorter), which changes of one step at a
    time do not reach. A trial either shortens a random half of the running steps to random times
    (and some retried steps to fewer attempts), or every step by one random amount; then some
    retried steps' failed attempts end sooner than their last. Seeded by the
    plan's size: the same plan gets the same answer. Stops over `threshold`, after `_SHAKES`
    trials, or when `effort` is spent."""
    rng = random.Random(len(loads))
    running = [index for index in range(len(loads)) if runs[index] and loads.seconds[index] > 0]
    if not running:
        return best, timing
    longest = max(loads.seconds[index] for index in running)
    for _ in range(_SHAKES):
        attempts, seconds = list(loads.attempts), list(loads.seconds)
        if rng.random() < 0.5:
            for index in running:
                if rng.random() < 0.5:
                    seconds[index] = rng.randint(0, seconds[index])
                if attempts[index] > 1 and rng.random() < 0.25:
                    attempts[index] = rng.randint(1, attempts[index])
        else:
            cut = rng.randint(1, longest)
            for index in running:
                seconds[index] = max(0, seconds[index] - cut)
        failing = list(seconds)
        for index in running:  # a retried step's failed attempts may end sooner than its last
            if attempts[index] > 1 and rng.random() < 0.25:
                failing[index] = rng.randint(0, seconds[index])
        if not effort.take(_attempts_made(attempts, runs)):
            break
        trial = Timing(tuple(attempts), tuple(seconds), tuple(failing))
        schedule = list_schedule(loads, runs, workers, trial)
        if schedule.makespan > best.makespan:
            best, timing = schedule, trial
            if best.makespan > threshold:
                break
    return best, timing


_EARLY_ENDS = 3  # ends of other steps a step is tried ending just before, the latest first


def _early_ends(schedule: Schedule, index: int, seconds: int, first: bool = False) -> list[int]:
    """Shorter times per attempt for step `index`, each one second less than would end its last
    attempt (with `first`, its first), as scheduled now, at another step's end during it (the
    latest few): a tie broken the other way round, which can hand a worker to a step that was
    waiting, ahead of the steps the other one frees (Graham's anomaly). With retries every attempt
    is that much shorter, so the last one starts earlier and ends earlier still: a real timing all
    the same."""
    attempts = [(start, end) for step, start, end in schedule.starts if step == index]
    if not attempts:
        return []
    start, end = min(attempts) if first else max(attempts)
    ends = sorted({other_end for step, _, other_end in schedule.starts
                   if step != index and start < other_end <= end}, reverse=True)
    return [other_end - 1 - start for other_end in ends[:_EARLY_ENDS] if 0 < other_end - 1 - start < seconds]


def _attempts_made(attempts: Sequence[int], runs: Sequence[bool]) -> int:
    """What one simulation costs of the search's effort: the attempts of the steps that run."""
    return sum(made for made, running in zip(attempts, runs) if running)


_SEEN_THROUGH = 8  # nearest running predecessors a step that does not run passes on


def never_more_than(loads: Loads, runs: Sequence[bool], workers: int) -> bool:
    """Whether no more than `workers` running steps are ever ready or running at once, whatever
    their times: then the limit never holds a step back and the makespan is the critical path.

    The steps ready or running at one moment are pairwise unordered (one that must follow
    another is not ready before it is done), so they are an antichain of the DAG, and covering the
    running steps by `workers` chains (sets of pairwise ordered steps) proves the claim (Dilworth).
    The cover is built greedily in topological order: a running step extends a chain whose last
    step is one of its nearest running predecessors (seen through steps that do not run, which
    still order), else opens a chain; more than `workers` chains and the answer is "not proven"
    (False), which leaves the caller's Graham bound. Linear in the edges: each step carries at
    most `_SEEN_THROUGH` nearest running predecessors past the steps that do not run.
    """
    chain_ending_at: dict[int, int] = {}  # the last step of each chain → the chain
    chains = 0
    nearest: list[tuple[int, ...]] = []  # per step: itself if it runs, else its nearest running predecessors
    for index, predecessors in enumerate(loads.predecessors):
        before: list[int] = []
        for predecessor in predecessors:
            before.extend(nearest[predecessor])
        if not runs[index]:
            nearest.append(tuple(dict.fromkeys(before))[:_SEEN_THROUGH])
            continue
        nearest.append((index,))
        extended = next((chain_ending_at.pop(step) for step in before if step in chain_ending_at), None)
        if extended is None:
            chains += 1
            if chains > workers:
                return False
            extended = chains
        chain_ending_at[index] = extended
    return True


def graham_bound(work: int, critical: int, workers: int) -> Fraction:
    return Fraction(work, workers) + (1 - Fraction(1, workers)) * critical

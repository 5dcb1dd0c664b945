"""Worst-case budget figures of one execution of a plan: exact dynamic programmes over the DAG.

An execution is given by which steps run (`runs`); a step that does not run costs nothing, makes
no call, takes no time and counts as done as soon as its predecessors are. For one execution,
with `attempts = retry + 1` and every attempt taking its step's whole time:

- cost  = Σ attempts × cost over running steps (money as integers in the plan's smallest unit);
- calls = Σ attempts;  work = Σ attempts × seconds;
- critical path = the longest path by attempts × seconds: the makespan with no concurrency
  limit, found by one pass in topological order (`finish[s] = own + max finish[pred]`);
- `list_schedule`: the makespan with `workers` steps at a time when ready steps start in plan
  order (a heap of finish times, a heap of ready steps keyed by plan position);
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
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

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


def list_schedule(loads: Loads, runs: Sequence[bool], workers: int) -> Schedule:
    """Greedy list scheduling as the runtime does it: whenever a worker is free, start the ready step
    first in topological order (`loads` is in that order)."""
    own = step_times(loads, runs)
    size = len(own)
    waiting = [len(predecessors) for predecessors in loads.predecessors]
    successors: list[list[int]] = [[] for _ in range(size)]
    for index, predecessors in enumerate(loads.predecessors):
        for predecessor in predecessors:
            successors[predecessor].append(index)
    ready = [i for i in range(size) if waiting[i] == 0]
    heapq.heapify(ready)
    running: list[tuple[int, int]] = []  # (end, step)
    starts: list[tuple[int, int, int]] = []
    now = 0

    def finish(index: int) -> None:
        for successor in successors[index]:
            waiting[successor] -= 1
            if waiting[successor] == 0:
                heapq.heappush(ready, successor)

    while ready or running:
        while ready:
            index = ready[0]
            if not runs[index]:  # a skipped step takes no worker and is done at once
                heapq.heappop(ready)
                finish(index)
                continue
            if len(running) >= workers:
                break
            heapq.heappop(ready)
            starts.append((index, now, now + own[index]))
            heapq.heappush(running, (now + own[index], index))
        if not running:
            continue
        now, index = heapq.heappop(running)
        finish(index)
        while running and running[0][0] == now:
            finish(heapq.heappop(running)[1])
    return Schedule(now, tuple(starts))


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

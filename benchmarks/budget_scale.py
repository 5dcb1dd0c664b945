"""How the budget check scales: generated plans of 1,000 and 10,000 steps with branch groups.

Each plan is a DAG whose steps depend on 1–3 recent steps (`after`). Every so often a *pivot*
step gets a branch group: 2–4 conditional steps reading the pivot's result. Most groups are
switches (`kind == "a"` or `kind in ["a", "e"]`, `kind == "b"`…: at most one branch runs), some
are compatible ranges (`n > 0`, `n > 3`: all can run), and one in ten splits on parity
(`n % 2 == 0` / `== 1`: arithmetic, which only the solver decides). The plan's
cost and calls budgets are set exactly at the true worst case (computed from how the generator
built the groups), so the check has to *prove* the plan within budget; a second run sets the
cost budget one unit lower, so the check has to find the witness. The time budget is set at the
critical path of the plan with every step running (no branch group shortens it), under
`limit concurrency` large enough not to bind.

Prints one row per plan: steps, branch groups, the time to parse and build the graph (for
reference), the budget check's time (the best of three runs) and the solver's share of it, and the
verdicts.

    python benchmarks/budget_scale.py [--steps 1000 10000] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

from plangate.budget import critical_path
from plangate.checks import budget
from plangate.checks.context import PlanContext
from plangate.graph import build_graph
from plangate.policy.compiled import compile_policies
from plangate.smt import solve
from plangate.source import SourceFile
from plangate.syntax import parse_source

REPEAT = 3
POLICY = """policy bench {
  tool bench.* { risk read_only }
  limit concurrency <= 100000
}"""


@dataclass
class Generated:
    text: str
    groups: int
    worst_cost: int
    worst_calls: int


def generate(steps: int, seed: int, cost_budget_delta: int = 0) -> Generated:
    rng = random.Random(seed)
    lines: list[str] = []
    unconditional_cost = unconditional_calls = 0
    group_cost = group_calls = 0
    groups = 0
    index = 0
    while index < steps:
        window = range(max(0, index - 30), index)
        deps = rng.sample(list(window), min(len(window), rng.randint(1, 3)))
        after = f" after {', '.join(f's{d}' for d in deps)}" if deps else ""
        cost, retry = rng.randint(1, 9), rng.randint(0, 2)
        lines.append(f"  step s{index}{after} {{ call bench.run(n: {index}) cost {cost} usd retry {retry} time 1m }}")
        unconditional_cost += cost * (retry + 1)
        unconditional_calls += retry + 1
        pivot = index
        index += 1
        if index + 4 >= steps or rng.random() > 0.55 or index < 3:
            continue
        groups += 1
        shape = rng.random()
        parity, switch = shape < 0.1, shape < 0.8
        size = 2 if parity else rng.randint(2, 4)
        listed = rng.random() < 0.3
        branch_costs, branch_calls = [], []
        for branch in range(size):
            cost, retry = rng.randint(1, 60), rng.randint(0, 1)
            if parity:  # arithmetic: beyond the simple conditions, so the solver decides
                condition = f"s{pivot}.result.n % 2 == {branch}"
            elif switch and listed and branch == 0:
                condition = f's{pivot}.result.kind in ["a", "e"]'
            elif switch:
                condition = f's{pivot}.result.kind == "{"abcd"[branch]}"'
            else:
                condition = f"s{pivot}.result.n > {branch * 3}"
            lines.append(f"  step s{index} after s{pivot} {{ call bench.branch(n: {index}) when {condition} "
                         f"cost {cost} usd retry {retry} time 1m }}")
            branch_costs.append(cost * (retry + 1))
            branch_calls.append(retry + 1)
            index += 1
        group_cost += max(branch_costs) if switch else sum(branch_costs)
        group_calls += max(branch_calls) if switch else sum(branch_calls)
    worst_cost = unconditional_cost + group_cost
    worst_calls = unconditional_calls + group_calls
    header = (f"plan bench_{steps} {{\n  budget {{ cost <= {worst_cost + cost_budget_delta} usd "
              f"calls <= {worst_calls} time <= {{time}} }}")
    body = "\n".join(lines)
    return Generated(header + "\n" + body + "\n}\n", groups, worst_cost, worst_calls)


def run(steps: int, seed: int, cost_budget_delta: int) -> dict[str, object]:
    generated = generate(steps, seed, cost_budget_delta)
    policy, _ = compile_policies(parse_source(SourceFile("bench.policy", POLICY)).document.policies)
    # the time budget: the critical path with every step running (found once, then written in)
    probe = parse_source(SourceFile("bench.plan", generated.text.replace("{time}", "1d"))).document.plans[0]
    probe_ctx = PlanContext(probe, build_graph(probe), policy)
    loads = budget.evaluate(probe_ctx).loads
    longest, _ = critical_path(loads, [True] * len(loads))
    text = generated.text.replace("{time}", f"{longest}s")

    started = time.perf_counter()
    plan = parse_source(SourceFile("bench.plan", text)).document.plans[0]
    graph = build_graph(plan)
    parsed = time.perf_counter() - started

    context = PlanContext(plan, graph, policy)
    timings = []
    for _ in range(REPEAT):  # the best of a few runs: the machine may be shared
        started = time.perf_counter()
        report = budget.evaluate(context)
        timings.append((time.perf_counter() - started,
                        report.branches.solver_seconds if report.branches is not None else 0.0))
    checked, solver = min(timings)
    verdicts = sorted(f"{finding.bound.figure}:{finding.verdict}" for finding in report.findings) or ["within"]
    return {"steps": steps, "groups": generated.groups, "parse": parsed, "check": checked, "solver": solver,
            "verdicts": ", ".join(verdicts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=7)
    arguments = parser.parse_args()
    solve.prepare()  # the worker's start-up (~0.1 s) is paid once per process, not per plan
    print(f"{'steps':>7} {'groups':>6} {'budget':>9} {'parse+graph':>12} {'budget check':>13} {'solver':>8}  verdicts")
    for steps in arguments.steps:
        for label, delta in (("= worst", 0), ("< worst", -1)):
            row = run(steps, arguments.seed, delta)
            print(f"{row['steps']:>7} {row['groups']:>6} {label:>9} {row['parse'] * 1000:>10.0f}ms "
                  f"{row['check'] * 1000:>11.0f}ms {row['solver'] * 1000:>6.0f}ms  {row['verdicts']}")


if __name__ == "__main__":
    main()

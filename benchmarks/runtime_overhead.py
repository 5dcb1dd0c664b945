"""What the runtime costs per step, against a policy engine and an agent-graph runtime.

    python benchmarks/runtime_overhead.py [--steps 10,1000] [--decisions 20000]

Prints one table (figures in milliseconds or microseconds; a ratio below 1 means plangate is faster):

1. Engine overhead per step: a linear plan of N steps whose tool returns at once, run by `Runtime.advance`
   on a fresh SQLite journal in a temporary folder, under a policy of ten deny rules. The time of
   `advance` divided by N: the decision on the concrete call, the journal records around the effect
   (intent, result, state; each committed with an fsync), and the pass that re-reads the run. The
   static check at `start` is left out (it is `plangate check`'s cost, paid once).
2. Decision per step, ten rules: `Evaluator.decide_call` (the rules compiled once into closures) on
   the activation the runtime builds for a step, against cedarpy's `is_authorized` with a pre-parsed
   `PolicySet` and `Entities` on ten equivalent Cedar policies (one `forbid` per deny rule, one
   `permit` for the rest). Both decide the same eight calls (allowed and denied ones); the script
   stops if the two engines disagree on any. Best of five repeats, mean per call.
3. Per-node overhead of LangGraph with its SQLite checkpointer (`SqliteSaver`, WAL, durability
   "sync": a checkpoint committed before the next node, as plangate commits before each effect) on
   a linear graph of N nodes that return at once, against line 1 for the same N.

An untimed warm-up goes first (imports, first compilations). Lines 1 and 3 alternate plangate and
LangGraph runs, so that both meet the same disk (an fsync's cost varies a lot on shared machines);
sizes up to 100 take the median of three runs, larger ones a single run. The first line of the
table, one journal append (a commit with its fsync), gives the scale: a step makes three.

cedarpy and langgraph are benchmark-only extras (`pip install cedarpy langgraph
langgraph-checkpoint-sqlite`); without them their rows say "not installed".
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from plangate.driver import check_sources  # first: it loads the checks before plangate.policy.facts
from plangate.policy.decide import Evaluator
from plangate.policy.facts import rule_activation, step_facts
from plangate.runtime.host import Runtime
from plangate.runtime.journal import Journal
from plangate.runtime.tools import ToolRegistry, tool
from plangate.source import SourceFile

POLICY = """
policy bench {
  version 1
  tool bench.noop      { risk read_only }
  tool db.drop         { risk irreversible }
  tool db.query        { risk read_only }
  tool payments.refund { risk irreversible }
  tool dns.route       { risk external_write }
  tool pager.page      { risk external_write }
  tool email.send      { risk external_write }
  tool chat.post       { risk external_write }
  tool deploy.*        { risk reversible_write }
  tool http.get        { risk read_only }
  unknown_tools deny

  deny "no-prod-drops"       when call.tool == "db.drop" && args.env == "prod"
  deny "refund-cap"          when call.tool == "payments.refund" && args.amount > 500.0
  deny "no-wildcard-dns"     when call.tool == "dns.route" && args.host.startsWith("*")
  deny "query-reads-only"    when call.tool == "db.query" && !args.sql.startsWith("SELECT ")
  deny "no-sev1"             when call.tool == "pager.page" && args.severity == "sev1"
  deny "retry-cap"           when step.risk >= external_write && step.retry > 3
  deny "no-competitor-mail"  when call.tool == "email.send" && args.to.endsWith("@competitor.example")
  deny "quiet-general"       when call.tool == "chat.post" && args.channel == "#general"
  deny "no-embargoed-region" when call.tool.startsWith("deploy.") && args.region in ["cn-north-1", "ap-east-1"]
  deny "https-only"          when call.tool == "http.get" && args.url.startsWith("http://")
}
"""

CEDAR = r"""
permit(principal, action, resource);
@id("no-prod-drops") forbid(principal, action, resource == Tool::"db.drop") when { context.args.env == "prod" };
@id("refund-cap") forbid(principal, action, resource == Tool::"payments.refund")
  when { context.args.amount.greaterThan(decimal("500.0")) };
@id("no-wildcard-dns") forbid(principal, action, resource == Tool::"dns.route") when { context.args.host like "\**" };
@id("query-reads-only") forbid(principal, action, resource == Tool::"db.query") unless { context.args.sql like "SELECT *" };
@id("no-sev1") forbid(principal, action, resource == Tool::"pager.page") when { context.args.severity == "sev1" };
@id("retry-cap") forbid(principal, action, resource) when { context.risk >= 2 && context.retry > 3 };
@id("no-competitor-mail") forbid(principal, action, resource == Tool::"email.send")
  when { context.args.to like "*@competitor.example" };
@id("quiet-general") forbid(principal, action, resource == Tool::"chat.post") when { context.args.channel == "#general" };
@id("no-embargoed-region") forbid(principal, action, resource)
  when { context.tool like "deploy.*" && ["cn-north-1", "ap-east-1"].contains(context.args.region) };
@id("https-only") forbid(principal, action, resource == Tool::"http.get") when { context.args.url like "http://*" };
"""

# (step, call in plan syntax, whether the rules deny it); the same calls are put to Cedar.
CALLS = [
    ("route", 'dns.route(host: "v2.example.com", target: "pv-42")', False),
    ("wildcard", 'dns.route(host: "*.example.com", target: "pv-42")', True),
    ("refund", 'payments.refund(amount: 49.99, currency: "USD")', False),
    ("big_refund", 'payments.refund(amount: 900.0, currency: "USD")', True),
    ("query", 'db.query(sql: "SELECT count(*) FROM orders")', False),
    ("write_query", 'db.query(sql: "DELETE FROM orders")', True),
    ("preview", 'deploy.preview(artifact: "web.tar", region: "eu-west-1")', False),
    ("noop", "bench.noop(n: 1)", False),
]
RISK_OF = {"read_only": 0, "reversible_write": 1, "external_write": 2, "irreversible": 3}


@tool("bench.noop")
def noop(n: int) -> dict:
    return {"n": n}


def linear_plan(steps: int) -> str:
    lines = [f"  step s{i}{f' after s{i - 1}' if i else ''} {{ call bench.noop(n: {i}) risk read_only }}"
             for i in range(steps)]
    return "plan bench {\n  version 1\n" + "\n".join(lines) + "\n}\n"


def engine_per_step(steps: int) -> float:
    """Seconds per step of `Runtime.advance` on a linear plan of `steps` instant steps."""
    registry = ToolRegistry()
    registry.register(noop)
    with tempfile.TemporaryDirectory() as folder, Journal.open(Path(folder) / "journal.db") as journal:
        runtime = Runtime(journal, registry)
        run = runtime.start(linear_plan(steps), "bench.plan", [("bench.policy", POLICY)])
        started = time.perf_counter()
        report = runtime.advance(run)
        elapsed = time.perf_counter() - started
    assert report.state == "succeeded", report.message
    return elapsed / steps


def append_time(count: int = 100) -> float:
    """Seconds per journal append: one SQLite commit in WAL mode with synchronous=FULL."""
    with tempfile.TemporaryDirectory() as folder, Journal.open(Path(folder) / "journal.db") as journal:
        started = time.perf_counter()
        for _ in range(count):
            journal.append("bench", "state", {"state": "ready", "reason": "timing"}, step="s")
        return (time.perf_counter() - started) / count


def activations() -> list[tuple[dict[str, Any], bool]]:
    """The activation the runtime builds for each of `CALLS`, and whether it must be denied."""
    text = "plan calls {\n  version 1\n" + "\n".join(
        f"  step {name} {{ call {call} }}" for name, call, _ in CALLS) + "\n}\n"
    result = check_sources([SourceFile("calls.plan", text)], [SourceFile("bench.policy", POLICY)])
    plan, policy = result.plans[0], result.policy
    return [(rule_activation(step_facts(plan.step(name), policy), plan), denied) for name, _, denied in CALLS]


def cedar_requests(found: list[tuple[dict[str, Any], bool]]) -> list[dict[str, Any]]:
    def value(item: Any) -> Any:
        if isinstance(item, float):
            return {"__extn": {"fn": "decimal", "arg": repr(item)}}
        return item

    return [{"principal": 'Agent::"planner"', "action": 'Action::"call"',
             "resource": {"type": "Tool", "id": activation["call"]["tool"]},
             "context": {"tool": activation["call"]["tool"], "risk": activation["step"]["risk"],
                         "retry": activation["step"]["retry"],
                         "args": {k: value(v) for k, v in activation["args"].items()}}}
            for activation, _ in found]


def per_call(function: Callable[[Any], Any], inputs: list[Any], rounds: int) -> float:
    """Best of five: the mean seconds of one call of `function` over `inputs`, `rounds` calls each."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds // len(inputs)):
            for item in inputs:
                function(item)
        best = min(best, (time.perf_counter() - started) / (rounds // len(inputs) * len(inputs)))
    return best


def decision_times(rounds: int) -> tuple[float, float | None]:
    found = activations()
    evaluator = Evaluator(check_sources([], [SourceFile("bench.policy", POLICY)]).policy)
    for activation, denied in found:
        assert bool(evaluator.decide_call(activation).denied_by) == denied, activation["call"]
    ours = per_call(evaluator.decide_call, [activation for activation, _ in found], rounds)
    try:
        import cedarpy
    except ImportError:
        return ours, None
    policies = cedarpy.PolicySet.from_str(CEDAR)
    entities = cedarpy.Entities.from_json_str("[]")
    requests = cedar_requests(found)
    for request, (_, denied) in zip(requests, found):
        decision = cedarpy.is_authorized(request, policies, entities).decision
        assert (decision == cedarpy.Decision.Deny) == denied, (request, decision)
    return ours, per_call(lambda request: cedarpy.is_authorized(request, policies, entities), requests, rounds)


def langgraph_per_node(nodes: int) -> float | None:
    """Seconds per node of a LangGraph run with a SQLite checkpointer, or None when not installed."""
    try:
        from typing import TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    class State(TypedDict):
        n: int

    def step(state: State) -> dict:
        return {"n": state["n"] + 1}

    graph = StateGraph(State)
    for i in range(nodes):
        graph.add_node(f"s{i}", step)
        graph.add_edge(f"s{i - 1}" if i else START, f"s{i}")
    graph.add_edge(f"s{nodes - 1}", END)
    with tempfile.TemporaryDirectory() as folder:
        connection = sqlite3.connect(Path(folder) / "checkpoints.db", check_same_thread=False)
        try:
            app = graph.compile(checkpointer=SqliteSaver(connection))
            config = {"configurable": {"thread_id": "bench"}, "recursion_limit": nodes + 10}
            started = time.perf_counter()
            final = app.invoke({"n": 0}, config, durability="sync")
            elapsed = time.perf_counter() - started
        finally:
            connection.close()
    assert final["n"] == nodes
    return elapsed / nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="10,1000", help="plan sizes, comma-separated (default: 10,1000)")
    parser.add_argument("--decisions", type=int, default=20_000, help="decisions per timing round")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.steps.split(",")]

    rows: list[tuple[str, str, str, str, str]] = []

    def ratio(ours: float, theirs: float | None) -> str:
        return "—" if theirs is None else f"{ours / theirs:.2f}"

    def shown(seconds: float | None, scale: float, unit: str) -> str:
        return "not installed" if seconds is None else f"{seconds * scale:.{1 if unit == 'µs' else 2}f} {unit}"

    print("timing journal commits…", file=sys.stderr)
    rows.append(("one journal append (a commit with fsync), for scale", shown(append_time(), 1e3, "ms"), "", "", ""))
    engine_per_step(2), langgraph_per_node(2)  # warm-up: imports and first compilations
    engine, graph = {}, {}
    for size in sizes:
        print(f"running {size} steps and {size} LangGraph nodes…", file=sys.stderr)
        ours, theirs = [], []
        for _ in range(3 if size <= 100 else 1):  # alternate, so that both see the same disk
            ours.append(engine_per_step(size))
            theirs.append(langgraph_per_node(size))
        engine[size] = statistics.median(ours)
        graph[size] = None if None in theirs else statistics.median(theirs)
        rows.append((f"engine overhead per step, {size:,} steps", shown(engine[size], 1e3, "ms"), "", "", ""))
    print("timing decisions…", file=sys.stderr)
    ours_decision, cedar = decision_times(args.decisions)
    rows.append(("decision per step, 10 rules (vs cedarpy is_authorized)", shown(ours_decision, 1e6, "µs"),
                 shown(cedar, 1e6, "µs"), ratio(ours_decision, cedar), "< 1"))
    for size in sizes:
        rows.append((f"per-node overhead, {size:,} nodes (vs LangGraph + SqliteSaver)", shown(engine[size], 1e3, "ms"),
                     shown(graph[size], 1e3, "ms"), ratio(engine[size], graph[size]), "< 1"))

    headers = ("measure", "plangate", "other", "ratio", "goal")
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())

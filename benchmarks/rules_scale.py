"""How deciding rules on values known only at run time scales with the number of steps.

    python benchmarks/rules_scale.py [--sizes 100,400,800] [--forget]

Generates a plan of N steps, each calling `svc.op(n: …, name: "app-" + sK.result.name + ".internal")`
on the previous step's result, under a policy with a deny rule that must fire on every such call
(`size(args.name) > 12`) and two requirements on the arguments (`contains`, arithmetic). Every step
asks the solver the same questions of values of the same shape. Checks each plan once in process
(`check_sources`) and prints, per size: the time, the queries sent to the solver, and the
diagnostics by name. `--forget` keeps no solver answer between questions (`MAX_REMEMBERED = 0`), to
compare with asking each step afresh; those runs may reach the command's 30 s solver allowance,
after which rules are `decided-at-run-time`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "engine"))  # run from a checkout even when plangate is not installed

from plangate.driver import check_sources  # noqa: E402
from plangate.smt import solve  # noqa: E402
from plangate.source import SourceFile  # noqa: E402

POLICY = """policy p {
  tool src.read { risk read_only args { id: string } }
  tool svc.op   { risk read_only args { n: int, name: string } }
  require approval when args.name.contains("pay") by role "ops"
  require approval when args.n * 2 > 1000 by role "fin"
  deny "long-name" when call.tool == "svc.op" && size(args.name) > 12
}
"""


def generate_plan(steps: int) -> str:
    lines = ["plan p {", '  step s0 { call src.read(id: "root") }']
    for i in range(1, steps):
        lines.append(f'  step s{i} {{ call svc.op(n: s{i - 1}.result.n % 1000, name: "app-" + s{i - 1}.result.name '
                     f'+ ".internal") approval by role "ops" approval by role "fin" }}')
    return "\n".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,400,800")
    parser.add_argument("--forget", action="store_true", help="keep no solver answer between questions")
    args = parser.parse_args(argv)
    if args.forget:
        solve.MAX_REMEMBERED = 0
    sent: list[int] = []
    request = solve._request

    def counting(message, time_bound):
        sent.append(len(message.get("queries", message.get("groups", ()))))
        return request(message, time_bound)

    solve._request = counting
    policy = [SourceFile("p.policy", POLICY)]
    check_sources([SourceFile("warm.plan", generate_plan(2))], policy)  # the grammar, the solver's worker
    print(f"rules on run-time values, in process; solver answers {'forgotten' if args.forget else 'remembered'}")
    print(f"{'steps':>7} {'time':>11} {'queries':>8}  diagnostics")
    for size in (int(text) for text in args.sizes.split(",")):
        solve.forget_answers()
        sent.clear()
        started = time.perf_counter()
        result = check_sources([SourceFile("p.plan", generate_plan(size))], policy)
        elapsed = time.perf_counter() - started
        counts = collections.Counter(d.name for d in result.diagnostics)
        shown = ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
        print(f"{size:>7,} {elapsed * 1000:>8,.1f} ms {sum(sent):>8,}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Instructions the parser executes on a generated plan: a timing that does not depend on the machine's load.

    python benchmarks/parse_instructions.py [--steps 1000] [--checkout DIR]...

Wall-clock timings on a shared two-core machine vary by ±10% from one process to the next, which
hides a change of a few percent. Counting instructions does not: each checkout's parse of the plan
of `check_scale.generate_plan(steps)` runs under valgrind's callgrind, once with the parse and once
without (the same imports and a warm-up parse of a one-step plan), and the difference is printed,
in millions. Give `--checkout` twice (e.g. a `git worktree` of the last release and this tree) to
compare two versions in one table. Needs `valgrind` on the PATH; takes about 30 s per checkout.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_scale import generate_plan  # noqa: E402

_PROGRAM = """
import sys
sys.path.insert(0, sys.argv[1])
from plangate.source import SourceFile
from plangate.syntax import parse_source
parse_source(SourceFile("warm.plan", "plan w { step a { call t.x(a: 1 + b.result.c) expect result.x == 2 } }"))
text = open(sys.argv[2], encoding="utf-8").read()
if sys.argv[3] == "parse":
    parse_source(SourceFile("scale.plan", text))
"""


def instructions(engine: Path, plan: Path, mode: str) -> int:
    completed = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", _PROGRAM,
         str(engine), str(plan), mode], capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", completed.stderr)
    if completed.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed for {engine}: {completed.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--checkout", action="append", default=[], metavar="DIR",
                        help="a checkout of plangate (default: this one)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing measured")
        return 2
    checkouts = [Path(path) for path in args.checkout] or [ROOT]
    with tempfile.TemporaryDirectory() as folder:
        plan = Path(folder, "scale.plan")
        plan.write_text(generate_plan(args.steps)[0], encoding="utf-8")
        print(f"instructions of one parse of the {args.steps:,}-step plan (callgrind, millions)")
        for checkout in checkouts:
            engine = checkout / "engine"
            counted = instructions(engine, plan, "parse") - instructions(engine, plan, "skip")
            print(f"  {counted / 1e6:>9,.0f} M  {checkout}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

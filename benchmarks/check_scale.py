"""How the static check scales with plan size, and how fast the command line starts.

    python benchmarks/check_scale.py [--policy FILE]... [--sizes 100,1000,10000] [--runs 3]

Generates plans of 100, 1,000 and 10,000 steps (see `generate_plan`), checks each in process with
`plangate.driver.check_sources` (best of `--runs`), and prints, per size: the file size, the time of
each stage from the driver's `timings` (parse+model, graph, checks), the total, and the ratio of the
total to `json.loads` of the same plan written as JSON. Then the wall-clock time of `plangate
--version` and of `plangate check` on one example (best of 5, child processes). Targets are printed
next to the figures. See benchmarks/README.md for what each column means.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "engine"))  # run from a checkout even when plangate is not installed

from plangate.driver import check_sources  # noqa: E402
from plangate.source import SourceFile  # noqa: E402

TARGETS = {1_000: 0.150, 10_000: 1.5}  # seconds, total check time: structure (issue 2)
POLICY_TARGETS = {1_000: 0.200, 10_000: 1.5}  # with policy checks and budget proofs (issue 3)
VERSION_TARGET = 0.100
EXAMPLE_TARGET = 0.300

# Read-only tools of policies/baseline.policy, with arguments of the catalogued types.
TOOLS = [
    ("logs.search", ["service", "query", "since"]),
    ("metrics.query", ["query", "window"]),
    ("ci.test", ["commit", "suite"]),
    ("web.search", ["query", "max_results"]),
]


def generate_plan(steps: int, seed: int = 7) -> tuple[str, dict]:
    """A plan of `steps` steps, as plan text and as an equivalent JSON-able document.

    Step i depends on 1–3 earlier steps, mostly near ones: some through `after`, some through
    `sK.result.…` references in its arguments. A third of the steps sit in conditional branch
    groups: runs of three steps whose `when` tests an earlier step's result, alternately the "then"
    and the "else" side of one condition. Every step has a call with 2–3 arguments, a risk, a cost
    (a range or an amount), a time bound, a retry count and an `expect`.
    """
    rng = random.Random(seed)
    lines = [f"plan scale_{steps} {{", "  version 1", f'  objective "a generated plan of {steps} steps"', ""]
    document: dict = {"plan": {"id": f"scale_{steps}", "version": 1,
                               "objective": f"a generated plan of {steps} steps", "steps": []}}
    condition: str | None = None
    for i in range(steps):
        name = f"s{i}"
        earlier = sorted({max(0, i - 1 - int(rng.expovariate(0.15))) for _ in range(rng.randint(1, 3))}) if i else []
        after = [f"s{k}" for k in earlier[: len(earlier) // 2 + (len(earlier) % 2)]]
        referenced = [f"s{k}" for k in earlier[len(after):]]
        if i % 9 == 3 and i > 3:  # a branch group of three starts: then, else, then
            pivot = f"s{rng.randrange(i)}"
            condition = f'{pivot}.result.mode == "fast"'
        when = None
        if condition is not None and i % 9 in (3, 4, 5):
            when = condition if i % 9 != 4 else condition.replace("==", "!=")
        tool, params = TOOLS[i % len(TOOLS)]
        strings = [param for param in params if param != "max_results"]
        args: dict[str, str] = {}
        for index, param in enumerate(params):
            if param == "max_results":
                args[param] = str(rng.randint(3, 20))
            elif index < len(referenced):
                args[param] = f'"{param}-" + {referenced[index]}.result.{param}'
            else:
                args[param] = f'"{param}-{i}"'
        after.extend(referenced[len(strings):])  # a dependency that found no argument to live in
        cost = "0.01..0.05 usd" if i % 2 else "0.02 usd"
        expect = "result.status == 200" if i % 3 else f'result.count >= 0 && result.source == "{tool}"'
        retry = 1 + i % 2
        head = f"  step {name}" + (f" after {', '.join(after)}" if after else "") + " {"
        body = [f"    call   {tool}({', '.join(f'{k}: {v}' for k, v in args.items())})",
                "    risk   read_only", f"    cost   {cost}", "    time   2m", f"    retry  {retry}",
                f"    expect {expect}"]
        if when:
            body.insert(0, f"    when   {when}")
        lines += [head, *body, "  }"]
        low, _, high = cost.partition(" ")[0].partition("..")
        document["plan"]["steps"].append({
            "id": name, "after": after, "when": when,
            "call": {"tool": tool, "args": args},
            "risk": "read_only",
            "cost": {"min": low, "max": high or low, "currency": "usd"},
            "time": "2m", "retry": retry, "expect": [expect],
        })
    lines.append("}")
    return "\n".join(lines) + "\n", document


def best_of(runs: int, function):
    best = None
    for _ in range(runs):
        value = function()
        if best is None or value[0] < best[0]:
            best = value
    return best


def time_check(text: str, policies: list[SourceFile], runs: int) -> tuple[float, dict, int]:
    def once():
        source = SourceFile("scale.plan", text)
        started = time.perf_counter()
        result = check_sources([source], policies)
        return time.perf_counter() - started, result.timings, len(result.diagnostics)
    return best_of(runs, once)


def time_json(text: str, runs: int) -> float:
    def once():
        started = time.perf_counter()
        json.loads(text)
        return (time.perf_counter() - started,)
    return best_of(runs, once)[0]


def time_command(argv: list[str], runs: int = 5) -> tuple[float, int]:
    def once():
        started = time.perf_counter()
        completed = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started, completed.returncode
    return best_of(runs, once)


def plangate_command() -> list[str]:
    script = Path(sys.executable).with_name("plangate")
    if script.is_file():
        return [str(script)]
    found = shutil.which("plangate")
    return [found] if found else [sys.executable, "-m", "plangate.cli"]


def compile_bytecode() -> None:
    """Write the package's bytecode, as `pip install` does, so start-up is not measured compiling source.

    (Python compiles a module without bytecode at every import when it may not write the cache, e.g.
    under `PYTHONDONTWRITEBYTECODE=1`; an installed wheel has its bytecode written at install time.)
    """
    import plangate
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(plangate.__file__).parent)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def size(count: int) -> str:
    return f"{count / 1024:,.0f} KiB" if count < 1024 * 1024 else f"{count / 1024 / 1024:,.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", action="append", default=[], metavar="FILE",
                        help="check against these policies too (catalogue, requirements, rules, budgets)")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--example", default="examples/deploy.plan")
    parser.add_argument("--dump", metavar="DIR", help="also write the generated plans (and JSON) to DIR")
    args = parser.parse_args(argv)

    policies = [SourceFile(path, Path(path).read_text(encoding="utf-8")) for path in args.policy]
    check_sources([SourceFile("warm.plan", "plan w { step a { call t.x() } }")], policies)  # load the parser

    print(f"plangate check, in process, best of {args.runs}"
          + (f"; policies: {', '.join(args.policy)}" if args.policy else "; no policy (structure checks only)"))
    header = f"{'steps':>7} {'file':>9} {'parse+model':>12} {'graph':>10} {'checks':>10} {'total':>10} " \
             f"{'json.loads':>11} {'ratio':>6} {'diags':>6}  target"
    print(header)
    print("-" * len(header))
    slowest: dict[str, float] = {}
    for steps in (int(part) for part in args.sizes.split(",")):
        text, document = generate_plan(steps)
        as_json = json.dumps(document)
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            Path(args.dump, f"scale_{steps}.plan").write_text(text, encoding="utf-8")
            Path(args.dump, f"scale_{steps}.json").write_text(as_json, encoding="utf-8")
        total, timings, diagnostics = time_check(text, policies, args.runs)
        loads = time_json(as_json, args.runs)
        target = (POLICY_TARGETS if policies else TARGETS).get(steps)
        verdict = "" if target is None else f"≤ {ms(target)} {'ok' if total <= target else 'MISSED'}"
        print(f"{steps:>7,} {size(len(text.encode())):>9} {ms(timings['parse']):>12} {ms(timings['graph']):>10} "
              f"{ms(timings['checks']):>10} {ms(total):>10} {ms(loads):>11} {total / loads:>5.0f}x "
              f"{diagnostics:>6}  {verdict}")
        if steps == max(int(part) for part in args.sizes.split(",")):
            slowest = {key[6:]: value for key, value in timings.items() if key.startswith("check:")}
            slowest["(policy compile)"] = timings.get("policy", 0.0)
    if slowest:
        ranked = sorted(slowest.items(), key=lambda item: -item[1])[:5]
        print("largest plan, slowest checks: " + ", ".join(f"{name} {ms(value)}" for name, value in ranked))

    print()
    command = plangate_command()
    compile_bytecode()
    version, _ = time_command([*command, "--version"])
    print(f"{'plangate --version':<72} {ms(version):>10}  ≤ {ms(VERSION_TARGET)} "
          f"{'ok' if version <= VERSION_TARGET else 'MISSED'}")
    example = args.example
    if (ROOT / example).is_file():
        runs = [[*command, "check", example]]
        if (ROOT / "policies" / "baseline.policy").is_file():
            runs.append([*command, "check", example, "--policy", "policies/baseline.policy"])
        for argv_ in runs:
            wall, code = time_command(argv_)
            shown = "plangate " + " ".join(argv_[len(command):])
            print(f"{shown:<72} {ms(wall):>10}  ≤ {ms(EXAMPLE_TARGET)} "
                  f"{'ok' if wall <= EXAMPLE_TARGET else 'MISSED'} (exit {code})")
    print(f"(wall clock of a child process, best of 5, bytecode compiled as by `pip install`; "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

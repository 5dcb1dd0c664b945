"""How `plangate policy diff` scales with the size of the policies compared.

Generates a policy of N tools and N deny rules (each rule names its tool: `call.tool == "svcK.op"
&& args.amount > … && args.env == "prod"`) and N/10 approval requirements over `step.risk` and
`args.amount`, then two NEW versions of it:

- `near`: three deny rules raise their threshold and one tool's risk changes — the review of a
  small edit, the usual case;
- `every`: every threshold, risk and cap drawn afresh — every class of tools differs.

Each pair is compiled once and diffed in process (`plangate.policy.diff.diff_policies`), best of
`--runs`. Prints one row per size and version: the tools, the rules, the time, the solver's share
of it (the time spent waiting for the solver's worker) and how many changes were found.

    python benchmarks/diff_scale.py [--sizes 20,100,300] [--runs 3] [--versions near,every]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "engine"))  # run from a checkout even when plangate is not installed

from plangate.policy.compiled import compile_policies  # noqa: E402
from plangate.policy.diff import diff_policies  # noqa: E402
from plangate.smt import solve  # noqa: E402
from plangate.source import SourceFile  # noqa: E402
from plangate.syntax import parse_source  # noqa: E402

RISKS = ["read_only", "reversible_write", "external_write", "irreversible"]


def generate_policy(size: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = [f"policy p{size} {{", "  version 1"]
    for i in range(size):
        lines.append(f"  tool svc{i}.op {{ risk {rng.choice(RISKS)} cost <= {rng.randint(1, 50)} usd "
                     "args { amount: double, env: string } }")
    for i in range(size):
        lines.append(f'  deny "r{i}" when call.tool == "svc{i}.op" && args.amount > {rng.randint(100, 1000)}.0 '
                     '&& args.env == "prod"')
    for i in range(size // 10):
        lines.append(f"  require approval when step.risk >= external_write && args.amount > {rng.randint(1, 99)}.0 "
                     f'by role "op{i}" within 1h')
    lines += ["  limit cost <= 100 usd", "}"]
    return "\n".join(lines) + "\n"


def near_version(text: str) -> str:
    """Three deny thresholds raised by 50 and the risk of `svc3.op` changed."""
    lines = text.splitlines()
    raised = 0
    for index, line in enumerate(lines):
        if line.strip().startswith('deny "r') and raised < 3:
            lines[index] = re.sub(r"> (\d+)\.0", lambda m: f"> {int(m.group(1)) + 50}.0", line)
            raised += 1
        elif line.strip().startswith("tool svc3.op "):
            risk = re.search(r"risk (\w+)", line).group(1)  # type: ignore[union-attr]
            lines[index] = line.replace(f"risk {risk}", f"risk {RISKS[(RISKS.index(risk) + 1) % len(RISKS)]}")
    return "\n".join(lines) + "\n"


def compiled(text: str, name: str):
    document = parse_source(SourceFile(name, text)).document
    policy, diagnostics = compile_policies(document.policies)
    assert policy is not None and not diagnostics, diagnostics
    return policy


def timed_diff(old, new, runs: int) -> tuple[float, float, int]:
    """Best of `runs`: (seconds, seconds waiting for the solver, changes found)."""
    waited = [0.0]
    request = solve._request

    def timed_request(*args, **kwargs):
        started = time.perf_counter()
        try:
            return request(*args, **kwargs)
        finally:
            waited[0] += time.perf_counter() - started

    best = (float("inf"), 0.0, 0)
    solve._request = timed_request
    try:
        for _ in range(runs):
            waited[0] = 0.0
            started = time.perf_counter()
            changes = diff_policies(old, new)
            elapsed = time.perf_counter() - started
            if elapsed < best[0]:
                best = (elapsed, waited[0], len(changes))
    finally:
        solve._request = request
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,100,300")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--versions", default="near,every")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    warm = compiled(generate_policy(2, seed=0), "warm.policy")
    diff_policies(warm, compiled(generate_policy(2, seed=1), "warm.policy"))  # start the solver's worker
    versions = args.versions.split(",")
    print(f"plangate policy diff, in process, best of {args.runs}")
    print(f"{'tools':>6} {'rules':>6} {'version':>8} {'time':>11} {'solver':>11} {'share':>6} {'changes':>8}")
    print("-" * 62)
    for size in sizes:
        old_text = generate_policy(size, seed=size)
        old = compiled(old_text, "old.policy")
        for version in versions:
            new_text = near_version(old_text) if version == "near" else generate_policy(size, seed=size + 1)
            new = compiled(new_text, "new.policy")
            seconds, solver, changes = timed_diff(old, new, args.runs)
            rules = size + size // 10
            print(f"{size:>6,} {rules:>6,} {version:>8} {seconds * 1000:>8,.1f} ms {solver * 1000:>8,.1f} ms "
                  f"{solver / seconds:>5.0%} {changes:>8,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

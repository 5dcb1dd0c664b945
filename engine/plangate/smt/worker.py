"""The solver worker: the child process that owns Z3.

It runs as a script (`python worker.py`), never imported by plangate, and imports only the
standard library and z3, so it starts fast and a crash or a kill costs plangate nothing but this
process. The parent (`plangate.smt.solve`) enforces the wall-clock bound by killing it.

Protocol: one JSON object per line in each direction. After importing z3 the worker writes
`{"ready": VERSION}`; then for each request it writes exactly one answer.

    {"op": "check", "time_bound": S, "queries": [{"smt": TEXT, "values": [[NAME, SORT], ...]}]}
      → {"results": [{"status": "sat"|"unsat"|"unknown", "reason": R, "model": {NAME: VALUE}}]}
    {"op": "patterns", "time_bound": S, "max_patterns": N,
     "groups": [{"smt": TEXT, "fires": [NAME, ...], "values": [[NAME, SORT], ...]}]}
      → {"results": [{"status": "ok"|"unknown", "reason": R,
                      "patterns": [{"fires": [INDEX, ...], "model": {NAME: VALUE}}]}]}

A reply with `"exiting": true` is the worker's last (it ran out of memory).

`smt` is SMT-LIB2 text (declarations, definitions and assertions). `check` asks whether the
assertions are satisfiable and reads the named constants in a model (model completion on).
`patterns` computes the *maximal feasible subsets* of the Boolean constants `fires` under the
assertions: every set of fires that can hold together and cannot be extended, with a model for
each. It uses MARCO-style enumeration: a map solver over the fire indices proposes a seed that is
neither inside a known maximal set nor a superset of a known infeasible core; a feasible seed is
grown to a maximal set (first by everything its model already makes true, then one index at a
time), an infeasible one yields its unsat core. Every proposal either finds a new maximal set or a
new core, so the loop ends; `max_patterns` bounds it (beyond: "unknown").

Values in models: Int → int, Real → [numerator, denominator], String → str (Z3's `\\u{…}` escapes
decoded), Bool → bool. The
request's `time_bound` covers the whole request: each Z3 call gets the time that remains as its
own timeout, and queries reached after the bound answer "unknown" without running.

Memory is bounded twice: Z3's `memory_max_size` (`MEMORY_MB`), past which a query answers
"unknown", and the process's address space (`ADDRESS_SPACE_BYTES`), past which an allocation fails
and the worker dies — which the parent reports as the solver stopping, as it does a timeout. A
5-line plan (`size(s) == 2000000000` beside `s.contains("ab")`) once took this process past 2 GiB.
"""

import json
import re
import resource
import sys
import time

MEMORY_MB = 1024  # Z3's own bound: past it, a query answers "unknown" (memory exhausted)
ADDRESS_SPACE_BYTES = 4 << 30  # the process's hard bound, should Z3 overrun its own: it then dies
OUT_OF_MEMORY = f"the solver ran out of memory (its bound is {MEMORY_MB} MB)"


def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > ADDRESS_SPACE_BYTES:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    import z3

    z3.set_param("memory_max_size", MEMORY_MB)

    sorts = {"Int": z3.IntSort(), "Real": z3.RealSort(), "String": z3.StringSort(), "Bool": z3.BoolSort()}

    def value_of(model, name, sort):
        value = model.eval(z3.Const(name, sorts[sort]), model_completion=True)
        if sort == "Bool":
            return z3.is_true(value)
        if sort == "Int":
            return value.as_long()
        if sort == "Real":
            if z3.is_algebraic_value(value):
                value = value.approx(20)
            return [value.numerator_as_long(), value.denominator_as_long()]
        # Z3 prints characters beyond Latin-1 (and a backslash that would read as one) as \u{…}
        return re.sub(r"\\u\{([0-9a-fA-F]+)\}", lambda match: chr(int(match.group(1), 16)), value.as_string())

    def read_model(solver, values):
        model = solver.model()
        return {name: value_of(model, name, sort) for name, sort in values}

    class Deadline:
        def __init__(self, seconds):
            self.end = time.monotonic() + seconds

        def remaining_ms(self):
            return int((self.end - time.monotonic()) * 1000)

        def arm(self, solver):
            remaining = self.remaining_ms()
            if remaining <= 0:
                return False
            solver.set("timeout", remaining)
            return True

    solver = z3.Solver()
    seeds = z3.Solver()

    def check(query, deadline):
        solver.reset()  # no state from earlier queries: a model depends on the query alone
        solver.push()  # not only for the pop: a scope keeps Z3 on its incremental solver (models unchanged)
        try:
            solver.add(z3.parse_smt2_string(query["smt"]))
            if not deadline.arm(solver):
                return {"status": "unknown", "reason": "timeout"}
            outcome = solver.check()
            if outcome == z3.sat:
                return {"status": "sat", "model": read_model(solver, query["values"])}
            if outcome == z3.unsat:
                return {"status": "unsat"}
            return {"status": "unknown", "reason": solver.reason_unknown()}
        finally:
            solver.pop()

    def patterns(group, deadline, max_patterns):
        solver.reset()
        seeds.reset()
        solver.push()
        seeds.push()
        try:
            solver.add(z3.parse_smt2_string(group["smt"]))
            return enumerate_patterns(group, deadline, max_patterns)
        finally:
            seeds.pop()
            solver.pop()

    def enumerate_patterns(group, deadline, max_patterns):
        fires = [z3.Bool(name) for name in group["fires"]]
        index = {fire.get_id(): position for position, fire in enumerate(fires)}
        choose = [z3.Bool(f"seed!{position}") for position in range(len(fires))]
        found = []

        def holds(subset):
            if not deadline.arm(solver):
                return None
            outcome = solver.check(*[fires[i] for i in subset])
            return None if outcome == z3.unknown else outcome == z3.sat

        def block_core():
            core = [index[literal.get_id()] for literal in solver.unsat_core()]
            seeds.add(z3.Or([z3.Not(choose[i]) for i in core]) if core else z3.BoolVal(False))

        def unknown():
            return {"status": "unknown", "reason": solver.reason_unknown() or "timeout"}

        while True:
            if not deadline.arm(seeds):
                return {"status": "unknown", "reason": "timeout"}
            outcome = seeds.check()
            if outcome == z3.unsat:
                return {"status": "ok", "patterns": found}
            if outcome == z3.unknown:
                return {"status": "unknown", "reason": seeds.reason_unknown()}
            proposal = seeds.model()
            seed = [i for i in range(len(fires)) if z3.is_true(proposal.eval(choose[i], model_completion=True))]
            feasible = holds(seed)
            if feasible is None:
                return unknown()
            if not feasible:
                block_core()
                continue
            model = solver.model()
            grown = [i for i in range(len(fires)) if z3.is_true(model.eval(fires[i], model_completion=True))]
            for i in range(len(fires)):
                if i in grown:
                    continue
                feasible = holds(grown + [i])
                if feasible is None:
                    return unknown()
                if feasible:
                    grown.append(i)
                else:
                    block_core()
            if holds(grown) is not True:  # the last check may have failed: the model of the set itself
                return unknown()
            found.append({"fires": sorted(grown), "model": read_model(solver, group["values"])})
            if len(found) > max_patterns:
                return {"status": "unknown", "reason": f"more than {max_patterns} branch combinations"}
            outside = [choose[i] for i in range(len(fires)) if i not in grown]
            seeds.add(z3.Or(outside) if outside else z3.BoolVal(False))

    exhausted = []  # set once Z3 ran out of memory: the worker answers, then exits (a fresh one follows)

    def bounded(work, *arguments):
        if exhausted:
            return {"status": "unknown", "reason": OUT_OF_MEMORY}
        try:
            return work(*arguments)
        except z3.Z3Exception as error:
            if "memory" not in str(error):
                raise
            exhausted.append(True)
            return {"status": "unknown", "reason": OUT_OF_MEMORY}

    def answer(request):
        deadline = Deadline(request["time_bound"])
        if request["op"] == "check":
            return {"results": [bounded(check, query, deadline) for query in request["queries"]]}
        return {"results": [bounded(patterns, group, deadline, request["max_patterns"]) for group in request["groups"]]}

    sys.stdout.write(json.dumps({"ready": z3.get_version_string()}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except Exception as error:  # a malformed query is reported to the parent, not fatal
            reply = {"error": f"{type(error).__name__}: {error}"}
        if exhausted:
            reply["exiting"] = True  # the parent stops this worker and starts another for what follows
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if exhausted:
            return


if __name__ == "__main__":
    main()

"""The one registry of diagnostic codes.

Each code is `PG` + three digits and has a stable kebab-case name, a default severity and a
one-line summary. Hundreds group them: 0xx input and syntax, 1xx plan structure, 2xx policy
structure, 3xx a plan against a policy, 4xx budgets, 5xx expressions (CEL), 6xx policy tests.
Codes and names never change meaning; a retired code stays reserved. Every code has a section in
`docs/diagnostics.md` and at least one golden test (a test enforces both).
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS_URL = "https://github.com/plangate/plangate/blob/main/docs/diagnostics.md"


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    severity: str  # "error" | "warning" | "note"
    summary: str
    help: str | None = None

    @property
    def anchor(self) -> str:
        return f"{DOCS_URL}#{self.code.lower()}-{self.name}"


CODES: tuple[Code, ...] = (
    # 0xx: reading and parsing input
    Code("PG000", "internal-error", "error", "plangate failed on this input; please report it"),
    Code("PG001", "syntax-error", "error", "the text does not parse"),
    Code("PG002", "input-too-large", "error", "the input is over the size or nesting bound"),
    Code("PG003", "unreadable-input", "error", "the file cannot be read or is not UTF-8 text"),
    Code("PG004", "wrong-document-kind", "error", "a plan file holds no plan, or a policy file no policy"),
    # 1xx: plan structure
    Code("PG101", "unknown-step", "error", "a reference or `after` names no step of the plan"),
    Code("PG102", "duplicate-step", "error", "two steps share an id"),
    Code("PG103", "dependency-cycle", "error", "the steps' edges form a cycle"),
    Code("PG105", "result-out-of-scope", "error",
         "`result` is used outside `expect`, `idempotency` or `rollback`"),
    Code("PG106", "currency-mismatch", "error", "amounts in different currencies meet"),
    Code("PG107", "open-decision", "warning", "the plan has a pending decision"),
    Code("PG108", "empty-plan", "error", "the plan has no steps"),
    Code("PG109", "unreachable-step", "warning", "a step can never run"),
    Code("PG110", "duplicate-clause", "error", "a clause that may appear once appears twice"),
    Code("PG111", "missing-call", "error", "a step has no `call`"),
    Code("PG112", "unknown-risk", "error", "a risk names no risk class"),
    Code("PG113", "invalid-value", "error", "a number, duration or amount is out of its range"),
    Code("PG114", "duplicate-plan", "warning", "two plans with one id are checked together"),
    Code("PG115", "reserved-step-id", "error", "a step id that an expression cannot name"),
    # 2xx: policy structure
    Code("PG201", "duplicate-tool", "error", "two catalogue entries have the same pattern"),
    Code("PG202", "malformed-pattern", "error", "a tool pattern is not a dotted name with an optional `.*`"),
    Code("PG203", "duplicate-rule", "error", "two deny/warn rules share a name"),
    Code("PG204", "duplicate-test", "error", "two policy tests share a name"),
    Code("PG205", "unknown-limit", "error", "a `limit` names no known limit"),
    Code("PG206", "ambiguous-tool", "error", "two catalogue patterns match a tool equally well"),
    Code("PG207", "unknown-arg-type", "error", "an `args` entry names no known type"),
    Code("PG208", "policy-conflict", "warning", "combined policies disagree; the stricter side wins"),
    # 3xx: a plan against a policy
    Code("PG301", "unknown-tool", "error", "a call's tool matches no catalogue entry"),
    Code("PG302", "arg-type", "error", "a call's argument is missing, unknown or of the wrong type"),
    Code("PG303", "risk-underdeclared", "error", "a step declares a risk below its tool's catalogue risk"),
    Code("PG304", "approval-missing", "error", "a step needs an approval that the plan does not ask for"),
    Code("PG305", "approval-insufficient", "error",
         "the plan asks for fewer approvers, another role, or a longer `within` than required"),
    Code("PG306", "check-missing", "error", "a `require check` rule is not met"),
    Code("PG307", "rollback-missing", "error", "a `require rollback` rule is not met"),
    Code("PG308", "idempotency-missing", "error", "a `require idempotency` rule is not met"),
    Code("PG309", "retry-without-idempotency", "error", "a write is retried with no idempotency key"),
    Code("PG310", "limit-exceeded", "error", "a declared figure is over a policy limit"),
    Code("PG311", "policy-deny", "error", "a deny rule must fire for a step"),
    Code("PG312", "policy-deny-possible", "warning", "a deny rule may fire at run time"),
    Code("PG313", "policy-warn", "warning", "a warn rule fires (or may fire) for a step"),
    Code("PG314", "check-not-read-only", "error", "a `check` step calls a tool that is not read-only"),
    Code("PG315", "no-policy", "note", "no policy was given, so policy checks did not run"),
    Code("PG316", "idempotency-key-shared", "warning", "two steps call one tool with the same idempotency key"),
    # 4xx: budgets
    Code("PG401", "budget-exceeded", "error", "some execution can exceed a budget or limit"),
    Code("PG402", "budget-unknown", "error", "the solver could not decide within its time bound"),
    # 5xx: expressions
    Code("PG501", "cel-type-error", "error", "an expression is ill-typed"),
    Code("PG502", "unknown-name", "error", "an expression names a variable or function that does not exist"),
    Code("PG503", "decided-at-run-time", "note",
         "an expression is outside the subset the checker reasons about; it is decided at run time"),
    # 6xx: policy tests
    Code("PG601", "policy-test-failed", "error", "a policy `test` block does not get its expected decision"),
)

BY_NAME: dict[str, Code] = {code.name: code for code in CODES}
BY_CODE: dict[str, Code] = {code.code: code for code in CODES}


# Codes that were retired, and the code that reports their cases now (docs/diagnostics.md says why).
RETIRED = {"self-dependency": "dependency-cycle", "PG104": "PG103"}


def lookup(name_or_code: str) -> Code:
    """The code for a name (`approval-missing`) or a code (`PG304`), in any case; `_` for `-`; a
    retired name or code gives the one that replaced it."""
    key = name_or_code.lower().replace("_", "-")
    key = RETIRED.get(key, RETIRED.get(name_or_code.upper(), key))
    code = BY_NAME.get(key) or BY_CODE.get(key.upper())
    if code is None:
        raise KeyError(name_or_code)
    return code

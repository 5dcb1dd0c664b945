"""Policy documents on their own: `duplicate-tool`, `malformed-pattern`, `duplicate-rule`,
`duplicate-test`, and `unknown-limit` / `invalid-value` for limits (via compilation)."""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PolicyContext
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.policy.compiled import PATTERN


def check(ctx: PolicyContext) -> Iterator[Diagnostic]:
    policy = ctx.policy
    tools: dict[str, object] = {}
    for entry in policy.tools:
        if not PATTERN.match(entry.pattern):
            yield diagnostic(
                "malformed-pattern", entry.pattern_span, f"`{entry.pattern}` is not a tool pattern",
                help="write a dotted name (`deploy.preview`), a prefix ending in `.*` (`deploy.*`) or `*`")
        elif entry.pattern in tools:
            yield diagnostic(
                "duplicate-tool", entry.pattern_span, f"`{entry.pattern}` is already in the catalogue",
                labels=[Label(tools[entry.pattern].pattern_span, "first entry here")],  # type: ignore[attr-defined]
                help="merge the two entries into one")
        else:
            tools[entry.pattern] = entry
    rules: dict[str, object] = {}
    for rule in policy.rules:
        if rule.name in rules:
            yield diagnostic("duplicate-rule", rule.span, f"a rule named `{rule.name}` already exists",
                             labels=[Label(rules[rule.name].span, "first rule here")],  # type: ignore[attr-defined]
                             help="give each deny/warn rule its own name")
        else:
            rules[rule.name] = rule
    tests: dict[str, object] = {}
    for test in policy.tests:
        if test.name in tests:
            yield diagnostic("duplicate-test", test.span, f"a test named `{test.name}` already exists",
                             labels=[Label(tests[test.name].span, "first test here")],  # type: ignore[attr-defined]
                             help="give each test its own name")
        else:
            tests[test.name] = test

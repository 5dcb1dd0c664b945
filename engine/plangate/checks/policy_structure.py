"""Policy documents on their own: `duplicate-tool`, `malformed-pattern`, `duplicate-rule`,
`duplicate-test`, and `unknown-limit` / `invalid-value` for limits (via compilation)."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, TypeVar

from plangate.checks.context import PolicyContext
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.policy.compiled import PATTERN

T = TypeVar("T")


def check(ctx: PolicyContext) -> Iterator[Diagnostic]:
    policy = ctx.policy
    well_formed = []
    for entry in policy.tools:
        if PATTERN.match(entry.pattern):
            well_formed.append(entry)
        else:
            yield diagnostic(
                "malformed-pattern", entry.pattern_span, f"`{entry.pattern}` is not a tool pattern",
                help="write a dotted name (`deploy.preview`), a prefix ending in `.*` (`deploy.*`) or `*`")
    for entry, first in _repeats(well_formed, lambda e: e.pattern):
        yield diagnostic("duplicate-tool", entry.pattern_span, f"`{entry.pattern}` is already in the catalogue",
                         labels=[Label(first.pattern_span, "first entry here")], help="merge the two entries into one")
    for rule, first in _repeats(policy.rules, lambda r: r.name):
        yield diagnostic("duplicate-rule", rule.span, f"a rule named `{rule.name}` already exists",
                         labels=[Label(first.span, "first rule here")], help="give each deny/warn rule its own name")
    for test, first in _repeats(policy.tests, lambda t: t.name):
        yield diagnostic("duplicate-test", test.span, f"a test named `{test.name}` already exists",
                         labels=[Label(first.span, "first test here")], help="give each test its own name")


def _repeats(items: Iterable[T], key: Callable[[T], str]) -> Iterator[tuple[T, T]]:
    """Each item whose key an earlier item already has, with that first item."""
    first: dict[str, T] = {}
    for item in items:
        name = key(item)
        if name in first:
            yield item, first[name]
        else:
            first[name] = item

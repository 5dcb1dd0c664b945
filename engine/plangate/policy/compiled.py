"""Compile one or more policies into a frozen, hashed `CompiledPolicy`.

Combination (the contract, §4): the union of requirements, the tightest limit, any deny wins; a
tool named by several policies gets the highest risk (a disagreement on the risk class is a
`policy-conflict` warning: one of them misjudges the tool) and the tightest caps (an overlay that
lowers a cap is the usual case, so that is silent); `unknown_tools` is `warn` only when every
policy says `warn` (a policy that does not set it denies: that is the default, and any deny wins),
else `deny`. Patterns: an exact dotted name, a prefix `a.b.*` (matching `a.b.c` and deeper, not
`a.b` itself) or `*`; the most specific match wins — exact, then the longest prefix, then `*` —
within each policy; the entries that several policies match a tool with combine like one
pattern's (`CompiledPolicy.match`), so an overlay never loosens a tool. Policies are told apart by
position, not id. Two policies giving one tool different `args` schemas (through one pattern, or
through patterns one of which covers the other) make it ambiguous (`ambiguous-tool`); the first
schema is kept.

The canonical form (`canonical()`) holds every fact a decision may use, with expressions printed
as canonical CEL and no spans; `hash` is its `content_hash` (SHA-256 of the canonical JSON). The
runtime decides with this same object, so a decision never depends on anything outside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping, Sequence

from plangate.cel.ast import Expr, to_source
from plangate.diagnostics import Diagnostic, Label, backticked, diagnostic
from plangate.runtime.canonical import canonical_json, content_hash
from plangate.ir.nodes import ApprovalSpec, ArgSpec, Duration, Limit, Money, Policy, PolicyTest, Risk
from plangate.source import NO_SPAN, Span
from plangate.suggest import did_you_mean

PATTERN = re.compile(r"^(\*|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\.\*)?)$")

# The limits a policy may set and the kind of value each takes.
LIMIT_KINDS = {"retries": "count", "concurrency": "count", "calls": "count", "cost": "money",
               "time": "duration", "steps": "count", "approval_within": "duration"}


@dataclass(frozen=True)
class CatalogueEntry:
    pattern: str
    risk: Risk | None
    cost_cap: Decimal | None
    currency: str | None
    time_cap: int | None
    args: tuple[ArgSpec, ...] | None
    policies: tuple[str, ...]
    span: Span = field(default=NO_SPAN, compare=False)
    # The positions, among the policies combined, of those that give this entry (two policies may
    # share an id: each still speaks for itself).
    origins: tuple[int, ...] = field(default=(), compare=False)
    # Where a combined entry's cost and time caps come from, when another entry than its own
    # pattern gives them: (pattern, span) of that entry, for messages.
    cost_from: tuple[str, Span] | None = field(default=None, compare=False)
    time_from: tuple[str, Span] | None = field(default=None, compare=False)
    # Likewise for the risk and the `args` schema: a more specific entry of one policy that states
    # neither takes them from the policy's next entry for the tool that does (`entry_where`).
    risk_from: tuple[str, Span] | None = field(default=None, compare=False)
    args_from: tuple[str, Span] | None = field(default=None, compare=False)
    # One pattern given by several policies is one entry (the combination of theirs); these are
    # the policies' own entries, each with its one origin, so that each policy still speaks of a
    # tool through its own most specific entry (`entry_where`). Empty for an entry of one policy.
    parts: tuple["CatalogueEntry", ...] = field(default=(), compare=False, repr=False)

    def cost_source(self) -> tuple[str, Span]:
        """The pattern and span of the entry whose cost cap this is."""
        return self.cost_from or (self.pattern, self.span)

    def time_source(self) -> tuple[str, Span]:
        """The pattern and span of the entry whose time cap this is."""
        return self.time_from or (self.pattern, self.span)

    def risk_source(self) -> tuple[str, Span]:
        """The pattern and span of the entry whose risk this is."""
        return self.risk_from or (self.pattern, self.span)

    def args_source(self) -> tuple[str, Span]:
        """The pattern and span of the entry whose `args` schema this is."""
        return self.args_from or (self.pattern, self.span)

    def specificity(self) -> tuple[int, int]:
        return pattern_specificity(self.pattern)

    def matches(self, tool: str) -> bool:
        if self.pattern == "*":
            return True
        if self.pattern.endswith(".*"):
            return tool.startswith(self.pattern[:-1]) and len(tool) > len(self.pattern) - 1
        return tool == self.pattern


@dataclass(frozen=True)
class CompiledRequirement:
    kind: str  # approval | check | rollback | idempotency
    when: Expr | None
    approval: ApprovalSpec | None
    policy: str
    span: Span = field(default=NO_SPAN, compare=False)

    def describe(self) -> str:
        text = f"require {self.kind}"
        if self.when is not None:
            text += f" when {to_source(self.when)}"
        if self.approval is not None:
            text += " by " + describe_approval(self.approval)
        return text


@dataclass(frozen=True)
class CompiledRule:
    effect: str  # deny | warn
    name: str
    when: Expr
    because: str | None
    policy: str
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class LimitValue:
    name: str
    count: int | None = None
    amount: Decimal | None = None
    currency: str | None = None
    seconds: int | None = None
    policy: str = ""
    span: Span = field(default=NO_SPAN, compare=False)

    def key(self) -> Decimal:
        if self.amount is not None:
            return self.amount
        return Decimal(self.count if self.count is not None else self.seconds or 0)

    def text(self) -> str:
        if self.amount is not None:
            return f"{self.amount:f} {self.currency}" if self.currency else f"{self.amount:f}"
        if self.seconds is not None:
            return format_seconds(self.seconds)
        return str(self.count)


class ReadOnlyDict(dict):
    """A dict that refuses every change after it is made (a `TypeError`), and still pickles and
    copies as a dict does: a compiled policy may be sent to another process."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a compiled policy's limits cannot be changed")

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (ReadOnlyDict, (dict(self),))


@dataclass(frozen=True)
class CompiledPolicy:
    ids: tuple[str, ...]
    versions: tuple[int | None, ...]
    catalogue: tuple[CatalogueEntry, ...]
    unknown_tools: str
    requirements: tuple[CompiledRequirement, ...]
    rules: tuple[CompiledRule, ...]
    limits: Mapping[str, LimitValue] = field(hash=False)  # read-only (`ReadOnlyDict`)
    tests: tuple[tuple[str, PolicyTest], ...]
    hash: str = ""
    _matched: dict[str, CatalogueEntry | None] = field(default_factory=dict, compare=False, repr=False)

    def match(self, tool: str) -> CatalogueEntry | None:
        """What the catalogue says of `tool`, or None when no entry matches (remembered per name).

        Each policy speaks through its own most specific entry for the tool; where several
        policies match it with different entries (`deploy.*` in one, `deploy.preview` in another)
        those combine as one pattern's entries do: the highest risk, the tightest caps. So a more
        specific entry in an overlay never loosens what another policy says of the tool."""
        if tool in self._matched:
            return self._matched[tool]
        found = self.entry_where(lambda entry: entry.matches(tool))
        if len(self._matched) < 4096:
            self._matched[tool] = found
        return found

    def entry_where(self, applies: Callable[[CatalogueEntry], bool]) -> CatalogueEntry | None:
        """What the catalogue says of the tools the entries that `applies` selects stand for: each
        policy's most specific such entry — with what it leaves unsaid (risk, caps, `args`) taken
        from the policy's next such entry that says it (`_inherit`) —, those combined (`match`;
        `policy diff` asks it of a class of tools)."""
        spoken = _spoken([entry for entry in self.catalogue if applies(entry)], len(self.ids))
        return _combine_matches(spoken) if spoken else None

    def limit(self, name: str) -> LimitValue | None:
        return self.limits.get(name)

    def approval_lasts(self, within: int | None) -> int | None:
        """How long an approval asked to last `within` seconds (None: not said) may last: the
        shorter of that and `limit approval_within`; None when neither bounds it. The runtime caps
        every approval's expiry so; the gate, `check`'s help and `policy diff` say what it caps."""
        cap = self.limit("approval_within")
        bounds = [seconds for seconds in (within, cap.seconds if cap is not None else None) if seconds is not None]
        return min(bounds) if bounds else None

    def canonical(self, legacy: bool = False) -> dict[str, Any]:
        """What decides, as JSON-like data (its canonical JSON is what `hash` names). Each catalogue
        entry says which of the combined policies give it and, where several give one pattern,
        what each says (`match` reads each policy's own entries). `legacy`: the form hashed before
        plangate recorded that (entries without `origins` and `parts`), to read runs recorded then."""
        def entry(e: CatalogueEntry) -> dict[str, Any]:
            found = {"pattern": e.pattern, "risk": e.risk.name if e.risk is not None else None,
                     "cost_cap": e.cost_cap, "currency": e.currency, "time_cap": e.time_cap,
                     "args": None if e.args is None else [[a.name, a.type, a.optional] for a in e.args]}
            if not legacy:
                found["origins"] = list(e.origins)
                if e.parts:
                    found["parts"] = [entry(part) for part in e.parts]
            return found

        return {
            "policies": [{"id": i, "version": v} for i, v in zip(self.ids, self.versions)],
            "catalogue": [entry(e) for e in self.catalogue],
            "unknown_tools": self.unknown_tools,
            "requirements": [
                {"kind": r.kind, "when": to_source(r.when) if r.when is not None else None,
                 "approval": None if r.approval is None else {
                     "count": r.approval.count, "role": r.approval.role,
                     "within": r.approval.within.seconds if r.approval.within else None},
                 "policy": r.policy}
                for r in self.requirements
            ],
            "rules": [{"effect": r.effect, "name": r.name, "when": to_source(r.when), "because": r.because,
                       "policy": r.policy} for r in self.rules],
            "limits": {name: {"count": v.count, "amount": v.amount,
                              "currency": v.currency, "seconds": v.seconds}
                       for name, v in sorted(self.limits.items())},
        }

    def canonical_json(self) -> str:
        return canonical_json(self.canonical())

    def legacy_hash(self) -> str:
        """The hash of `canonical(legacy=True)`: what runs recorded before entries had origins name."""
        return content_hash(self.canonical(legacy=True))


def pattern_specificity(pattern: str) -> tuple[int, int]:
    """Higher is more specific: an exact name, then the longer prefix, then `*`."""
    if pattern == "*":
        return (0, 0)
    if pattern.endswith(".*"):
        return (1, pattern.count("."))
    return (2, 0)


def describe_approval(spec: ApprovalSpec) -> str:
    count = f"{spec.count} of " if spec.count != 1 else ""
    within = f" within {format_seconds(spec.within.seconds)}" if spec.within is not None else ""
    return f'{count}role "{spec.role}"{within}'


def format_seconds(seconds: int | float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def compile_policies(policies: Iterable[Policy]) -> tuple[CompiledPolicy, list[Diagnostic]]:
    policies = list(policies)
    diagnostics: list[Diagnostic] = []
    catalogue: dict[str, CatalogueEntry] = {}
    unknown_tools = "deny"
    if policies and all(p.unknown_tools == "warn" for p in policies):  # any deny wins; unset is deny
        unknown_tools = "warn"
    requirements: list[CompiledRequirement] = []
    rules: list[CompiledRule] = []
    stated: set[str] = set()
    limits: dict[str, LimitValue] = {}
    coded_limit: LimitValue | None = None  # the first limit that states a currency
    tests: list[tuple[str, PolicyTest]] = []

    for position, policy in enumerate(policies):
        for entry in policy.tools:
            if not PATTERN.match(entry.pattern):
                continue  # reported by the `malformed-pattern` check; a bad pattern matches nothing
            compiled = CatalogueEntry(
                pattern=entry.pattern,
                risk=entry.risk.level if entry.risk is not None else None,
                cost_cap=entry.cost.amount if entry.cost is not None else None,
                currency=entry.cost.currency if entry.cost is not None else None,
                time_cap=entry.time.seconds if entry.time is not None else None,
                args=entry.args,
                policies=(policy.id,),
                span=entry.pattern_span,
                origins=(position,),
            )
            previous = catalogue.get(entry.pattern)
            if previous is None:
                catalogue[entry.pattern] = compiled
            elif position not in previous.origins:
                catalogue[entry.pattern] = _merge_entries(previous, compiled, diagnostics)
        for requirement in policy.requirements:
            compiled_requirement = CompiledRequirement(requirement.kind, requirement.when, requirement.approval,
                                                       policy.id, requirement.span)
            if compiled_requirement.describe() not in stated:  # the union: one requirement stated twice is one
                stated.add(compiled_requirement.describe())
                requirements.append(compiled_requirement)
        for rule in policy.rules:
            rules.append(CompiledRule(rule.effect, rule.name, rule.when, rule.because, policy.id, rule.span))
        for limit in policy.limits:
            value = _limit_value(policy.id, limit, diagnostics)
            if value is None:
                continue
            current = limits.get(limit.name)
            coded = coded_limit if coded_limit is not None and coded_limit.name == limit.name else None
            if coded is not None and value.currency and coded.currency != value.currency:  # a code-less limit takes it
                diagnostics.append(diagnostic(
                    "currency-mismatch", limit.span,
                    f"`limit {limit.name}` is in `{value.currency}` here but in `{coded.currency}` in policy "
                    f"`{coded.policy}`: the two cannot be compared",
                    labels=[Label(coded.span, "the other limit")], help="state both limits in one currency"))
                continue
            if current is None or value.key() < current.key():
                limits[limit.name] = value
            if value.currency and coded_limit is None:
                coded_limit = value
        tests.extend((policy.id, test) for test in policy.tests)
    currency = _check_cap_currencies(policies, coded_limit, diagnostics)
    if currency is not None:  # an amount without a code takes the currency of those it meets
        cost_limit = limits.get("cost")
        if cost_limit is not None and cost_limit.amount is not None and not cost_limit.currency:
            limits["cost"] = replace(cost_limit, currency=currency)
        catalogue = {pattern: _in_currency(entry, currency) for pattern, entry in catalogue.items()}

    compiled = CompiledPolicy(
        ids=tuple(p.id for p in policies),
        versions=tuple(p.version for p in policies),
        catalogue=tuple(sorted(catalogue.values(), key=lambda e: e.pattern)),
        unknown_tools=unknown_tools,
        requirements=tuple(requirements),
        rules=tuple(rules),
        limits=ReadOnlyDict(limits),
        tests=tuple(tests),
    )
    object.__setattr__(compiled, "hash", content_hash(compiled.canonical()))
    _check_schemas(compiled, diagnostics)
    return compiled, diagnostics


def _in_currency(entry: CatalogueEntry, currency: str) -> CatalogueEntry:
    """`entry` (and the policies' entries it combines) with a cost cap written without a code in `currency`."""
    parts = tuple(_in_currency(part, currency) for part in entry.parts)
    if entry.cost_cap is not None and not entry.currency:
        return replace(entry, currency=currency, parts=parts)
    return replace(entry, parts=parts) if parts != entry.parts else entry


def _merge_entries(first: CatalogueEntry, second: CatalogueEntry, diagnostics: list[Diagnostic]) -> CatalogueEntry:
    """One pattern given by two policies: what `_combine_matches` makes of them (as of two patterns
    that match one tool), and a disagreement on the risk (one on `args`: `_check_schemas`)."""
    differences = []
    if first.risk is not None and second.risk is not None and first.risk != second.risk:
        differences.append(f"risk `{first.risk.name}` against `{second.risk.name}`: "
                           f"`{max(first.risk, second.risk).name}` is kept")
    for difference in differences:
        diagnostics.append(diagnostic(
            "policy-conflict", second.span,
            f"policies {_two_policies((first, first.span), (second, second.span))} disagree on `{first.pattern}`: "
            f"{difference}",
            labels=[Label(first.span, f"`{first.policies[0]}` says this")],
            help="combined policies keep the stricter side; make the entries agree to silence this"))
    return replace(_combine_matches([first, second]), parts=(*(first.parts or (first,)), *(second.parts or (second,))))


def _inherit(entries: list[CatalogueEntry]) -> CatalogueEntry:
    """One policy's entries that match a tool, the most specific first, as one: the first, with each
    of the risk, the cost cap, the time cap and the `args` schema it does not state taken from the
    next that does. So `tool deploy.preview { args { … } }` under `tool deploy.* { risk
    reversible_write }` declares the schema and keeps the risk: an entry that leaves the risk out
    does not make its tool `irreversible`, nor let a step declare less than `deploy.*` says."""
    first = entries[0]
    if len(entries) == 1 or None not in (first.risk, first.cost_cap, first.time_cap, first.args):
        return first

    def giver(stated: Callable[[CatalogueEntry], bool]) -> CatalogueEntry | None:
        return next((entry for entry in entries[1:] if stated(entry)), None) if not stated(first) else None

    risk, cost, time, args = (giver(lambda e: e.risk is not None), giver(lambda e: e.cost_cap is not None),
                              giver(lambda e: e.time_cap is not None), giver(lambda e: e.args is not None))
    if (risk, cost, time, args) == (None, None, None, None):
        return first
    return replace(
        first,
        risk=risk.risk if risk is not None else first.risk,
        cost_cap=cost.cost_cap if cost is not None else first.cost_cap,
        currency=cost.currency if cost is not None else first.currency,
        time_cap=time.time_cap if time is not None else first.time_cap,
        args=args.args if args is not None else first.args,
        risk_from=risk.risk_source() if risk is not None else first.risk_from,
        cost_from=cost.cost_source() if cost is not None else first.cost_from,
        time_from=time.time_source() if time is not None else first.time_from,
        args_from=args.args_source() if args is not None else first.args_from,
    )


def _combine_matches(entries: list[CatalogueEntry]) -> CatalogueEntry:
    """The entries that several policies' most specific matches give one tool, as one: the highest
    risk (its pattern and span, for messages), the tightest caps, and the `args` schema of the most
    specific entry that declares one."""
    if len(entries) == 1:
        return entries[0]
    by_specificity = sorted(entries, key=CatalogueEntry.specificity, reverse=True)
    riskiest = max(by_specificity, key=lambda entry: _level(entry.risk))  # the first of the riskiest
    capped = [entry for entry in entries if entry.cost_cap is not None]
    timed = [entry for entry in entries if entry.time_cap is not None]
    schemas = [entry.args for entry in by_specificity if entry.args is not None]
    cost_entry = min(capped, key=lambda entry: entry.cost_cap) if capped else None  # type: ignore[arg-type,return-value]
    time_entry = min(timed, key=lambda entry: entry.time_cap) if timed else None  # type: ignore[arg-type,return-value]
    cap = (cost_entry.cost_cap, cost_entry.currency) if cost_entry is not None else (None, None)
    return CatalogueEntry(
        pattern=riskiest.pattern,
        risk=riskiest.risk,
        cost_cap=cap[0],
        currency=cap[1] if cap[0] is not None else next((entry.currency for entry in entries if entry.currency), None),
        time_cap=time_entry.time_cap if time_entry is not None else None,
        args=schemas[0] if schemas else None,
        policies=tuple(dict.fromkeys(policy for entry in entries for policy in entry.policies)),
        span=riskiest.span,
        origins=tuple(sorted({origin for entry in entries for origin in entry.origins})),
        cost_from=cost_entry.cost_source() if cost_entry is not None else None,
        time_from=time_entry.time_source() if time_entry is not None else None,
        risk_from=riskiest.risk_from,
        args_from=next((entry.args_source() for entry in by_specificity if entry.args is not None), None),
    )


def _spoken(entries: list[CatalogueEntry], positions: int) -> list[CatalogueEntry]:
    """Each combined policy's own entry among `entries` (catalogue entries that match the tools in
    question), in the policies' order: its most specific one, with what that leaves unsaid taken
    from its next ones (`_inherit`). A policy given twice (the same entry again) speaks once."""
    spoken: list[CatalogueEntry] = []
    for position in range(positions):
        found = [next((part for part in combined.parts if position in part.origins), combined)
                 for combined in entries if position in combined.origins]
        if found:
            entry = _inherit(sorted(found, key=CatalogueEntry.specificity, reverse=True))
            if entry not in spoken:
                spoken.append(entry)
    return spoken


def same_schema(first: tuple[ArgSpec, ...], second: tuple[ArgSpec, ...]) -> bool:
    """Whether two `args` schemas declare the same arguments (named, so in any order)."""
    return sorted(first, key=lambda spec: spec.name) == sorted(second, key=lambda spec: spec.name)


def _covering(pattern: str) -> list[str]:
    """The patterns that match every tool `pattern` stands for: itself, each shorter prefix, `*`."""
    if pattern == "*":
        return ["*"]
    parts = pattern.removesuffix(".*").split(".")
    prefixes = [".".join(parts[:length]) + ".*" for length in range(len(parts) - 1, 0, -1)]
    return [pattern, *(prefix for prefix in prefixes if prefix != pattern), "*"]


def _check_schemas(policy: CompiledPolicy, diagnostics: list[Diagnostic]) -> None:
    """`ambiguous-tool` where two of the combined policies give one tool different `args` schemas.

    Each policy speaks of a tool through its own most specific entry, with a schema that entry
    leaves unsaid taken from its next (`_spoken`), so the schemas compared are those, for each
    class of tools that one set of patterns matches: each pattern of the catalogue stands for one
    (an exact name; the tools under a prefix that no longer pattern takes; `*`), and only the
    patterns covering it (`_covering`) can match its tools. A call to such a tool would have to fit
    both schemas, so one of them misdescribes the tool. Each pair of schemas is reported once."""
    if len(policy.ids) < 2:
        return
    by_pattern = {entry.pattern: entry for entry in policy.catalogue}
    reported: set[frozenset[tuple[str, Span]]] = set()
    for entry in policy.catalogue:
        candidates = [by_pattern[pattern] for pattern in _covering(entry.pattern) if pattern in by_pattern]
        declared = [found for found in _spoken(candidates, len(policy.ids)) if found.args is not None]
        declared.sort(key=CatalogueEntry.specificity, reverse=True)  # the first is the schema kept (`_combine_matches`)
        if len(declared) < 2:
            continue
        kept = declared[0]
        for other in declared[1:]:
            if same_schema(kept.args, other.args):  # type: ignore[arg-type]
                continue
            kept_source, other_source = kept.args_source(), other.args_source()
            if frozenset({kept_source, other_source}) in reported:
                continue
            reported.add(frozenset({kept_source, other_source}))
            if kept_source[0] == other_source[0]:  # one pattern in two policies
                diagnostics.append(diagnostic(
                    "ambiguous-tool", other_source[1],
                    f"policies {_two_policies((kept, kept_source[1]), (other, other_source[1]))} give "
                    f"`{kept_source[0]}` different `args`",
                    labels=[Label(kept_source[1], "the schema that is kept")],
                    help="give the tool one argument schema in every policy"))
                continue
            (narrow, (narrow_pattern, narrow_span)), (broad, (broad_pattern, broad_span)) = sorted(
                ((kept, kept_source), (other, other_source)), key=lambda item: pattern_specificity(item[1][0]),
                reverse=True)
            diagnostics.append(diagnostic(
                "ambiguous-tool", narrow_span,
                f"policies {_two_policies((narrow, narrow_span), (broad, broad_span))} give `{entry.pattern}` "
                f"different `args` (through `{narrow_pattern}` and `{broad_pattern}`)",
                labels=[Label(broad_span, "the other schema")],
                help="give the tool one argument schema in every policy"))


def _two_policies(first: tuple[CatalogueEntry, Span], second: tuple[CatalogueEntry, Span]) -> str:
    """"`a` and `b`" for the policies of two entries; with their files where the ids are one (two
    files may hold policies of one id, and each speaks for itself)."""
    (one, one_span), (other, other_span) = first, second
    if one.policies[0] != other.policies[0] or one_span.file == other_span.file:
        return f"`{one.policies[0]}` and `{other.policies[0]}`"
    return f"`{one.policies[0]}` (`{one_span.file}`) and `{other.policies[0]}` (`{other_span.file}`)"


def _level(risk: Risk | None) -> int:
    return -1 if risk is None else int(risk)


def _check_cap_currencies(policies: Sequence[Policy], cost_limit: LimitValue | None,
                          diagnostics: list[Diagnostic]) -> str | None:
    """Tool cost caps meet the cost limit (and each other) in every plan's cost bound: one currency,
    which is returned (the limit's, else the first cap's; None when no amount states one)."""
    reference = (cost_limit.currency, cost_limit.span, f"`limit cost` of policy `{cost_limit.policy}`") \
        if cost_limit is not None and cost_limit.currency else None
    for policy in policies:
        for entry in policy.tools:
            if entry.cost is None or not entry.cost.currency:
                continue
            if reference is None:
                reference = (entry.cost.currency, entry.cost.span,
                             f"the cap of tool `{entry.pattern}` in policy `{policy.id}`")
            elif entry.cost.currency != reference[0]:
                diagnostics.append(diagnostic(
                    "currency-mismatch", entry.cost.span,
                    f"tool `{entry.pattern}` is capped at `{entry.cost}` in policy `{policy.id}`, but {reference[2]} "
                    f"is in `{reference[0]}`",
                    labels=[Label(reference[1], f"in `{reference[0]}` here")],
                    help=f"state the cap in `{reference[0]}`"))
    return reference[0] if reference is not None else None


def _limit_value(policy: str, limit: Limit, diagnostics: list[Diagnostic]) -> LimitValue | None:
    kind = LIMIT_KINDS.get(limit.name)
    value = limit.value
    if kind is None:
        diagnostics.append(diagnostic(
            "unknown-limit", limit.span, f"`{limit.name}` is not a limit",
            help=did_you_mean(limit.name, LIMIT_KINDS) or
            "the limits are " + backticked(LIMIT_KINDS)))
        return None
    if kind == "duration":
        if isinstance(value, Duration):
            return LimitValue(limit.name, seconds=value.seconds, policy=policy, span=limit.span)
        diagnostics.append(diagnostic("invalid-value", limit.span,
                                      f"`limit {limit.name}` takes a duration such as `2h`"))
        return None
    if isinstance(value, Duration):
        diagnostics.append(diagnostic("invalid-value", limit.span,
                                      f"`limit {limit.name}` takes {'a number' if kind == 'count' else 'an amount'}, not a duration"))
        return None
    assert isinstance(value, Money)
    if kind == "money":
        return LimitValue(limit.name, amount=value.amount, currency=value.currency, policy=policy, span=limit.span)
    if value.currency is not None or value.amount != value.amount.to_integral_value() or value.amount < 0:
        diagnostics.append(diagnostic("invalid-value", limit.span,
                                      f"`limit {limit.name}` takes a whole number, not `{value}`"))
        return None
    if limit.name == "concurrency" and value.amount < 1:
        diagnostics.append(diagnostic("invalid-value", limit.span, "`limit concurrency` must be at least 1"))
        return None
    return LimitValue(limit.name, count=int(value.amount), policy=policy, span=limit.span)

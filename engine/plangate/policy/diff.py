"""`plangate policy diff OLD NEW`: what NEW allows that OLD denied, and back.

A semantic diff of two compiled policies. The subject of every comparison is one *call*: a tool
name, its arguments, and the step and plan around it (the declared risk, retry, cost, time, kind;
the plan's id, version and budget). What a policy decides on a call is what `plangate check` and
the runtime decide:

- allowed: the tool has a catalogue entry (the most specific match) or `unknown_tools` is `warn`;
  where the entry declares `args`, every argument is declared, every required one is given and
  each value has its type (an int passes for a double); and no deny rule fires (a rule whose
  condition errors does not fire);
- `step.risk` is the effective risk: the higher of the declared risk and the entry's, or
  `irreversible` when neither says (so one call may have a different `step.risk` under OLD and
  under NEW, when their catalogues rate its tool differently); a call that declares less than
  the entry's risk is refused (`risk-underdeclared`, as the gate and `plangate test` refuse it);
  likewise `step.cost` and
  `step.time` are the declared figure, else the entry's cap, else 0 (one per side where the caps
  differ);
- the calls compared are those both policies' limits and caps admit: a step retrying more than
  `limit retries` or declaring more than its tool's cap, a budget over `limit cost`/`time`/`calls`,
  is `limit-exceeded` under a policy whatever its rules say (a changed limit is reported by itself),
  so a rule that only fires there is dead; a required approval's `within` is capped by `limit
  approval_within`, as the runtime caps every approval;
- requirements: every `require` whose condition fires applies; approvals merge per role (the most
  approvers, the shortest `within`); a `check` step needs approvals only;
- warnings: the warn rules that fire.

Algorithm. The tool names are split into *classes* on which both catalogues are constant: each
exact name either catalogue gives; for each prefix pattern `a.b.*`, the well-formed dotted names
under it that no exact name or longer prefix of either catalogue takes; and every other
well-formed name. For each class one encoder (`plangate.smt.encode`) encodes both policies'
conditions over shared unknowns — the tool (a constant for an exact name, else a string the class
constrains), `args` (a map whose fields are typed by the entry's schema), the step and plan fields,
and the declared risk, from which each side's `step.risk` is derived. Then one solver request per
class asks, for each comparison and direction, for a call on which the two sides differ:

    allow        allowed(NEW) ∧ ¬allowed(OLD)               loosened (and the reverse: tightened)
    require K    allowed by both ∧ K(OLD) ∧ ¬K(NEW)         loosened (reverse: tightened)
    approval R   allowed by both ∧ NEW asks fewer approvers of role R or a longer `within`
    warn W       allowed by both ∧ W fires on one side only  changed
    warnings     allowed by both ∧ some warn rule fires on one side and none on the other

A model is decoded into a concrete call (fields no condition reads get a value of their declared
type) and *replayed*: decided on concrete values by each policy's own evaluator
(`policy.decide.Evaluator`) and catalogue, exactly as `plangate check` decides a constant call.
Witnesses with the same explanation are grouped into one change that lists the other tools.

Invariants:
- Every reported witness is a call one side really allows (or requires, or warns on) and the other
  does not: the replay confirms it, or the change says it could not be confirmed (and counts).
- The tool of a witness exists per a catalogue: an exact name or an instance of a pattern that
  decides it, never a name both policies deny as unknown.
- Nothing undecided is a pass: a solver timeout ("unknown") is a `changed` entry naming the
  comparison and the reason, and counts as a difference. A condition outside the solver's subset
  (`matches`, `exists`…) is an opaque Boolean constant, one per condition text, shared by both
  sides (unless it reads a `step.risk` that differs): "no witness" is then still a proof, and a
  witness is kept only if the replay confirms it; otherwise it is such a `changed` entry.
- The policies have the *same meaning* exactly when every comparison is decided without a witness
  and the catalogues' risks, caps and the limits agree. Textual edits that change nothing (a deny
  rule rewritten, a rule removed that only denied what is denied anyway) are listed with kind
  `rewritten` and never count: `--exit-code` then exits 0.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Callable, NamedTuple

from plangate.cel import ast as cel
from plangate.diagnostics import backticked
from plangate.ir.nodes import ArgSpec, Risk
from plangate.policy.compiled import CatalogueEntry, CompiledPolicy, CompiledRequirement, format_seconds
from plangate.policy.relevance import ToolFilter, condition_shape

SIDES = ("old", "new")
OTHER = "any other tool"  # the label of the names no pattern of either catalogue takes
NAMES = {"old": "OLD", "new": "NEW"}
KINDS = ("check", "rollback", "idempotency")  # requirement kinds other than approval
COUNTED = ("loosened", "tightened", "changed")  # `rewritten` is informational
FOREVER = 10 ** 12  # `within` of an approval that is not required, or required without a bound
# The type of an argument value no condition reads, as a tag the solver chooses.
TAGS = {"string": 0, "int": 1, "double": 2, "bool": 3, "list": 4, "map": 5, "null": 6, "bytes": 7}
TAG_VALUES: dict[int, Any] = {0: "", 1: 0, 2: 0.0, 3: False, 4: [], 5: {}, 6: None, 7: b""}
ACCEPTS = {"string": (0,), "int": (1,), "uint": (1,), "double": (1, 2), "bool": (3,), "list": (4,),
           "map": (5,), "null": (6,), "bytes": (7,)}  # dyn, duration, timestamp: anything
DURATIONS = ("step.time", "plan.budget.time")  # seconds in the solver, durations in CEL
FIGURES = ("cost", "time")  # a step's figures that a catalogue cap stands in for when it declares none
SORTS = {"string": "String", "int": "Int", "uint": "Int", "double": "Real", "bool": "Bool"}
_ID = ('(re.++ (re.union (re.range "A" "Z") (re.range "a" "z") (str.to_re "_")) '
       '(re.* (re.union (re.range "A" "Z") (re.range "a" "z") (re.range "0" "9") (str.to_re "_"))))')
DOTTED = f'(re.++ {_ID} (re.* (re.++ (str.to_re ".") {_ID})))'  # a well-formed tool name


@dataclass
class Change:
    kind: str  # loosened | tightened | changed | rewritten
    subject: str
    text: str
    witness: dict[str, Any] | None = None

    @property
    def counts(self) -> bool:
        return self.kind in COUNTED


def diff_policies(old: CompiledPolicy, new: CompiledPolicy, time_bound: float = 2.0) -> list[Change]:
    from plangate.smt import solve

    policies = {"old": old, "new": new}
    with solve.allowance(solve.TOTAL_BOUND):  # each query has `time_bound`; all of them together, this
        results = _compare(policies, time_bound)
    changes: list[Change] = []
    allowed = _allow_changes(results, changes)
    _catalogue(old, new, changes, allowed)
    _unknown_tools(old, new, changes, allowed)
    _requirement_changes(policies, results, changes)
    _warn_changes(policies, results, changes)
    _limits(old, new, changes)
    _deny_rules(old, new, changes, allowed)
    if old.versions != new.versions:
        shown = {side: ", ".join(str(v) if v is not None else "none" for v in policy.versions)
                 for side, policy in (("old", old), ("new", new))}
        changes.append(Change("rewritten", "version", f"`version` {shown['old']} → {shown['new']}"))
    return changes


@dataclass
class AllowDifferences:
    """What the allow comparison found: whether any call is decided differently (or could not be
    decided), and, on its witnesses, the reasons to deny that one policy gives and the other does
    not — per tool class, `catalogue`, `arguments` or `denied by `RULE``. An edit explains a
    difference when its reason is among them; where some difference could not be decided, or the
    witnesses may not show every reason (`undecided`), any edit may explain one."""

    found: bool = False
    undecided: bool = False
    reasons: set[tuple[str, str]] = field(default_factory=set)  # (tool class label, reason kind)

    def explained_by(self, reason: str, tool_class: str | None = None) -> bool:
        """Whether an edit that gives `reason` (for the tools of `tool_class`, or of any) may explain a difference."""
        if self.undecided:
            return True
        return any(kind == reason and (tool_class is None or tool_class == label) for label, kind in self.reasons)

    def remark(self, explained: bool, when_nothing_differs: str) -> str:
        """What to add to an edit's text: `when_nothing_differs` when nothing is allowed
        differently, else a word on an edit that explains none of the differences."""
        if not self.found:
            return when_nothing_differs
        return "" if explained else " (none of the differences in allowed calls comes from it)"


# ------------------------------------------------------------------------------------ tool classes

@dataclass(frozen=True)
class ToolClass:
    label: str  # the tool, the pattern, or "any other tool"
    exact: str | None = None
    prefix: str | None = None  # "a.b." for the instances of `a.b.*`
    excluded: tuple[str, ...] = ()  # exact names the class leaves out
    excluded_prefixes: tuple[str, ...] = ()  # longer prefixes the class leaves out

    def contains(self, name: str) -> bool:
        """Whether the class takes the tool `name` (its being a well-formed dotted name aside)."""
        if self.exact is not None:
            return name == self.exact
        if self.prefix is not None and not name.startswith(self.prefix):
            return False
        return name not in self.excluded and not any(name.startswith(prefix) for prefix in self.excluded_prefixes)

    def may_hold(self, tools: ToolFilter | None) -> bool:
        """Whether a condition whose tool filter is `tools` can hold for some tool of the class. A
        filter that rejects each of the class's tools makes the condition false on all of them
        (`policy.relevance`), so it needs no encoding."""
        if tools is None:
            return True
        if self.exact is not None:
            return tools.admits(self.exact)
        if tools.names is not None:
            return any(self.contains(name) and tools.admits(name) for name in tools.names)
        prefix = self.prefix
        return prefix is None or all(other.startswith(prefix) or prefix.startswith(other) for other in tools.prefixes)

    def constraint(self, tool: str) -> str:
        from plangate.smt.encode import conj, string_text

        parts = [f"(str.in_re {tool} {DOTTED})"]
        if self.prefix is not None:
            parts.append(f"(str.prefixof {string_text(self.prefix)} {tool})")
        parts += [f"(not (= {tool} {string_text(name)}))" for name in self.excluded]
        parts += [f"(not (str.prefixof {string_text(prefix)} {tool}))" for prefix in self.excluded_prefixes]
        return conj(*parts)

    def entry(self, policy: CompiledPolicy) -> CatalogueEntry | None:
        if self.exact is not None:
            return policy.match(self.exact)
        prefix = self.prefix
        return policy.entry_where(lambda entry: entry.pattern == "*" or (
            prefix is not None and entry.pattern.endswith(".*") and prefix.startswith(entry.pattern[:-1])))


def tool_classes(old: CompiledPolicy, new: CompiledPolicy) -> list[ToolClass]:
    patterns = {entry.pattern for policy in (old, new) for entry in policy.catalogue}
    exact = sorted(p for p in patterns if not p.endswith("*"))
    prefixes = sorted(p[:-1] for p in patterns if p.endswith(".*"))
    classes = [ToolClass(name, exact=name) for name in exact]
    for prefix in prefixes:
        classes.append(ToolClass(prefix + "*", prefix=prefix,
                                 excluded=tuple(n for n in exact if n.startswith(prefix)),
                                 excluded_prefixes=tuple(q for q in prefixes if q != prefix and q.startswith(prefix))))
    classes.append(ToolClass(OTHER, excluded=tuple(exact), excluded_prefixes=tuple(prefixes)))
    return classes


# ------------------------------------------------------------------------------------- the model

@dataclass
class _Side:
    policy: CompiledPolicy
    entry: CatalogueEntry | None
    activation: dict[str, Any] = field(default_factory=dict)
    deny: str | None = "false"  # None: a deny rule is outside the solver's subset (see `problems`)
    deny_rules: dict[str, str] = field(default_factory=dict)  # deny rule name → when it fires
    warn: dict[str, str | None] = field(default_factory=dict)
    needs: dict[str, str | None] = field(default_factory=dict)  # kind → when it applies
    approvals: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)  # role → (fires, count, within)
    approval_problem: str | None = None
    conform: str = "true"
    problems: dict[str, str] = field(default_factory=dict)  # what could not be encoded → why

    @property
    def admitted(self) -> bool:
        return self.entry is not None or self.policy.unknown_tools == "warn"

    @property
    def schema(self) -> dict[str, ArgSpec] | None:
        if self.entry is None or self.entry.args is None:
            return None
        return {spec.name: spec for spec in self.entry.args}

    def allowed(self) -> str | None:
        from plangate.smt.encode import conj, neg

        if not self.admitted:
            return "false"
        if self.deny is None:
            return None
        return conj(self.conform, neg(self.deny))


class _Model:
    """Both policies' conditions on the calls of one tool class, over shared unknowns."""

    def __init__(self, policies: dict[str, CompiledPolicy], tool_class: ToolClass, typed_by: str = "new") -> None:
        from plangate.smt.decide import Unknown
        from plangate.smt.encode import Encoder, Unsupported

        self.tool_class = tool_class
        self.sides = {side: _Side(policies[side], tool_class.entry(policies[side])) for side in SIDES}
        self.encoder = Encoder({})
        self.tags: dict[str, str] = {}  # argument path → its type tag constant
        self.facts: list[str] = []
        self.failure: str | None = None
        self.typed_by = typed_by
        self.opaque: dict[tuple[str, str], str] = {}
        self.opaque_reasons: dict[str, str] = {}
        tool: Any = tool_class.exact if tool_class.exact is not None else Unknown("call.tool", "string")
        risks = {side: self.sides[side].entry.risk if self.sides[side].entry is not None else None for side in SIDES}
        self.caps = {figure: {side: _cap(self.sides[side].entry, figure) for side in SIDES} for figure in FIGURES}
        for side in SIDES:
            risk_path = "step.risk" if risks["old"] == risks["new"] else f"step.risk.{side}"
            figure = {name: Unknown(self.figure_path(name, side), "double") for name in FIGURES}
            activation: dict[str, Any] = {risk.name: int(risk) for risk in Risk}
            activation["step"] = {"id": Unknown("step.id", "string"), "kind": Unknown("step.kind", "string"),
                                  "tool": tool, "risk": Unknown(risk_path, "int"),
                                  "retry": Unknown("step.retry", "int"), "cost": figure["cost"],
                                  "time": figure["time"], "conditional": Unknown("step.conditional", "bool")}
            args = Unknown("args", "dyn")
            activation["call"] = {"tool": tool, "args": args}
            activation["args"] = args
            activation["plan"] = {"id": Unknown("plan.id", "string"), "version": Unknown("plan.version", "int"),
                                  "budget": Unknown("plan.budget", "dyn")}
            self.sides[side].activation = activation
        try:
            self._encode(risks)
        except Unsupported as error:
            self.failure = error.reason
        except RecursionError:
            self.failure = "a condition is nested too deeply to reason about"

    def figure_path(self, figure: str, side: str) -> str:
        """The unknown a side's `step.cost` or `step.time` is: one for both sides where their tool
        caps agree, else one per side (a step that declares none sees its tool's cap)."""
        caps = self.caps[figure]
        return f"step.{figure}" if caps["old"] == caps["new"] else f"step.{figure}.{side}"

    # -- encoding -------------------------------------------------------------------------------

    def _encode(self, risks: dict[str, Risk | None]) -> None:
        from plangate.smt.decide import Unknown
        from plangate.smt.encode import COLLECTIONS, Unsupported, disj

        encoder = self.encoder
        encoder.activation = self.sides["old"].activation
        if self.tool_class.exact is None:
            self.tool = encoder.term(encoder.reach(Unknown("call.tool", "string"))).text
        self.args = encoder.reach(Unknown("args", "dyn"))
        encoder.bind_map(self.args)
        # The arguments' own fields first, typed by a schema: `typed_by`'s where both declare one
        # (a value of that type may not fit the other side's: the witnesses of the other side
        # allowing come from a model typed by it, see `_compare`).
        schemas = [self.sides[side].schema for side in (self.typed_by, "old" if self.typed_by == "new" else "new")]
        typed: dict[str, str] = {}
        for schema in schemas:
            for name, spec in (schema or {}).items():
                typed.setdefault(name, spec.type)
        for name, kind in typed.items():
            sort = SORTS.get(kind)
            if sort is not None:
                encoder.variable(f"args.{name}", sort, self.args)
            else:
                if kind in COLLECTIONS:  # known by its size and keys, as the checker knows a declared list or map
                    encoder.kinds[f"args.{name}"] = kind
                encoder.child(self.args, name)
        if any(schema is None for schema in schemas) and any(schema is not None for schema in schemas):
            extra = next(f"extra{i or ''}" for i in range(len(typed) + 1) if f"extra{i or ''}" not in typed)
            encoder.child(self.args, extra)  # an argument one side's schema does not declare
        for side in SIDES:
            state = self.sides[side]
            encoder.activation = state.activation
            policy = state.policy

            def fires(expr: cel.Expr | None, what: str) -> str | None:
                if expr is None:
                    return "true"
                if not self.tool_class.may_hold(condition_shape(expr).tools):
                    return "false"
                try:
                    return encoder.fires(expr)
                except Unsupported as error:
                    return self._opaque(expr, side, risks, f"{what} of policy `{', '.join(policy.ids)}`: {error.reason}")
                except RecursionError:
                    return self._opaque(expr, side, risks, f"{what} of policy `{', '.join(policy.ids)}`: "
                                        "the condition is nested too deeply to reason about")

            denies = [fires(rule.when, f"deny `{rule.name}`") for rule in policy.rules if rule.effect == "deny"]
            state.deny = None if None in denies else disj(*denies)  # type: ignore[arg-type]
            for rule, term in zip([rule for rule in policy.rules if rule.effect == "deny"], denies):
                if term is not None:
                    state.deny_rules[rule.name] = disj(state.deny_rules.get(rule.name, "false"), term)
            for rule in policy.rules:
                if rule.effect == "warn":
                    found = fires(rule.when, f"warn `{rule.name}`")
                    previous = state.warn.get(rule.name, "false")
                    state.warn[rule.name] = None if found is None or previous is None else disj(previous, found)
            for kind in KINDS:
                conditions = [fires(r.when, f"require {kind}") for r in policy.requirements if r.kind == kind]
                state.needs[kind] = None if None in conditions else disj(*conditions)  # type: ignore[arg-type]
            for requirement in policy.requirements:
                if requirement.kind != "approval" or requirement.approval is None:
                    continue
                spec = requirement.approval
                found = fires(requirement.when, f'approval by role "{spec.role}"')
                if found is None:
                    state.approval_problem = state.problems[f'approval by role "{spec.role}"']
                    continue
                state.approvals.setdefault(spec.role, []).append((found, spec.count, _within_seconds(policy, spec)))
        for side in SIDES:
            self.sides[side].conform = self._conform(self.sides[side])
        self._background(risks)

    def _opaque(self, expr: cel.Expr, side: str, risks: dict[str, Risk | None], reason: str) -> str:
        """A condition outside the solver's subset, as a Boolean constant of its own: the same
        condition on both sides (reading the same `step.risk`) is one constant, so it cancels out;
        a witness that needs a value of it is kept only when the replay confirms it."""
        text = cel.to_source(expr)
        shared = risks["old"] == risks["new"] or "step.risk" not in read_paths([expr])
        key = (text, "" if shared else side)
        name = self.opaque.get(key)
        if name is None:
            name = self.opaque[key] = f"opaque{len(self.opaque)}"
            self.facts.append(f"(declare-const {name} Bool)")
            self.opaque_reasons[name] = reason
        return name

    def undecided(self, formula: str) -> str | None:
        """Why a witness of `formula` may be an artefact: a condition the solver does not read."""
        for name, reason in self.opaque_reasons.items():
            if re.search(rf"\b{name}\b", formula):
                return reason
        return None

    def _conform(self, side: _Side) -> str:
        """When the call's arguments fit the side's schema (true without one)."""
        from plangate.smt.encode import conj

        schema = side.schema
        if schema is None:
            return "true"
        parts: list[str] = []
        for variable in self._arguments():
            name = variable.path[len("args."):]
            spec = schema.get(name)
            if spec is None:
                parts.append(f"(not {variable.presence})")
                continue
            if not spec.optional:
                parts.append(variable.presence)
            fits = self._fits(variable, spec.type)
            if fits != "true":
                parts.append(f"(=> {variable.presence} {fits})")
        return conj(*parts)

    def _arguments(self) -> list[Any]:
        return [v for v in self.encoder.variables.values() if v.parent is self.args]

    def _fits(self, variable: Any, kind: str) -> str:
        """When the value of `variable` (present) has the declared type `kind`."""
        from plangate.smt.encode import disj

        if kind not in ACCEPTS:
            return "true"  # dyn, duration, timestamp: any value (as `plangate check` has it)
        root = variable.sort.find()
        if variable.kind is not None:  # a declared list or map: of that kind, whatever its size
            return "true" if kind == variable.kind else "false"
        if root.sort == "Map":
            return "true" if kind == "map" else "false"
        if not variable.used:
            if root.sort is None:
                tag = self.tags.get(variable.path)
                if tag is None:
                    tag = self.tags[variable.path] = f"tag{len(self.tags)}"
                    self.facts.append(f"(declare-const {tag} Int)")
                    self.facts.append(f"(assert (and (<= 0 {tag}) (<= {tag} {len(TAGS) - 1})))")
                return disj(*(f"(= {tag} {number})" for number in ACCEPTS[kind]))
            accepted = {"String": ("string",), "Bool": ("bool",), "Int": ("int", "uint", "double"),
                        "Real": ("double",) if root.declared else ("int", "uint", "double")}[root.sort]
            return "true" if kind in accepted else "false"
        sort = self.encoder.sort_of(variable)
        name = variable.name
        if sort == "String":
            return "true" if kind == "string" else "false"
        if sort == "Bool":
            return "true" if kind == "bool" else "false"
        if sort == "Int":
            return {"int": "true", "double": "true", "uint": f"(<= 0 {name})"}.get(kind, "false")
        whole = f"(= {name} (to_real (to_int {name})))"  # a run-time number that may be an int
        if root.declared:
            return "true" if kind == "double" else "false"
        return {"double": "true", "int": whole, "uint": f"(and {whole} (<= 0.0 {name}))"}.get(kind, "false")

    def _background(self, risks: dict[str, Risk | None]) -> None:
        from plangate.smt.encode import conj, string_text

        encoder = self.encoder
        if self.tool_class.exact is None:
            self.facts.append(f"(assert {self.tool_class.constraint(self.tool)})")
        risk_vars = {side: encoder.variables.get("step.risk" if risks["old"] == risks["new"] else f"step.risk.{side}")
                     for side in SIDES}
        if any(v is not None and v.used for v in risk_vars.values()):
            declared = encoder.variable("step.declared_risk", "Int", None)
            declared.used = True
            self.facts.append(f"(assert (and (<= (- 1) {declared.name}) (<= {declared.name} 3)))")
            for side in SIDES:
                variable = risk_vars[side]
                if variable is None or not variable.used:
                    continue
                risk, d = risks[side], declared.name
                effective = f"(ite (= {d} (- 1)) 3 {d})" if risk is None else f"(ite (< {d} {int(risk)}) {int(risk)} {d})"
                self.facts.append(f"(assert (= {variable.name} {effective}))")
            for side in SIDES:  # a call declaring less than its tool's catalogue risk is refused there
                risk = risks[side]
                if risk is not None:
                    state = self.sides[side]
                    state.conform = conj(state.conform, f"(or (= {declared.name} (- 1)) (<= {int(risk)} {declared.name}))")
        bounds = {"step.retry": "(<= 0 {})", "plan.version": "(<= 0 {})",
                  "step.kind": f'(or (= {{0}} {string_text("step")}) (= {{0}} {string_text("check")}))'}
        for path, fact in bounds.items():
            variable = encoder.variables.get(path)
            if variable is not None and variable.used:
                self.facts.append(f"(assert {fact.format(variable.name)})")
        for figure in FIGURES:
            self._figure(figure)
        self._within_limits()
        self.declarations = encoder.declarations()
        self.values = encoder.values() + tuple((tag, "Int") for tag in self.tags.values())

    def _figure(self, figure: str) -> None:
        """`step.cost` or `step.time` as each side sees it: the step's declared figure, else its
        tool's cap, else 0 — and a declared figure over either side's cap is `limit-exceeded`
        there, so the calls compared declare at most the tighter cap. With one cap for both, one
        unknown between 0 and the cap stands for every case."""
        from plangate.smt.encode import real_text

        caps = self.caps[figure]
        if caps["old"] == caps["new"]:
            variable = self.encoder.variables.get(f"step.{figure}")
            if variable is not None and variable.used:
                self._bound(variable, 0, caps["old"])
            return
        sides = {side: self.encoder.variables.get(f"step.{figure}.{side}") for side in SIDES}
        if not any(variable is not None and variable.used for variable in sides.values()):
            return
        declared = self.encoder.variable(f"step.declared_{figure}", "Real", None)  # -1: the step declares none
        declared.used = True
        tighter = min(cap for cap in caps.values() if cap is not None)
        d = declared.name
        self.facts.append(f"(assert (or (= {d} (- 1.0)) (and (<= 0.0 {d}) (<= {d} {real_text(tighter)}))))")
        for side, variable in sides.items():
            if variable is not None and variable.used:
                value = variable.name if self.encoder.sort_of(variable) == "Real" else f"(to_real {variable.name})"
                self.facts.append(f"(assert (= {value} (ite (= {d} (- 1.0)) {real_text(caps[side] or Fraction(0))} {d})))")

    def _within_limits(self) -> None:
        """The calls compared are ones both policies' limits admit: a step retrying more than
        `limit retries`, a plan whose budget declares more than `limit cost`, `time` or `calls`, is
        `limit-exceeded` there whatever the rules say (a changed limit is reported as such)."""
        for path, limit in (("step.retry", "retries"), ("plan.budget.cost", "cost"),
                            ("plan.budget.time", "time"), ("plan.budget.calls", "calls")):
            values = [_limit_value(side.policy, limit) for side in self.sides.values()]
            bound = min((value for value in values if value is not None), default=None)
            variable = self.encoder.variables.get(path)
            if bound is not None and variable is not None and variable.used:
                self._bound(variable, None, bound)

    def _bound(self, variable: Any, low: int | None, high: Fraction | None) -> None:
        """Facts that `variable` (a number, where present) lies within [low, high]."""
        from plangate.smt.encode import conj, int_text, real_text

        sort = self.encoder.sort_of(variable)
        if sort not in ("Int", "Real"):
            return
        text = (lambda value: int_text(math.floor(value))) if sort == "Int" else real_text
        parts = ([f"(<= {text(Fraction(low))} {variable.name})"] if low is not None else []) + \
                ([f"(<= {variable.name} {text(high)})"] if high is not None else [])
        if parts:
            fact = conj(*parts)
            self.facts.append(f"(assert {fact})" if variable.presence == "true" else
                              f"(assert (=> {variable.presence} {fact}))")

    # -- questions ------------------------------------------------------------------------------

    def query(self, formula: str, extra: str = "") -> Any:
        from plangate.smt import solve

        text = "\n".join([*self.declarations, *self.facts, f"(assert {formula})", extra])
        return solve.Query(text, self.values)

    def plain_tool(self) -> str:
        """The tool name in lower case letters, digits and `_` (asked first, for a readable witness)."""
        segment = '(re.++ (re.range "a" "z") (re.* (re.union (re.range "a" "z") (re.range "0" "9") (str.to_re "_"))))'
        return f'(assert (str.in_re {self.tool} (re.++ {segment} (re.* (re.++ (str.to_re ".") {segment})))))'

    def step_kind(self) -> str:
        from plangate.smt.encode import string_text

        variable = self.encoder.variables.get("step.kind")
        if variable is None or not variable.used:
            return ""
        return f"(assert (= {variable.name} {string_text('step')}))"

    def witness(self, model: dict[str, Any]) -> "Witness":
        from plangate.smt.decide import Unknown, instantiate

        decoded = self.encoder.decode(model)
        tool = self.tool_class.exact if self.tool_class.exact is not None else str(decoded.get("call.tool", ""))
        args = instantiate({"args": Unknown("args")}, decoded)["args"]
        args = dict(args) if isinstance(args, dict) else {}
        other = "old" if self.typed_by == "new" else "new"
        schema = self.sides[self.typed_by].schema or self.sides[other].schema or {}
        for variable in self._arguments():
            name = variable.path[len("args."):]
            if name in args and name in schema and schema[name].type == "duration":
                args[name] = _as_duration(args[name])  # the solver's value, as the duration the call passes
                continue
            if name not in args or args[name] is not None:
                continue
            tag = self.tags.get(variable.path)
            if tag is not None:
                args[name] = _copy(TAG_VALUES[int(model.get(tag, 0))])
            else:
                sort = variable.sort.find().sort
                kind = {"String": "string", "Int": "int", "Real": "double", "Bool": "bool", "Map": "map"}.get(
                    sort or "", schema[name].type if name in schema else "string")
                args[name] = _copy(TAG_VALUES.get(TAGS.get(kind, 0), ""))
        declared = decoded.get("step.declared_risk")
        figures = {name: None if value is None or value < 0 else float(value)
                   for name in FIGURES if f"step.declared_{name}" in decoded
                   for value in [decoded[f"step.declared_{name}"]]}
        per_side = tuple(f"step.{name}." for name in figures)
        return Witness(tool=tool, args=args, declared=int(declared) if isinstance(declared, int) and declared >= 0 else None,
                       fields={path: value for path, value in decoded.items()
                               if path.startswith(("step.", "plan.")) and
                               not path.startswith(("step.risk", "step.declared", *per_side))},
                       reads_risk="step.declared_risk" in decoded, figures=figures)


def _cap(entry: CatalogueEntry | None, figure: str) -> Fraction | None:
    """The entry's `cost <=` cap (an amount) or `time <=` cap (seconds); None without one."""
    cap = None if entry is None else entry.cost_cap if figure == "cost" else entry.time_cap
    return None if cap is None else Fraction(cap)


def _limit_value(policy: CompiledPolicy, name: str) -> Fraction | None:
    limit = policy.limit(name)
    return None if limit is None else Fraction(limit.key())


def _within_seconds(policy: CompiledPolicy, spec: Any) -> int:
    """How long a required approval may last (`approval_lasts`: its `within`, capped by `limit
    approval_within`, as the runtime caps every approval's expiry); FOREVER without either."""
    lasts = policy.approval_lasts(spec.within.seconds if spec.within is not None else None)
    return FOREVER if lasts is None else lasts


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


# ----------------------------------------------------------------------------------- the replay

@dataclass
class Witness:
    """A concrete call, as decoded from a model: what the replay decides and the report shows."""

    tool: str
    args: dict[str, Any]
    declared: int | None  # the declared risk, None when the step declares none
    fields: dict[str, Any]  # step.* and plan.* values the conditions read
    reads_risk: bool
    # `cost` or `time` where the sides' tool caps differ: the step's declared figure, or None when
    # it declares none (each side then sees its tool's cap)
    figures: dict[str, float | None] = field(default_factory=dict)

    def risk(self, entry: CatalogueEntry | None) -> Risk:
        levels = [level for level in (self.declared, entry.risk if entry is not None else None) if level is not None]
        return Risk(max(levels)) if levels else Risk.irreversible

    def figure(self, name: str, entry: CatalogueEntry | None) -> float:
        """`step.cost` or `step.time` (seconds) under the policy whose entry is `entry`, where
        the sides' caps differ: as declared, else the entry's cap, else 0."""
        declared = self.figures.get(name)
        if declared is not None:
            return declared
        cap = _cap(entry, name)
        return float(cap) if cap is not None else 0.0

    def activation(self, entry: CatalogueEntry | None) -> dict[str, Any]:

        def get(path: str, default: Any) -> Any:
            value = self.fields.get(path)
            return default if value is None else value

        budget: dict[str, Any] = {}
        for path, value in self.fields.items():
            if path.startswith("plan.budget."):
                name = path[len("plan.budget."):]
                if "." in name or "[" in name:
                    continue
                if name == "time":
                    value = _as_duration(value)
                elif value is None:
                    value = 0.0 if name == "cost" else 0
                budget[name] = value
        activation: dict[str, Any] = {risk.name: int(risk) for risk in Risk}
        activation["step"] = {"id": get("step.id", "s"), "kind": get("step.kind", "step"), "tool": self.tool,
                              "risk": int(self.risk(entry)), "retry": get("step.retry", 0),
                              "cost": float(get("step.cost", self.figure("cost", entry))),
                              "time": _as_duration(get("step.time", self.figure("time", entry))),
                              "conditional": get("step.conditional", False)}
        activation["call"] = {"tool": self.tool, "args": self.args}
        activation["args"] = self.args
        activation["plan"] = {"id": get("plan.id", "p"), "version": get("plan.version", 0), "budget": budget}
        return activation

    def text(self, entries: dict[str, CatalogueEntry | None], read: frozenset[str]) -> str:
        """The call, with the step and plan fields that the compared conditions (`read`) read."""
        parts = [f"`call.tool` = {json.dumps(self.tool)}"]
        parts += [f"`args.{name}` = {_show(value)}" for name, value in sorted(self.args.items())]
        if not self.args:
            parts.append("no arguments")
        if self.reads_risk and "step.risk" in read:
            old, new = self.risk(entries["old"]), self.risk(entries["new"])
            declared = " (declared by the step)" if self.declared is not None and all(
                self.declared > (entry.risk if entry is not None and entry.risk is not None else -1)
                for entry in entries.values()) else ""
            parts.append(f"`step.risk` = {old.name}{declared}" if old == new else
                         f"`step.risk` = {old.name} under OLD, {new.name} under NEW")
        for name in self.figures:
            if f"step.{name}" not in read:
                continue
            shown = {side: _show(_as_duration(self.figure(name, entries[side])) if name == "time"
                                 else self.figure(name, entries[side])) for side in SIDES}
            parts.append(f"`step.{name}` = {shown['old']} (declared by the step)" if self.figures[name] is not None else
                         f"`step.{name}` = {shown['old']} under OLD, {shown['new']} under NEW (the tool's caps: "
                         f"the step declares no `{name}`)")
        parts += [f"`{path}` = " + (_show(_as_duration(value)) if path in DURATIONS else _show(value))
                  for path, value in sorted(self.fields.items())
                  if value is not None and not isinstance(value, dict) and _within(path, read)]
        return ", ".join(parts)

    def json(self, entries: dict[str, CatalogueEntry | None]) -> dict[str, Any]:
        return {"tool": self.tool, "args": _plain(self.args),
                "declared_risk": Risk(self.declared).name if self.declared is not None else None,
                "risk": {side: self.risk(entries[side]).name for side in SIDES},
                "fields": _plain({**{path: value for path, value in self.fields.items() if not isinstance(value, dict)},
                                  **{f"step.{name}": {side: self.figure(name, entries[side]) for side in SIDES}
                                     for name in self.figures}})}


def _within(path: str, read: frozenset[str]) -> bool:
    return any(path == r or path.startswith(r + ".") or r.startswith(path + ".") for r in read)


def read_paths(conditions: list[cel.Expr | None]) -> frozenset[str]:
    """The field paths (`step.risk`, `plan.budget.time`) that the conditions select."""
    found: set[str] = set()
    for condition in conditions:
        if condition is None:
            continue
        for node in cel.walk(condition):
            chain = cel.field_chain(node)
            if chain is not None and chain[1]:
                found.add(".".join([chain[0], *chain[1]]))
    return frozenset(found)


class DenyReason(NamedTuple):
    """One reason a policy denies a witness: its kind tells what could lift it."""

    kind: str  # catalogue (unknown tool, risk declared below it) | arguments (they break the schema) | rule
    text: str
    rule: str | None = None  # the deny rule's name, for kind "rule"


@dataclass
class Decision:
    """What one policy decides on a witness."""

    allowed: bool
    reasons: list[DenyReason]  # why it is denied
    warns: set[str]
    kinds: set[str]
    approvals: dict[str, tuple[int, int]]  # role → (count, within; FOREVER without one)
    applied: list[CompiledRequirement]


def decide_witness(policy: CompiledPolicy, entry: CatalogueEntry | None, witness: Witness) -> Decision:
    from plangate.checks.catalogue import underdeclared
    from plangate.policy.decide import evaluator_for

    decision = evaluator_for(policy).decide_call(witness.activation(entry))
    reasons: list[DenyReason] = []
    if entry is None and policy.unknown_tools != "warn":
        reasons.append(DenyReason("catalogue", f"`{witness.tool}` is not in its catalogue"))
    lower = underdeclared(witness.tool, Risk(witness.declared) if witness.declared is not None else None, entry)
    if lower is not None:
        reasons.append(DenyReason("catalogue", lower))
    if entry is not None and entry.args is not None:
        reasons += [DenyReason("arguments", problem) for problem in _argument_problems(entry.args, witness.args)]
    reasons += [DenyReason("rule", f"denied by `{rule.name}`", rule.name) for rule in decision.denied_by]
    approvals: dict[str, tuple[int, int]] = {}
    for requirement in decision.requirements:
        if requirement.kind == "approval" and requirement.approval is not None:
            spec = requirement.approval
            count, within = approvals.get(spec.role, (0, FOREVER))
            approvals[spec.role] = (max(count, spec.count), min(within, _within_seconds(policy, spec)))
    return Decision(not reasons, reasons, {rule.name for rule in decision.warned_by},
                    {r.kind for r in decision.requirements}, approvals, list(decision.requirements))


_VALUE_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "uint": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "bytes": lambda v: isinstance(v, bytes),
    "list": lambda v: isinstance(v, (list, tuple)),
    "map": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _argument_problems(schema: tuple[ArgSpec, ...], args: dict[str, Any]) -> list[str]:
    """How constant arguments break a schema, as the `arg-type` check has it."""
    specs = {spec.name: spec for spec in schema}
    problems = [f"it declares no argument `{name}`" for name in sorted(args) if name not in specs]
    for name, spec in specs.items():
        if name not in args:
            if not spec.optional:
                problems.append(f"argument `{name}` is missing")
        elif not _VALUE_TYPES.get(spec.type, lambda v: True)(args[name]):
            problems.append(f"argument `{name}` is not {'an' if spec.type[0] in 'aeiou' else 'a'} `{spec.type}`")
    return problems


# ---------------------------------------------------------------------------------- comparisons

@dataclass(frozen=True)
class Question:
    kind: str  # allow | require | approval | warn | warnings (some warn rule fires)
    name: str  # the requirement kind, role or warn rule ("" for allow and warnings)
    direction: str  # loosened (NEW gives or asks less) | tightened (NEW denies or asks more)


@dataclass
class Finding:
    tool_class: ToolClass
    status: str  # witness | unknown | runtime
    witness: Witness | None = None
    entries: dict[str, CatalogueEntry | None] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    confirmed: bool = True
    reason: str | None = None
    read: frozenset[str] = frozenset()  # what the compared conditions read (shown with the witness)


def _compare(policies: dict[str, CompiledPolicy], time_bound: float) -> dict[Question, list[Finding]]:
    from plangate.smt import solve

    questions: list[Question] = [Question("allow", "", d) for d in ("loosened", "tightened")]
    kinds = [k for k in KINDS if any(r.kind == k for p in policies.values() for r in p.requirements)]
    questions += [Question("require", k, d) for k in kinds for d in ("loosened", "tightened")]
    roles = sorted({r.approval.role for p in policies.values() for r in p.requirements if r.approval is not None})
    questions += [Question("approval", role, d) for role in roles for d in ("loosened", "tightened")]
    warns = sorted({r.name for p in policies.values() for r in p.rules if r.effect == "warn"})
    questions += [Question("warn", name, d) for name in warns for d in ("loosened", "tightened")]
    if warns:
        questions += [Question("warnings", "", d) for d in ("loosened", "tightened")]
    results: dict[Question, list[Finding]] = {q: [] for q in questions}
    reads = {question: _conditions_read(policies, question) for question in questions}
    for tool_class in tool_classes(policies["old"], policies["new"]):
        model = _Model(policies, tool_class)
        entries = {side: model.sides[side].entry for side in SIDES}
        if not any(model.sides[side].admitted for side in SIDES):
            continue  # both deny every call of this class as unknown
        # Where the schemas type one argument differently, OLD allowing is asked of a model typed by OLD.
        models = {"new": model, "old": _Model(policies, tool_class, "old") if _types_differ(model) else model}
        failure = model.failure or models["old"].failure
        if failure is not None:
            for question in questions:
                results[question].append(Finding(tool_class, "runtime", entries=entries, reason=failure))
            continue
        asked: list[tuple[Question, Any]] = []
        formulas: dict[Question, str] = {}
        for question in questions:
            model = models["old" if question == Question("allow", "", "tightened") else "new"]
            formula = _formula(model, question)
            if isinstance(formula, tuple):
                results[question].append(Finding(tool_class, "runtime", entries=entries, reason=formula[1]))
            elif formula != "false":
                extra = model.step_kind() if question.kind == "require" else ""
                formulas[question] = formula
                asked.append((question, model.query(formula, extra)))
                if tool_class.exact is None:  # first a witness whose tool reads like one: `deploy.a`
                    asked.append((question, model.query(formula, extra + "\n" + model.plain_tool())))
        if not asked:
            continue
        answers = solve.check([query for _, query in asked], time_bound)
        if tool_class.exact is None:
            asked, answers = asked[::2], [nice if nice.status == "sat" else answer
                                          for answer, nice in zip(answers[::2], answers[1::2])]
        for (question, _), answer in zip(asked, answers):
            model = models["old" if question == Question("allow", "", "tightened") else "new"]
            if answer.status == "unsat":
                continue
            if answer.status != "sat":
                results[question].append(Finding(tool_class, "unknown", entries=entries,
                                                 reason=answer.reason or "the solver gave no answer"))
                continue
            witness = model.witness(answer.model)
            decisions = {side: decide_witness(policies[side], entries[side], witness) for side in SIDES}
            confirmed = _confirms(question, decisions)
            opaque = model.undecided(formulas[question])
            if opaque is not None and not confirmed:
                results[question].append(Finding(tool_class, "runtime", entries=entries, reason=opaque))
                continue
            results[question].append(Finding(tool_class, "witness", witness, entries, decisions,
                                             confirmed, read=reads[question]))
            if question.kind == "allow" and confirmed:
                results[question] += _other_reasons(model, question, formulas[question], decisions, policies,
                                                    entries, reads[question], time_bound)
            elif question.kind == "allow":
                results[question] += _reasons_apart(model, question, formulas[question], policies, entries,
                                                    reads[question], time_bound)
    return results


MAX_REASONS = 4  # witnesses sought per tool class and direction, one for each reason the stricter side has


def _other_reasons(model: "_Model", question: Question, formula: str, decisions: dict[str, Decision],
                   policies: dict[str, CompiledPolicy], entries: dict[str, CatalogueEntry | None],
                   read: frozenset[str], time_bound: float) -> list[Finding]:
    """More witnesses of an allow difference, each denied by the stricter side for another reason:
    the reasons already shown are excluded (a deny rule's condition is false; the arguments fit
    the schema), and the solver asked again, until no witness is left or `MAX_REASONS` is reached.
    A tool that loosens in two ways (a deny rule removed *and* an argument added) shows both."""
    from plangate.smt import solve
    from plangate.smt.encode import conj, neg

    denying = "old" if question.direction == "loosened" else "new"
    side = model.sides[denying]
    found: list[Finding] = []
    excluded: list[str] = []
    for _ in range(MAX_REASONS - 1):
        for reason in decisions[denying].reasons:
            if reason.kind == "rule" and reason.rule in side.deny_rules:
                excluded.append(neg(side.deny_rules[reason.rule]))
            elif reason.kind == "arguments":
                excluded.append(side.conform)  # now the arguments fit
            else:
                return found  # a reason that cannot be excluded: every witness has it
        (answer,) = solve.check([model.query(conj(formula, *excluded))], time_bound)
        if answer.status != "sat":
            return found
        witness = model.witness(answer.model)
        decisions = {name: decide_witness(policies[name], entries[name], witness) for name in SIDES}
        if not _confirms(question, decisions) or model.undecided(formula) is not None:
            return found
        found.append(Finding(model.tool_class, "witness", witness, entries, decisions, True, read=read))
    return found


def _reasons_apart(model: "_Model", question: Question, formula: str, policies: dict[str, CompiledPolicy],
                   entries: dict[str, CatalogueEntry | None], read: frozenset[str],
                   time_bound: float) -> list[Finding]:
    """Witnesses of an allow difference whose first witness the replay did not confirm (a condition
    at the edge of what the solver models, such as a bound past the largest double): the solver is
    asked once per reason the stricter side has — each deny rule, and arguments that do not fit its
    schema — in one batch, and each witness the replay confirms is kept (up to `MAX_REASONS` - 1),
    so a plain difference is not hidden behind one that could not be confirmed."""
    from plangate.smt import solve
    from plangate.smt.encode import conj, neg

    side = model.sides["old" if question.direction == "loosened" else "new"]
    reasons = [side.deny_rules[name] for name in sorted(side.deny_rules)]
    if side.conform != "true":
        reasons.append(neg(side.conform))
    found: list[Finding] = []
    for answer in solve.check([model.query(conj(formula, reason)) for reason in reasons], time_bound):
        if answer.status != "sat" or len(found) == MAX_REASONS - 1:
            continue
        witness = model.witness(answer.model)
        decisions = {name: decide_witness(policies[name], entries[name], witness) for name in SIDES}
        if _confirms(question, decisions) and model.undecided(formula) is None:
            found.append(Finding(model.tool_class, "witness", witness, entries, decisions, True, read=read))
    return found


def _conditions_read(policies: dict[str, CompiledPolicy], question: Question) -> frozenset[str]:
    conditions: list[cel.Expr | None] = []
    for policy in policies.values():
        if question.kind in ("allow", "warn", "warnings"):
            effect = "deny" if question.kind == "allow" else "warn"
            conditions += [r.when for r in policy.rules
                           if r.effect == effect and (question.kind != "warn" or r.name == question.name)]
        elif question.kind == "require":
            conditions += [r.when for r in policy.requirements if r.kind == question.name]
        else:
            conditions += [r.when for r in policy.requirements if r.approval is not None and r.approval.role == question.name]
    return read_paths(conditions)


def _types_differ(model: _Model) -> bool:
    old, new = model.sides["old"].schema, model.sides["new"].schema
    if old is None or new is None:
        return False
    return any(old[name].type != new[name].type for name in old.keys() & new.keys())


def _formula(model: _Model, question: Question) -> str | tuple[str, str]:
    """The formula whose models are the witnesses of `question`; ("runtime", why) when a condition
    it needs is outside the solver's subset."""
    from plangate.smt.encode import conj, disj, neg

    old, new = model.sides["old"], model.sides["new"]
    allowed = {side: model.sides[side].allowed() for side in SIDES}
    for side in SIDES:
        if allowed[side] is None:
            return ("runtime", _problem(model.sides[side], "deny"))
    if question.kind == "allow":
        more, less = (new, old) if question.direction == "loosened" else (old, new)
        a, b = more.allowed(), less.allowed()
        return "false" if a == b else conj(a, neg(b))  # type: ignore[arg-type]
    both = conj(allowed["old"], allowed["new"])  # type: ignore[arg-type]
    if both == "false":
        return "false"
    if question.kind in ("require", "warn", "warnings"):
        values = {side: _condition(model.sides[side], question) for side in SIDES}
        for side in SIDES:
            if values[side] is None:
                return ("runtime", _problem(model.sides[side], "require" if question.kind == "require" else "warn"))
        # loosened: OLD requires (or warns) and NEW does not
        having, lacking = (values["old"], values["new"]) if question.direction == "loosened" else (values["new"], values["old"])
        return "false" if having == lacking else conj(both, having, neg(lacking))
    for side in SIDES:
        if model.sides[side].approval_problem is not None:
            return ("runtime", model.sides[side].approval_problem or "")
    terms = {side: _approval_terms(model.sides[side].approvals.get(question.name, [])) for side in SIDES}
    if terms["old"] == terms["new"]:
        return "false"
    (old_count, old_within), (new_count, new_within) = terms["old"], terms["new"]
    if question.direction == "loosened":
        weaker = disj(f"(< {new_count} {old_count})", f"(> {new_within} {old_within})")
    else:
        weaker = disj(f"(< {old_count} {new_count})", f"(> {old_within} {new_within})")
    return conj(both, weaker)


def _condition(side: _Side, question: Question) -> str | None:
    """When the requirement kind, the warn rule, or any warn rule (`warnings`) fires on `side`."""
    from plangate.smt.encode import disj

    if question.kind == "require":
        return side.needs.get(question.name, "false")
    if question.kind == "warn":
        return side.warn.get(question.name, "false")
    conditions = list(side.warn.values())
    return None if None in conditions else disj(*conditions)  # type: ignore[arg-type]


def _approval_terms(found: list[tuple[str, int, int]]) -> tuple[str, str]:
    """SMT terms for the merged approval of one role: the most approvers, the shortest `within`."""
    count, within = "0", str(FOREVER)
    for fires, number, seconds in found:
        count = f"(ite (and {fires} (< {count} {number})) {number} {count})"
        within = f"(ite (and {fires} (< {seconds} {within})) {seconds} {within})"
    return count, within


def _problem(side: _Side, kind: str) -> str:
    """Why a condition of `kind` (deny, warn, require) could not be encoded, naming its rule."""
    for what, why in side.problems.items():
        if what.startswith(kind):
            return f"{what} of policy `{', '.join(side.policy.ids)}`: {why}"
    return next(iter(side.problems.values()), "a condition is outside the subset the solver reasons about")


def _confirms(question: Question, decisions: dict[str, Decision]) -> bool:
    old, new = decisions["old"], decisions["new"]
    loose = question.direction == "loosened"
    if question.kind == "allow":
        return (new.allowed and not old.allowed) if loose else (old.allowed and not new.allowed)
    if not (old.allowed and new.allowed):
        return False
    having, lacking = (old, new) if loose else (new, old)  # the side that requires, warns or asks more
    if question.kind == "require":
        return question.name in having.kinds and question.name not in lacking.kinds
    if question.kind == "warn":
        return question.name in having.warns and question.name not in lacking.warns
    if question.kind == "warnings":
        return bool(having.warns) and not lacking.warns
    a = having.approvals.get(question.name, (0, FOREVER))
    b = lacking.approvals.get(question.name, (0, FOREVER))
    return b[0] < a[0] or b[1] > a[1]


# ------------------------------------------------------------------------------------ reporting

def _group(findings: list[Finding], key: Callable[[Finding], Any]) -> list[list[Finding]]:
    groups: dict[Any, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(key(finding), []).append(finding)
    return list(groups.values())


def _also(group: list[Finding]) -> str:
    others = [finding.tool_class.label for finding in group[1:]]
    if not others:
        return ""
    shown = ", ".join(_label(label) for label in others[:8]) + (", …" if len(others) > 8 else "")
    return f"; the same for {len(others)} more: {shown}"  # tools or patterns (`deploy.*`)


def _label(label: str) -> str:
    return label if label == OTHER else f"`{label}`"


def _witness_json(group: list[Finding]) -> dict[str, Any]:
    first = group[0]
    assert first.witness is not None
    data = first.witness.json(first.entries)
    for side in SIDES:
        decision = first.decisions[side]
        data[side] = {"allowed": decision.allowed, "denied_because": [reason.text for reason in decision.reasons],
                      "requires": sorted(decision.kinds), "warns": sorted(decision.warns),
                      "approvals": {role: {"count": count, "within": None if within >= FOREVER else within}
                                    for role, (count, within) in sorted(decision.approvals.items())}}
    data["tools"] = [finding.tool_class.label for finding in group]
    data["confirmed"] = first.confirmed
    return data


def _undecided(question: Question, findings: list[Finding], what: str, changes: list[Change], subject: str) -> None:
    for group in _group([f for f in findings if f.status != "witness"], lambda f: f.reason):
        first = group[0]
        changes.append(Change("changed", subject, f"whether {what} could not be decided for calls of "
                              f"{_label(first.tool_class.label)}: {first.reason}{_also(group)}"))


def _unconfirmed(finding: Finding) -> str:
    return "" if finding.confirmed else " (replaying this call did not confirm the solver's answer: treat it as a possible difference)"


def _allow_changes(results: dict[Question, list[Finding]], changes: list[Change]) -> AllowDifferences:
    """The allow comparisons, and what they found (`AllowDifferences`)."""
    differences = AllowDifferences()
    for direction in ("loosened", "tightened"):
        question = Question("allow", "", direction)
        findings = results.get(question, [])
        differences.found = differences.found or bool(findings)
        allowing, denying = ("new", "old") if direction == "loosened" else ("old", "new")
        what = "NEW allows a call that OLD denies" if direction == "loosened" else "NEW denies a call that OLD allows"
        witnesses = [f for f in findings if f.status == "witness"]
        differences.undecided = differences.undecided or len(witnesses) < len(findings)
        per_class: dict[str, int] = {}
        for finding in witnesses:
            kinds = [{_reason_kind(reason) for reason in finding.decisions[side].reasons} for side in SIDES]
            differences.reasons.update((finding.tool_class.label, kind) for kind in kinds[0] ^ kinds[1])
            per_class[finding.tool_class.label] = per_class.get(finding.tool_class.label, 0) + 1
            # The search for more witnesses stops at a reason it cannot exclude (the catalogue) or
            # after `MAX_REASONS`: other reasons may hide behind them, so any edit may explain one.
            if "catalogue" in kinds[0] | kinds[1] or per_class[finding.tool_class.label] >= MAX_REASONS:
                differences.undecided = True

        def key(finding: Finding) -> tuple[str, ...]:
            return tuple(sorted(_reason_kind(reason) for reason in finding.decisions[denying].reasons)) + (str(finding.confirmed),)

        for group in _group(witnesses, key):
            first = group[0]
            assert first.witness is not None
            reasons = "; ".join(reason.text for reason in first.decisions[denying].reasons) or "no reason found"
            kind = direction if first.confirmed else "changed"
            changes.append(Change(kind, "allowed calls",
                                  f"{what}: {first.witness.text(first.entries, first.read)} ({NAMES[denying]}: {reasons})"
                                  f"{_also(group)}{_unconfirmed(first)}", _witness_json(group)))
        _undecided(question, findings, what, changes, "allowed calls")
    return differences


def _reason_kind(reason: DenyReason) -> str:
    """What tells two findings' reasons apart: the kind, and for a rule which one."""
    return reason.text if reason.kind == "rule" else reason.kind


def _requirement_changes(policies: dict[str, CompiledPolicy], results: dict[Question, list[Finding]],
                         changes: list[Change]) -> None:
    differs: set[str] = set()
    for question, findings in results.items():
        if question.kind not in ("require", "approval") or not findings:
            continue
        differs.add(question.name if question.kind == "require" else "approval")
        loose = question.direction == "loosened"
        having, lacking = ("old", "new") if loose else ("new", "old")
        if question.kind == "require":
            subject = f"require {question.name}"
            what = (f"NEW no longer requires `{question.name}` for a call that OLD requires it for" if loose else
                    f"NEW requires `{question.name}` for a call that OLD does not")
        else:
            subject = f'approval by role "{question.name}"'
            what = (f'NEW asks less approval by role "{question.name}" than OLD for a call' if loose else
                    f'NEW asks more approval by role "{question.name}" than OLD for a call')
        witnesses = [f for f in findings if f.status == "witness"]

        def key(finding: Finding) -> tuple[Any, ...]:
            if question.kind == "require":
                rules = [r.describe() for r in finding.decisions[having].applied if r.kind == question.name]
                return (tuple(rules), finding.confirmed)
            return (tuple(finding.decisions[side].approvals.get(question.name, (0, FOREVER)) for side in SIDES),
                    finding.confirmed)

        for group in _group(witnesses, key):
            first = group[0]
            assert first.witness is not None
            if question.kind == "require":
                rules = [r.describe() for r in first.decisions[having].applied if r.kind == question.name]
                why = f"{NAMES[having]}: " + backticked(rules)
            else:
                needs = {side: first.decisions[side].approvals.get(question.name, (0, FOREVER)) for side in SIDES}
                why = "; ".join([part for part in [_approval_change(needs, loose)] if part] +
                                [f"{NAMES[side]}: {_approval_text(needs[side])}" for side in SIDES])
            kind = question.direction if first.confirmed else "changed"
            changes.append(Change(kind, subject, f"{what}: {first.witness.text(first.entries, first.read)} ({why})"
                                  f"{_also(group)}{_unconfirmed(first)}", _witness_json(group)))
        _undecided(question, findings, what, changes, subject)
    # Requirements rewritten without a witness: listed, never counted.
    for kind in ("approval", *KINDS):
        texts = {side: sorted(r.describe() for r in policies[side].requirements if r.kind == kind) for side in SIDES}
        if texts["old"] != texts["new"] and kind not in differs:
            removed = [t for t in texts["old"] if t not in texts["new"]]
            added = [t for t in texts["new"] if t not in texts["old"]]
            text = backticked(removed) or "nothing"
            text += " → " + (backticked(added) or "nothing")
            changes.append(Change("rewritten", f"require {kind}",
                                  f"`{kind}` requirements rewritten, with the same effect on every call both allow: {text}"))


def _approval_change(needs: dict[str, tuple[int, int]], loose: bool) -> str:
    """What makes NEW's approval of a role weaker (`loose`) or stronger than OLD's: its number of
    approvers, its `within`, or both — one edit may loosen one and tighten the other."""
    (old_count, old_within), (new_count, new_within) = needs["old"], needs["new"]
    if (new_count if loose else old_count) == 0:
        return "none asked" if loose else "asked where OLD asks none"
    parts = []
    if (new_count < old_count) if loose else (new_count > old_count):
        parts.append(f"{'fewer' if loose else 'more'} approvers, {old_count} → {new_count}")
    if (new_within > old_within) if loose else (new_within < old_within):
        parts.append(f"{'a longer' if loose else 'a shorter'} `within`, {_seconds_or_none(old_within)} → "
                     f"{_seconds_or_none(new_within)}")
    return " and ".join(parts)


def _seconds_or_none(within: int) -> str:
    return "no time bound" if within >= FOREVER else format_seconds(within)


def _approval_text(need: tuple[int, int] | None) -> str:
    if need is None or need[0] == 0:
        return "none"
    count, within = need
    text = f"{count} approver{'s' if count > 1 else ''}"
    return text + (f" within {format_seconds(within)}" if within < FOREVER else " with no time bound")


def _warn_changes(policies: dict[str, CompiledPolicy], results: dict[Question, list[Finding]],
                  changes: list[Change]) -> None:
    texts = {side: {} for side in SIDES}  # type: dict[str, dict[str, str]]
    for side in SIDES:
        for rule in policies[side].rules:
            if rule.effect == "warn":
                texts[side][rule.name] = " || ".join(
                    [t for t in [texts[side].get(rule.name)] if t] + [cel.to_source(rule.when)])
    # Whether some call gets a warning from one policy and none from the other; if none does, a rule
    # renamed, split or merged only changes which name a warning bears, and does not count.
    warnings_differ = any(results.get(Question("warnings", "", d)) for d in ("loosened", "tightened"))
    names = sorted(texts["old"].keys() | texts["new"].keys())
    for name in names:
        old, new = texts["old"].get(name), texts["new"].get(name)
        header = (f"warn rule `{name}` was added: `{new}`" if old is None else
                  f"warn rule `{name}` was removed: `{old}`" if new is None else
                  f"warn rule `{name}`: `{old}` → `{new}`" if old != new else
                  f"warn rule `{name}` (unchanged text) fires on other calls")
        sentences: list[str] = []
        witness: dict[str, Any] | None = None
        counted = False
        for direction in ("loosened", "tightened"):
            findings = results.get(Question("warn", name, direction), [])
            counted = counted or bool(findings)
            having, lacking = ("old", "new") if direction == "loosened" else ("new", "old")
            found = [f for f in findings if f.status == "witness"]
            if found:
                first = found[0]
                assert first.witness is not None
                sentences.append(f"{NAMES[having]} warns and {NAMES[lacking]} does not on {first.witness.text(first.entries, first.read)}"
                                 f"{_also(found)}{_unconfirmed(first)}")
                witness = witness or _witness_json(found)
            for group in _group([f for f in findings if f.status != "witness"], lambda f: f.reason):
                sentences.append(f"whether {NAMES[having]} warns where {NAMES[lacking]} does not could not be decided "
                                 f"for calls of {_label(group[0].tool_class.label)}: {group[0].reason}{_also(group)}")
        if old == new and not counted:
            continue
        if counted and warnings_differ:
            changes.append(Change("changed", f"warn {name}", header + "; " + "; ".join(sentences), witness))
        elif counted:
            changes.append(Change("rewritten", f"warn {name}",
                                  header + " (every call that gets a warning from one policy gets one from the other, "
                                  "under another rule's name)"))
        else:
            changes.append(Change("rewritten", f"warn {name}",
                                  header + " (on the calls both policies allow, it warns exactly as before)"))


def _deny_rules(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change], allowed: AllowDifferences) -> None:
    """Deny rules edited, added or removed, by name: one that explains an allow witness (it fires
    on the witness under one policy and not the other) is `changed`; a rewrite that explains none
    is `rewritten`."""
    texts: dict[str, dict[str, str]] = {"old": {}, "new": {}}
    reasons: dict[str, dict[str, str | None]] = {"old": {}, "new": {}}  # the `because` of each rule
    for side, policy in (("old", old), ("new", new)):
        for rule in policy.rules:
            if rule.effect == "deny":
                texts[side][rule.name] = " || ".join(
                    [t for t in [texts[side].get(rule.name)] if t] + [cel.to_source(rule.when)])
                reasons[side].setdefault(rule.name, rule.because)
    # A rule that only changed its name (one removed, one added, with one condition) is one edit.
    removed = {texts["old"][name]: name for name in texts["old"].keys() - texts["new"].keys()}
    added = {texts["new"][name]: name for name in texts["new"].keys() - texts["old"].keys()}
    renamed = {removed[text]: added[text] for text in removed.keys() & added.keys()}
    for before, after in sorted(renamed.items()):
        explained = allowed.explained_by(f"denied by `{before}`") or allowed.explained_by(f"denied by `{after}`")
        changes.append(Change("changed" if explained else "rewritten", f"deny {after}",
                              f"deny rule `{before}` was renamed `{after}`: `{texts['new'][after]}`"
                              + allowed.remark(explained, " (its condition is the same)")))
    for name in sorted(texts["old"].keys() & texts["new"].keys()):
        a, b = reasons["old"][name], reasons["new"][name]
        if a != b and texts["old"][name] == texts["new"][name]:
            changes.append(Change("rewritten", f"deny {name}", f"deny rule `{name}` gives another reason: "
                                  f"{json.dumps(a) if a else 'none'} → {json.dumps(b) if b else 'none'}"))
    for name in sorted(texts["old"].keys() | texts["new"].keys()):
        a, b = texts["old"].get(name), texts["new"].get(name)
        if a == b or name in renamed or name in renamed.values():
            continue
        text = (f"deny rule `{name}` was removed: `{a}`" if b is None else
                f"deny rule `{name}` was added: `{b}`" if a is None else f"deny rule `{name}`: `{a}` → `{b}`")
        explained = allowed.explained_by(f"denied by `{name}`")
        changes.append(Change("changed" if explained else "rewritten", f"deny {name}",
                              text + allowed.remark(explained, " (both policies still allow and deny the same calls)")))


def _unknown_tools(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change], allowed: AllowDifferences) -> None:
    if old.unknown_tools != new.unknown_tools:
        explained = allowed.explained_by("catalogue")
        kind = ("loosened" if new.unknown_tools == "warn" else "tightened") if explained else "rewritten"
        changes.append(Change(kind, "unknown_tools",
                              f"tools outside the catalogue: `{old.unknown_tools}` → `{new.unknown_tools}`"
                              + allowed.remark(explained, " (no tool is decided differently)")))


def _catalogue(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change], allowed: AllowDifferences) -> None:
    """Facts of the catalogue that decisions other than allow/deny read (risk classes, caps,
    schemas), compared per tool class: the entry each policy decides the class's tools by, however
    the catalogue spells it (`deploy.preview { risk read_only }` added under `deploy.* { risk
    reversible_write }` lowers that tool's risk). A tool one catalogue lacks is compared only where
    that policy admits it (`unknown_tools warn`: no risk, no caps); where it denies it, the allow
    comparison speaks of it. Entries added or removed that change none of this, nor what is
    allowed, are `rewritten`."""
    differing: set[str] = set()  # the patterns of the entries whose facts differ
    for tool_class in tool_classes(old, new):
        a, b = tool_class.entry(old), tool_class.entry(new)
        if (a is None and (b is None or old.unknown_tools != "warn")) or (b is None and new.unknown_tools != "warn"):
            continue
        found = _entry_changes(tool_class.label, a, b, allowed)
        if found:
            differing.update(entry.pattern for entry in (a, b) if entry is not None)
            changes.extend(found)
    if not allowed.found:
        before = {entry.pattern for entry in old.catalogue}
        after = {entry.pattern for entry in new.catalogue}
        for pattern in sorted(after - before - differing):
            changes.append(Change("rewritten", f"tool {pattern}",
                                  f"`{pattern}` is now in the catalogue (both policies decide its calls alike)"))
        for pattern in sorted(before - after - differing):
            changes.append(Change("rewritten", f"tool {pattern}",
                                  f"`{pattern}` left the catalogue (both policies decide its calls alike)"))


def _entry_changes(label: str, a: CatalogueEntry | None, b: CatalogueEntry | None,
                   allowed: AllowDifferences) -> list[Change]:
    """How the entry NEW decides the tools of `label` by (`b`) differs from OLD's (`a`); None is no
    entry (an unknown tool that the policy admits)."""
    subject = f"tool {label}"
    name = f"`{label}`" if label != OTHER else label
    patterns = [entry.pattern if entry is not None else None for entry in (a, b)]
    through = "" if patterns[0] == patterns[1] else " (OLD by {}, NEW by {})".format(
        *(f"`{pattern}`" if pattern is not None else "no entry" for pattern in patterns))
    risks = [entry.risk if entry is not None else None for entry in (a, b)]
    costs = [(entry.cost_cap, entry.currency) if entry is not None and entry.cost_cap is not None else (None, None)
             for entry in (a, b)]
    times = [entry.time_cap if entry is not None else None for entry in (a, b)]
    schemas = [entry.args if entry is not None else None for entry in (a, b)]
    found: list[Change] = []
    if risks[0] != risks[1]:
        found.append(Change(_risk_direction(*risks), subject,
                            f"{name} risk `{_risk(risks[0])}` → `{_risk(risks[1])}`{through}"))
    if costs[0] != costs[1]:
        looser = costs[1][0] is None or (costs[0][0] is not None and costs[1][0] > costs[0][0])
        kind = "loosened" if looser else "tightened"
        if costs[0][1] and costs[1][1] and costs[0][1] != costs[1][1]:
            kind = "changed"  # plangate never converts: 20 eur is neither more nor less than 10 usd
        found.append(Change(kind, subject,
                            f"{name} cost cap {_amount(*costs[0])} → {_amount(*costs[1])}{through}"))
    if times[0] != times[1]:
        looser = times[1] is None or (times[0] is not None and times[1] > times[0])
        found.append(Change("loosened" if looser else "tightened", subject,
                            f"{name} time cap {_seconds(times[0])} → {_seconds(times[1])}{through}"))
    if _schema_key(schemas[0]) != _schema_key(schemas[1]):
        explained = allowed.explained_by("arguments", label)
        found.append(Change("changed" if explained else "rewritten", subject,
                            f"{name} argument schema: {_schema(schemas[0])} → {_schema(schemas[1])}{through}"
                            + allowed.remark(explained, " (both policies still allow the same calls)")))
    return found


def _limits(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change]) -> None:
    for name in sorted(old.limits.keys() | new.limits.keys()):
        a, b = old.limits.get(name), new.limits.get(name)
        if a is None and b is not None:
            changes.append(Change("tightened", f"limit {name}", f"`limit {name}` added: {b.text()}"))
        elif b is None and a is not None:
            changes.append(Change("loosened", f"limit {name}", f"`limit {name}` removed (was {a.text()})"))
        elif a is not None and b is not None and (a.key(), a.currency) != (b.key(), b.currency):
            kind = "loosened" if b.key() > a.key() else "tightened"
            if a.currency != b.currency:
                kind = "changed"
            changes.append(Change(kind, f"limit {name}", f"`limit {name}` {a.text()} → {b.text()}"))


def _risk_direction(old: Risk | None, new: Risk | None) -> str:
    """How a tool's catalogue risk changing from `old` to `new` moves the effective risk of its steps.

    A catalogue risk is a floor under the declared one (`risk-underdeclared` below it). No risk
    (None) is no floor, and a step declaring none then counts as `irreversible` (docs/semantics.md):
    so dropping a floor `r` raises the steps that declare nothing to `irreversible` (tighter unless
    `r` is `irreversible`) and frees those declaring less than `r` (looser unless `r` is
    `read_only`); both at once is `changed`."""
    if old is not None and new is not None:
        return "loosened" if new < old else "tightened"
    floor = old if old is not None else new
    assert floor is not None
    undeclared_rise = floor != Risk.irreversible  # steps declaring nothing: floor ↔ irreversible
    declared_drop = floor != Risk.read_only  # steps declaring less than the floor
    if undeclared_rise and declared_drop:
        return "changed"
    removed = new is None
    return ("tightened" if removed else "loosened") if undeclared_rise else ("loosened" if removed else "tightened")


def _risk(risk: Risk | None) -> str:
    return risk.name if risk is not None else "none"


def _amount(amount: Any, currency: str | None) -> str:
    return "none" if amount is None else f"{amount} {currency}" if currency else str(amount)


def _seconds(seconds: int | None) -> str:
    return "none" if seconds is None else format_seconds(seconds)


def _schema_key(args: tuple[ArgSpec, ...] | None) -> Any:
    return None if args is None else sorted((a.name, a.type, a.optional) for a in args)


def _schema(args: tuple[ArgSpec, ...] | None) -> str:
    if args is None:
        return "any arguments"
    return "{" + ", ".join(f"{a.name}: {a.type}{'?' if a.optional else ''}" for a in args) + "}"


def _as_duration(value: Any) -> Any:
    """A duration field of a witness as a duration: the decoder gives one where the variable is
    typed so, the solver's seconds (a number) elsewhere; anything else is no time at all."""
    from plangate.cel.evaluate import Duration

    if isinstance(value, Duration):
        return value
    if isinstance(value, (int, float, Fraction)) and not isinstance(value, bool):
        return Duration.from_seconds(Fraction(value))
    return Duration.from_seconds(0)


def _show(value: Any) -> str:
    from plangate.cel.evaluate import Duration

    if isinstance(value, Duration):
        return f'duration("{value}")'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, bytes):
        return 'b"' + value.decode("latin-1") + '"'
    return json.dumps(_plain(value))


def _plain(value: Any) -> Any:
    from plangate.cel.evaluate import Duration

    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, Duration):
        return str(value)
    return value


# ------------------------------------------------------------------------------------------ CLI

TITLES = {"loosened": "NEW allows what OLD denied (loosened)", "tightened": "NEW denies what OLD allowed (tightened)",
          "changed": "other changes", "rewritten": "rewritten, same meaning"}


def diff_command(old_path: str, new_path: str, output_format: str, exit_code: bool = False) -> int:
    """The CLI face: 0 when the diff was made, 2 when a policy is broken; with `exit_code`, 1 when
    the policies differ in meaning (a `rewritten` entry alone is no difference)."""
    from plangate.diagnostics import Severity
    from plangate.diagnostics.render import render, terminal_text
    from plangate.driver import check

    compiled = []
    for path in (old_path, new_path):
        result = check([], [path])
        errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
        if errors or result.policy is None:
            sys.stderr.write(render(result.diagnostics, result.sources, "text", files=result.files,
                                    tool_version=""))
            print(terminal_text(f"plangate: `{path}` has errors; no diff was made"), file=sys.stderr)
            return 2
        compiled.append(result.policy)
    changes = diff_policies(compiled[0], compiled[1])
    differs = any(change.counts for change in changes)
    if output_format == "json":
        print(json.dumps({"old": old_path, "new": new_path, "same_meaning": not differs,
                          "changes": [asdict(c) for c in changes]}, indent=2))
    else:
        if not differs:  # each line may quote the policies (a rule's name, a string): shown as diagnostics show them
            print(terminal_text(f"`{old_path}` and `{new_path}` have the same meaning: they allow and deny the "
                                "same calls, with the same requirements, warnings and limits"))
        for kind in ("loosened", "tightened", "changed", "rewritten"):
            group = [change for change in changes if change.kind == kind]
            if group:
                print(TITLES[kind] + ":")
                for change in group:
                    print(f"  {terminal_text(change.text)}")
    return 1 if (differs and exit_code) else 0

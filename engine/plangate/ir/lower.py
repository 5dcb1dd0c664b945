"""Lowering: Lark's LALR reductions → the typed model.

`Lowering` is handed to Lark as its internal transformer, so each grammar rule is turned into an IR
node the moment it is reduced: no parse tree is built and nothing recurses, however deep the input.
Nodes are built with `ir.build` (`model_construct` from a dict): the lowering is the one trusted
producer of IR and passes values of the declared types, so pydantic's validation (and building its
schemas at start-up) is skipped on this hot path; IR built through the API is validated as usual.
Spans come from the tokens and the nodes already built (named keyword terminals such as `STEP` and
`RBRACE` are kept so a node's span covers its whole text).

What the grammar cannot say is checked here and reported, never raised: clauses given twice, risk
names, whole numbers, escapes, currencies inside a range. (Expression depth is the one exception:
`ExpressionTooDeep` stops the parse, and the parser reports it as `input-too-large`.) A callback never fails
on well-formed input; `Lowering.diagnostics` collects what it finds for the current file.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal, InvalidOperation
from functools import partialmethod
from typing import Any

from lark import Token, Transformer

from plangate.cel import ast as cel
from plangate.diagnostics import Diagnostic, Label, backticked, diagnostic
from plangate.ir import nodes as ir
from plangate.source import Span

_INT_MAX = (1 << 63) - 1

MAX_EXPRESSION_DEPTH = 256
MAX_NUMBER_DIGITS = 40  # of a whole number, and the digits and decimal places of an amount
MAX_DURATION_DIGITS = 15  # some 30 million years in seconds

DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}  # seconds per unit (the parser's hints use it too)
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v", "?": "?", "`": "`"}

_new_span = tuple.__new__  # `Span(file, start, end)` without the named tuple's Python-level `__new__`

# The step clauses that may appear at most once; `expect`, `approval` and `after` may repeat.
_SINGLE_STEP_CLAUSES = ("call", "risk", "cost", "time", "retry", "idempotency", "rollback", "when")


class ExpressionTooDeep(Exception):
    def __init__(self, span: Span) -> None:
        super().__init__("expression too deep")
        self.span = span


class _Clause:
    """A step/tool/test clause on its way into its block: kind, value and where it was written."""

    __slots__ = ("kind", "value", "span")

    def __init__(self, kind: str, value: Any, span: Span) -> None:
        self.kind = kind
        self.value = value
        self.span = span


class Lowering(Transformer):
    """Builds IR from reductions; reset with `begin(file)` before each parse."""

    def __init__(self) -> None:
        super().__init__(visit_tokens=False)
        self.file = ""
        self.diagnostics: list[Diagnostic] = []
        self._depth: dict[int, int] = {}  # id → depth of the long-spanned CEL nodes of this parse

    def begin(self, file: str) -> None:
        self.file = file
        self.diagnostics = []
        self._depth = {}

    # ---------------------------------------------------------------- helpers
    def _tok(self, token: Token) -> Span:
        return _new_span(Span, (self.file, token.start_pos, token.end_pos))

    def _span(self, first: Any, last: Any) -> Span:
        start = first.start_pos if type(first) is Token else _start(first)  # the common case inline
        end = last.end_pos if type(last) is Token else _end(last)
        return _new_span(Span, (self.file, start, end))

    def _through(self, keyword: Token, node: Any) -> Span:
        """From a keyword token to the end of a node built from what follows it (`expect x > 1`)."""
        return _new_span(Span, (self.file, keyword.start_pos, node.span.end))

    def _report(self, name: str, span: Span, message: str, **extra: Any) -> None:
        self.diagnostics.append(diagnostic(name, span, message, **extra))

    def _string(self, token: Token) -> str:
        raw = token.value[1:-1]
        if "\\" not in raw:
            return raw
        out: list[str] = []
        index = 0
        while index < len(raw):
            char = raw[index]
            if char != "\\":
                out.append(char)
                index += 1
                continue
            escape = raw[index + 1] if index + 1 < len(raw) else ""
            if escape in _ESCAPES:
                out.append(_ESCAPES[escape])
                index += 2
            elif escape in ("u", "x", "U"):
                width = {"u": 4, "x": 2, "U": 8}[escape]
                digits = raw[index + 2:index + 2 + width]
                start = token.start_pos + 1 + index
                code = int(digits, 16) if len(digits) == width and all(c in _HEX for c in digits) else None
                if code is None:
                    self._report("syntax-error", Span(self.file, start, start + 2 + len(digits)),
                                 f"malformed escape `\\{escape}{digits}` in a string",
                                 help=f"write `\\{escape}` followed by {width} hexadecimal digits")
                    out.append("\ufffd")
                elif 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
                    what = "a surrogate, half of a UTF-16 pair" if code <= 0xDFFF else "past the last code point, U+10FFFF"
                    self._report("syntax-error", Span(self.file, start, start + 2 + width),
                                 f"the escape `\\{escape}{digits}` is not a character: it is {what}",
                                 help="write the character itself, or its code point (`\\U0001F600` for 😀)")
                    out.append("\ufffd")
                else:
                    out.append(chr(code))
                index += 2 + width
            else:
                start = token.start_pos + 1 + index
                self._report("syntax-error", Span(self.file, start, start + 2),
                             f"unknown escape `\\{escape}` in a string",
                             help='escapes are CEL\'s: `\\"`, `\\\\`, `\\n`, `\\t`, `\\r`, `\\uXXXX` and the others of the language '
                                  'reference; write `\\\\` for a backslash')
                out.append(escape)
                index += 2
        return "".join(out)

    def _named(self, token: Token, what: str) -> str:
        """The text of a string that names something (a role, a rule, a test): one with no
        visible character names nothing, and is reported."""
        text = self._string(token)
        if not text.strip():
            self._report("invalid-value", self._tok(token), f"{what} cannot be empty",
                         help="give it a name, such as `\"operator\"`")
        return text

    def _whole(self, token: Token, what: str, minimum: int = 0) -> int | None:
        """The whole number `token` holds, or None (reported) when it is not one or is too small;
        the caller then leaves the clause out rather than invent a value."""
        text = token.value
        number = _number(text)  # digits, a fraction, an exponent (`1e3` is whole, as limits read it)
        if number is None:  # an exponent past what a decimal holds: too long, or a fraction too fine
            self._report("invalid-value", self._tok(token), f"{what} must be a whole number, not `{_short(text)}`"
                         if "e-" in text.lower() else f"{what} has more than {MAX_NUMBER_DIGITS} digits")
            return None
        if number != number.to_integral_value():
            self._report("invalid-value", self._tok(token), f"{what} must be a whole number, not `{text}`")
            return None
        if number.adjusted() + 1 > MAX_NUMBER_DIGITS:  # its digits, leading zeros aside
            self._report("invalid-value", self._tok(token), f"{what} has more than {MAX_NUMBER_DIGITS} digits")
            return None
        value = int(number)
        if value < minimum:
            self._report("invalid-value", self._tok(token), f"{what} must be at least {minimum}")
            return None
        return value

    def _duration(self, token: Token) -> ir.Duration:
        text = token.value
        unit = text.lstrip("0123456789")
        digits = text[: len(text) - len(unit)]
        if len(digits.lstrip("0")) > MAX_DURATION_DIGITS:
            self._report("invalid-value", self._tok(token), f"the duration `{_short(text)}` is too long to count",
                         help=f"a duration has at most {MAX_DURATION_DIGITS} digits")
            digits = "0"
        number = int(digits)
        # Whole seconds: a bound in milliseconds rounds up, so `500ms` is never read as no time at all.
        seconds = -(-number // 1000) if unit == "ms" else number * int(DURATION_UNITS[unit])
        return ir.build(ir.Duration, {"seconds": seconds, "text": text, "span": self._tok(token)})

    def _risk(self, token: Token) -> ir.RiskRef:
        name = token.value
        level = ir.Risk.__members__.get(name)
        if level is None:
            from plangate.suggest import did_you_mean

            self._report("unknown-risk", self._tok(token), f"`{name}` is not a risk class",
                         help=did_you_mean(name, ir.RISK_NAMES)
                         or "the risk classes are " + backticked(ir.RISK_NAMES))
        return ir.build(ir.RiskRef, {"name": name, "level": level, "span": self._tok(token)})

    # ---------------------------------------------------------------- documents
    def start(self, children: list) -> ir.Document:
        plans = tuple(child for child in children if isinstance(child, ir.Plan))
        policies = tuple(child for child in children if isinstance(child, ir.Policy))
        span = self._span(children[0], children[-1]) if children else Span(self.file, 0, 0)
        return ir.Document.model_construct(file=self.file, plans=plans, policies=policies, span=span)

    def expression(self, children: list) -> cel.Expr:
        return children[0]

    def version_clause(self, children: list) -> _Clause:
        keyword, number = children
        return _Clause("version", self._whole(number, "a version", 0), self._span(keyword, number))

    # ---------------------------------------------------------------- plans
    def empty_items(self, children: list) -> list:
        return []

    def append_item(self, children: list) -> list:
        items, item = children
        items.append(item)
        return items

    def plan(self, children: list) -> ir.Plan:
        keyword, name, items, close = children
        fields: dict[str, Any] = {"non_goals": [], "scope": [], "success": [], "constraints": [],
                                  "decisions": [], "steps": []}
        seen: dict[str, Span] = {}
        for item in items:
            if isinstance(item, ir.Step):
                fields["steps"].append(item)
            elif isinstance(item, ir.Decision):
                fields["decisions"].append(item)
            elif isinstance(item, ir.Budget):
                if self._once(seen, "budget", item.span):
                    fields["budget"] = item
            elif item.kind in ("version", "objective"):
                if self._once(seen, item.kind, item.span):
                    fields[item.kind] = item.value
            elif item.kind == "scope":
                fields["scope"].extend(item.value)
            else:
                fields[item.kind].append(item.value)
        for key in ("non_goals", "scope", "success", "constraints", "decisions", "steps"):
            fields[key] = tuple(fields[key])
        return ir.Plan.model_construct(id=name.value, id_span=self._tok(name), span=self._span(keyword, close), **fields)

    def _once(self, seen: dict[str, Span], kind: str, span: Span, what: str | None = None) -> bool:
        if kind in seen:
            what = what or f"`{kind}`"
            self._report("duplicate-clause", span, f"{what} is given twice",
                         labels=[Label(seen[kind], "first given here")],
                         help="remove one of the two")
            return False
        seen[kind] = span
        return True

    def objective_clause(self, children: list) -> _Clause:
        (text,) = children
        return _Clause("objective", self._string(text), self._tok(text))

    def non_goal_clause(self, children: list) -> _Clause:
        (text,) = children
        return _Clause("non_goals", self._string(text), self._tok(text))

    def scope_clause(self, children: list) -> _Clause:
        return _Clause("scope", [self._string(t) for t in children], self._span(children[0], children[-1]))

    def success_clause(self, children: list) -> _Clause:
        (text,) = children
        return _Clause("success", self._string(text), self._tok(text))

    def constraint_clause(self, children: list) -> _Clause:
        (text,) = children
        return _Clause("constraints", self._string(text), self._tok(text))

    def decision_pending(self, children: list) -> _Clause:
        return _Clause("pending", None, self._tok(children[0]))

    def decision_resolved(self, children: list) -> _Clause:
        (answer,) = children
        return _Clause("resolved", self._string(answer), self._tok(answer))

    def decision_clause(self, children: list) -> ir.Decision:
        keyword, question, state = children
        return ir.Decision.model_construct(question=self._string(question), pending=state.kind == "pending",
                           answer=state.value, span=self._span(keyword, state))

    def budget_cost(self, children: list) -> _Clause:
        keyword, money = children
        return _Clause("cost", money, self._through(keyword, money))

    def budget_time(self, children: list) -> _Clause:
        keyword, duration = children
        return _Clause("time", self._duration(duration), self._span(keyword, duration))

    def budget_calls(self, children: list) -> _Clause:
        keyword, number = children
        return _Clause("calls", self._whole(number, "a call budget"), self._span(keyword, number))

    def budget_block(self, children: list) -> ir.Budget:
        keyword, *items, close = children
        seen: dict[str, Span] = {}
        fields: dict[str, Any] = {}
        for item in items:
            if self._once(seen, item.kind, item.span) and item.value is not None:
                fields[item.kind] = item.value
                if item.kind == "calls":
                    fields["calls_span"] = item.span
        return ir.Budget.model_construct(span=self._span(keyword, close), **fields)

    def after_list(self, children: list) -> list[ir.Name]:
        return [ir.build(ir.Name, {"name": token.value, "span": self._tok(token)}) for token in children]

    def step_block(self, children: list) -> ir.Step:
        keyword, name, after, *clauses, close = children
        fields: dict[str, Any] = {}
        after_names: list[ir.Name] = list(after or ())
        expects: list[ir.Expectation] = []
        approvals: list[ir.ApprovalSpec] = []
        seen: dict[str, Span] = {}
        for clause in clauses:
            if clause.kind == "after":
                after_names.extend(clause.value)
            elif clause.kind == "expect":
                expects.append(ir.build(ir.Expectation, {"expr": clause.value, "span": clause.span}))
            elif clause.kind == "approval":
                approvals.append(clause.value)
            elif self._once(seen, clause.kind, clause.span):
                fields[clause.kind] = clause.value
                if clause.kind == "retry":
                    fields["retry_span"] = clause.span
        fields.update(id=name.value, kind="check" if keyword.type == "CHECK" else "step", id_span=self._tok(name),
                      after=tuple(after_names), expects=tuple(expects), approvals=tuple(approvals),
                      span=_new_span(Span, (self.file, keyword.start_pos, close.end_pos)))
        return ir.build(ir.Step, fields)

    def call_clause(self, children: list) -> _Clause:
        keyword, call = children
        return _Clause("call", call, self._through(keyword, call))

    def rollback_clause(self, children: list) -> _Clause:
        keyword, call = children
        return _Clause("rollback", call, self._through(keyword, call))

    def risk_clause(self, children: list) -> _Clause:
        keyword, name = children
        return _Clause("risk", self._risk(name), self._span(keyword, name))

    def cost_clause(self, children: list) -> _Clause:
        keyword, money = children
        return _Clause("cost", ir.build(ir.CostRange, {"low": money, "high": money, "span": money.span}),
                       self._through(keyword, money))

    def cost_range_clause(self, children: list) -> _Clause:
        keyword, low, high = children
        if low.currency is None and high.currency is not None:
            low = ir.build(ir.Money, {"amount": low.amount, "currency": high.currency, "span": low.span})
        elif low.currency is not None and high.currency is None:
            high = ir.build(ir.Money, {"amount": high.amount, "currency": low.currency, "span": high.span})
        elif low.currency != high.currency:
            self._report("currency-mismatch", self._span(low, high),
                         f"a cost range cannot go from `{low.currency}` to `{high.currency}`",
                         help="write both ends in one currency")
        if low.amount > high.amount:
            self._report("invalid-value", self._span(low, high),
                         f"the range `{low.amount}..{high.amount}` is empty: its low end is above its high end",
                         help=f"did you mean `{high.amount}..{low.amount}`?")
        span = self._span(low, high)
        return _Clause("cost", ir.build(ir.CostRange, {"low": low, "high": high, "span": span}), self._through(keyword, high))

    def time_clause(self, children: list) -> _Clause:
        keyword, duration = children
        return _Clause("time", self._duration(duration), self._span(keyword, duration))

    def retry_clause(self, children: list) -> _Clause:
        keyword, number = children
        return _Clause("retry", self._whole(number, "a retry count") or 0, self._span(keyword, number))

    def expect_clause(self, children: list) -> _Clause:
        keyword, expr = children
        return _Clause("expect", expr, self._through(keyword, expr))

    def idempotency_clause(self, children: list) -> _Clause:
        keyword, expr = children
        return _Clause("idempotency", expr, self._through(keyword, expr))

    def when_clause(self, children: list) -> _Clause:
        keyword, expr = children
        return _Clause("when", expr, self._through(keyword, expr))

    def approval_clause(self, children: list) -> _Clause:
        keyword, spec = children
        spec = spec.model_copy(update={"span": self._span(keyword, spec)})
        return _Clause("approval", spec, spec.span)

    def after_clause(self, children: list) -> _Clause:
        (names,) = children
        return _Clause("after", names, self._span(names[0], names[-1]))

    def approval_spec(self, children: list) -> ir.ApprovalSpec:
        keyword, count, role, within = children
        count_value = 1 if count is None else (self._whole(count, "an approver count", 1) or 1)
        duration = self._duration(within) if within is not None else None
        # Zero as written (a duration too long to count is reported as that, and reads as 0 too).
        if duration is not None and not duration.text.rstrip("msdh").strip("0"):
            self._report("invalid-value", duration.span, f"an approval `within {duration.text}` expires at once",
                         help="give it a time to be used, such as `within 15m`")
        last = within if within is not None else role
        role_name = self._named(role, "a role")
        return ir.ApprovalSpec.model_construct(count=count_value, role=role_name, within=duration,
                               span=self._span(keyword, last))

    def tool_name(self, children: list) -> tuple[str, Span]:
        return ".".join(token.value for token in children), self._span(children[0], children[-1])

    def tool_call(self, children: list) -> ir.ToolCall:
        (name, name_span), *args, close = children
        seen: dict[str, Span] = {}
        arguments = tuple(arg for arg in args if arg is not None
                          and self._once(seen, arg.name, arg.span, f"the argument `{arg.name}`"))
        return ir.build(ir.ToolCall, {"tool": name, "tool_span": name_span, "args": arguments,
                                      "span": _new_span(Span, (self.file, name_span.start, close.end_pos))})

    def call_arg(self, children: list) -> ir.Argument:
        name, value = children  # a NAME token and an expression
        return ir.build(ir.Argument, {"name": name.value, "value": value,
                                      "span": _new_span(Span, (self.file, name.start_pos, value.span.end))})

    def money(self, children: list) -> ir.Money:
        number, currency = children
        amount = _number(number.value)
        places = amount.as_tuple() if amount is not None else None
        if places is None or len(places.digits) > MAX_NUMBER_DIGITS \
                or not -MAX_NUMBER_DIGITS <= places.exponent <= MAX_NUMBER_DIGITS:  # type: ignore[operator]
            self._report("invalid-value", self._tok(number), f"the amount `{_short(number.value)}` has more digits "
                         f"or decimal places than can be counted exactly",
                         help=f"write an amount with at most {MAX_NUMBER_DIGITS} digits in all, at most "
                              f"{MAX_NUMBER_DIGITS} of them after the point")
            amount = Decimal(0)
        last = currency if currency is not None else number
        if currency is not None and currency.start_pos == number.end_pos and currency.value in DURATION_UNITS \
                and number.value.isdigit():  # `cost 5m`: a duration where an amount goes, not 5 of currency `m`
            self._report("invalid-value", self._span(number, currency),
                         f"`{number.value}{currency.value}` is a duration, but an amount goes here",
                         help=f"write an amount such as `{number.value} usd` (a step's time is `time {number.value}{currency.value}`)")
            currency = None  # no currency `m` to disagree with the others
        return ir.build(ir.Money, {"amount": amount, "currency": currency.value.lower() if currency is not None else None,
                                   "span": self._span(number, last)})

    # ---------------------------------------------------------------- policies
    def policy(self, children: list) -> ir.Policy:
        keyword, name, items, close = children
        fields: dict[str, Any] = {"tools": [], "requirements": [], "rules": [], "limits": [], "tests": []}
        seen: dict[str, Span] = {}
        for item in items:
            if isinstance(item, ir.ToolEntry):
                fields["tools"].append(item)
            elif isinstance(item, ir.Requirement):
                fields["requirements"].append(item)
            elif isinstance(item, ir.Rule):
                fields["rules"].append(item)
            elif isinstance(item, ir.Limit):
                fields["limits"].append(item)
            elif isinstance(item, ir.PolicyTest):
                fields["tests"].append(item)
            elif item.kind == "unknown_tools":
                if self._once(seen, "unknown_tools", item.span):
                    fields["unknown_tools"] = item.value
                    fields["unknown_tools_span"] = item.span
            elif self._once(seen, item.kind, item.span):
                fields[item.kind] = item.value
        for key in ("tools", "requirements", "rules", "limits", "tests"):
            fields[key] = tuple(fields[key])
        return ir.Policy.model_construct(id=name.value, id_span=self._tok(name), span=self._span(keyword, close), **fields)

    def tool_pattern(self, children: list) -> tuple[str, Span]:
        tokens = [token for token in children if token is not None]
        if tokens[0].type == "STRING":
            return self._string(tokens[0]), self._tok(tokens[0])  # checked by `malformed-pattern`
        names = ".".join(token.value for token in tokens if token.type == "NAME")
        text = "*" if tokens[0].type == "STAR" else names + (".*" if tokens[-1].type == "DOT_STAR" else "")
        return text, self._span(tokens[0], tokens[-1])

    def tool_entry(self, children: list) -> ir.ToolEntry:
        keyword, (pattern, pattern_span), *items, close = children
        fields: dict[str, Any] = {}
        seen: dict[str, Span] = {}
        for item in items:
            if self._once(seen, item.kind, item.span):
                fields[item.kind] = item.value
        return ir.ToolEntry.model_construct(pattern=pattern, pattern_span=pattern_span, span=self._span(keyword, close),
                            **fields)

    def tool_risk(self, children: list) -> _Clause:
        keyword, name = children
        return _Clause("risk", self._risk(name), self._span(keyword, name))

    def tool_cost(self, children: list) -> _Clause:
        keyword, money = children
        return _Clause("cost", money, self._through(keyword, money))

    def tool_time(self, children: list) -> _Clause:
        keyword, duration = children
        return _Clause("time", self._duration(duration), self._span(keyword, duration))

    def tool_args(self, children: list) -> _Clause:
        keyword, *specs, close = children
        specs = [spec for spec in specs if spec is not None]
        seen: dict[str, Span] = {}
        unique = []
        for spec in specs:
            if self._once(seen, spec.name, spec.span, f"the argument `{spec.name}`"):
                unique.append(spec)
        return _Clause("args", tuple(unique), self._span(keyword, close))

    def arg_spec(self, children: list) -> ir.ArgSpec:
        name, type_name, optional = children
        if type_name.value not in ir.ARG_TYPES:
            from plangate.suggest import did_you_mean

            self._report("unknown-arg-type", self._tok(type_name), f"`{type_name.value}` is not a type",
                         help=did_you_mean(type_name.value, ir.ARG_TYPES)
                         or "the types are " + backticked(ir.ARG_TYPES))
        last = optional if optional is not None else type_name
        return ir.ArgSpec.model_construct(name=name.value, type=type_name.value, optional=optional is not None,
                          span=self._span(name, last))

    def unknown_tools_clause(self, children: list) -> _Clause:
        keyword, value = children
        mode = value.value
        if mode not in ("deny", "warn"):
            self._report("invalid-value", self._tok(value), f"`unknown_tools` takes `deny` or `warn`, not `{mode}`")
            mode = "deny"
        return _Clause("unknown_tools", mode, self._span(keyword, value))

    def requirement_kind(self, children: list) -> Token:
        return children[0]

    def require_clause(self, children: list) -> ir.Requirement:
        keyword, kind, _when, condition, approval = children
        last = approval or condition or kind
        if kind.value == "approval" and approval is None:
            self._report("syntax-error", self._span(keyword, last),
                         "`require approval` needs `by role \"R\"`: who must approve",
                         help='write `require approval when … by role "operator" within 1h`')
        if kind.value != "approval" and approval is not None:
            self._report("syntax-error", approval.span,
                         f"`by role` belongs to `require approval`, not `require {kind.value}`")
            approval = None
        return ir.Requirement.model_construct(kind=kind.value, when=condition, approval=approval,
                              span=self._span(keyword, last))

    def _rule(self, effect: str, children: list) -> ir.Rule:
        keyword, name, _when, condition, because = children
        last = because if because is not None else condition
        return ir.Rule.model_construct(effect=effect, name=self._named(name, f"a {effect} rule's name"), when=condition,
                       because=self._string(because) if because is not None else None,
                       span=self._span(keyword, last))

    def deny_rule(self, children: list) -> ir.Rule:
        return self._rule("deny", children)

    def warn_rule(self, children: list) -> ir.Rule:
        return self._rule("warn", children)

    def limit_clause(self, children: list) -> ir.Limit:
        keyword, name, value = children
        return ir.Limit.model_construct(name=name.value, value=value, span=self._span(keyword, value))

    def duration_value(self, children: list) -> ir.Duration:
        return self._duration(children[0])

    def test_block(self, children: list) -> ir.PolicyTest:
        keyword, name, *items, close = children
        call = None
        risk = None
        expects: list[ir.TestExpect] = []
        seen: dict[str, Span] = {}
        for item in items:
            if item.kind == "expect":
                expects.append(item.value)
            elif self._once(seen, item.kind, item.span):
                if item.kind == "call":
                    call = item.value
                else:
                    risk = item.value
        span = self._span(keyword, close)
        if call is None:
            self._report("missing-call", span, f"policy test `{self._string(name)}` has no `call`",
                         help="add the call to decide, e.g. `call payments.refund(amount: 900.0)`")
            call = ir.build(ir.ToolCall, {"tool": "", "span": span})
        return ir.PolicyTest.model_construct(name=self._named(name, "a test's name"), call=call, risk=risk,
                                             expects=tuple(expects), span=span)

    def test_call(self, children: list) -> _Clause:
        keyword, call = children
        return _Clause("call", call, self._through(keyword, call))

    def test_risk(self, children: list) -> _Clause:
        keyword, name = children
        return _Clause("risk", self._risk(name), self._span(keyword, name))

    def test_expect(self, children: list) -> _Clause:
        keyword, expectation = children
        expectation = expectation.model_copy(update={"span": self._span(keyword, expectation)})
        return _Clause("expect", expectation, expectation.span)

    def expect_allow(self, children: list) -> ir.TestExpect:
        return ir.TestExpect.model_construct(effect="allow", span=self._tok(children[0]))

    def expect_deny(self, children: list) -> ir.TestExpect:
        keyword, name = children
        return ir.TestExpect.model_construct(effect="deny", rule=self._string(name) if name is not None else None,
                             span=self._span(keyword, name if name is not None else keyword))

    def expect_warn(self, children: list) -> ir.TestExpect:
        keyword, name = children
        return ir.TestExpect.model_construct(effect="warn", rule=self._string(name) if name is not None else None,
                             span=self._span(keyword, name if name is not None else keyword))

    def expect_require(self, children: list) -> ir.TestExpect:
        keyword, kind = children
        return ir.TestExpect.model_construct(effect="require", rule=kind.value, span=self._span(keyword, kind))

    # ---------------------------------------------------------------- CEL
    def _checked(self, node: cel.Expr) -> cel.Expr:
        """`node`, or `ExpressionTooDeep` when it is nested deeper than `MAX_EXPRESSION_DEPTH`.

        A node's span strictly contains its children's, so no node is deeper than its text is long:
        only nodes with long spans are measured. Their depths are remembered (`_depth`, by id); a
        short child is measured by a walk of at most `MAX_EXPRESSION_DEPTH` nodes, and it is walked
        once, as the child of its one parent. So the bound costs nothing on ordinary expressions,
        linear time on long ones, and a too-deep chain stops the parse at its first node too deep.
        """
        span = node.span
        if span.end - span.start <= MAX_EXPRESSION_DEPTH:
            return node
        known = self._depth
        depth = 1 + max((known.get(id(part)) or _depth_of(part) for part in cel.children(node)), default=0)
        if depth > MAX_EXPRESSION_DEPTH:
            raise ExpressionTooDeep(span)
        known[id(node)] = depth
        return node

    def _binary(self, op: str, children: list) -> cel.Binary:
        left, right = children  # two expressions (the operator token is dropped)
        span = _new_span(Span, (self.file, left.span.start, right.span.end))
        node = cel.Binary(op, left, right, span)
        return node if span.end - span.start <= MAX_EXPRESSION_DEPTH else self._checked(node)

    or_op = partialmethod(_binary, "||")
    and_op = partialmethod(_binary, "&&")
    eq_op = partialmethod(_binary, "==")
    ne_op = partialmethod(_binary, "!=")
    lt_op = partialmethod(_binary, "<")
    le_op = partialmethod(_binary, "<=")
    gt_op = partialmethod(_binary, ">")
    ge_op = partialmethod(_binary, ">=")
    in_op = partialmethod(_binary, "in")
    add_op = partialmethod(_binary, "+")
    sub_op = partialmethod(_binary, "-")
    mul_op = partialmethod(_binary, "*")
    div_op = partialmethod(_binary, "/")
    mod_op = partialmethod(_binary, "%")

    def conditional(self, children: list) -> cel.Conditional:
        condition, _question, then, otherwise = children
        return self._checked(cel.Conditional(condition, then, otherwise, self._span(condition, otherwise)))

    def not_op(self, children: list) -> cel.Unary:
        bang, operand = children
        return self._checked(cel.Unary("!", operand, self._span(bang, operand)))

    def neg_op(self, children: list) -> cel.Expr:
        """`-x`; of a number literal, the negative literal (`-9223372036854775808` is the least int,
        whose digits alone are past the range) — but not where negating a negative int literal
        leaves the range (`--9223372036854775808` overflows when evaluated, as CEL has it)."""
        minus, operand = children
        if isinstance(operand, cel.Literal) and operand.kind in ("int", "double") and not (
                operand.kind == "int" and operand.value < 0 and -operand.value > _INT_MAX):  # type: ignore[operator]
            return cel.Literal(-operand.value, operand.kind, self._span(minus, operand))  # type: ignore[operator]
        return self._checked(cel.Unary("-", operand, self._span(minus, operand)))

    def select(self, children: list) -> cel.Select:
        operand, name = children  # an expression and a NAME token
        span = _new_span(Span, (self.file, operand.span.start, name.end_pos))
        node = cel.Select(operand, name.value, span)
        return node if span.end - span.start <= MAX_EXPRESSION_DEPTH else self._checked(node)

    def method_call(self, children: list) -> cel.Call:
        target, name, args, close = children
        args = tuple(args or ())
        return self._checked(cel.Call(name.value, target, args, self._span(target, close)))

    def index(self, children: list) -> cel.Index:
        operand, key, close = children
        return self._checked(cel.Index(operand, key, self._span(operand, close)))

    def ident(self, children: list) -> cel.Ident:
        (name,) = children
        return cel.Ident(name.value, self._tok(name))

    def function_call(self, children: list) -> cel.Call:
        name, args, close = children
        args = tuple(args or ())
        return self._checked(cel.Call(name.value, None, args, self._span(name, close)))

    def parens(self, children: list) -> cel.Expr:
        """The expression inside, its span widened to the parentheses: the span of an expression that
        begins or ends with one (`(a - 1) / b`) then starts and ends at it."""
        open_, inner, close = children
        widened = dataclasses.replace(inner, span=self._span(open_, close))
        depth = self._depth.get(id(inner))
        if depth is not None:
            self._depth[id(widened)] = depth
        return widened

    def list_literal(self, children: list) -> cel.ListExpr:
        open_, *items, close = children
        items = tuple(item for item in items if item is not None)  # placeholders; `null` is a Literal
        return self._checked(cel.ListExpr(items, self._span(open_, close)))

    def map_literal(self, children: list) -> cel.MapExpr:
        open_, *entries, close = children
        entries = tuple(entry for entry in entries if entry is not None)
        return self._checked(cel.MapExpr(entries, self._span(open_, close)))

    def expr_list(self, children: list) -> list:
        return children

    def map_entry(self, children: list) -> tuple:
        return tuple(children)

    def number(self, children: list) -> cel.Literal:
        (token,) = children
        text = token.value
        if text.isdigit():
            return cel.Literal(self._int(token, text, 10), "int", self._tok(token))
        return cel.Literal(float(text), "double", self._tok(token))

    def uint(self, children: list) -> cel.Literal:
        (token,) = children
        return cel.Literal(self._int(token, token.value[:-1], 10), "uint", self._tok(token))

    def hex_int(self, children: list) -> cel.Literal:
        (token,) = children
        return cel.Literal(self._int(token, token.value, 16), "int", self._tok(token))

    def _int(self, token: Token, text: str, base: int) -> int:
        """The value of an integer literal; one far past any CEL int (whose digits Python would not
        even convert) is reported here, and read as 0."""
        if len(text.lstrip("0xX").lstrip("0")) > MAX_NUMBER_DIGITS:
            self._report("invalid-value", self._tok(token), f"the number `{_short(token.value)}` is out of the range of `int`",
                         help="CEL ints have 64 bits")
            return 0
        return int(text, base)

    def string(self, children: list) -> cel.Literal:
        (token,) = children
        return cel.Literal(self._string(token), "string", self._tok(token))

    def true(self, children: list) -> cel.Literal:
        return cel.Literal(True, "bool", self._tok(children[0]))

    def false(self, children: list) -> cel.Literal:
        return cel.Literal(False, "bool", self._tok(children[0]))

    def null(self, children: list) -> cel.Literal:
        return cel.Literal(None, "null", self._tok(children[0]))


def _depth_of(expr: cel.Expr) -> int:
    """The depth of a (short) expression, without recursion."""
    deepest = 0
    stack = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((part, depth + 1) for part in cel.children(node))
    return deepest


def _start(item: Any) -> int:
    if isinstance(item, Token):
        return item.start_pos
    if isinstance(item, (list, tuple)) and item and not isinstance(item, Span):
        return _start(item[0])
    return item.span.start


def _end(item: Any) -> int:
    if isinstance(item, Token):
        return item.end_pos
    if isinstance(item, (list, tuple)) and item and not isinstance(item, Span):
        return _end(item[-1])
    return item.span.end


def _number(text: str) -> Decimal | None:
    """A NUMBER token's value, exactly; None for an exponent past what a decimal holds (`1e99999999999999999999`)."""
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _short(text: str) -> str:
    return text if len(text) <= 24 else text[:20] + "…"

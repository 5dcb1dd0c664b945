"""Typed model of plans and policies.

Every node is a frozen pydantic model with a `span`; spans never take part in equality or hashing
(`Node.__eq__` and `__hash__` skip them), so two plans that say the same thing are equal wherever
their text stands. CEL expressions are `plangate.cel.ast` trees (validated by the parser, not again
by pydantic). Amounts are `Decimal`, durations whole seconds, risk classes the ordered `Risk` enum.
"""

from __future__ import annotations

from decimal import Decimal
from enum import IntEnum
from typing import Annotated, Any, Literal as TypingLiteral, Self, TypeVar, Union

from pydantic import BaseModel, ConfigDict, SkipValidation

from plangate.cel.ast import Expr
from plangate.source import NO_SPAN, Span

CelExpr = Annotated[Expr, SkipValidation]


class Risk(IntEnum):
    """The four risk classes, in order: a higher value is a riskier effect."""

    read_only = 0
    reversible_write = 1
    external_write = 2
    irreversible = 3


RISK_NAMES = tuple(risk.name for risk in Risk)


_REQUIRED = object()
_new_object = object.__new__  # BaseModel defines no `__new__`: a bare instance, filled in below
_set_attribute = object.__setattr__
_construction: dict[type, tuple[dict[str, Any], frozenset[str]] | None] = {}


def _immutable(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, Decimal)):
        return True
    return isinstance(value, (tuple, frozenset)) and all(_immutable(item) for item in value)


def _construction_plan(cls: type) -> tuple[dict[str, Any], frozenset[str]] | None:
    """Defaults in declaration order and the required names, or None where pydantic's way is needed."""
    template: dict[str, Any] = {}
    required = set()
    for name, field in cls.__pydantic_fields__.items():
        if field.alias is not None or field.validation_alias is not None or field.default_factory is not None:
            return None
        if field.is_required():
            template[name] = _REQUIRED
            required.add(name)
        elif _immutable(field.default):
            template[name] = field.default
        else:
            return None
    if cls.model_config.get("extra") == "allow" or cls.__pydantic_post_init__:
        return None
    return template, frozenset(required)


class Node(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    span: Span = NO_SPAN

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Self:
        """pydantic's `model_construct` (trusted data, defaults filled in, nothing validated), faster:
        see `build`."""
        if _fields_set is not None:
            return super().model_construct(_fields_set, **values)
        return build(cls, values)

    def _semantic(self) -> tuple:
        """The node's fields but its spans (`span`, `id_span`, `tool_span`…: where, not what)."""
        return tuple(value for key, value in self.__dict__.items() if key != "span" and not key.endswith("_span"))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._semantic() == other._semantic()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._semantic()))


NodeT = TypeVar("NodeT", bound=Node)


def build(cls: type[NodeT], values: dict[str, Any]) -> NodeT:
    """`cls.model_construct(**values)`: trusted data, defaults filled in, nothing validated.

    The parser builds every node this way, with the values in a dict (no keyword arguments to
    pack). pydantic's generic version looks up aliases and defaults field by field; here a
    per-class template of immutable defaults, in declaration order, is merged with the values. A class or a call outside that shape (aliases, factories, unknown
    or missing names) goes to pydantic's own.
    """
    plan = _construction.get(cls, _REQUIRED)
    if plan is _REQUIRED:
        plan = _construction[cls] = _construction_plan(cls)
    if plan is None:
        return BaseModel.model_construct.__func__(cls, None, **values)  # type: ignore[attr-defined]
    template, required = plan
    data = {**template, **values}
    if len(data) != len(template) or not required <= values.keys():
        return BaseModel.model_construct.__func__(cls, None, **values)  # type: ignore[attr-defined]
    node = _new_object(cls)
    _set_attribute(node, "__dict__", data)
    _set_attribute(node, "__pydantic_fields_set__", set(values))
    _set_attribute(node, "__pydantic_extra__", None)
    _set_attribute(node, "__pydantic_private__", None)
    return node


class Name(Node):
    """An identifier as written, with its own span (a step id in `after`, a risk class…)."""

    name: str


class Money(Node):
    amount: Decimal
    currency: str | None = None

    def __str__(self) -> str:  # plain digits: `1e3 usd` reads `1000 usd`, never `1E+3 usd`
        return f"{self.amount:f} {self.currency}" if self.currency else f"{self.amount:f}"


class CostRange(Node):
    low: Money
    high: Money


class Duration(Node):
    seconds: int
    text: str

    def __str__(self) -> str:
        return self.text


class RiskRef(Node):
    name: str
    level: Risk | None  # None when the name is not a risk class (reported by lowering)


class Argument(Node):
    name: str
    value: CelExpr


class ToolCall(Node):
    tool: str
    tool_span: Span = NO_SPAN
    args: tuple[Argument, ...] = ()

    def arg(self, name: str) -> Argument | None:
        for argument in self.args:
            if argument.name == name:
                return argument
        return None


class ApprovalSpec(Node):
    """`approval by [N of] role "R" [within D]` in a plan, or the approval part of a `require`."""

    count: int = 1
    role: str
    within: Duration | None = None


class Expectation(Node):
    expr: CelExpr


class Step(Node):
    id: str
    kind: TypingLiteral["step", "check"] = "step"
    id_span: Span = NO_SPAN
    after: tuple[Name, ...] = ()
    call: ToolCall | None = None
    risk: RiskRef | None = None
    cost: CostRange | None = None
    time: Duration | None = None
    retry: int = 0
    retry_span: Span | None = None
    expects: tuple[Expectation, ...] = ()
    idempotency: CelExpr | None = None
    rollback: ToolCall | None = None
    approvals: tuple[ApprovalSpec, ...] = ()
    when: CelExpr | None = None


class Decision(Node):
    question: str
    pending: bool
    answer: str | None = None


class Budget(Node):
    cost: Money | None = None
    time: Duration | None = None
    calls: int | None = None
    calls_span: Span | None = None  # the `calls <= N` clause


class Plan(Node):
    id: str
    id_span: Span = NO_SPAN
    version: int | None = None
    objective: str | None = None
    non_goals: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()
    success: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    decisions: tuple[Decision, ...] = ()
    budget: Budget | None = None
    steps: tuple[Step, ...] = ()

    def step(self, step_id: str) -> Step | None:
        for step in self.steps:
            if step.id == step_id:
                return step
        return None


# --- policies -------------------------------------------------------------------------------

ARG_TYPES = ("string", "int", "uint", "double", "bool", "bytes", "list", "map", "duration",
             "timestamp", "dyn", "null")


class ArgSpec(Node):
    name: str
    type: str
    optional: bool = False


class ToolEntry(Node):
    pattern: str
    pattern_span: Span = NO_SPAN
    risk: RiskRef | None = None
    cost: Money | None = None
    time: Duration | None = None
    args: tuple[ArgSpec, ...] | None = None  # None: any arguments


class Requirement(Node):
    kind: TypingLiteral["approval", "check", "rollback", "idempotency"]
    when: CelExpr | None = None
    approval: ApprovalSpec | None = None


class Rule(Node):
    effect: TypingLiteral["deny", "warn"]
    name: str
    when: CelExpr
    because: str | None = None


LimitValue = Union[int, Money, Duration]


class Limit(Node):
    name: str
    value: LimitValue


class TestExpect(Node):
    effect: TypingLiteral["allow", "deny", "warn", "require"]
    rule: str | None = None  # the rule name (deny/warn) or requirement kind (require)


class PolicyTest(Node):
    name: str
    call: ToolCall
    risk: RiskRef | None = None
    expects: tuple[TestExpect, ...] = ()


class Policy(Node):
    id: str
    id_span: Span = NO_SPAN
    version: int | None = None
    tools: tuple[ToolEntry, ...] = ()
    unknown_tools: TypingLiteral["deny", "warn"] | None = None
    unknown_tools_span: Span | None = None
    requirements: tuple[Requirement, ...] = ()
    rules: tuple[Rule, ...] = ()
    limits: tuple[Limit, ...] = ()
    tests: tuple[PolicyTest, ...] = ()


class Document(Node):
    """What one file holds: its plans and policies, in order."""

    file: str
    plans: tuple[Plan, ...] = ()
    policies: tuple[Policy, ...] = ()

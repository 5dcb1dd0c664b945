"""The canonical, span-free form of a plan, and its content hash.

Every field of every IR node except spans, with CEL expressions printed canonically
(`plangate.cel.ast.to_source`), amounts as decimal strings and risks by name. Two plans that say
the same thing have the same hash wherever their text stands and however it is laid out.
"""

from __future__ import annotations

from decimal import Decimal
from enum import Enum
from typing import Any

from plangate.cel import ast as cel
from plangate.ir.nodes import Node, Plan
from plangate.runtime.canonical import content_hash
from plangate.source import Span

_CEL_TYPES = (cel.Literal, cel.Ident, cel.Select, cel.Index, cel.Call, cel.Unary, cel.Binary,
              cel.Conditional, cel.ListExpr, cel.MapExpr)


def canonical(value: Any) -> Any:
    if isinstance(value, Node):
        return {key: canonical(item) for key, item in value.__dict__.items()
                if not isinstance(item, Span) and not key.endswith("span")}
    if isinstance(value, _CEL_TYPES):
        return cel.to_source(value)
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, Decimal):
        return value
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    return value


def plan_hash(plan: Plan) -> str:
    return content_hash(canonical(plan))

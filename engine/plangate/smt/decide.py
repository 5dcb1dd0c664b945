"""Deciding a condition over values known only at run time: never, may, or must it fire?

`decide(condition, activation)` encodes the CEL condition over the activation (`encode.Encoder`),
where `Unknown` placeholders stand for values known only at run time, and asks the solver worker
two questions in one request bounded by `time_bound`: can the condition fire (fires ∧ background
satisfiable?) and can it fail to fire (¬fires ∧ background satisfiable?).

    fire impossible           → "never"
    fire possible, not-fire impossible → "must"   (witness: a model of firing)
    both possible             → "may"    (witness: a model of firing)
    the solver did not answer → "unknown" (reason: e.g. "the solver timed out after 2s");
                                "may" if only the second question is undecided (reason says so)
    outside the subset        → "runtime" (reason: what is outside; never a silent true or false)

`assume` are expressions known to evaluate without error on every run that matters (the arguments
a call computes: the call is made only when they evaluate); both questions are asked under that
premise.

"Fires" follows CEL: an error (a missing field, a type mismatch, a division by zero) makes the
condition not fire, so a field selected from a run-time value may be absent unless the
condition's own logic rules that out. When no `Unknown` is reached the encoder folds the condition
to a constant and no solver runs (nor is z3 imported: it lives in the worker process).

`instantiate(activation, witness)` replays a witness: the activation with every `Unknown` replaced
by the witness's values (fields the witness does not give stay absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from plangate.cel.ast import Expr
from plangate.smt import solve
from plangate.smt.encode import Encoder, Unknown, Unsupported, conj

__all__ = ["Unknown", "Verdict", "decide", "instantiate"]


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "never" | "may" | "must" | "unknown" | "runtime"
    witness: dict[str, object] | None = None  # path → value making the condition true ("may", "must")
    reason: str | None = None  # why, for "unknown" and "runtime"


def decide(condition: Expr, activation: Mapping[str, object], time_bound: float = 2.0,
           assume: Sequence[Expr] = ()) -> Verdict:
    encoder = Encoder(activation)
    try:
        premise = conj(*(encoder.evaluates(expr) for expr in assume))
        fires = encoder.fires(condition)
        if premise == "false":
            return Verdict("never")
        if fires in ("true", "false") and premise == "true":
            return Verdict("must", {}) if fires == "true" else Verdict("never")
        background = "\n".join([*encoder.declarations(), *([f"(assert {premise})"] if premise != "true" else [])])
        values = encoder.values()
    except Unsupported as error:
        return Verdict("runtime", reason=error.reason)
    except RecursionError:
        return Verdict("runtime", reason="the expression is nested too deeply to reason about")
    can_fire, can_fail = solve.check([solve.Query(f"{background}\n(assert {fires})", values),
                                      solve.Query(f"{background}\n(assert (not {fires}))", values)], time_bound)
    if can_fire.status == "unsat":
        return Verdict("never")
    if can_fire.status != "sat":
        return Verdict("unknown", reason=can_fire.reason)
    witness = encoder.decode(can_fire.model)
    if can_fail.status == "unsat":
        return Verdict("must", witness)
    if can_fail.status != "sat":
        return Verdict("may", witness, f"whether it always fires is not known: {can_fail.reason}")
    return Verdict("may", witness)


def instantiate(activation: Mapping[str, object], witness: Mapping[str, object]) -> dict[str, object]:
    """A concrete activation: each `Unknown` replaced by its value in `witness`."""
    return {name: _replace(value, witness) for name, value in activation.items()}


def _replace(value: object, witness: Mapping[str, object]) -> object:
    if isinstance(value, Unknown):
        return _value_at(value.path, witness)
    if isinstance(value, Mapping):
        return {key: _replace(item, witness) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace(item, witness) for item in value]
    return value


def _value_at(path: str, witness: Mapping[str, object]) -> object:
    if path in witness and not isinstance(witness[path], dict):
        return witness[path]
    fields: dict[object, object] = {}
    for key, value in witness.items():
        if key.startswith(path + "."):
            rest = key[len(path) + 1:]
        elif key.startswith(path + "["):
            rest = key[len(path):]
        else:
            continue
        _store(fields, rest, value)
    return fields


def _store(fields: dict[object, object], rest: str, value: object) -> None:
    """Store `value` at the relative path `rest` ("a.b", "[0].c") inside nested maps."""
    segments: list[object] = []
    for part in rest.split("."):
        while "[" in part:
            head, _, tail = part.partition("[")
            if head:
                segments.append(head)
            index, _, part = tail.partition("]")
            segments.append(int(index))
        if part:
            segments.append(part)
    node = fields
    for segment in segments[:-1]:
        node = node.setdefault(segment, {})  # type: ignore[assignment]
    if not (value == {} and isinstance(node.get(segments[-1]), dict)):  # a map keeps the fields stored in it
        node[segments[-1]] = value

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
premise. `given` are conditions that hold on every such run (a step's `when`s); a conjunct of them
outside the subset is left out of the premise (`_followed`): fewer conjuncts allow more runs, so
"never" and "must" hold for the whole, and a "may" stands only with a witness that the runtime's
evaluator finds under every conjunct, else it is "runtime".

"Fires" follows CEL: an error (a missing field, a type mismatch, a division by zero) makes the
condition not fire, so a field selected from a run-time value may be absent unless the
condition's own logic rules that out. When no `Unknown` is reached the encoder folds the condition
to a constant and no solver runs (nor is z3 imported: it lives in the worker process).

Opaque conditions (`matches`, `== null` on an untyped value, `in` over a run-time list: see
`encode`) are free Boolean constants: "never" and "must" stand, but a witness is given only when
the runtime's evaluator, replaying it, confirms that it fires (candidate values pinned in a few
extra queries of the same batch); "may" without one is "runtime". The other side of "may" is
confirmed alike, or its reason says it is not known.

A declared `list` or `map` is written out from its size and keys (`Encoder.decode`): such a
witness is shown only once the runtime's evaluator confirms it (and the pinned `in` candidates over
one list are merged: the items found, then the model's filler up to its size); when none is
confirmed, the verdict stands with no witness, never with a value of another type.

Every other witness is replayed too: one that does not fire when the runtime computes it (a
double's rounding, which the solver's reals do not have: nothing lies strictly between 1.0 and the
next double) makes the verdict "runtime", never a "may" with an example that does not fire.

`instantiate(activation, witness)` replays a witness: the activation with every `Unknown` replaced
by the witness's values (fields the witness does not give stay absent).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

from plangate.cel.ast import Binary, Expr, field_chain
from plangate.smt import solve
from plangate.smt.encode import Encoder, Unknown, Unsupported, collection_kinds, conj, store_path

__all__ = ["Unknown", "Verdict", "decide", "instantiate"]


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "never" | "may" | "must" | "unknown" | "runtime"
    witness: dict[str, object] | None = None  # path → value making the condition true ("may", "must")
    reason: str | None = None  # why, for "unknown" and "runtime"


def decide(condition: Expr, activation: Mapping[str, object], time_bound: float = 2.0,
           assume: Sequence[Expr] = (), original: Mapping[str, object] | None = None,
           given: Sequence[Expr] = ()) -> Verdict:
    """`original`: the activation a witness is replayed in (default `activation`; the caller's
    when it gave the solver durations as seconds). `given`: conditions that hold on every run that
    matters (a step's `when`: its call is made only when it fires), a premise as `assume` is."""
    pinned = pinned_by(given, activation)
    followed, unfollowed = _followed(given, activation)
    try:
        encoder, premise, fires = _encoded(condition, activation, assume, followed, pinned)
        if pinned and not encoder.pins_read_as_values():
            encoder, premise, fires = _encoded(condition, activation, assume, followed, {})
        if premise == "false":
            return Verdict("never")
        if fires in ("true", "false") and premise == "true":
            return _narrowed(encoder, Verdict("must", {})) if fires == "true" else Verdict("never")
        background = "\n".join([*encoder.declarations(), *([f"(assert {premise})"] if premise != "true" else [])])
        values = encoder.values()
    except Unsupported as error:
        return Verdict("runtime", reason=error.reason)
    except RecursionError:
        return Verdict("runtime", reason="the expression is nested too deeply to reason about")
    replay = _Replay(condition, assume, given, activation if original is None else original)
    if encoder.atoms:
        verdict = _narrowed(encoder, _decide_opaque(encoder, background, fires, values, time_bound, replay))
    else:
        verdict = _narrowed(encoder, _decide_plain(encoder, background, fires, values, time_bound, replay))
    if unfollowed is not None and verdict.outcome == "may" and (verdict.witness is None or replay(verdict.witness) is not True):
        return Verdict("runtime", reason=unfollowed)  # a "may" under part of the premise needs a run under all of it
    return verdict


def _followed(given: Sequence[Expr], activation: Mapping[str, object]) -> tuple[list[Expr], str | None]:
    """The conjuncts of `given` the encoder follows, and why one is not (None when all are). A
    premise of fewer conjuncts holds on more runs: "never" and "must" under it hold under all of
    them; a "may" stands only with an example that the runtime's evaluator finds under all."""
    followed: list[Expr] = []
    unfollowed: str | None = None
    pending = list(reversed(given))
    while pending:
        expr = pending.pop()
        if isinstance(expr, Binary) and expr.op == "&&":
            pending += [expr.right, expr.left]
            continue
        try:
            Encoder(activation, opaque=True, kinds=collection_kinds(activation)).fires(expr)
        except Unsupported as error:
            unfollowed = unfollowed or error.reason
            continue
        except RecursionError:
            unfollowed = unfollowed or "the expression is nested too deeply to reason about"
            continue
        followed.append(expr)
    return followed, unfollowed


def _encoded(condition: Expr, activation: Mapping[str, object], assume: Sequence[Expr], given: Sequence[Expr],
             pinned: Mapping[str, object]) -> tuple[Encoder, str, str]:
    """An encoder over `activation` with `pinned` values, the premise (`assume` evaluate, `given`
    fire) and when `condition` fires."""
    encoder = Encoder(activation, opaque=True, kinds=collection_kinds(activation), pinned=pinned)
    premise = conj(*(encoder.evaluates(expr) for expr in assume), *(encoder.fires(expr) for expr in given))
    return encoder, premise, encoder.fires(condition)


def pinned_by(given: Sequence[Expr], activation: Mapping[str, object]) -> dict[str, object]:
    """The run-time values that premises fix exactly, by path: a conjunct `x.f == "s"` (a string, a
    bool or `null`: no value of another type equals one), `x.f` alone (a condition holds only when
    it is exactly `true`) or `!x.f` (exactly `false`). On every run that counts the value is that
    one, so the condition is decided with it, of its type — which a premise that merely holds for
    it could not say: `when a.result.level == "high"` makes `args.level > 3` an error, not a
    number's comparison. The first of two conjuncts on one path wins; the other is then false.
    `decide` keeps the pins only where the encoding read each pinned value as itself
    (`Encoder.pins_read_as_values`): `has()` of it, or a read of the map above it as a whole, would
    not know of the constant, so it decides without pins then."""
    from plangate.cel.ast import Literal, Unary

    pinned: dict[str, object] = {}
    pending = list(reversed(given))  # taken from the end: the first conjunct first
    while pending:
        expr = pending.pop()
        if isinstance(expr, Binary) and expr.op == "&&":
            pending += [expr.right, expr.left]
            continue
        target, value = expr, True
        if isinstance(expr, Unary) and expr.op == "!":
            target, value = expr.operand, False
        elif isinstance(expr, Binary) and expr.op == "==":
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if isinstance(other, Literal) and other.kind in ("string", "bool", "null"):
                    target, value = side, other.value
        path = _unknown_path(target, activation)
        if path is not None:
            pinned.setdefault(path, value)
    return pinned


def _unknown_path(expr: Expr, activation: Mapping[str, object]) -> str | None:
    """The path of the run-time value a chain `x.a.b` reads (the `Unknown` it reaches, and the
    fields below it), or None when it reads no such value."""
    chain = field_chain(expr)
    if chain is None or chain[0] not in activation:
        return None
    root, fields = chain
    value = activation[root]
    for index, name in enumerate(fields):
        if isinstance(value, Unknown):
            return ".".join([value.path, *fields[index:]])
        if not isinstance(value, Mapping) or name not in value:
            return None
        value = value[name]
    return value.path if isinstance(value, Unknown) else None


def _narrowed(encoder: Encoder, verdict: Verdict) -> Verdict:
    """"must" read as "may" where the encoding took a run-time value to be of one kind that its use
    only makes likely (`Encoder.narrowed`: a double in double arithmetic, numbers in `+`): on a run
    where it is of another (an int, a string), that use is an error and the rule does not fire."""
    if verdict.outcome != "must" or not encoder.narrowed:
        return verdict
    return Verdict("may", verdict.witness, f"it does not fire where {encoder.narrowed[0]}")


def _decide_plain(encoder: Encoder, background: str, fires: str, values: tuple[tuple[str, str], ...],
                  time_bound: float, replay: "_Replay") -> Verdict:
    can_fire, can_fail = solve.check([solve.Query(f"{background}\n(assert {fires})", values),
                                      solve.Query(f"{background}\n(assert (not {fires}))", values)], time_bound)
    if can_fire.status == "unsat":
        return Verdict("never")
    if can_fire.status != "sat":
        return Verdict("unknown", reason=can_fire.reason)
    witness = encoder.decode(can_fire.model)
    replayed = None if witness is None else replay(witness)
    if any(variable.kind is not None for variable in encoder.variables.values()):
        # A declared list or map is written out from its size and keys: shown only once the
        # runtime's evaluator confirms it (else the verdict stands, with no example).
        witness = witness if replayed is True else None
    elif replayed is False:  # the solver's reals are not the runtime's doubles (rounding)
        return Verdict("runtime", reason="the solver's example does not fire when the runtime computes it "
                                         "(a double rounds, or is not an int, where the solver's reals do not tell)")
    if can_fail.status == "unsat":
        return Verdict("must", witness)
    if can_fail.status != "sat":
        return Verdict("may", witness, f"whether it always fires is not known: {can_fail.reason}")
    return Verdict("may", witness)


class _Replay:
    """The condition evaluated by the runtime's evaluator on a witness: True (it fires), False (it
    does not), None (a run that does not count: a premise fails to evaluate)."""

    def __init__(self, condition: Expr, assume: Sequence[Expr], given: Sequence[Expr],
                 activation: Mapping[str, object]) -> None:
        from plangate.cel.evaluate import compile_expr

        self.condition = compile_expr(condition)
        self.premises = [compile_expr(expr) for expr in assume]
        self.conditions = [compile_expr(expr) for expr in given]
        self.activation = activation

    def __call__(self, witness: Mapping[str, object]) -> bool | None:
        from plangate.cel.evaluate import CelError

        concrete = instantiate(self.activation, witness)
        if any(isinstance(premise(concrete), CelError) for premise in self.premises) or any(
                condition(concrete) is not True for condition in self.conditions):
            return None
        return self.condition(concrete) is True


MAX_CANDIDATES = 8  # combinations of candidate values tried per question


def _decide_opaque(encoder: Encoder, background: str, fires: str, values: tuple[tuple[str, str], ...],
                   time_bound: float, replay: _Replay) -> Verdict:
    """The verdict when the encoding holds opaque conditions (free Boolean constants for
    `matches`, `== null` on an untyped value, `in` over a run-time list). The solver's "never"
    and "must" hold whatever those conditions are, so they stand. A model is only a candidate: a
    witness is given only once the runtime's evaluator confirms it, and "may" needs one. Each
    question is asked with each combination of the conditions' candidate values pinned
    (`(= text "candidate")`, the constant set to what the regular expression says) and as is, all
    in one batch."""
    atoms = list(encoder.atoms.values())
    combinations = list(itertools.islice(itertools.product(*(atom.candidates for atom in atoms)), MAX_CANDIDATES))
    queries, pinned = [], []
    for goal in (fires, f"(not {fires})"):
        for combination in [*combinations, None]:  # the pinned first: their witnesses read best
            pins = [] if combination is None else _pins(atoms, combination)
            queries.append(solve.Query("\n".join([background, f"(assert {goal})", *pins]), values))
            pinned.append(combination)
    answers = solve.check(queries, time_bound)
    half = len(answers) // 2
    can_fire, can_fail = answers[half - 1], answers[-1]
    if can_fire.status == "unsat":
        return Verdict("never")
    fired = _confirmed(encoder, atoms, answers[:half], pinned[:half], replay, True)
    if can_fail.status == "unsat":
        return Verdict("must", fired)
    reason = "; ".join(dict.fromkeys(atom.reason for atom in atoms))
    if fired is None:
        why = can_fire.reason if can_fire.status != "sat" else f"no value was found that makes it fire ({reason})"
        return Verdict("runtime", reason=why)
    if _confirmed(encoder, atoms, answers[half:], pinned[half:], replay, False) is None:
        return Verdict("may", fired, f"whether it always fires is not known ({reason})")
    return Verdict("may", fired)


def _pins(atoms: Sequence[object], combination: Sequence[tuple[object, bool]]) -> list[str]:
    from plangate.smt.encode import string_text

    pins = []
    for atom, (value, truth) in zip(atoms, combination):
        pins.append(f"(assert {'' if truth else '(not '}{atom.name}{'' if truth else ')'})")  # type: ignore[attr-defined]
        if atom.text is not None and isinstance(value, str):  # type: ignore[attr-defined]
            pins.append(f"(assert (= {atom.text} {string_text(value)}))")  # type: ignore[attr-defined]
    return pins


def _confirmed(encoder: Encoder, atoms: Sequence[object], answers: Sequence[solve.Answer],
               pinned: Sequence[object], replay: _Replay, fires: bool) -> dict[str, object] | None:
    """The first model that the runtime's evaluator confirms (it fires, or it does not, as
    `fires` asks), as a witness; None when none does."""
    from plangate.smt.encode import KEEP

    for answer, combination in zip(answers, pinned):
        if answer.status != "sat":
            continue
        witness = encoder.decode(answer.model)
        if witness is None:
            continue  # a list or map too large to write out
        if combination is not None:
            pinned: dict[str, object] = {}  # path → the candidate value, or the found items merged
            for atom, (value, _truth) in zip(atoms, combination):  # type: ignore[call-overload]
                variable = atom.variable  # type: ignore[attr-defined]
                if variable is None or atom.text is not None:  # type: ignore[attr-defined]
                    continue  # a string pinned in the solver: the model has it
                if value is KEEP:
                    if witness.get(variable.path) is None:
                        witness[variable.path] = ""  # a value of no type the model fixed: any non-null
                elif variable.kind is not None:
                    pinned[variable.path] = _union(pinned.get(variable.path), value)
                else:
                    witness[variable.path] = value
            for path, value in pinned.items():  # the items found, then the model's filler up to its size
                witness[path] = _merged(value, witness.get(path))
        if replay(witness) is fires:
            return witness
    return None


def _union(first: object, second: object) -> object:
    """The candidate values of two `in` tests over one declared list or map, together: the items
    of both lists, or both maps' keys."""
    if isinstance(first, list) and isinstance(second, list):
        return [*first, *second]
    if isinstance(first, dict) and isinstance(second, dict):
        return {**first, **second}
    return second


def _merged(found: object, model: object) -> object:
    """The items `in` found, then the model's filler past them up to its size (a list); the model's
    keys with those found (a map)."""
    if isinstance(found, list) and isinstance(model, list):
        return [*found, *model[len(found):]]
    if isinstance(found, dict) and isinstance(model, dict):
        return {**model, **found}
    return found


def instantiate(activation: Mapping[str, object], witness: Mapping[str, object]) -> dict[str, object]:
    """A concrete activation: each `Unknown` replaced by its value in `witness`."""
    return {name: _replace(value, witness) for name, value in activation.items()}


def _replace(value: object, witness: Mapping[str, object]) -> object:
    if isinstance(value, Unknown):
        found = _value_at(value.path, witness)
        if value.type == "number" and type(found) is int:  # an int given to a `double` argument: converted
            return float(found)
        return found
    if isinstance(value, Mapping):
        return {key: _replace(item, witness) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace(item, witness) for item in value]
    return value


def _value_at(path: str, witness: Mapping[str, object]) -> object:
    found = witness.get(path)
    if path in witness and not isinstance(found, dict):
        return found
    fields: dict[object, object] = copy.deepcopy(found) if isinstance(found, dict) else {}
    for key, value in witness.items():
        if key.startswith(path + "."):
            rest = key[len(path) + 1:]
        elif key.startswith(path + "["):
            rest = key[len(path):]
        else:
            continue
        store_path(fields, rest, value)
    return fields

"""Reference CEL semantics: evaluation by cel-python, with values in `plangate.cel.evaluate`'s form.

Used by the differential tests (the compiled evaluator must agree with it on the well-typed subset)
(nothing else evaluates with it: cel-python is hundreds of times slower than the closures).

Algorithm: the expression (a tree, printed canonically with `to_source`, or CEL text) is compiled
by cel-python once per distinct text (an LRU cache); the activation's values are converted to
cel-python's types (`Uint` → `UintType`, `Duration` → `DurationType`…), the program runs, and the
result is converted back (`IntType` → `int`, `DurationType` → `Duration`…).

Invariant: `evaluate_reference` never raises. A parse failure, an evaluation error, or anything
cel-python itself raises becomes a `CelError` (cel-python is third-party code, so every exception
of it is caught here, at the boundary).

cel-python 0.5's known departures from the CEL specification (kept here, as this module reports
what cel-python does): `1 == 1.0` and `1 < 2.0` are errors while `2.5 > 2` is true; any double
divided by zero is `+inf`; `[1, 2][-1]` is 2; `string(true)` is "True"; `true && 1` is 1;
durations keep microseconds only. One departure is corrected, as it is a plain bug: cel-python's
`contains` fails on a string built by `+`, so `contains` is supplied here.
"""

from __future__ import annotations

import datetime
import sys
from functools import lru_cache
from typing import Mapping

import celpy
from celpy import celtypes

from plangate.cel.ast import Expr, to_source
from plangate.cel.evaluate import NANOS_PER_SECOND, CelError, Duration, Timestamp, Uint


@lru_cache(maxsize=1024)
def _program(text: str) -> object:
    """The cel-python program for `text`, or a `CelError` when cel-python cannot compile it."""
    recursion_limit = sys.getrecursionlimit()
    try:
        environment = celpy.Environment()  # raises the process's recursion limit: restored below
        return environment.program(environment.compile(text), functions={"contains": _contains})
    except Exception as error:  # cel-python's own failures: reported as values
        return CelError(f"cel-python cannot compile the expression: {error}")
    finally:
        sys.setrecursionlimit(recursion_limit)


def _contains(text: object, fragment: object) -> object:
    """`contains`, which cel-python 0.5 lacks on strings that `+` built (they are plain `str`)."""
    if isinstance(text, str) and isinstance(fragment, str):
        return celtypes.BoolType(fragment in text)
    return celpy.CELEvalError("no such overload", TypeError, (text, fragment))


def evaluate_reference(expression: Expr | str, activation: Mapping[str, object]) -> object:
    """Evaluate `expression` with cel-python; the result in plain values, or a `CelError`."""
    text = expression if isinstance(expression, str) else to_source(expression)
    program = _program(text)
    if isinstance(program, CelError):
        return program
    try:
        context = {name: to_celpy(value) for name, value in activation.items()}
        result = program.evaluate(context)  # type: ignore[attr-defined]
    except celpy.CELEvalError as error:
        return CelError(_message(error))
    except Exception as error:  # anything else cel-python raises is an evaluation error too
        return CelError(f"cel-python failed: {type(error).__name__}: {error}")
    if isinstance(result, celpy.CELEvalError):
        return CelError(_message(result))
    return from_celpy(result)


def _message(error: Exception) -> str:
    return str(error.args[0]) if error.args else type(error).__name__


def to_celpy(value: object) -> object:
    """A plain CEL value (as `compile_expr` reads them) in cel-python's types."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, Uint):
        return celtypes.UintType(int(value))
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, bytes):
        return celtypes.BytesType(value)
    if isinstance(value, Duration):
        seconds, nanos = divmod(value.nanos, NANOS_PER_SECOND)
        return celtypes.DurationType(seconds, nanos)
    if isinstance(value, Timestamp):  # cel-python keeps microseconds
        moment = _EPOCH + datetime.timedelta(microseconds=value.nanos // 1_000)
        return celtypes.TimestampType(moment)
    if isinstance(value, (list, tuple)):
        return celtypes.ListType([to_celpy(item) for item in value])
    if isinstance(value, Mapping):
        return celtypes.MapType({to_celpy(key): to_celpy(item) for key, item in value.items()})
    raise TypeError(f"not a CEL value: {type(value).__name__}")


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def from_celpy(value: object) -> object:
    """A cel-python result as a plain CEL value."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.UintType):
        return Uint(int(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return Timestamp((value - _EPOCH) // datetime.timedelta(microseconds=1) * 1_000)
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return Duration(micros * 1_000)
    if isinstance(value, list):
        return [from_celpy(item) for item in value]
    if isinstance(value, dict):
        return {from_celpy(key): from_celpy(item) for key, item in value.items()}
    return value

"""Canonical JSON and content hashes; values as a tool receives them (`plain`, `call_value`) and
the idempotency key a value names (`key_text`).

`canonical_json(value)` writes one text for one value, whatever order its dicts were built in, so
that plan hashes, policy hashes, journal bodies and the argument hash an approval binds to compare
equal exactly when the values do. The form:

- object keys sorted by code point; keys must be strings (no silent `1` → `"1"` conversion, which
  would make `{1: x}` and `{"1": x}` collide);
- no whitespace; non-ASCII characters written as themselves (the text is hashed as UTF-8);
- `None`, `bool`, `int`, `str` as JSON writes them; tuples as lists;
- a float by its shortest round-trip text (`repr`), so `1.0` stays distinct from the integer `1`;
  NaN and infinities are rejected, JSON has no spelling for them;
- a `Decimal` as a string in plain notation without trailing zeros (`Decimal("2.50")` and
  `Decimal("25E-1")` both give `"2.5"`; minus zero gives `"0"`), so equal amounts hash equally.

Anything else raises `TypeError`, and a value that cannot be written raises `ValueError`: the
canonical form never guesses. `content_hash(value)` is `"sha256:"` and the hex SHA-256 of the
canonical text encoded as UTF-8.

`kept_json(value)` is the canonical text of a value a run keeps from outside — a tool's result, a
reconcile hook's answer, a result settled by hand — within two bounds: at most `MAX_KEPT_DEPTH`
(64, as deep as a plan may nest brackets: `syntax.MAX_NESTING`) lists and maps one inside another,
and at most `MAX_KEPT_BYTES` (16 MiB) of text in UTF-8. Both are checked by a walk without
recursion before any text is written (a 200 MB string is refused without being copied; a value
that holds itself is too deep), and the size again on the text. A value within them is small
enough for the journal to hold and read back whole, and shallow enough for every recursive walk a
run makes of it (`canonical_json`, CEL's operators, Python's `==` and `repr`) even inside the
deepest expression a plan may hold (`ir.lower.MAX_EXPRESSION_DEPTH` more levels). `plain` walks
without recursion, at any depth.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from decimal import Decimal
from typing import Any, Iterator

HASH_PREFIX = "sha256:"
MAX_KEPT_DEPTH = 64  # lists and maps one inside another in a value a run keeps (`kept_json`)
MAX_KEPT_BYTES = 16 * 1024 * 1024  # UTF-8 bytes of the canonical text of a value a run keeps


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a JSON-like value (see the module docstring)."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def plain(value: Any) -> Any:
    """A CEL value as a tool is given it: a `uint` as an int, a duration or timestamp as its text
    (`90s`, `2024-01-01T08:00:00Z`), bytes as text, maps and lists likewise inside. Without
    recursion, at any depth: each list or map is made empty and filled as the walk reaches its
    items; a map's in their order, so of two keys that read alike (`1` and `"1"`) the later's value
    wins, as in a dict built from its items."""
    from plangate.cel.evaluate import Duration, Timestamp, Uint

    def scalar(item: Any) -> Any:
        if isinstance(item, bool) or item is None or isinstance(item, (str, float)):
            return item
        if isinstance(item, (Uint, int)):
            return int(item)
        if isinstance(item, (Duration, Timestamp)):
            return str(item)
        if isinstance(item, bytes):
            return item.decode("utf-8", errors="replace")
        return item

    top: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(value, top, 0)]  # (value, the list or map it goes in, where)
    while pending:
        item, into, where = pending.pop()
        if isinstance(item, dict):
            made: Any = dict.fromkeys(str(key) for key in item)
            pending.extend((inner, made, str(key)) for key, inner in reversed(item.items()))
        elif isinstance(item, (list, tuple)):
            made = [None] * len(item)
            for index, inner in enumerate(item):
                if isinstance(inner, (dict, list, tuple)):
                    pending.append((inner, made, index))
                else:
                    made[index] = scalar(inner)
        else:
            made = scalar(item)
        into[where] = made
    return top[0]


def call_value(value: Any) -> Any:
    """A CEL value as a tool receives it (`plain`), or a `CelError` when it has no JSON form: a
    map key that is not a string (`{1: "a"}` would reach the tool as `{"1": "a"}` and collide with
    a `"1"` key), a NaN or an infinity (the call could not be journaled, so it is not made)."""
    from plangate.cel.evaluate import CelError

    if isinstance(value, CelError):
        return value
    key = _non_string_key(value)
    if key is not None:
        try:
            shown = canonical_json(plain(key))
        except (TypeError, ValueError):  # a NaN key
            shown = repr(key)
        return CelError(f"a map passed to a tool must have string keys (the tool is given JSON), "
                        f"but one key is `{shown}`")
    given = plain(value)
    try:
        canonical_json(given)
    except (TypeError, ValueError) as error:
        return CelError(f"the value cannot be passed to a tool: {error}")
    return given


def _non_string_key(value: Any) -> Any:
    """A key of a map inside `value` that is not a string, or None."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return key
                pending.append(inner)
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return None


def key_text(value: Any) -> str:
    """The idempotency key a value of a plan's `idempotency` names: a string as it is, any other
    value the canonical JSON text of its `plain` form (`5` and `"5"` name one key). Raises as
    `canonical_json` does for a value with no canonical text."""
    value = plain(value)
    return value if isinstance(value, str) else canonical_json(value)


def idempotency_key(value: Any) -> str:
    """The key a value of a plan's `idempotency` names (`key_text`); `ValueError`, saying why, for a
    value that names none: `null`, an empty string, or one with no canonical text (a NaN, an
    infinity). The runtime keys a call so, and `check` refuses a constant key that names none."""
    named = plain(value)
    if named is None or named == "":
        raise ValueError(f"the key is {'null' if named is None else 'an empty string'}, which names no call")
    try:
        return key_text(named)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the key has no canonical text: {error}") from None


_TOO_LARGE = f"its canonical JSON text is over {MAX_KEPT_BYTES // (1024 * 1024)} MiB, the most a run keeps"


def kept_json(value: Any) -> str:
    """The canonical JSON text of a value a run keeps from outside (see the module docstring);
    raises as `canonical_json` does, and `ValueError` for a value nested more than
    `MAX_KEPT_DEPTH` deep or whose text would be over `MAX_KEPT_BYTES`."""
    problem = _bounds_problem(value)
    if problem is None:
        text = canonical_json(value)
        if len(text.encode("utf-8")) <= MAX_KEPT_BYTES:
            return text
        problem = _TOO_LARGE
    raise ValueError(problem)


def _bounds_problem(value: Any) -> str | None:
    """Why `value` is past a bound of `kept_json`, where a walk can tell without writing its text:
    nested too deep, or larger than a lower bound of its text's bytes allows (each string its
    characters and quotes, each other value at least one character, each list or map its
    brackets and separators, each key its characters, quotes and colon). Depth first, keeping one
    iterator per open list or map, so it stops at the first level past the bound."""
    size = 0
    levels: list[Iterator[Any]] = [iter((value,))]
    while levels:
        for item in levels[-1]:
            if isinstance(item, (list, tuple, dict)):
                if len(levels) > MAX_KEPT_DEPTH:
                    return (f"it is nested more than {MAX_KEPT_DEPTH} levels deep in lists and maps, the most a "
                            "run keeps")
                size += 1 + max(len(item), 1)
                if isinstance(item, dict):
                    size += sum(len(key) + 3 if isinstance(key, str) else 3 for key in item)
                    levels.append(iter(item.values()))
                else:
                    levels.append(iter(item))
            else:
                size += len(item) + 2 if isinstance(item, str) else 1
            if size > MAX_KEPT_BYTES:
                return _TOO_LARGE
            if isinstance(item, (list, tuple, dict)):
                break  # into it; what follows it is taken up once it is walked
        else:
            levels.pop()
    return None


def content_hash(value: Any) -> str:
    """`"sha256:<hex>"` over the UTF-8 bytes of `canonical_json(value)`."""
    return HASH_PREFIX + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _decimal_text(amount: Decimal) -> str:
    """Plain notation, no exponent, no trailing zeros, no minus zero: `2.50` → `"2.5"`."""
    if not amount.is_finite():
        raise ValueError(f"a decimal must be finite to be written canonically, not {amount}")
    text = format(amount.normalize(), "f")
    return "0" if text == "-0" else text


def _write(value: Any, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif isinstance(value, bool):
        parts.append("true" if value else "false")
    elif isinstance(value, int):
        try:
            parts.append(str(int(value)))
        except ValueError:  # Python's bound on the digits it converts: not a limit of JSON a user can lift
            raise ValueError(f"an int of more than {sys.get_int_max_str_digits():,} digits is too long to write "
                             "in JSON") from None
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"JSON has no spelling for the float {value!r}")
        parts.append(float.__repr__(value))
    elif isinstance(value, Decimal):
        parts.append(_string(_decimal_text(value)))
    elif isinstance(value, str):
        parts.append(_string(value))
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _write(item, parts)
        parts.append("]")
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, not {type(key).__name__} {key!r}")
        parts.append("{")
        for index, key in enumerate(sorted(value)):
            if index:
                parts.append(",")
            parts.append(_string(key))
            parts.append(":")
            _write(value[key], parts)
        parts.append("}")
    else:
        kind = type(value).__name__
        raise TypeError(f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} value has no canonical JSON form")


def _string(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"the string {text!r} is not valid Unicode text: {error.reason}") from None
    return json.dumps(str(text), ensure_ascii=False)


def undecodable(text: str) -> str | None:
    """`text` with each byte that was not UTF-8 (held as a lone surrogate, as `os.fsdecode` and a
    command line in another encoding give it) shown as its escape, when it holds any: JSON text
    cannot keep one. None when `text` is UTF-8 text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return None

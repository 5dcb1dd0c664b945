"""RE2 patterns as SMT-LIB regular expressions: `text.matches(pattern)` as `(str.in_re text R)`.

`matches` is a search (RE2's partial match): it holds when some substring of the text matches the
pattern. `search_language(pattern)` gives an SMT-LIB regex whose language is exactly the set of
texts for which that search succeeds, or None when the pattern is outside the subset translated
here; the encoder then keeps `matches` as an opaque condition, as before.

Algorithm
- The pattern is read with Python's regular-expression parser (`python_regex_tree`), which reads the
  common RE2 syntax alike; anything where the two may read a pattern differently is refused
  (`None`): flags (`(?i)`, `(?s)`…), `{,n}`, POSIX classes (`[[:digit:]]`), back-references and
  octal escapes (`\\1`, `\\0`),
  look-arounds, word boundaries, Unicode classes, possessive and atomic forms.
- Each node becomes a regex term: a literal run `str.to_re`, a class a union of `re.range`s (a
  negated class, `.` and `[^…]`, the rest of `re.allchar`), a repetition `re.*`, `re.+`,
  `re.opt` or `(_ re.loop m n)`, a group its content, an alternation `re.union`. RE2's classes are
  ASCII: `\\d` = `[0-9]`, `\\w` = `[0-9A-Za-z_]`, `\\s` = `[\\t\\n\\f\\r ]`; `.` is any character
  but `\\n`.
- Search: `^` (or `\\A`) first and `$` last anchor the pattern (RE2's `$` without `(?m)` is the
  end of the text); an end that is not anchored gets `(re.* re.allchar)`. An anchor anywhere else
  is refused.

Invariant: for every pattern this translates and every text of characters up to U+2FFFF (what
Z3's strings hold), `(str.in_re text R)` holds exactly when RE2's `search` finds a match
(`tests/test_smt.py` checks it on generated patterns and texts).
"""

from __future__ import annotations

import re
from functools import lru_cache
from re._constants import MAXREPEAT, SRE_FLAG_UNICODE  # type: ignore[import-not-found]

from plangate.cel.evaluate import python_regex_tree
from plangate.smt.encode import MAX_SMT_CHAR, string_text

MAX_REPEAT_COUNT = 1000  # RE2's own bound on `{m,n}`
MAX_PATTERN_CHARS = 2000  # a longer pattern stays an opaque condition

_ANY = "re.allchar"
_EVERYTHING = "(re.* re.allchar)"
_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20))
_CATEGORIES = {"CATEGORY_DIGIT": (_DIGIT, False), "CATEGORY_NOT_DIGIT": (_DIGIT, True),
               "CATEGORY_WORD": (_WORD, False), "CATEGORY_NOT_WORD": (_WORD, True),
               "CATEGORY_SPACE": (_SPACE, False), "CATEGORY_NOT_SPACE": (_SPACE, True)}
# Syntax that Python and RE2 read differently: `{,n}` and `{01}` (repetitions in Python, text in RE2), POSIX
# classes (`[[:digit:]]`: a class in RE2, a set of characters in Python), and a backslash before a
# digit (octal or a back-reference). The rest that is refused shows in the tree.
_REFUSED = re.compile(r"\{,|\{0[0-9]|,0[0-9]|\[:|\\[0-9]")


class _Outside(Exception):
    """The pattern uses something this translation does not cover."""


@lru_cache(maxsize=512)
def search_language(pattern: str) -> str | None:
    """The SMT-LIB regex of the texts that `pattern` finds a match in, or None (see the module)."""
    if len(pattern) > MAX_PATTERN_CHARS or _REFUSED.search(pattern.replace("\\\\", "")):
        return None
    tree = python_regex_tree(pattern)
    if tree is None or tree.state.flags & ~SRE_FLAG_UNICODE:
        return None
    items = list(tree)
    try:
        starts = bool(items) and _anchor(items[0], ("AT_BEGINNING", "AT_BEGINNING_STRING"))
        if starts:
            items = items[1:]
        ends = bool(items) and _anchor(items[-1], ("AT_END",))
        if ends:
            items = items[:-1]
        body = _sequence(items, 0)
    except (_Outside, RecursionError):
        return None
    parts = [*([] if starts else [_EVERYTHING]), body, *([] if ends else [_EVERYTHING])]
    return parts[0] if len(parts) == 1 else f"(re.++ {' '.join(parts)})"


def _anchor(item: tuple, names: tuple[str, ...]) -> bool:
    op, argument = item
    return str(op) == "AT" and str(argument) in names


def _sequence(items: list, depth: int) -> str:
    if depth > 100:
        raise _Outside
    terms: list[str] = []
    literal: list[str] = []
    for op, argument in items:
        name = str(op)
        if name == "LITERAL":
            literal.append(_char(argument))
            continue
        if literal:
            terms.append(_literal(literal))
            literal = []
        terms.append(_item(name, argument, depth))
    if literal:
        terms.append(_literal(literal))
    if not terms:
        return '(str.to_re "")'
    return terms[0] if len(terms) == 1 else f"(re.++ {' '.join(terms)})"


def _literal(chars: list[str]) -> str:
    return f"(str.to_re {string_text(''.join(chars))})"


def _item(name: str, argument: object, depth: int) -> str:
    if name == "NOT_LITERAL":
        return _complement(f"(str.to_re {string_text(_char(argument))})")
    if name == "ANY":
        return _complement('(str.to_re "\\u{a}")')  # `.`: any character but a newline
    if name == "IN":
        return _class(argument)  # type: ignore[arg-type]
    if name in ("MAX_REPEAT", "MIN_REPEAT"):  # greedy or lazy: the same language
        low, high, sub = argument  # type: ignore[misc]
        if low > MAX_REPEAT_COUNT or (high != MAXREPEAT and high > MAX_REPEAT_COUNT):
            raise _Outside
        inner = _sequence(list(sub), depth + 1)
        if high == MAXREPEAT:
            if low == 0:
                return f"(re.* {inner})"
            if low == 1:
                return f"(re.+ {inner})"
            return f"(re.++ ((_ re.loop {low} {low}) {inner}) (re.* {inner}))"
        if (low, high) == (0, 1):
            return f"(re.opt {inner})"
        return f"((_ re.loop {low} {high}) {inner})"
    if name == "SUBPATTERN":
        _group, add_flags, del_flags, sub = argument  # type: ignore[misc]
        if add_flags or del_flags:
            raise _Outside
        return _sequence(list(sub), depth + 1)
    if name == "BRANCH":
        _, alternatives = argument  # type: ignore[misc]
        terms = [_sequence(list(alternative), depth + 1) for alternative in alternatives]
        return terms[0] if len(terms) == 1 else f"(re.union {' '.join(terms)})"
    raise _Outside  # AT (an anchor not at an end), GROUPREF, ASSERT, ATOMIC_GROUP, POSSESSIVE_REPEAT…


def _class(members: list) -> str:
    negated = False
    ranges: list[tuple[int, int]] = []
    complements: list[str] = []
    for op, argument in members:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            ranges.append((argument, argument))
        elif name == "RANGE":
            ranges.append(tuple(argument))  # type: ignore[arg-type]
        elif name == "CATEGORY" and str(argument) in _CATEGORIES:
            spans, complemented = _CATEGORIES[str(argument)]
            if complemented:
                complements.append(_complement(_ranges(list(spans))))
            else:
                ranges.extend(spans)
        else:
            raise _Outside
    terms = ([_ranges(ranges)] if ranges else []) + complements
    union = "re.none" if not terms else terms[0] if len(terms) == 1 else f"(re.union {' '.join(terms)})"
    return _complement(union) if negated else union


def _ranges(ranges: list[tuple[int, int]]) -> str:
    terms = []
    for low, high in ranges:
        if low > high:
            continue
        if high > MAX_SMT_CHAR:
            raise _Outside  # characters Z3's strings do not hold
        terms.append(f"(str.to_re {string_text(chr(low))})" if low == high
                     else f"(re.range {string_text(chr(low))} {string_text(chr(high))})")
    if not terms:
        return "re.none"
    return terms[0] if len(terms) == 1 else f"(re.union {' '.join(terms)})"


def _complement(term: str) -> str:
    """The single characters that `term` (a set of single characters) does not hold."""
    return f"(re.inter {_ANY} (re.comp {term}))"


def _char(code: object) -> str:
    if not isinstance(code, int) or code > MAX_SMT_CHAR:
        raise _Outside
    return chr(code)

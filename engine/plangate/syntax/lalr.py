"""A lean LALR(1) driver over Lark's own parse table, callbacks and terminals: the fast path of a parse.

Lark's parser is general (interactive parsing, error handling, any lexer); reading a well-formed file
needs none of it. This driver runs the same automaton — Lark's `IntParseTable`, built from
`grammar/plangate.lark` — with the same reduction callbacks (the lowering, wrapped by Lark's tree
builder), so it performs exactly the reductions Lark would, in the same order, and builds the same IR.

Algorithm
- Lexing is contextual, as with Lark's contextual lexer, but from one master regex: the terminals in
  Lark's own order (priority, then width), keywords folded into `NAME`. A match whose terminal the
  current state accepts is exactly what Lark's per-state lexer returns, because that lexer tries a
  subsequence of the same alternatives in the same order. A word that is a keyword becomes the
  keyword where the state accepts it and `NAME` otherwise, as Lark's `UnlessCallback` does.
- Parsing is the textbook loop: look the token up in the top state's actions; reduce (pop the rule's
  length, call its callback, push the goto) until it shifts. Unit rules that Lark inlines (`?rule`
  with one child) only change state, so their callback is skipped, and a chain of them (`primary` →
  `member` → … → `expr`) depends only on the state below, the rule reduced and the next terminal:
  it is followed once and remembered (`chains`). So a unit reduction never reaches the loop: it
  only ever follows another reduction (a shift leaves a terminal on top), and `chains` folds it.
- A token that every rule's child filter drops (punctuation, most keywords) is pushed as a
  placeholder, not built: no callback ever receives it.
- Anything unusual makes the driver give up and return `GIVE_UP`: a token the state does not accept
  (where a contextual lexer might have split the text differently, or a syntax error), text no
  terminal matches, nesting past the bound. The caller then parses with Lark itself, which produces
  the same value or the error with all of Lark's reporting. So this path never has to be right about
  errors, only about success, and on success it is Lark's parse.

Invariant: for every text, the driver returns `GIVE_UP` or the value `Lark.parse` returns; the
lowering sees the same callbacks with the same children (tokens carry type, value, start and end).
The bounds on nesting and on runs of unary operators are counted exactly as the Lark path's lexer
callbacks count them.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, Callable

from lark import Lark, Token
from lark.parse_tree_builder import ChildFilterLALR, ChildFilterLALR_NoPlaceholders
from lark.parsers.lalr_analysis import Shift

GIVE_UP = object()
_DROPPED = object()  # stands on the value stack for a token no callback receives

_OPENERS = {"LBRACE": 1, "LPAR": 1, "LSQB": 1, "RBRACE": -1, "RPAR": -1, "RSQB": -1}
_UNARY = ("BANG", "MINUS")
_OPERANDS = ("NAME", "NUMBER", "UINT", "HEX", "STRING", "SQ_STRING")  # TRUE/FALSE/NULL arrive as NAME in Lark
_END = "$END"


class LalrDriver:
    """Parses with Lark's tables; `parse` returns the lowered value or `GIVE_UP`."""

    def __init__(self, lark: Lark, max_nesting: int) -> None:
        frontend = lark.parser
        parser = frontend.parser.parser
        table = parser.parse_table
        callbacks: dict[Any, Callable] = parser.callbacks
        self.max_nesting = max_nesting
        self.start_states: dict[str, int] = dict(table.start_states)
        self.end_states: dict[str, int] = dict(table.end_states)
        self.ignore = frozenset(lark.lexer_conf.ignore)
        if any(isinstance(key, str) for key in callbacks):
            raise ValueError("token callbacks in the parser are not supported by the fast driver")

        # Actions: a shift is the next state (an int); a reduce is (length, callback or None, origin).
        reductions: dict[Any, tuple[int, Callable | None, str]] = {}
        self.actions: dict[int, dict[str, Any]] = {}
        for state, row in table.states.items():
            compiled: dict[str, Any] = {}
            for symbol, (action, argument) in row.items():
                if action is Shift:
                    compiled[symbol] = argument
                else:
                    reduction = reductions.get(argument)
                    if reduction is None:
                        reduction = reductions[argument] = self._reduction(argument, callbacks[argument])
                    compiled[symbol] = reduction
            self.actions[state] = compiled

        self.chains: dict[tuple[int, str, str], tuple[int, Any]] = {}
        lexer = frontend.lexer
        root = getattr(lexer, "lexer", lexer).root_lexer  # inside a post-lexer's connector, if any
        terminals = root.scanner.terminals  # Lark's order, keywords already folded into NAME
        ignored = [t.pattern.to_regexp() for t in terminals if t.name in self.ignore]
        skip = "(?:" + "|".join(f"(?>{pattern})" for pattern in ignored) + ")*+"  # possessive: never gives back
        # Each alternative is marked by an empty group at its end (its name is `lastgroup`), so that
        # it begins with the terminal's own first character or class, which the regex engine tests
        # before entering the alternative; group 1 is the skipped text, so a token starts at `end(1)`.
        alternatives = "|".join(f"(?:{t.pattern.to_regexp()})(?P<{t.name}>)" for t in terminals if t.name not in self.ignore)
        self.master = re.compile("(" + skip + ")(?:" + alternatives + ")")
        self.trailer = re.compile(skip + r"\Z")
        self.keywords = {t.pattern.value: t.name for t in lark.terminals
                         if t.pattern.type == "str" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t.pattern.value)}
        # Terminals that every rule's child filter drops (punctuation, most keywords): no callback
        # ever sees them, so they are pushed as a placeholder instead of a `Token`.
        kept = {symbol.name for rule in lark.rules for symbol in rule.expansion
                if symbol.is_term and not symbol.filter_out}
        self.dropped = frozenset(symbol.name for rule in lark.rules for symbol in rule.expansion
                                 if symbol.is_term and symbol.name not in kept) - set(_OPENERS) - set(_UNARY)

    @staticmethod
    def _reduction(rule: Any, callback: Callable) -> tuple[int, Callable | None, str]:
        size = len(rule.expansion)
        only = rule.expansion[0] if size == 1 else None
        if only is not None and rule.options.expand1 and not rule.alias and not only.is_term \
                and not only.name.startswith("_"):
            probe = object()
            if callback([probe]) is probe:  # Lark's ExpandSingleChild passes its one child through
                return 1, None, rule.origin.name
        return size, _specialise(callback, size), rule.origin.name


    def _follow(self, below: int, origin: str, kind: str) -> tuple[int, Any]:
        """After a reduction to `origin` above state `below`, with `kind` next: the state pushed and its
        action, unit reductions folded in (each pops the state just pushed and goes to from `below`)."""
        state = self.actions[below][origin]
        while True:
            action = self.actions[state].get(kind)
            if action is None or action.__class__ is int or action[1] is not None or state in self.end_states.values():
                return state, action
            state = self.actions[below][action[2]]

    def parse(self, text: str, start: str) -> Any:
        actions = self.actions
        chains = self.chains
        keywords = self.keywords
        dropped = self.dropped
        match = self.master.match
        max_nesting = self.max_nesting
        new_token = str.__new__
        end_state = self.end_states[start]
        state = self.start_states[start]
        states = [state]
        values: list[Any] = []
        depth = 0
        unary_run = 0
        position = 0
        while True:  # one token per turn; at the end of the text, `$END`
            found = match(text, position)
            if found is None:
                if self.trailer.match(text, position) is None:
                    return GIVE_UP  # text that no terminal matches
                kind, token, row = _END, None, actions[state]
            else:
                kind = found.lastgroup
                position = found.end()
                row = actions[state]
                if kind in dropped:
                    token = _DROPPED
                else:
                    begin = found.end(1)
                    value = text[begin:position]
                    if kind == "NAME":
                        keyword = keywords.get(value)
                        if keyword is not None and keyword in row:
                            kind = keyword
                        else:
                            unary_run = 0
                    elif kind in _OPENERS:
                        depth += _OPENERS[kind]
                        if depth > max_nesting:
                            return GIVE_UP
                        unary_run = 0
                    elif kind in _UNARY:
                        unary_run += 1
                        if unary_run > max_nesting:
                            return GIVE_UP
                    elif kind in _OPERANDS:
                        unary_run = 0
                    if kind in dropped:
                        token = _DROPPED
                    else:
                        token = new_token(Token, value)
                        token.type = kind
                        token.value = value
                        token.start_pos = begin
                        token.end_pos = position
            action = row.get(kind)
            if action is None:
                return GIVE_UP
            while action.__class__ is not int:  # reduce until the token shifts
                size, callback, origin = action
                if size:
                    children = values[-size:]
                    del states[-size:]
                    del values[-size:]
                else:
                    children = []
                values.append(callback(children))
                key = (states[-1], origin, kind)
                follow = chains.get(key)
                if follow is None:
                    follow = chains[key] = self._follow(*key)
                state, action = follow
                states.append(state)
                if state == end_state:  # only the start symbol leads there, only at `$END`
                    return values[-1]
                if action is None:
                    return GIVE_UP
            if token is None:
                return GIVE_UP  # `$END` is never shifted
            state = action
            states.append(state)
            values.append(token)


class _Spliced(list):
    """The items of one of Lark's generated repetition rules (`__step_star_3`…), to splice into a parent.

    Lark builds a `Tree` per repetition and the parent's child filter splices its `.children`; a list
    that is its own `.children` serves Lark's filters and ours alike, without the tree.
    """

    __slots__ = ()

    @property
    def children(self) -> list:
        return self


def _specialise(callback: Callable, size: int) -> Callable:
    """`callback` with Lark's child filter (and tree building for repetitions) compiled for this rule.

    Lark wraps each transformer method in a filter that drops anonymous tokens, splices repetitions
    and inserts `None` for absent optional parts (`ChildFilterLALR`, `…_NoPlaceholders`). The same
    selection is done here with less generality. A callback of any other shape is kept as it is.
    """
    to_include = getattr(callback, "to_include", None)
    if type(callback) is ChildFilterLALR:
        append_none = callback.append_none
    elif type(callback) is ChildFilterLALR_NoPlaceholders:
        to_include = [(index, expand, 0) for index, expand in to_include]
        append_none = 0
    else:
        to_include = None
    builder = callback if to_include is None else callback.node_builder
    splice = isinstance(builder, partial) and getattr(builder.func, "__name__", "") == "default_callback" \
        and builder.args and str(builder.args[0]).startswith("__")
    if to_include is None:
        return _Spliced if splice else callback
    if splice:
        builder = None
    if append_none == 0 and not any(expand or nones for _, expand, nones in to_include):
        if builder is None:
            builder = _Spliced
        picked = tuple(index for index, _, _ in to_include)
        if picked == tuple(range(size)):
            return builder
        if len(picked) == 1:
            (first,) = picked
            return lambda children: builder([children[first]])
        if len(picked) == 2:
            first, second = picked
            return lambda children: builder([children[first], children[second]])
        return lambda children: builder([children[index] for index in picked])
    if builder is None and append_none == 0 and len(to_include) == 2 and to_include[0] == (0, True, 0) \
            and not any(to_include[1][1:]):
        added = to_include[1][0]

        def grow(children: list) -> Any:  # a left-recursive repetition, one item longer: in place
            items = children[0]
            items.append(children[added])
            return items

        return grow
    make = _Spliced if builder is None else list

    def select(children: list) -> Any:
        filtered = None
        for index, expand, nones in to_include:
            if filtered is None:
                if expand and not nones:
                    filtered = children[index]  # a left-recursive repetition: extend it in place
                    continue
                filtered = make()
            if nones:
                filtered.extend((None,) * nones)
            if expand:
                filtered.extend(children[index])
            else:
                filtered.append(children[index])
        if filtered is None:
            filtered = make()
        if append_none:
            filtered.extend((None,) * append_none)
        return filtered if builder is None else builder(filtered)

    return select

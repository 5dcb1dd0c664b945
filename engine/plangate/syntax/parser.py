"""Parsing: one cached LALR parser for plans, policies and CEL, with readable syntax errors.

Algorithm
- The grammar (`grammar/plangate.lark`, shipped in the wheel) is compiled once per process and
  cached on disk by Lark; the lowering (`plangate.ir.lower.Lowering`) runs as Lark's internal
  transformer, so a parse yields IR directly and never recurses.
- Bounds: input over `MAX_INPUT_CHARS` is refused; bracket nesting and runs of unary `!`/`-` are
  counted by lexer callbacks and a parse stops past `MAX_NESTING`; CEL depth is bounded in lowering.
  Each gives `input-too-large`. Garbage collection is paused during a parse.
- Errors: a lexer or parser error becomes one `syntax-error` that says, in a user's words, what was
  found and what was expected (common mistakes are recognised with Lark's `match_examples`).
  Recovery: the item holding the error (the step, tool entry, rule… whose line starts it) is blanked
  out — replaced by spaces, so every offset stays — and the text parsed again, up to
  `MAX_SYNTAX_ERRORS` times. Errors in different items are independent, so each is real.
  When the text does not parse, no IR is returned: later stages see only whole documents. (A
  problem the lowering finds inside a well-formed construct — a bad escape in a string, a
  `require approval` without `by` — is reported as `syntax-error` too, and the document it could
  still build is returned with it.)

Invariant: `parse_source` never raises for any text; everything it finds is a diagnostic.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import re
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Callable

from lark import Lark, Token
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from plangate.assets import read_asset
from plangate.diagnostics import Diagnostic, Label, backticked, diagnostic
from plangate.ir.lower import DURATION_UNITS, ExpressionTooDeep, Lowering
from plangate.cel.ast import Expr
from plangate.ir.nodes import Document
from plangate.source import SourceFile, Span
from plangate.suggest import closest
from plangate.syntax.lalr import GIVE_UP, LalrDriver

MAX_INPUT_CHARS = 8 * 1024 * 1024
MAX_NESTING = 64
MAX_SYNTAX_ERRORS = 12

_OPENERS = {"LBRACE": 1, "LPAR": 1, "LSQB": 1, "RBRACE": -1, "RPAR": -1, "RSQB": -1}
_OPERANDS = ("NAME", "NUMBER", "UINT", "HEX", "STRING", "SQ_STRING", "TRUE", "FALSE", "NULL")

# The keywords that begin an independent item of a plan or policy: the unit that recovery blanks out.
_ITEM_KEYWORDS = ("step", "check", "budget", "tool", "require", "deny", "warn", "limit", "test", "unknown_tools",
                  "objective", "non_goal", "scope", "success", "constraint", "decision", "version")
# The start of a plan's or policy's header: its keyword at the start of a line, before a name or `{`.
_HEADER = re.compile(r"(?:^|(?<=\r))[ \t]*(?:plan|policy)(?=[ \t]*[^.\s\[(])", re.MULTILINE)
_LINE_END = re.compile(r"[\r\n]|\Z")
# Lines that begin an item (a plan or policy included).
_ITEM_START = re.compile(r"(?:^|(?<=\r))[ \t]*(?:" + "|".join(_ITEM_KEYWORDS + ("plan", "policy")) + r")\b", re.MULTILINE)

# The order in which clause keywords are offered as examples in "expected a clause such as …".
_CLAUSE_ORDER = ("call", "risk", "after", "cost", "time", "retry", "expect", "idempotency", "rollback",
                 "approval", "when", "step", "check", "budget", "objective", "version", "tool",
                 "require", "deny", "warn", "limit", "test", "unknown_tools")

_WORDS = {
    "NAME": "a name",
    "STRING": "a string",
    "SQ_STRING": "a string",
    "NUMBER": "a number",
    "DURATION": "a duration such as `30s` or `1h`",
    "$END": "end of file",
}

_BLOCK_KEYWORDS = frozenset({"STEP", "CHECK", "TOOL", "TEST", "BUDGET", "REQUIRE", "DENY", "WARN", "LIMIT",
                             "PLAN", "POLICY", "UNKNOWN_TOOLS"})
_COMPOUND_DURATION = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d)[A-Za-z0-9_.]*")
_CURRENCY_SIGN = re.compile(r"[$€£]\s*([0-9]+(?:\.[0-9]+)?)")  # `$5`: an amount written the usual way
_SPACED_DURATION = re.compile(r"([0-9]+)[ \t]+([A-Za-z]+)\b")
_OTHER_UNIT = re.compile(r"[0-9]+(?:\.[0-9]+)?([A-Za-z][A-Za-z0-9_]*)")
_UNIT_WORDS = {"ms": "ms", "s": "s", "sec": "s", "second": "s", "m": "m", "min": "m", "minute": "m",
               "h": "h", "hr": "h", "hour": "h", "d": "d", "day": "d"}
_CALL_BUDGET = re.compile(r"(?<![A-Za-z0-9_.])calls[ \t]*<=[ \t]*\Z")  # searched up to a number
_BOUND_AFTER = re.compile(r"[ \t]*<=")  # `tme <= 30m` after `calls <= 20`: a misspelt clause, not a unit
_NUMBER_BEFORE = re.compile(r"(?<![A-Za-z0-9_.])([0-9]+(?:\.[0-9]+)?)[ \t]*\Z")
_ARGUMENT_NAME_AFTER = re.compile(r"[ \t]*:(?!:)")
# Words after which an item keyword names something, or is part of the item: `step test`, `after
# check`, `require check`, `unknown_tools deny`.
_NAMING_WORDS = frozenset(("step", "check", "after", "require", "unknown_tools"))
_KEYWORD_AFTER_BRACE = re.compile(r"[ \t]*(" + "|".join(_ITEM_KEYWORDS) + r")\b")
_SELECTED_AFTER = re.compile(r"\s*[.\[:(]")  # `step.risk`, `step["risk"]`, `{test: …}`, `test(…)`
_ARGUMENT_NAME_BEFORE = re.compile(r"[(,]\s*[A-Za-z_][A-Za-z0-9_]*\s*\Z")
_BRACES = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\\\n]*(?:\\.[^\'\\\n]*)*\'|#[^\r\n]*|[{}]')
_ITEM_SCAN = re.compile(_BRACES.pattern + r"|(?P<bracket>[()\[\]])|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
                        r"|(?P<number>[0-9][A-Za-z0-9_.]*)|(?P<operator>[^\sA-Za-z0-9_])")
_ITEM_KEYWORD_SET = frozenset(_ITEM_KEYWORDS)

_EXAMPLES: dict[str, list[str]] = {
    "missing-comma": [
        "plan p { step s { call t.x(a: 1 b: 2) } }",
        'plan p { step s { call t.x(a: "1" b: 2) } }',
        "plan p { step s { call t.x(a: q.r b: 2) } }",
        "plan p { step s { call t.x(a: f() b: 2) } }",
        "plan p { step s { call t.x(a: f(1) b: 2) } }",
        "plan p { step s { call t.x(a: 1, b: 1 c: 2) } }",
        "plan p { step s { call t.x(a: [1, 2] b: 2) } }",
        "plan p { step s { call t.x(a: {\"k\": 1} b: 2) } }",
        "plan p { step s { call t.x(a: true b: 2) } }",
        "plan p { step s { call t.x(a: null b: 2) } }",
        "plan p { step s { call t.x(a: 1.5 b: 2) } }",
        "plan p { step s { call t.x(a: -1 b: 2) } }",
        "plan p { step s { call t.x(a: (1) b: 2) } }",
        "plan p { step s { call t.x(a: q.r[0] b: 2) } }",
        "plan p { step s { call t.x(a: q.r.f() b: 2) } }",
        "plan p { step s { call t.x() rollback t.y(a: 1 b: 2) } }",
        "plan p { step s { call t.x() rollback t.y(a: result.id b: 2) } }",
        "policy p { test \"t\" { call t.x(a: 1 b: 2) } }",
    ],
    "missing-colon": [
        "plan p { step s { call t.x(a 1) } }",
        'plan p { step s { call t.x(a "1") } }',
    ],
    "missing-close-brace": [
        "plan p { step a { call t.x() step b { call t.y() } }",
        "plan p { step a { call t.x() check b { call t.y() } }",
        "plan p { step a { risk read_only step b { call t.y() } }",
        "plan p { step a { retry 1 step b { call t.y() } }",
        "plan p { step a { time 1m step b { call t.y() } }",
        "plan p { step a { cost 1 usd step b { call t.y() } }",
        "plan p { step a { expect x step b { call t.y() } }",
        "plan p { step a { expect x == 1 step b { call t.y() } }",
        "plan p { step a { expect x.y step b { call t.y() } }",
        'plan p { step a { expect x == "1" step b { call t.y() } }',
        "plan p { step a { } step b { call t.y() }",
        "policy p { tool a.b { risk read_only tool c { } }",
    ],
    "missing-role": [
        'plan p { step a { call t.x() approval by "operator" } }',
        'plan p { step a { call t.x() approval by 2 of "operator" } }',
        'policy p { require approval by "operator" }',
        'policy p { require approval when step.risk >= irreversible by "operator" }',
    ],
    "missing-after-comma": [
        "plan p { step a after b c { call t.x() } }",
        "plan p { step a after b, c d { call t.x() } }",
        "plan p { step a { call t.x() after b c } }",
    ],
    "missing-open-brace": [
        "plan p { step a call t.x() } }",
        "plan p { step a after b call t.x() } }",
        "policy p { tool a risk read_only } }",
        "plan p step a { call t.x() } }",
        "policy p tool a { } }",
    ],
}

_EXAMPLE_MESSAGES = {
    "missing-comma": ("expected `,` between two arguments",
                      "separate arguments with commas: `f(a: 1, b: 2)`"),
    "missing-colon": ("expected `:` after an argument's name",
                      "write each argument as `name: value`"),
    "missing-close-brace": ("expected `}` to close the block before this",
                            "a `{` above is not closed: add `}` at the end of its block"),
    "missing-role": ("expected `role` before the role's name",
                     'write `by role "operator"` (or `by 2 of role "operator"`)'),
    "missing-after-comma": ("expected `,` between two steps of `after`",
                            "separate the steps with commas: `after build, test`"),
    "missing-open-brace": ("expected `{` to open the block",
                           "a block's body goes inside braces: `step name { … }`"),
}


class _NestingTooDeep(Exception):
    def __init__(self, token: Token) -> None:
        super().__init__("nesting too deep")
        self.token = token


class _Nesting(threading.local):
    depth = 0
    unary_run = 0  # `!`/`-` tokens since the last operand: each nests one level deeper


@dataclass
class ParseResult:
    document: Document | None
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass
class _Failure:
    error: Diagnostic
    recoverable: bool


@dataclass
class _Parser:
    lark: Lark
    lowering: Lowering
    nesting: _Nesting
    lock: threading.Lock
    terminal_text: dict[str, str]
    fast: LalrDriver


def grammar_text() -> str:
    return read_asset("grammar", "plangate.lark")


def _cache_path(text: str) -> str | None:
    """Where Lark may keep the compiled grammar, or None (no cache).

    Lark's cache is a pickle, and unpickling runs code: so it is kept only in a folder that no one
    but this user can write to (`_private`), and a cache file there that someone else could
    have written is removed first. The folders tried: `$XDG_CACHE_HOME/plangate` (default
    `~/.cache/plangate`), then `plangate-UID` in the temporary folder, each made `0700` if missing.
    Where the system cannot say who owns a file (no `os.getuid`), nothing is cached."""
    if not hasattr(os, "getuid"):
        return None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(base, "plangate"), os.path.join(tempfile.gettempdir(), f"plangate-{os.getuid()}")):
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            continue
        path = os.path.join(folder, f"grammar-{digest}.lark-cache")
        try:
            if not _private(folder, stat.S_ISDIR) or not os.access(folder, os.W_OK):
                continue
            if os.path.lexists(path) and not _private(path, stat.S_ISREG):
                os.remove(path)
        except OSError:
            continue
        return path
    return None


def _private(path: str, kind: Callable[[int], bool]) -> bool:
    """Whether `path` is of `kind` (`stat.S_ISDIR`, `stat.S_ISREG`; not a link to one), this
    user's, and no one else may write to it; `OSError` when it cannot be looked at."""
    info = os.lstat(path)
    return kind(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _keep_private(path: str | None) -> None:
    """Lark writes its cache file with the process's umask: make it this user's alone."""
    if path is None:
        return
    try:
        if stat.S_IMODE(os.lstat(path).st_mode) & 0o022:
            os.chmod(path, 0o600)
    except OSError:
        pass


class _WholeWords:
    """A post-lexer that changes no token; its `always_accept` puts `NAME` in the lexer of every
    parser state. Lark's contextual lexer otherwise tries, where only keywords may come, the
    keywords alone, which match a prefix of a longer word: `stepfetch {` would read as
    `step fetch {`. With `NAME` there, a word is read whole (a keyword only when it is the whole
    word, §2's identifiers), and `stepfetch` is an unexpected name."""

    always_accept = ("NAME",)

    def process(self, stream):
        return stream


@functools.cache
def _parser() -> _Parser:
    text = grammar_text()
    lowering = Lowering()
    nesting = _Nesting()

    def count(token: Token) -> Token:
        nesting.depth += _OPENERS[token.type]
        if nesting.depth > MAX_NESTING:
            raise _NestingTooDeep(token)
        nesting.unary_run = 0
        return token

    def count_unary(token: Token) -> Token:
        nesting.unary_run += 1
        if nesting.unary_run > MAX_NESTING:
            raise _NestingTooDeep(token)
        return token

    def operand(token: Token) -> Token:
        nesting.unary_run = 0
        return token

    callbacks = {name: operand for name in _OPERANDS}
    callbacks.update({name: count for name in _OPENERS})
    callbacks.update(BANG=count_unary, MINUS=count_unary)
    options = dict(parser="lalr", start=["start", "expression"], lexer="contextual", maybe_placeholders=True,
                   transformer=lowering, lexer_callbacks=callbacks, postlex=_WholeWords())
    cache = _cache_path(text)
    try:
        lark = Lark(text, cache=cache or False, **options)
        _keep_private(cache)
    except (OSError, EOFError, ValueError):  # an unreadable or stale cache file: build afresh
        lark = Lark(text, **options)
    terminal_text = {}
    for terminal in lark.terminals:
        if terminal.pattern.type == "str":
            terminal_text[terminal.name] = terminal.pattern.value
    return _Parser(lark, lowering, nesting, threading.Lock(), terminal_text, LalrDriver(lark, MAX_NESTING))


def parse_source(source: SourceFile) -> ParseResult:
    """Parse one file into a `Document`, or into diagnostics when it does not parse."""
    if len(source.text) > MAX_INPUT_CHARS:
        return ParseResult(None, [diagnostic(
            "input-too-large", Span(source.name, 0, 0),
            f"the file has {len(source.text):,} characters, over the bound of {MAX_INPUT_CHARS:,}",
            help="split the plan or policy into smaller files")])
    parser = _parser()
    with parser.lock:
        return _parse_with_recovery(parser, source)


def parse_expression(source: SourceFile) -> tuple["Expr | None", list[Diagnostic]]:
    """Parse a CEL expression on its own (for the API and tests); spans point into `source`."""
    if len(source.text) > MAX_INPUT_CHARS:
        return None, [diagnostic("input-too-large", Span(source.name, 0, 0), "the expression is too long")]
    parser = _parser()
    with parser.lock:
        outcome = _parse_once(parser, source.name, source.text, start="expression")
    if isinstance(outcome, _Failure):
        return None, [outcome.error]
    return outcome


def _parse_with_recovery(parser: _Parser, source: SourceFile) -> ParseResult:
    text = source.text
    errors: list[Diagnostic] = []
    while True:
        outcome = _parse_once(parser, source.name, text)
        if not isinstance(outcome, _Failure):
            document, lowering_diagnostics = outcome
            if errors:
                return ParseResult(None, errors + lowering_diagnostics)
            return ParseResult(document, lowering_diagnostics)
        error = outcome.error
        if any(seen.span == error.span and seen.message == error.message for seen in errors):
            return ParseResult(None, errors)  # blanking changed nothing the parse reads: said once
        errors.append(error)
        if not outcome.recoverable or len(errors) >= MAX_SYNTAX_ERRORS:
            return ParseResult(None, errors)
        blanked = _repaired_header(text, error.span.start)
        if blanked is None:
            blanked = _blank_item(text, error.span.start)
        if blanked is None or blanked == text:
            return ParseResult(None, errors)
        text = blanked


def _parse_once(parser: _Parser, name: str, text: str, start: str = "start"):
    """The parsed value and the lowering's diagnostics, or the syntax error as a `_Failure`."""
    parser.lowering.begin(name)
    parser.nesting.depth = 0
    parser.nesting.unary_run = 0
    collecting = gc.isenabled()
    gc.disable()  # a parse allocates only live objects; generational passes would make it superlinear
    try:
        document = parser.fast.parse(text, start)
        if document is GIVE_UP:  # Lark itself: the same value, or the error with all its reporting
            parser.lowering.begin(name)
            document = parser.lark.parse(text, start=start)
        return document, list(parser.lowering.diagnostics)
    except _NestingTooDeep as too_deep:
        token = too_deep.token
        return _Failure(diagnostic(
            "input-too-large", Span(name, token.start_pos, token.end_pos),
            f"unary `{token.value}` is repeated more than {MAX_NESTING} times" if token.type in ("BANG", "MINUS")
            else f"brackets are nested more than {MAX_NESTING} deep",
            help="flatten the expression or the block structure"), False)
    except ExpressionTooDeep as too_deep:
        return _Failure(diagnostic(
            "input-too-large", too_deep.span,
            "this expression is nested too deeply to check",
            help="split it into smaller expressions; a long run of `||` comparisons reads better as `x in [\"a\", \"b\", …]`"), False)
    except UnexpectedInput as error:
        return _Failure(_describe(parser, name, text, error),
                        not isinstance(error, UnexpectedEOF) and not _at_end(error))
    except (LarkError, RecursionError) as error:  # defensive: no input may escape as a traceback
        return _Failure(diagnostic("syntax-error", Span(name, 0, 0), f"the file could not be parsed: {error}"), False)
    finally:
        if collecting:
            gc.enable()


def _at_end(error: UnexpectedInput) -> bool:
    return isinstance(error, UnexpectedToken) and error.token.type == "$END"


def _blank_item(text: str, offset: int) -> str | None:
    """`text` with the item around `offset` replaced by white space, or None if there is none.

    The item runs from the item start at or before `offset` to the next item start; the last item
    of a file runs to the file's last `}` (kept: it closes the plan or policy around the item)."""
    line_starts = []
    for match in _ITEM_START.finditer(text):  # up to the first one past `offset`: all that is needed
        line_starts.append(match.start())
        if match.start() > offset:
            break
    starts = sorted(set(line_starts) | set(_starts_mid_line(text, offset)))
    before = [start for start in starts if start <= offset]
    after = [start for start in starts if start > offset]
    if not before:
        return None
    begin = before[-1]
    if text[begin:offset].strip() == "" and len(before) > 1:
        begin = before[-2]  # the error is at the start of an item: the item before it is unclosed
    if after:
        end = after[0]
    else:
        end = text.rfind("}")
        if end <= begin or len(before) < 2:
            return None
    region = re.sub(r"[^\r\n]", " ", text[begin:end])
    return text[:begin] + region + text[end:]


def _repaired_header(text: str, offset: int) -> str | None:
    """`text` with an error in a plan's or policy's header (`plan deploy-v2 {`, its `{` on the next
    line or not; a stray character after the `{` on its line) mended in place, or None when the
    error is not there. Blanking the item would blank the header, and every item of the body would
    then stand outside any plan: a false error each. So a name that does not parse becomes `x` (the
    document is not used: the file has errors), and the rest of the line after the `{` becomes
    white space; lengths and lines are kept, so every later error keeps its position."""
    header = None
    for match in _HEADER.finditer(text, 0, offset + 1):
        header = match
    if header is None:
        return None
    brace = text.find("{", header.end())
    if brace == -1 or "}" in text[header.end():brace] or _ITEM_START.search(text, header.end() + 1, brace):
        return None  # no `{` before the next item: not a header this can mend
    if offset <= brace:  # in the name (the `{` may stand on the next line)
        name = text[header.end():brace]
        if len(name) < 2 or not name[0].isspace():
            return None  # no room for a name (`plan {`): the item is blanked instead
        return text[:header.end()] + " x" + re.sub(r"[^\r\n]", " ", name[2:]) + text[brace:]
    line_end = _LINE_END.search(text, brace).start()  # type: ignore[union-attr]
    if offset < line_end and text[brace + 1:offset].strip() == "":
        return text[:offset] + " " * (line_end - offset) + text[line_end:]
    return None


def _starts_mid_line(text: str, stop_after: int | None = None) -> list[int]:
    """Item starts in the middle of a line, as in `plan p { budget { … } step a { … } }`: an item's
    keyword (not inside a string or a comment) right after a brace, or standing directly in a plan
    or policy (brace depth 1, outside brackets) after the end of a clause — a brace, a string, a
    number or a word — rather than as a name or part of an expression: not after `step`, `check`,
    `after`, `require` or `unknown_tools` (`step test`, `after check`, `require check`), not after
    an operator, a comma or an opening bracket (`args.n == tool`, `after a, test`), not before
    `.`, `[`, `:` or `(` (`step.risk`, `step["risk"]`). Counting depth keeps a word of a clause's
    value from being taken for a new item; a brace left unclosed by the error itself throws the count off, which the
    keywords right after a brace and the line starts make up for. With `stop_after`, the scan ends
    at the first start past that offset (a recovery needs no more: each scan was the whole file,
    once per syntax error)."""
    found: list[int] = []
    braces = brackets = 0
    previous = ""  # the last lexeme: a word itself, else its kind ("string", "number", "operator"…)
    for match in _ITEM_SCAN.finditer(text):
        lexeme, kind = match.group(), match.lastgroup
        if lexeme[0] == "#":
            continue
        if lexeme in ("{", "}"):
            braces += 1 if lexeme == "{" else -1
            follows = _KEYWORD_AFTER_BRACE.match(text, match.end())
            if follows is not None and not _SELECTED_AFTER.match(text, follows.end()):
                found.append(follows.start(1))
                if stop_after is not None and found[-1] > stop_after:
                    return found
            previous = lexeme
            continue
        if kind == "bracket":
            brackets = brackets + 1 if lexeme in "([" else max(0, brackets - 1)
        elif (kind == "word" and lexeme in _ITEM_KEYWORD_SET and braces == 1 and brackets == 0
              and previous not in _NAMING_WORDS and previous != "operator"
              and not _SELECTED_AFTER.match(text, match.end())):
            found.append(match.start())
            if stop_after is not None and found[-1] > stop_after:
                return found
        previous = lexeme if kind == "word" else "operator" if lexeme in ("(", "[") else (kind or "string")
    return found


def _line_start(text: str, offset: int) -> int:
    return max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1


def _describe(parser: _Parser, name: str, text: str, error: UnexpectedInput) -> Diagnostic:
    if isinstance(error, UnexpectedCharacters):
        return _describe_character(parser, name, text, error)
    token = getattr(error, "token", None)
    expected = set(getattr(error, "accepts", None) or getattr(error, "expected", None) or ())
    if token is None or token.type == "$END":
        start = len(text)
        found = "end of file"
        span = Span(name, start, start)
    else:
        found = f"`{token.value}`"
        span = Span(name, token.start_pos, token.end_pos)
    # A keyword where no keyword is expected is read as a name (`_WholeWords`): here it is the keyword.
    kind = parser.fast.keywords.get(str(token.value), token.type) if token is not None and token.type == "NAME" \
        else (token.type if token is not None else "$END")
    if "RBRACE" in expected and (token is None or kind == "$END" or
                                 (kind in _BLOCK_KEYWORDS and _starts_line(text, token.start_pos))):
        opener = _unclosed_brace(text, span.start)
        if opener is not None:
            return diagnostic("syntax-error", span, f"expected `}}` to close the block, found {found}",
                              labels=[Label(Span(name, opener, opener + 1), "this `{` is never closed")],
                              help="add `}` where the block ends")
    if token is not None and "DURATION" in expected:
        spaced = _SPACED_DURATION.match(text, token.start_pos)
        if spaced is not None:  # `30 s`, `30 minutes`: a number, then a unit as a word of its own
            number, unit = spaced.group(1), spaced.group(2)
            short = _UNIT_WORDS.get(unit.lower().rstrip("s") if len(unit) > 2 else unit.lower())
            if short is None:  # `time <= 3 usd`: no unit of time at all
                return diagnostic("syntax-error", Span(name, token.start_pos, spaced.end()),
                                  f"`{spaced.group()}` is not a duration: `{unit}` is not a unit of time",
                                  help="a duration is a whole number and its unit, written together: `30s`, `5m`, "
                                       "`2h` or `1d`")
            return diagnostic("syntax-error", Span(name, token.start_pos, spaced.end()),
                              f"`{spaced.group()}` is not a duration: the number and its unit are written together",
                              help=f"write `{number}{short}`")
        compound = _COMPOUND_DURATION.match(text, token.start_pos)
        if compound is not None:
            written = compound.group()
            return diagnostic("syntax-error", Span(name, token.start_pos, compound.end()),
                              f"`{written}` is not a duration: a duration is one whole number and one unit",
                              help=f"write it in one unit, such as `{_in_one_unit(written)}`")
        other_unit = _OTHER_UNIT.match(text, token.start_pos)
        if other_unit is not None:  # `5y`, `3w`, `2weeks`: a unit plangate does not have
            return diagnostic("syntax-error", Span(name, token.start_pos, other_unit.end()),
                              f"`{other_unit.group()}` is not a duration: `{other_unit.group(1)}` is not a unit",
                              help="the units are `ms`, `s`, `m`, `h` and `d`: write it in one of them, "
                                   "such as `30d` for a month")
    if token is not None and token.type == "NAME":
        literal = _literal_in_expression(name, text, token)
        if literal is not None:
            return literal
    if token is not None and token.type == "QMARK" and expected == {"COLON"}:  # `args { thread?: string }`
        optional = _OPTIONAL_AFTER_NAME.match(text, token.start_pos)
        if optional is not None:
            before = text[:token.start_pos].rstrip()
            argument = re.search(r"[A-Za-z_][A-Za-z0-9_]*\Z", before)
            written = f"{argument.group() if argument else 'name'}: {optional.group(1)}?"
            return diagnostic("syntax-error", span, "an optional argument is marked after its type, not its name",
                              help=f"write `{written}`")
    if token is not None and token.type in ("STRING", "SQ_STRING"):
        prefixed = _prefixed_string(name, text, token)
        if prefixed is not None:
            return prefixed
        if token.type == "SQ_STRING" and "STRING" in expected:  # `objective 'x'`: only CEL takes single quotes
            return diagnostic("syntax-error", span, f"a string here is written in double quotes, found {found}",
                              help=f"write `{_double_quoted(str(token.value))}`; single quotes are for CEL expressions only")
    if token is not None and token.type == "MINUS" and "MINUS" not in expected:
        word = _WORD_BEFORE.search(text, max(0, token.start_pos - 200), token.start_pos)
        hyphenated = _HYPHENATED.match(text, word.start()) if word is not None else None
        if hyphenated is not None and hyphenated.end() > token.end_pos:
            written = hyphenated.group()  # `deploy-v2` where a name ends: a name with a hyphen in it
            return diagnostic("syntax-error", Span(name, hyphenated.start(), hyphenated.end()),
                              f"`{written}` is not a name: a name holds letters, digits and `_`, not `-`",
                              help=f"write `{written.replace('-', '_')}`")
    label = _match_example(parser, error)
    if label == "missing-close-brace" and kind not in _BLOCK_KEYWORDS:
        label = None  # a misspelt clause (`aproval by …`), not the start of the next block
    if label is not None:
        message, help_text = _EXAMPLE_MESSAGES[label]
        return diagnostic("syntax-error", span, f"{message}, found {found}", help=help_text)
    return diagnostic("syntax-error", span, f"unexpected {found}; expected {_expected_words(parser, expected)}",
                      help=_keyword_hint(parser, token, expected))


_WORD_BEFORE = re.compile(r"(?<![A-Za-z0-9_.])[A-Za-z_][A-Za-z0-9_]*\Z")  # searched up to a `-`
_HYPHENATED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)+")
_OPTIONAL_AFTER_NAME = re.compile(r"\?\s*:\s*([A-Za-z_][A-Za-z0-9_]*)")
_STRING_PREFIX = re.compile(r"(?<![A-Za-z0-9_])(?:[rRbB]|[rR][bB]|[bB][rR])\Z")


def _prefixed_string(name: str, text: str, token: Token) -> Diagnostic | None:
    """CEL's raw and bytes strings (`r"[0-9]+"`, `b"abc"`), which plangate's CEL does not take: the
    prefix lexes as a name and the string after it is the unexpected token."""
    prefix = _STRING_PREFIX.search(text, max(0, token.start_pos - 3), token.start_pos)
    if prefix is None:
        return None
    value = str(token.value)
    span = Span(name, prefix.start(), token.end_pos)
    if "b" in prefix.group().lower():
        return diagnostic("syntax-error", span, f"bytes literals such as `{prefix.group()}{value}` are not part of "
                          "plangate's CEL", help="pass the text as a string; a tool is given JSON, which has no bytes")
    plain = '"' + value[1:-1].replace("\\", "\\\\").replace('"', '\\"') + '"'
    return diagnostic("syntax-error", span, f"raw strings such as `{prefix.group()}{value}` are not part of plangate's CEL",
                      help=f"write it as a plain string, each backslash doubled: `{plain}`")


def _double_quoted(single_quoted: str) -> str:
    """A single-quoted string literal written in double quotes, its escapes kept (`\\'` needs none)."""
    parts = re.findall(r"\\.|[^\\]", single_quoted[1:-1], re.DOTALL)
    return '"' + "".join("'" if part == "\\'" else '\\"' if part == '"' else part for part in parts) + '"'


def _keyword_hint(parser: _Parser, token: Token | None, expected: set[str]) -> str | None:
    """For a word where a keyword was expected: the keyword glued to a name (`stepfetch` →
    `step fetch`), or the keyword it misspells (`expects` → `expect`)."""
    if token is None or token.type != "NAME":
        return None
    keywords = [parser.terminal_text[term] for term in expected
                if term in parser.terminal_text and parser.terminal_text[term][:1].isalpha()]
    word = str(token.value)
    if word in parser.fast.keywords:  # a keyword out of place: its own message says more than a near word
        return None
    near = closest(word, keywords)
    if near is not None and abs(len(word) - len(near)) <= 2:  # a letter or two off: `expects`, `cal`
        return f"did you mean `{near}`?"
    for keyword in sorted(keywords, key=len, reverse=True):
        rest = word[len(keyword):]
        if word.startswith(keyword) and len(rest) > 1 and (rest[0].isalpha() or rest[0] == "_"):
            return f"did you mean `{keyword} {rest}`? a keyword is a word of its own"
    return f"did you mean `{near}`?" if near is not None else None


def _literal_in_expression(name: str, text: str, token: Token) -> Diagnostic | None:
    """A duration (`30s`) or an amount (`2.50 usd`) written where an expression goes, as in
    `call t.x(timeout: 30s)`: the plan's literals are not CEL; or where a call budget's whole
    number goes (`calls <= 3 usd`: `invalid-value`, as for a limit). The number before the name
    gives it away; a name followed by `<=` is a misspelt clause (`tme <= 30m`), and it and anything
    else are left to the general message."""
    before = _NUMBER_BEFORE.search(text, max(0, token.start_pos - 64), token.start_pos)
    if before is None:
        return None
    number = before.group(1)
    start = before.start(1)
    if _CALL_BUDGET.search(text, max(0, start - 64), start) and not _BOUND_AFTER.match(text, token.end_pos):
        written = number + text[before.end(1):token.start_pos] + token.value  # `3 usd`, `5m`, `3u` as written
        return diagnostic("invalid-value", Span(name, start, token.end_pos),
                          f"a call budget takes a whole number, not `{written}`",
                          help="count the calls: `calls <= 20`")
    if before.end(1) == token.start_pos and token.value in DURATION_UNITS and "." not in number:
        written = number + token.value
        return diagnostic("syntax-error", Span(name, start, token.end_pos),
                          f"`{written}` is a duration, which an expression writes as `duration(\"{written}\")`",
                          help=f'write `duration("{written}")`; durations without it are for `time` and `within`')
    if before.end(1) < token.start_pos and re.fullmatch(r"[A-Za-z]{3}", token.value) \
            and not _ARGUMENT_NAME_AFTER.match(text, token.end_pos) and not _BOUND_AFTER.match(text, token.end_pos):
        return diagnostic("syntax-error", Span(name, start, token.end_pos),
                          f"`{number} {token.value}` is an amount, which an expression writes as a number",
                          help=f"write `{number}` (and the currency as its own argument if the tool needs it); "
                               f"amounts with a currency are for `cost` and `budget`")
    return None


def _in_one_unit(written: str) -> str:
    """`1h30m` → `90m`; `1.5h` → `90m`; otherwise a plain example."""
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)", written)
    if not parts or "".join(number + unit for number, unit in parts) != written:
        return "90m"
    seconds = sum(float(number) * DURATION_UNITS[unit] for number, unit in parts)
    for unit in ("d", "h", "m", "s"):
        if seconds >= DURATION_UNITS[unit] and (seconds / DURATION_UNITS[unit]).is_integer():
            return f"{int(seconds / DURATION_UNITS[unit])}{unit}"
    return f"{max(1, round(seconds * 1000))}ms"


def _starts_line(text: str, offset: int) -> bool:
    line_start = _line_start(text, offset)
    return text[line_start:offset].strip() == ""


def _unclosed_brace(text: str, offset: int) -> int | None:
    """The offset of the innermost `{` still open at `offset` (strings and comments skipped)."""
    open_braces: list[int] = []
    for match in _BRACES.finditer(text, 0, offset):
        lexeme = match.group()
        if lexeme == "{":
            open_braces.append(match.start())
        elif lexeme == "}" and open_braces:
            open_braces.pop()
    return open_braces[-1] if open_braces else None


def _describe_character(parser: _Parser, name: str, text: str, error: UnexpectedCharacters) -> Diagnostic:
    offset = error.pos_in_stream
    char = text[offset] if offset < len(text) else ""
    if char in "\"'":
        line_end = _LINE_END.search(text, offset).start()  # type: ignore[union-attr]
        return diagnostic("syntax-error", Span(name, offset, line_end), "unterminated string",
                          help=f"close the string with `{char}` on the same line")
    span = Span(name, offset, offset + 1)
    if char == "=" and not text.startswith("==", offset):
        expected = {parser.terminal_text.get(terminal)
                    for terminal in (getattr(error, "allowed", None) or getattr(error, "expected", None) or ())}
        in_expression = "==" in expected  # where a comparison could go on, `=` was meant as `==`
        after_argument_name = _ARGUMENT_NAME_BEFORE.search(text, max(0, offset - 200), offset) is not None
        if "<=" in expected and not in_expression:  # `budget { cost = 5 usd }`, `limit retries = 3`
            return diagnostic("syntax-error", span, "expected `<=` here, found `=`",
                              help="a bound is written `<=`: `cost <= 40 usd`, `limit retries <= 3`")
        if ":" in expected and not in_expression and not after_argument_name:
            return diagnostic("syntax-error", span, "expected `:` here, found `=`",
                              help="an argument's type is written `name: type` (`args { host: string }`)")
        if after_argument_name:
            return diagnostic("syntax-error", span, "expected `:` between an argument's name and its value, found `=`",
                              help="write arguments as `name: value`; compare with `==`")
        return diagnostic("syntax-error", span, "unexpected `=`; compare with `==`",
                          help="CEL has no assignment; `==` compares two values")
    shown = char if char.isprintable() and not char.isspace() else f"U+{ord(char):04X}"  # an invisible one by its code
    expected = _expected_words(parser, set(error.allowed or ()))
    money = _CURRENCY_SIGN.match(text, offset)
    hint = f"write an amount as a number and a currency code: `{money.group(1)} usd`" if money else None
    return diagnostic("syntax-error", span, f"unexpected character `{shown}`; expected {expected}", help=hint)


def _match_example(parser: _Parser, error: UnexpectedInput) -> str | None:
    if not isinstance(error, UnexpectedToken):
        return None
    saved_file = parser.lowering.file

    def parse(example: str) -> object:
        parser.lowering.begin(saved_file)
        parser.nesting.depth = 0
        return parser.lark.parse(example, start="start")

    try:
        return error.match_examples(parse, _EXAMPLES, use_accepts=True)
    except Exception:  # labelling is a nicety; a failure here must not hide the error itself
        return None


def _expected_words(parser: _Parser, expected: set[str]) -> str:
    keywords = []
    punctuation = []
    words = []
    for term in expected:
        literal = parser.terminal_text.get(term)
        if literal is not None:
            (keywords if literal[:1].isalpha() or literal[:1] == "_" else punctuation).append(literal)
        elif term in _WORDS:
            words.append(_WORDS[term])
    if {"NUMBER", "STRING", "NAME"} <= expected and "LPAR" in expected:
        words = ["an expression"]
        keywords = [k for k in keywords if k not in ("true", "false", "null")]
        punctuation = [p for p in punctuation if p not in ("(", "[", "{", "!", "-")]
    words = sorted(set(words))
    ordered = sorted(set(keywords), key=lambda k: (_CLAUSE_ORDER.index(k) if k in _CLAUSE_ORDER else 99, k))
    parts: list[str] = []
    if len(ordered) > 3:
        parts.append("a clause such as " + backticked(ordered[:3]) + "…")
    else:
        parts.extend(f"`{k}`" for k in ordered)
    parts.extend(words)
    parts.extend(f"`{p}`" for p in sorted(set(punctuation)))
    if not parts:
        return "something else"
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]

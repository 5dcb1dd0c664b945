"""The fast LALR driver is Lark's parse, or it steps aside.

`plangate.syntax.lalr.LalrDriver` runs Lark's own tables and callbacks with a leaner loop and lexer.
Its invariant: for every text it returns `GIVE_UP` or exactly the value `Lark.parse` returns, spans
included, with the same diagnostics from the lowering. These tests hold it to that on every file in
the repository (where it must not give up), on the lexical corners where a contextual lexer splits
text differently from a global one, and on hypothesis-generated token soup and mutations.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from plangate.syntax.lalr import GIVE_UP
from plangate.syntax.parser import _parser
from plangate.source import SourceFile
from plangate.syntax import parse_source

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    path for pattern in ("examples/*.plan", "policies/*.policy", "tests/golden/*.plan", "tests/golden/*.policy",
                         "tests/twins/*.plan", "tests/twins/*.policy", "tests/data/**/*.plan", "tests/data/**/*.policy")
    for path in ROOT.glob(pattern)
)


def full_form(value):
    """Everything about a parsed value, spans included (IR equality leaves spans out on purpose)."""
    if isinstance(value, BaseModel):
        return (type(value).__name__, tuple((key, full_form(item)) for key, item in value.__dict__.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((field.name, full_form(getattr(value, field.name)))
                                            for field in dataclasses.fields(value)))
    if isinstance(value, (list, tuple)):
        return tuple(full_form(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, full_form(item)) for key, item in value.items())
    return (type(value).__name__, value)


def both_ways(text: str, start: str = "start"):
    """(fast result, Lark result) as full forms with the lowering's diagnostics; errors as `error`."""
    parser = _parser()
    with parser.lock:
        parser.lowering.begin("f")
        parser.nesting.depth = parser.nesting.unary_run = 0
        try:
            fast = parser.fast.parse(text, start)
            fast = fast if fast is GIVE_UP else (full_form(fast), full_form(parser.lowering.diagnostics))
        except Exception as error:  # the lowering's own bounds raise through both paths alike
            fast = ("raised", type(error).__name__)
        parser.lowering.begin("f")
        parser.nesting.depth = parser.nesting.unary_run = 0
        try:
            slow = parser.lark.parse(text, start=start)
            slow = (full_form(slow), full_form(parser.lowering.diagnostics))
        except Exception as error:
            slow = ("raised", type(error).__name__)
    return fast, slow


# Files whose text the fast path leaves to Lark on purpose, and why.
FALLS_BACK = {
    "tests/golden/invalid-value-budget.plan": "`30m` where only a number fits: Lark's contextual lexer reads "
                                              "`30` and `m`, the fast path's one regex a duration, and gives up",
}


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_file_in_the_repository_parses_on_the_fast_path_exactly_as_lark_parses_it(path):
    fast, slow = both_ways(path.read_text(encoding="utf-8", errors="replace"))
    if slow[0] == "raised" or str(path.relative_to(ROOT)) in FALLS_BACK:
        assert fast is GIVE_UP or fast == slow
    else:
        assert fast is not GIVE_UP
        assert fast == slow


def test_the_corpus_is_not_empty():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("text", [
    # keywords written where only a name fits: the contextual lexer reads them as names
    'plan p { step s { call t.x(a: call.tool, b: step.risk, c: args.time) expect result.cost > 0 } }',
    'policy q { deny "d" when call.tool == "x" && args.limit > step.retry }',
    # a duration where one fits
    'policy q { limit time <= 30m limit cost <= 5 usd }',
    # `..`, `.` and `.*` next to numbers and patterns
    'plan p { step s { call t.x(a: 1.5) cost 0.01..0.05 usd } }',
    'policy q { tool a.* { risk read_only } tool "b.c" { } tool * { } }',
    # `!=` against `!`, `<=` against `<`, comments that hold code, CRLF, tabs, a byte-order mark
    'plan p { step s { call t.x(a: !(1 != 2), b: 1 <= 2 && 3 < 4) } }',
    'plan p { # step hidden { call x.y() }\n step s { call t.x() } } # trailing "comment"',
    '\ufeffplan p {\r\n\tstep s {\r\n\t\tcall t.x()\r\n\t}\r\n}\r\n',
    'plan p { step s { call t.x() } }   \n\n# only a comment after the end',
    # literals of every kind, and true/false/null in unary runs
    "plan p { step s { call t.x(a: 0x1F, b: 7u, c: 1e3, d: 'q', e: [1, 2,], f: {\"k\": null}, g: !!true) } }",
    # the two entry points
    "1 + 2 * x.y[0]",
])
def test_lexical_corners_agree(text):
    start = "expression" if not text.lstrip("\ufeff").startswith(("plan", "policy")) else "start"
    fast, slow = both_ways(text, start)
    assert fast is not GIVE_UP
    assert fast == slow


def test_where_the_contextual_lexer_splits_a_token_the_fast_path_steps_aside_and_lark_parses():
    # `5d` is a duration for the global lexer; after `cost` only a number fits, so Lark reads `5` `d`
    text = 'plan p { step s { call t.x() cost 5d time 5d } }'
    fast, slow = both_ways(text)
    assert fast is GIVE_UP and slow[0] != "raised"
    parsed = parse_source(SourceFile("a.plan", text))  # and the lowering says `5d` is no amount
    assert parsed.document.plans[0].steps[0].cost.low.currency is None
    assert [d.name for d in parsed.diagnostics] == ["invalid-value"]


@pytest.mark.parametrize("text", [
    "plan p { step s { call t.x( } }",                # a syntax error
    "plan p { step s { call t.x() } } $",             # a character no terminal matches
    "plan p " + "{" * 80 + "}" * 80,                  # nesting past the bound
    "plan p { step s { expect " + "!" * 80 + "x } }",  # a run of unary operators past the bound
    "plan p { step s { call t.x() }",                 # end of file inside a block
    "plan p { # an unterminated comment is fine, an unterminated string is not\n step s { call t.x(a: \"x) } }",
])
def test_the_fast_path_steps_aside_where_lark_reports_an_error(text):
    fast, slow = both_ways(text)
    assert slow[0] == "raised"
    assert fast is GIVE_UP


@pytest.mark.parametrize("text, message, hint", [
    ("plan p {\n  stepfetch { call t.x() }\n}", "unexpected `stepfetch`", "did you mean `step fetch`? a keyword is a word of its own"),
    ("plan p { step s { callt.x() } }", "unexpected `callt`", "did you mean `call`?"),
    ("plan p { step s { call t.x() riskread_only } }", "unexpected `riskread_only`",
     "did you mean `risk read_only`? a keyword is a word of its own"),
    ("plan p { step s { call t.x() expects result.ok } }", "unexpected `expects`", "did you mean `expect`?"),
    ("plan p {\n  stpe s { call t.x() }\n}", "unexpected `stpe`", "did you mean `step`?"),
])
def test_a_keyword_is_a_whole_word_and_a_near_miss_gets_a_hint(text, message, hint):
    """§2: identifiers are `[A-Za-z_][A-Za-z0-9_]*`, so `stepfetch` is one word, never `step fetch`
    (Lark's contextual lexer would split it where only keywords fit, but for `_WholeWords`)."""
    fast, slow = both_ways(text)
    assert fast is GIVE_UP and slow[0] == "raised"
    (error,) = parse_source(SourceFile("a.plan", text)).diagnostics
    assert error.name == "syntax-error" and error.message.startswith(message) and error.help == hint


@pytest.mark.parametrize("text, message, hint", [
    ("plan p { step a { call t.x() time 30 s } }", "`30 s` is not a duration: the number and its unit are written together",
     "write `30s`"),
    ('plan p { step a { call t.x() approval by role "op" within 30 minutes } }',
     "`30 minutes` is not a duration: the number and its unit are written together", "write `30m`"),
    ("plan p { step a { call t.x() cost $5 } }", "unexpected character `$`; expected a name or a number",
     "write an amount as a number and a currency code: `5 usd`"),
    ("plan p { step a { call t.x() time 5y } }", "`5y` is not a duration: `y` is not a unit",
     "the units are `ms`, `s`, `m`, `h` and `d`: write it in one of them, such as `30d` for a month"),
    ('plan p { step a { call t.x() approval by role "o" within 2weeks } }', "`2weeks` is not a duration: `weeks` is not a unit",
     "the units are `ms`, `s`, `m`, `h` and `d`: write it in one of them, such as `30d` for a month"),
    ("plan p { budget { cost = 5 usd } }", "expected `<=` here, found `=`",
     "a bound is written `<=`: `cost <= 40 usd`, `limit retries <= 3`"),
    ("policy q { limit retries = 3 }", "expected `<=` here, found `=`",
     "a bound is written `<=`: `cost <= 40 usd`, `limit retries <= 3`"),
    ("policy q { tool x.y { args { v = string } } }", "expected `:` here, found `=`",
     "an argument's type is written `name: type` (`args { host: string }`)"),
    ("plan p { step a { call t.x() expect result = 1 } }", "unexpected `=`; compare with `==`",
     "CEL has no assignment; `==` compares two values"),
    ('plan p { step a { call t.x() approval by "ops" } }', 'expected `role` before the role\'s name, found `"ops"`',
     'write `by role "operator"` (or `by 2 of role "operator"`)'),
    ("plan p { step a after b c { call t.x() } }", "expected `,` between two steps of `after`, found `c`",
     "separate the steps with commas: `after build, test`"),
    *((f"plan p {{ step a {{ call t.x({arguments}) }} }}", "expected `,` between two arguments, found `c`",
       "separate arguments with commas: `f(a: 1, b: 2)`")
      for arguments in ("a: 1, b: 1 c: 2", "a: [1, 2] c: 2", "a: true c: 2", "a: f(1) c: 2", "a: g.result.v c: 2")),
    ("plan p { step a { call t.x() rollback t.y(a: 1 c: 2) } }", "expected `,` between two arguments, found `c`",
     "separate arguments with commas: `f(a: 1, b: 2)`"),
    ('plan p { step a { call t.x() expect result.s.matches(r"^\\d+$") } }',
     'raw strings such as `r"^\\d+$"` are not part of plangate\'s CEL',
     'write it as a plain string, each backslash doubled: `"^\\\\d+$"`'),
    ("plan p { step a { call t.x(v: R'a\\\"b') } }", "raw strings such as `R'a\\\"b'` are not part of plangate's CEL",
     'write it as a plain string, each backslash doubled: `"a\\\\\\"b"`'),
    ("policy q { tool c.post { args { channel: string, thread ?: string } } }",
     "an optional argument is marked after its type, not its name", "write `thread: string?`"),
    ('plan p { step a { call t.x(v: b"x") } }', 'bytes literals such as `b"x"` are not part of plangate\'s CEL',
     "pass the text as a string; a tool is given JSON, which has no bytes"),
    ("plan p { objective 'it\\'s \"so\"' }", "a string here is written in double quotes, found `'it\\'s \"so\"'`",
     'write `"it\'s \\"so\\""`; single quotes are for CEL expressions only'),
])
def test_a_duration_or_an_amount_written_the_usual_way_gets_the_plangate_way(text, message, hint):
    (error,) = parse_source(SourceFile("a.plan", text)).diagnostics
    assert (error.message, error.help) == (message, hint)


def test_a_parse_through_the_front_door_takes_the_fast_path(monkeypatch):
    parser = _parser()
    calls = []
    monkeypatch.setattr(parser.lark, "parse", lambda *args, **kwargs: calls.append(args))
    result = parse_source(SourceFile("a.plan", "plan p { step s { call t.x() } }"))
    assert result.document is not None and not result.diagnostics
    assert calls == []


_WORDS = ["plan", "policy", "step", "check", "call", "risk", "after", "cost", "time", "retry", "expect",
          "idempotency", "rollback", "approval", "by", "role", "within", "of", "when", "tool", "require", "deny",
          "warn", "limit", "test", "args", "budget", "calls", "true", "false", "null", "in", "result", "x", "s1",
          "t.x", "usd", "read_only", "{", "}", "(", ")", "[", "]", ",", ":", ".", "..", ".*", "*", "!", "-", "+",
          "==", "!=", "<=", ">=", "<", ">", "&&", "||", "?", "1", "2.5", "30s", "5d", "7u", "0x1f", '"s"', "'q'",
          "# c\n", "\n", " ", "\t"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_WORDS), max_size=60))
def test_token_soup_parses_the_same_or_steps_aside(words):
    text = " ".join(words)
    fast, slow = both_ways(text)
    assert fast is GIVE_UP or fast == slow
    if slow[0] == "raised" and slow[1] != "ExpressionTooDeep":
        assert fast is GIVE_UP


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_files_parse_the_same_or_step_aside(data):
    text = data.draw(st.sampled_from(SOURCES)).read_text(encoding="utf-8", errors="replace")
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    inserted = data.draw(st.sampled_from(["", " ", "\n", "call", "x", "5d", ".", "..", "!", "#", '"', "}", "{", ","]))
    mutated = text[:start] + inserted + text[end:]
    fast, slow = both_ways(mutated)
    assert fast is GIVE_UP or fast == slow
    if slow[0] == "raised" and slow[1] != "ExpressionTooDeep":
        assert fast is GIVE_UP


@pytest.mark.parametrize("path", [path for path in SOURCES if path.parts[-2] in ("examples", "policies")],
                         ids=lambda path: path.name)
def test_the_same_text_elsewhere_in_a_file_is_the_same_ir(path):
    """Spans take no part in equality or hashing: moving every token changes no node."""
    text = path.read_text(encoding="utf-8")
    here = parse_source(SourceFile("a", text)).document
    there = parse_source(SourceFile("a", "\n\n   # moved\n" + text.replace("\n", "\n  "))).document
    assert full_form(here) != full_form(there)  # the spans differ…
    assert here == there and hash(here) == hash(there)  # …and nothing else does


@pytest.mark.parametrize("text, count", [
    ("plan p { step a { call x.y(a: 1 b: 2) } step b { call x.y(c: 1 d: 2) } step c { call x.y(e: 1 f: 2) } }", 3),
    ("plan p {\n  step a { call x.y(a: 1 b: 2) }   step b { call x.y(c: 1 d: 2) }\n}", 2),
    ('policy q { tool a { risk read_only } tool b { cost <= } deny "d" when ( }', 2),
])
def test_broken_items_on_one_line_are_each_reported(text, count):
    """A whole step may stand on one line (§2), so recovery finds items after braces too."""
    found = parse_source(SourceFile("a.plan", text)).diagnostics
    assert [d.name for d in found] == ["syntax-error"] * count, [d.message for d in found]


@pytest.mark.parametrize("text, columns", [
    ("plan p { budget { calls <= } step a { call t.r() } }", [28]),
    ("plan p { budget { time <= 3u } step a { call t.r() } }", [27]),
    ("plan p { budget { calls <= 20\n tme <= 30m } step a { call t.r() } }", [32]),
    ('plan p { scope "a", step a { call t.r() } step b { call t.r() } }', [21]),
    ('plan p { version 1 objective step a { call t.r() } step b { call t.r( } }', [30, 71]),
    ('plan p { version 1 budget { calls <= } decision "d" pending step a { call t.r( } }', [38, 80]),
    # words of a clause are no items: `require check`, `unknown_tools deny`, `step.risk`, `(… check …)`
    ('policy z { require check when step.risk >= reversible_write unknown_tools deny '
     'deny "d" when args.x in (1, ) require approval when (step.id == "check") by role "o" tool x.y { cost <= } }',
     [106, 184]),
    # item keywords as names: a step id, an `after` target, a key of `step`
    ("plan p {\n step build { call t.r() }\n step test after build { call t.r( }\n step c after build { call t.r() }\n}",
     [72]),
    ("plan p { step version { call t.r( } step b { call t.r() } }", [35]),
    ("plan p { step a after b, test { call t.r( } step c { call t.r() } }", [43]),
    ('policy q { deny "d" when step["risk"] == 1 && args.n == 2 || warn "w" when true }', [67]),
])
def test_one_broken_clause_on_a_line_is_one_error(text, columns):
    """Every item keyword standing in a plan or policy starts an item, wherever its line begins: an
    error in one blanks that item alone, so nothing after it is reported falsely."""
    found = parse_source(SourceFile("a.plan", text)).diagnostics
    assert [(d.name, d.span.start + 1) for d in found] == [("syntax-error", column) for column in columns], \
        [d.message for d in found]


def test_the_grammar_cache_is_kept_only_where_no_one_else_can_write(tmp_path, monkeypatch):
    """Lark's cache is a pickle: a folder others can write to (or a link to one) is never used,
    and a cache file others could have written is removed before Lark reads it."""
    import os
    import stat
    import tempfile

    from plangate.syntax import parser

    home, temporary = tmp_path / "cache", tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(temporary))
    path = parser._cache_path("grammar")
    assert path is not None and path.startswith(str(home / "plangate") + os.sep)
    assert stat.S_IMODE(os.stat(home / "plangate").st_mode) & 0o077 == 0  # made 0700

    open(path, "w").write("planted")
    os.chmod(path, 0o666)  # others could have written it
    assert parser._cache_path("grammar") == path and not os.path.exists(path)

    os.chmod(home / "plangate", 0o777)  # a folder others may write to: the private one in tmp instead
    fallback = parser._cache_path("grammar")
    assert fallback is not None and fallback.startswith(str(temporary / f"plangate-{os.getuid()}") + os.sep)

    os.chmod(temporary / f"plangate-{os.getuid()}", 0o733)
    assert parser._cache_path("grammar") is None

    linked = tmp_path / "linked"
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    linked.mkdir()
    os.symlink(tmp_path / "elsewhere", linked / "plangate")  # a link to a folder: not used
    monkeypatch.setenv("XDG_CACHE_HOME", str(linked))
    assert parser._cache_path("grammar") is None


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_string_ends_at_a_lone_carriage_return_as_at_a_newline(quote):
    """A lone CR ends a line for positions (old Mac files), so a string may not run across one."""
    text = f"plan p {{\r  step a {{ call t.x(v: {quote}a\rb{quote}) }}\r}}\r"
    [found] = parse_source(SourceFile("a.plan", text)).diagnostics
    assert (found.name, found.message, found.span.start) == ("syntax-error", "unterminated string", text.index(quote))


@pytest.mark.parametrize("written", ["3 usd", "3u", "5m", "2.5 x"])
def test_a_call_budget_of_another_kind_says_what_it_takes(written):
    text = f"plan p {{ budget {{ calls <= {written} }} step a {{ call t.r() }} }}"
    [found] = parse_source(SourceFile("a.plan", text)).diagnostics
    assert (found.name, found.message) == ("invalid-value", f"a call budget takes a whole number, not `{written}`")


@pytest.mark.parametrize("text, expected", [
    # the header's name does not parse: mended in place, the body read in its plan (the `{` on the
    # header's line or the next)
    ("plan deploy-v2 {\n  step a { call t.x() risk bogus }\n}\n", ["syntax-error", "unknown-risk"]),
    ("plan deploy-v2\n{\n  step a { call t.x() risk bogus }\n}\n", ["syntax-error", "unknown-risk"]),
    ("policy base-line {\n  tool t.x { risk bogus }\n}\n", ["syntax-error", "unknown-risk"]),
    # a stray character after the `{` on the header's line: the rest of that line is skipped
    ("plan p { ;\n  step a { call t.x() risk bogus }\n}\n", ["syntax-error", "unknown-risk"]),
])
def test_an_error_in_a_header_leaves_the_body_read_in_its_plan(text, expected):
    assert [d.name for d in parse_source(SourceFile("a.plan", text)).diagnostics] == expected


def test_a_misspelt_clause_after_a_budget_figure_on_one_line_is_named_as_a_clause():
    text = "plan p { budget { calls <= 20 tme <= 30m } step a { call t.r() } }"
    [found] = parse_source(SourceFile("a.plan", text)).diagnostics
    assert (found.message, found.help) == ("unexpected `tme`; expected `cost`, `time`, `calls` or `}`", "did you mean `time`?")

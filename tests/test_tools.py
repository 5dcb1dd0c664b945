"""Tools: the decorator, reconcile hooks, loading from files and modules, argument binding, and
calls whose exceptions and non-JSON results become failed outcomes."""

from __future__ import annotations

import enum
import os
import sys
import textwrap
import typing
from decimal import Decimal
from typing import Any, Optional

import pytest

from plangate import tool as public_tool
from plangate.runtime.tools import (
    Outcome,
    Tool,
    ToolRegistry,
    bind,
    invoke,
    invoke_reconcile,
    tool,
)

TOOLS_FILE = '''
from dataclasses import dataclass
from plangate import tool

@dataclass
class Preview:  # dataclasses need the module in sys.modules while it runs
    id: str

@tool("deploy.preview")
def preview(artifact: str, idempotency_key: str) -> dict:
    return {"id": "pv-" + artifact, "key": idempotency_key}

@preview.reconcile
def preview_reconcile(idempotency_key: str) -> dict | None:
    return {"id": "pv-found"} if idempotency_key == "seen" else None

@tool("http.get")
def get(url: str, timeout: float = 5.0) -> dict:
    return {"status": 200, "url": url}

def not_a_tool():
    pass
'''


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# --- the decorator --------------------------------------------------------------------------------


def test_the_decorator_makes_a_callable_tool_with_a_reconcile_hook():
    @tool("deploy.preview")
    def preview(artifact: str, idempotency_key: str) -> dict:
        """Make a preview."""
        return {"id": "pv-" + artifact}

    @preview.reconcile
    def preview_reconcile(idempotency_key: str) -> dict | None:
        return None

    assert isinstance(preview, Tool) and preview.name == "deploy.preview"
    assert preview(artifact="a", idempotency_key="k") == {"id": "pv-a"}
    assert preview.__doc__ == "Make a preview." and preview.__name__ == "preview"
    assert preview.reconcile_hook is preview_reconcile and callable(preview_reconcile)
    assert preview.takes_idempotency_key and not preview.takes_any_keyword
    assert public_tool is tool


def test_the_decorator_refuses_tools_that_could_never_be_called():
    with pytest.raises(TypeError, match=r'@tool\("name.of.tool"\)'):
        tool(lambda: None)  # type: ignore[arg-type]  # @tool written without its name
    with pytest.raises(ValueError, match="not a tool name"):
        tool("deploy preview")
    with pytest.raises(TypeError, match="positional-only"):
        tool("t")(lambda x, /: x)

    @tool("t")
    def with_hook(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="must take an `idempotency_key`"):
        with_hook.reconcile(lambda key: None)
    with_hook.reconcile(lambda **anything: None)
    with pytest.raises(TypeError, match="already has a reconcile hook"):
        with_hook.reconcile(lambda idempotency_key: None)


def test_type_hints_that_do_not_resolve_fail_when_the_tool_is_defined(tmp_path):
    path = write(tmp_path, "unresolved.py", """
        from __future__ import annotations
        from plangate import tool

        @tool("t")
        def t(x: Missing) -> dict:
            return {}
    """)
    [problem] = ToolRegistry().load(str(path))
    assert "unresolved.py, line" in problem and "cannot read the signature of t" in problem
    assert "Missing" in problem


# --- loading --------------------------------------------------------------------------------------


def test_loading_a_file_registers_every_tool_in_it(tmp_path):
    registry = ToolRegistry()
    assert registry.load(str(write(tmp_path, "my tools.py", TOOLS_FILE))) == []
    assert registry.names() == ["deploy.preview", "http.get"]
    assert registry.get("deploy.preview").reconcile_hook is not None
    assert registry.get("nope") is None


def test_loading_two_files_of_one_name_keeps_both(tmp_path):
    first = write(tmp_path, "tools.py", TOOLS_FILE)
    (tmp_path / "other").mkdir()
    second = write(tmp_path / "other", "tools.py", """
        from plangate import tool

        @tool("chat.post")
        def post(channel: str, text: str) -> dict:
            return {}
    """)
    registry = ToolRegistry()
    assert registry.load(str(first)) == [] and registry.load(str(second)) == []
    assert registry.names() == ["chat.post", "deploy.preview", "http.get"]


def test_loading_an_importable_module(tmp_path, monkeypatch):
    write(tmp_path, "plangate_test_tools_module.py", TOOLS_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = ToolRegistry()
    assert registry.load("plangate_test_tools_module") == []
    assert registry.names() == ["deploy.preview", "http.get"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("def broken(:\n    pass\n", "syntax error in {path}, line 1"),
        ("import plangate_no_such_dependency\n",
         "loading tools from {path} failed (bad.py, line 1): ModuleNotFoundError: "
         "No module named 'plangate_no_such_dependency'"),
        ("x = 1\nraise RuntimeError('no credentials')\n",
         "loading tools from {path} failed (bad.py, line 2): RuntimeError: no credentials"),
        ("x = 1\n", "{path} defines no tools"),
        ("from plangate import tool\n@tool('t.x')\ndef x(n: 'int['):\n    return {}\n",  # raised, not parsed: no line
         "loading tools from {path} failed (bad.py, line 2): SyntaxError: Forward reference must be an expression"),
    ],
)
def test_loading_problems_are_sentences_not_tracebacks(tmp_path, text, expected):
    path = tmp_path / "bad.py"
    path.write_text(text)
    [problem] = ToolRegistry().load(str(path))
    assert problem.startswith(expected.format(path=path))


def test_a_missing_file_or_module_is_named(tmp_path):
    missing = tmp_path / "absent.py"
    assert ToolRegistry().load(str(missing)) == [f"there is no tools file at {missing}"]
    [problem] = ToolRegistry().load("plangate_no_such_module.tools")
    assert problem.startswith("there is no module named plangate_no_such_module.tools")


def test_an_import_error_inside_a_module_is_not_taken_for_a_missing_module(tmp_path, monkeypatch):
    write(tmp_path, "plangate_test_inner_import.py", "import plangate_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    [problem] = ToolRegistry().load("plangate_test_inner_import")
    assert problem.startswith("loading tools from plangate_test_inner_import failed")
    assert "plangate_no_such_dependency" in problem


def test_two_different_tools_with_one_name_are_refused(tmp_path):
    path = write(tmp_path, "twice.py", """
        from plangate import tool

        @tool("same.name")
        def first() -> int:
            return 1

        @tool("same.name")
        def second() -> int:
            return 2

        alias = second
    """)
    registry = ToolRegistry()
    [problem] = registry.load(str(path))
    assert problem.startswith("two tools are named same.name: first in")
    assert registry.names() == []  # none of a file with a problem: a caller never holds half of it
    [again] = registry.load(str(path))  # and it is not taken as loaded
    assert again.startswith("two tools are named same.name: first in")


def test_a_blank_or_relative_tools_name_is_a_sentence_about_what_to_give():
    assert ToolRegistry().load("") == ["no tools were named: give the path of a .py file or the name of a module"]
    [problem] = ToolRegistry().load(".tools")
    assert problem.startswith("`.tools` is no file, nor a module name (dotted identifiers")


# --- binding --------------------------------------------------------------------------------------


@tool("payments.refund")
def refund(
    amount: float,
    currency: str,
    count: int = 1,
    note: Optional[str] = None,
    tags: list[str] | None = None,
    meta: dict[str, Any] | None = None,
    urgent: bool = False,
    idempotency_key: str = "",
) -> dict:
    return {"refunded": amount, "key": idempotency_key}


@tool("free.form")
def free_form(target: str, **extra: Any) -> dict:
    return {"target": target, **extra}


def test_binding_a_good_call_passes_the_idempotency_key():
    kwargs, errors = bind(refund, {"amount": 12, "currency": "EUR", "tags": ["a"]}, "key-1")
    assert errors == []
    assert kwargs == {"amount": 12, "currency": "EUR", "tags": ["a"], "idempotency_key": "key-1"}
    assert invoke(refund, kwargs) == Outcome(True, result={"refunded": 12, "key": "key-1"})


def test_the_idempotency_key_goes_only_to_tools_that_declare_it():
    kwargs, errors = bind(free_form, {"target": "x", "anything": [1]}, "key-1")
    assert errors == [] and kwargs == {"target": "x", "anything": [1]}


@pytest.mark.parametrize(
    "args, error",
    [
        ({"currency": "EUR"}, "payments.refund needs the argument `amount`"),
        ({"amount": 1.0, "currency": "EUR", "reason": "x"},
         "payments.refund has no argument `reason` (it takes: amount, currency, count, note, "
         "tags, meta, urgent)"),
        ({"amount": "12", "currency": "EUR"},
         "argument `amount` of payments.refund must be float, not str '12'"),
        ({"amount": True, "currency": "EUR"},
         "argument `amount` of payments.refund must be float, not bool True"),
        ({"amount": 1.0, "currency": "EUR", "count": 2.0},
         "argument `count` of payments.refund must be int, not float 2.0"),
        ({"amount": 1.0, "currency": "EUR", "note": 3},
         "argument `note` of payments.refund must be str | None, not int 3"),
        ({"amount": 1.0, "currency": "EUR", "tags": ["a", 1]},
         "argument `tags` of payments.refund must be list[str] | None, not list ['a', 1]"),
        ({"amount": 1.0, "currency": "EUR", "meta": []},
         "argument `meta` of payments.refund must be dict[str, Any] | None, not list []"),
        ({"amount": 1.0, "currency": "EUR", "urgent": 1},
         "argument `urgent` of payments.refund must be bool, not int 1"),
        ({"amount": 1.0, "currency": "EUR", "idempotency_key": "mine"},
         "payments.refund: `idempotency_key` is given by the runtime, not by the plan's arguments"),
    ],
)
def test_binding_errors(args, error):
    _, errors = bind(refund, args, "key-1")
    assert errors == [error]


def test_binding_accepts_none_for_optional_arguments_and_any_value_where_unhinted():
    @tool("loose")
    def loose(anything, maybe: int | None) -> None:
        return None

    assert bind(loose, {"anything": {"deep": [1]}, "maybe": None}, "k")[1] == []
    assert bind(refund, {"amount": 1.5, "currency": "EUR", "note": None}, "k")[1] == []


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Window(typing.TypedDict, total=False):
    start: int
    label: str


class Span(typing.TypedDict):
    start: int


Cents = typing.NewType("Cents", int)


@tool("typed")
def typed(mode: typing.Literal["a", "b"], colour: Colour, cents: Cents, window: Window, span: Span,
          pair: tuple[int, str], many: tuple[int, ...], names: typing.Sequence[str],
          tags: typing.Mapping[str, int], by_code: dict[typing.Literal["a", "b"], int]) -> None:
    return None


TYPED_OK = {"mode": "a", "colour": "blue", "cents": 5, "window": {"label": "x"}, "span": {"start": 1},
            "pair": [1, "x"], "many": [1, 2, 3], "names": ["a"], "tags": {"k": 1}, "by_code": {"a": 1}}


@pytest.mark.parametrize("name, value, described", [
    ("mode", "c", '"a" | "b"'), ("mode", True, '"a" | "b"'), ("colour", "green", 'Colour ("red" | "blue")'),
    ("cents", "5", "Cents (int)"), ("window", {"start": "0"}, "Window"), ("window", {"other": 1}, "Window"),
    ("span", {}, "Span"), ("pair", [1, 2], "tuple[int, str]"), ("pair", [1], "tuple[int, str]"),
    ("many", [1, "x"], "tuple[int, ...]"), ("names", [1], "Sequence[str]"), ("tags", {"k": "v"}, "Mapping[str, int]"),
    ("by_code", {"c": 1}, 'dict["a" | "b", int]')])
def test_literal_enum_newtype_typeddict_tuple_and_abstract_hints_are_checked(name, value, described):
    assert bind(typed, TYPED_OK, "k")[1] == []
    _, errors = bind(typed, {**TYPED_OK, name: value}, "k")
    assert len(errors) == 1 and errors[0].startswith(f"argument `{name}` of typed must be {described}, "), errors


# --- calling --------------------------------------------------------------------------------------


def test_an_async_tool_and_hook_are_run_to_their_end():
    import asyncio

    @tool("slowly")
    async def slowly(n: int) -> dict:
        await asyncio.sleep(0)
        return {"n": n}

    @slowly.reconcile
    async def slowly_reconcile(idempotency_key: str) -> dict | None:
        return {"key": idempotency_key}

    assert invoke(slowly, {"n": 2}) == Outcome(True, result={"n": 2})
    assert invoke_reconcile(slowly, "k-1") == Outcome(True, result={"key": "k-1"})


def test_an_exception_fails_the_outcome_with_its_message():
    @tool("explodes")
    def explodes(reason: str) -> dict:
        raise RuntimeError(reason)

    @tool("explodes.quietly")
    def explodes_quietly() -> dict:
        raise KeyError

    assert invoke(explodes, {"reason": "upstream 503"}) == Outcome(
        False, error="RuntimeError: upstream 503"
    )
    assert invoke(explodes_quietly, {}) == Outcome(False, error="KeyError")


def test_results_must_be_json():
    @tool("returns")
    def returns(kind: str) -> Any:
        return {"set": {1, 2}, "nan": float("nan"), "tuple": (1, Decimal("2.50"))}[kind]

    assert invoke(returns, {"kind": "tuple"}) == Outcome(True, result=[1, "2.5"])
    outcome = invoke(returns, {"kind": "set"})
    assert not outcome.ok
    assert outcome.error.startswith("tool returns returned a result that is not JSON")
    assert not invoke(returns, {"kind": "nan"}).ok


def test_a_result_past_the_bounds_a_run_keeps_fails_like_one_with_no_json_form():
    """At most 64 lists and maps deep and 16 MiB of canonical JSON: a deeper result broke every
    later pass of its run, and a 200 MB one was journaled whole. A reconcile hook's answer, which
    stands for the call's result, is held to the same bounds."""
    from plangate.runtime.canonical import MAX_KEPT_BYTES, MAX_KEPT_DEPTH

    def nested(depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return value

    @tool("returns.nested")
    def returns_nested(depth: int) -> Any:
        return nested(depth)

    @tool("returns.text")
    def returns_text(length: int, idempotency_key: str) -> Any:
        return "é" * length

    @returns_text.reconcile
    def returns_text_reconcile(idempotency_key: str) -> Any:
        return {"l": nested(MAX_KEPT_DEPTH)}

    assert invoke(returns_nested, {"depth": MAX_KEPT_DEPTH}) == Outcome(True, result=nested(MAX_KEPT_DEPTH))
    too_deep = ("returned a result that is not JSON that plangate can keep: it is nested more than 64 levels deep "
                "in lists and maps, the most a run keeps")
    assert invoke(returns_nested, {"depth": MAX_KEPT_DEPTH + 1}) == Outcome(False, error="tool returns.nested "
                                                                                        + too_deep)
    assert invoke(returns_nested, {"depth": 100_000}).error == "tool returns.nested " + too_deep
    assert invoke(returns_text, {"length": (MAX_KEPT_BYTES - 2) // 2, "idempotency_key": "k"}).ok  # quotes and 2 bytes a character
    assert invoke(returns_text, {"length": MAX_KEPT_BYTES // 2, "idempotency_key": "k"}).error == (
        "tool returns.text returned a result that is not JSON that plangate can keep: its canonical JSON text is over "
        "16 MiB, the most a run keeps")
    assert invoke_reconcile(returns_text, "k").error == "the reconcile hook of tool returns.text " + too_deep

    @tool("returns.huge")
    def returns_huge() -> Any:
        return {"v": 10 ** 5000}

    assert invoke(returns_huge, {}).error == (  # not Python's advice to raise its bound on digits
        "tool returns.huge returned a result that is not JSON that plangate can keep: an int of more than 4,300 "
        "digits is too long to write in JSON")


def test_reconcile_hooks_are_invoked_like_tools(tmp_path):
    registry = ToolRegistry()
    registry.load(str(write(tmp_path, "tools.py", TOOLS_FILE)))
    preview = registry.get("deploy.preview")
    assert invoke_reconcile(preview, "seen") == Outcome(True, result={"id": "pv-found"})
    assert invoke_reconcile(preview, "unseen") == Outcome(True, result=None)
    assert invoke_reconcile(registry.get("http.get"), "k") == Outcome(
        False, error="tool http.get has no reconcile hook"
    )

    @tool("flaky")
    def flaky() -> None:
        return None

    @flaky.reconcile
    def flaky_reconcile(idempotency_key: str) -> None:
        raise TimeoutError("status API down")

    assert invoke_reconcile(flaky, "k") == Outcome(False, error="TimeoutError: status API down")


def test_sys_exit_in_a_tool_fails_the_attempt_and_keyboard_interrupt_still_stops():
    @tool("exits")
    def exits(code: int) -> dict:
        sys.exit(code)

    @tool("interrupted")
    def interrupted() -> dict:
        raise KeyboardInterrupt

    assert invoke(exits, {"code": 3}) == Outcome(False, error="SystemExit: 3")
    with pytest.raises(KeyboardInterrupt):
        invoke(interrupted, {})

    @interrupted.reconcile
    def interrupted_hook(idempotency_key: str) -> None:
        raise KeyboardInterrupt

    for within in (None, (5.0, "5s")):  # on the hook's own thread too: raised again here, not printed there
        with pytest.raises(KeyboardInterrupt):
            invoke_reconcile(interrupted, "k", within)


def test_a_tools_file_that_calls_sys_exit_is_a_loading_problem(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("import sys\nsys.exit(4)\n")
    [problem] = ToolRegistry().load(str(path))
    assert problem == f"loading tools from {path} failed (bad.py, line 2): SystemExit: 4"


# --- where loading looks, and loading once -----------------------------------------------------------


@pytest.fixture
def bare_path(monkeypatch):
    """`sys.path` as the `plangate` console script has it: no current directory on it."""
    here = os.path.realpath(os.getcwd())
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and os.path.realpath(p) != here])
    return sys.path


def test_a_module_name_is_found_in_the_current_directory_like_python_dash_m(tmp_path, monkeypatch, bare_path):
    write(tmp_path, "plangate_cwd_tools.py", TOOLS_FILE)
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    write(tmp_path / "pkg" / "sub", "local.py", TOOLS_FILE.replace("deploy.preview", "pkg.preview")
          .replace("http.get", "pkg.get"))
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    registry = ToolRegistry()
    assert registry.load("plangate_cwd_tools") == []
    assert registry.load("pkg.sub.local") == []  # a dotted name, as `examples.tools.local` from the repo root
    assert registry.names() == ["deploy.preview", "http.get", "pkg.get", "pkg.preview"]
    assert sys.path == before  # the directory was on it only while importing
    for name in ("plangate_cwd_tools", "pkg", "pkg.sub", "pkg.sub.local"):
        sys.modules.pop(name, None)


def test_a_tools_file_imports_a_helper_beside_it(tmp_path, bare_path):
    (tmp_path / "tl").mkdir()
    write(tmp_path / "tl", "plangate_helper_beside.py", "def value():\n    return 7\n")
    path = write(tmp_path / "tl", "mytools.py", """
        from plangate import tool
        import plangate_helper_beside

        @tool("t.read")
        def read() -> dict:
            return {"v": plangate_helper_beside.value()}
    """)
    before = list(sys.path)
    registry = ToolRegistry()
    assert registry.load(str(path)) == []
    assert registry.get("t.read")() == {"v": 7}
    assert sys.path == before
    sys.modules.pop("plangate_helper_beside", None)


def test_a_file_or_module_given_twice_is_loaded_once(tmp_path, monkeypatch):
    path = write(tmp_path, "plangate_twice_tools.py", TOOLS_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = ToolRegistry()
    assert registry.load(str(path)) == []
    assert registry.load(str(path)) == []
    assert registry.load(os.path.relpath(path)) == []  # another spelling of the same file
    assert registry.load("plangate_twice_tools") == []  # the same file as a module
    assert registry.load("plangate_twice_tools") == []
    assert registry.names() == ["deploy.preview", "http.get"]
    sys.modules.pop("plangate_twice_tools", None)


def test_an_exception_whose_text_fails_still_fails_the_attempt_with_its_type():
    from plangate.runtime.tools import invoke, tool

    class Opaque(Exception):
        def __str__(self) -> str:
            raise ValueError("str fails")

    @tool("t.opaque")
    def opaque() -> dict:
        raise Opaque()

    outcome = invoke(opaque, {})
    assert not outcome.ok and outcome.error is not None and "Opaque" in outcome.error


def test_a_dict_hint_with_keys_other_than_str_fits_no_json_object():
    """JSON keys are strings: a tool hinted `dict[int, str]` would be given `{"1": …}`, not `{1: …}`."""
    @tool("keyed")
    def keyed(by_id: dict[int, str]) -> None:
        return None

    assert bind(keyed, {"by_id": {}}, "k")[1] == []
    assert bind(keyed, {"by_id": {"1": "a"}}, "k")[1] == ["argument `by_id` of keyed must be dict[int, str], not dict {'1': 'a'}"]


def test_misuse_of_the_registry_and_the_decorator_is_a_clear_type_error(tmp_path):
    import functools

    def plain(x: int) -> int:
        return x

    with pytest.raises(TypeError, match=r"register takes a tool made with @tool"):
        ToolRegistry().register(plain)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="load takes a file's path or a module's name, not NoneType"):
        ToolRegistry().load(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot read the signature of a partial object"):
        tool("a.b")(functools.partial(plain, x=1))
    path = tmp_path / "pathlike_tools.py"
    path.write_text('from plangate import tool\n\n@tool("p.t")\ndef t() -> dict:\n    return {}\n')
    registry = ToolRegistry()
    assert registry.load(path) == [] and registry.names() == ["p.t"]  # a Path as well as a str

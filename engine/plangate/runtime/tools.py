"""Tools: the Python functions that plans call, their registry, and how a call is bound and made.

`@tool("deploy.preview")` turns a function into a `Tool`, still callable like the function. Its
keyword parameters are the call's arguments; a parameter named `idempotency_key` receives the
step's key from the runtime, never from the plan. A tool without that parameter is not given the
key, not even through `**kwargs` (which may pass its keywords on to an API that takes no such
thing): `Tool.takes_idempotency_key` says which, and the runtime warns of a plan key such a tool
cannot honour. `@preview.reconcile` registers the hook that,
after a crash, answers whether the call with a given key happened (its result) or not (None).
Signatures and type hints are read when the decorator runs, so a tool that can never be bound
(positional-only parameters, hints that do not resolve) fails when its file loads, not mid-run.

`ToolRegistry.load(module_or_file)` imports a `.py` file (under a fresh module name, so two files
named alike never collide) or an importable module, and registers every `Tool` among the module's
attributes. It returns the problems as sentences (no such file, a syntax error at a line, an
exception while importing — `SystemExit` included —, two tools with one name), never a traceback.
Where the import looks, as `python FILE` and `python -m MODULE` would: a file is imported with its
own folder first on `sys.path` (so it can import a helper module beside it), a module name with the
current directory first (the `plangate` console script does not put it there, unlike
`python -m`). The entry is taken out of `sys.path` again once the import is done (if the import
left `sys.path` as it found it otherwise), so a folder of tools never shadows, later, a module
that plangate imports lazily; modules imported meanwhile stay imported. Each file or module is
loaded once per registry: a file named twice, or a module whose file was already loaded, adds
nothing (and is no conflict with itself).

Standard output is plangate's own (`plangate run` prints the run id alone on its first line, for
scripts): what a tools file writes to it while it is imported, and what a tool or a reconcile hook
writes to it while it is called, goes to standard error instead (`_stdout_to_stderr`). The switch
is made per thread, since calls run on worker threads and may outlive the pass that made them:
while any tool runs, `sys.stdout` is a `_ToolStdout` that sends a tool's thread's writes to
`sys.stderr` and every other thread's where they were going. A thread a tool starts itself, a
child process, and writes to the file descriptor itself (`os.write(1, …)`) are not redirected.

`bind(tool, args, idempotency_key)` checks the plan's arguments against the parameters: missing
required ones, unknown names (unless the function takes `**kwargs`) and the type hints `str`,
`int`, `float` (an `int` is accepted too), `bool`, `dict[...]`, `list[...]`, `X | None`,
`Optional[X]`, unions and `Any`; `bool` never passes for `int` or `float`, as JSON keeps them apart.
Other hints are not checked: the arguments are JSON values, and such a hint is the tool's own
business. `invoke(tool, kwargs)` calls the tool and turns whatever happens into an `Outcome`: an
exception becomes a failed outcome with its message (the runtime journals it), and so does any
other `BaseException` (`sys.exit()` in a tool fails the attempt, never ends plangate) except
`KeyboardInterrupt`, which still stops the process (the open intent is then an unknown outcome); a result that has
no canonical JSON form fails too, and so does one past the bounds of what a run keeps (`kept_json`:
nested more than 64 lists and maps deep, or over 16 MiB as canonical JSON: the journal would hold
it whole, every reader would load it, and a walk of it could exhaust the stack); a successful
result is the JSON value the journal will hold (tuples become lists, `Decimal`s strings), so a
replayed run sees what the live run saw.
`invoke_reconcile(tool, idempotency_key)` does the same for the reconcile hook, whose answer is the
call's result or None: a bool says neither (`True` is no result), so it fails too.
"""

from __future__ import annotations

import collections.abc
import contextlib
import enum
import functools
import importlib
import importlib.util
import inspect
import itertools
import json
import os
import re
import sys
import threading
import traceback
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from plangate.runtime.canonical import kept_json, undecodable

IDEMPOTENCY_PARAMETER = "idempotency_key"

_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_module_numbers = itertools.count(1)


@dataclass(frozen=True)
class Parameter:
    """A keyword parameter of a tool: its type hint (`Any` when it has none) and whether the
    call must give it."""

    name: str
    hint: Any
    required: bool


class Tool:
    """A function registered under the name that plans call; calling the `Tool` calls it."""

    def __init__(self, name: str, function: Callable[..., Any]) -> None:
        self.parameters, self.takes_any_keyword = _keyword_parameters(name, function)
        functools.update_wrapper(self, function)
        self.name = name
        self.function = function
        self.reconcile_hook: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name} ({_module(self.function)}.{_name(self.function)})>"

    @property
    def takes_idempotency_key(self) -> bool:
        return IDEMPOTENCY_PARAMETER in self.parameters

    def reconcile(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: register `hook(idempotency_key=…) -> result | None`; returns the hook."""
        if self.reconcile_hook is not None:
            raise TypeError(f"tool {self.name} already has a reconcile hook")
        hook_parameters = inspect.signature(hook).parameters.values()
        if not any(
            (parameter.name == IDEMPOTENCY_PARAMETER and parameter.kind in _KEYWORD_KINDS)
            or parameter.kind is inspect.Parameter.VAR_KEYWORD
            for parameter in hook_parameters
        ):
            raise TypeError(
                f"the reconcile hook of tool {self.name} must take an `idempotency_key` parameter"
            )
        self.reconcile_hook = hook
        return hook


def is_tool_name(name: str) -> bool:
    """Whether `name` is a tool name: dotted identifiers (`deploy.preview`), no pattern."""
    return _TOOL_NAME.match(name) is not None


def tool(name: str) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator: `@tool("deploy.preview")` registers the function as the tool `deploy.preview`."""
    if not isinstance(name, str):
        raise TypeError('@tool needs the name that plans call: write @tool("name.of.tool")')
    if not is_tool_name(name):
        raise ValueError(f"{name!r} is not a tool name (a dotted identifier: deploy.preview)")

    def register(function: Callable[..., Any]) -> Tool:
        return Tool(name, function)

    return register


@dataclass(frozen=True)
class Outcome:
    """What a call gave: `ok` with its JSON `result`, or not `ok` with an `error` message."""

    ok: bool
    result: Any = None
    error: str | None = None


class ToolRegistry:
    """The tools a run may call, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._loaded: set[str] = set()  # the files (resolved) and module names already loaded

    def register(self, new_tool: Tool) -> None:
        """Add a tool; a second, different tool under the same name is a `ValueError`, anything
        but a `Tool` (a function not decorated with `@tool`) a `TypeError`."""
        if not isinstance(new_tool, Tool):
            raise TypeError(f"register takes a tool made with @tool(\"name.of.tool\"), not {type(new_tool).__name__}")
        known = self._tools.get(new_tool.name)
        if known is not None and known is not new_tool:
            raise ValueError(
                f"two tools are named {new_tool.name}: {_name(known.function)} in {_module(known.function)} "
                f"and {_name(new_tool.function)} in {_module(new_tool.function)}"
            )
        self._tools[new_tool.name] = new_tool

    def load(self, module_or_file: str | os.PathLike[str]) -> list[str]:
        """Register every `Tool` of a Python file (a path) or importable module (a name); the
        problems, or [] (where there are any, none of its tools is registered)."""
        if isinstance(module_or_file, os.PathLike):
            module_or_file = os.fspath(module_or_file)
        if not isinstance(module_or_file, str):
            raise TypeError(f"load takes a file's path or a module's name, not {type(module_or_file).__name__}")
        if not module_or_file.strip():
            return ["no tools were named: give the path of a .py file or the name of a module"]
        looks_like_file = module_or_file.endswith(".py") or Path(module_or_file).is_file()
        if not looks_like_file and not all(part.isidentifier() for part in module_or_file.split(".")):
            return [f"`{module_or_file}` is no file, nor a module name (dotted identifiers, such as `tools` or "
                    "`myapp.tools`): give the path of a .py file or the name of an importable module"]
        if looks_like_file:
            path = Path(module_or_file)
            if path.is_file() and str(path.resolve()) in self._loaded:
                return []  # named twice: once is enough
            with _stdout_to_stderr():
                module_or_problem = _import_file(path)
        else:
            if module_or_file in self._loaded:
                return []
            with _stdout_to_stderr():
                module_or_problem = _import_module(module_or_file)
        if isinstance(module_or_problem, str):
            return [module_or_problem]
        names = {module_or_problem.__name__} if not looks_like_file else set()
        origin = getattr(module_or_problem, "__file__", None)
        if origin:
            names.add(str(Path(origin).resolve()))
        if names & self._loaded:  # a module whose file was loaded already, under another name
            self._loaded |= names
            return []
        attributes = vars(module_or_problem).values()
        found_by_identity = {id(value): value for value in attributes if isinstance(value, Tool)}
        found = list(found_by_identity.values())  # a tool bound to two names is one tool
        if not found:
            return [f"{module_or_file} defines no tools (functions decorated with @tool)"]
        trial = ToolRegistry()  # all of the file's tools or none: a caller never holds half of it
        trial._tools = dict(self._tools)
        problems = []
        for found_tool in found:
            try:
                trial.register(found_tool)
            except ValueError as error:
                problems.append(str(error))
        if not problems:
            self._tools = trial._tools
            self._loaded |= names
        return problems

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)


def bind(
    bound_tool: Tool, args: dict[str, Any], idempotency_key: str
) -> tuple[dict[str, Any], list[str]]:
    """The keyword arguments to call `bound_tool` with, and why the call does not fit, if it
    does not (an empty list when it does)."""
    errors = []
    kwargs: dict[str, Any] = {}
    if IDEMPOTENCY_PARAMETER in args:
        errors.append(
            f"{bound_tool.name}: `{IDEMPOTENCY_PARAMETER}` is given by the runtime, "
            "not by the plan's arguments"
        )
    for name, value in args.items():
        if name == IDEMPOTENCY_PARAMETER:
            continue
        parameter = bound_tool.parameters.get(name)
        if parameter is None and not bound_tool.takes_any_keyword:
            accepted = [known for known in bound_tool.parameters if known != IDEMPOTENCY_PARAMETER]
            errors.append(
                f"{bound_tool.name} has no argument `{name}` "
                f"(it takes: {', '.join(accepted) or 'no arguments'})"
            )
            continue
        if parameter is not None and not _conforms(value, parameter.hint):
            errors.append(
                f"argument `{name}` of {bound_tool.name} must be {_describe(parameter.hint)}, "
                f"not {'null' if value is None else f'{_json_type(value)} {_preview(value)}'}"
            )
        kwargs[name] = value
    for parameter in bound_tool.parameters.values():
        if parameter.name == IDEMPOTENCY_PARAMETER:
            kwargs[IDEMPOTENCY_PARAMETER] = idempotency_key
        elif parameter.required and parameter.name not in args:
            errors.append(f"{bound_tool.name} needs the argument `{parameter.name}`")
    return kwargs, errors


def invoke(called_tool: Tool, kwargs: dict[str, Any]) -> Outcome:
    """Call the tool; an exception or a result with no JSON form is a failed `Outcome`."""
    return _call(called_tool.function, kwargs, f"tool {called_tool.name}")


def invoke_reconcile(called_tool: Tool, idempotency_key: str,
                     within: tuple[float, str] | None = None) -> Outcome:
    """Ask the tool's reconcile hook about the call with `idempotency_key`: an `ok` outcome's
    result is what the call returned, or None when it did not happen. A hook that returns a bool
    fails (the outcome stays unknown): `True` would settle the call as having happened with
    `true` for its result, which `expect` and later steps would then read. `within` (seconds, as
    written): the step's time bound, which holds for its hook as for its call; a hook that has not
    answered by then is left running on a daemon thread (it cannot hold the process open) and the
    outcome is a failure, so the step stays unknown."""
    hook = called_tool.reconcile_hook
    if hook is None:
        return Outcome(False, error=f"tool {called_tool.name} has no reconcile hook")
    what = f"the reconcile hook of tool {called_tool.name}"
    answer = _call(hook, {IDEMPOTENCY_PARAMETER: idempotency_key}, what) if within is None else \
        _ask_within(hook, idempotency_key, what, within, called_tool.name)
    if answer.ok and isinstance(answer.result, bool):  # "it happened" says nothing of what the call returned
        return Outcome(False, error=f"{what} returned {json.dumps(answer.result)}, a bool: it must return the "
                                    "call's result if the call happened, or None if it did not")
    return answer


def _ask_within(hook: Callable[..., Any], idempotency_key: str, what: str, within: tuple[float, str],
                tool_name: str) -> Outcome:
    """`hook`'s answer on a daemon thread of its own, waited for `within` seconds."""
    answers: list[Outcome] = []
    interrupted: list[KeyboardInterrupt] = []

    def ask() -> None:
        try:
            answers.append(_call(hook, {IDEMPOTENCY_PARAMETER: idempotency_key}, what))
        except KeyboardInterrupt as interrupt:  # raised again on the caller's thread, as without `within`
            interrupted.append(interrupt)

    asking = threading.Thread(target=ask, name=f"plangate-reconcile-{tool_name}", daemon=True)
    asking.start()
    asking.join(within[0])
    if interrupted:
        raise interrupted[0]
    if not answers:
        return Outcome(False, error=f"it gave no answer within {within[1]}")
    return answers[0]


_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _name(function: Callable[..., Any]) -> str:
    """The qualified name of a tool's function; a callable without one (a `partial`, an object)
    is named by its type."""
    return getattr(function, "__qualname__", None) or f"a {type(function).__name__} object"


def _module(function: Callable[..., Any]) -> str | None:
    return getattr(function, "__module__", None)


def _keyword_parameters(
    name: str, function: Callable[..., Any]
) -> tuple[dict[str, Parameter], bool]:
    """The keyword parameters of a tool's function and whether it takes `**kwargs`."""
    if not callable(function):
        raise TypeError(f"@tool({name!r}) decorates a function, not a {type(function).__name__}")
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function)
    except (NameError, TypeError, ValueError) as error:
        raise TypeError(
            f"tool {name}: cannot read the signature of {_name(function)}: {error}"
        ) from None
    parameters: dict[str, Parameter] = {}
    takes_any_keyword = False
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            takes_any_keyword = True
        elif parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"tool {name}: parameter `{parameter.name}` is positional-only; "
                "plans pass arguments by name"
            )
        elif parameter.kind in _KEYWORD_KINDS:
            parameters[parameter.name] = Parameter(
                parameter.name,
                hints.get(parameter.name, Any),
                parameter.default is inspect.Parameter.empty,
            )
    return parameters, takes_any_keyword


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a type hint; hints this module does not know always fit."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_conforms(value, option) for option in typing.get_args(hint))
    if origin is typing.Literal:  # `True` is not `1`: the type must match as well as the value
        return any(type(value) is type(option) and value == option for option in typing.get_args(hint))
    if isinstance(hint, typing.NewType):
        return _conforms(value, hint.__supertype__)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):  # a tool is given the member's value
        return any(type(value) is type(member.value) and value == member.value for member in hint)
    if typing.is_typeddict(hint):
        fields = typing.get_type_hints(hint)
        return isinstance(value, dict) and hint.__required_keys__ <= value.keys() and all(
            key in fields and _conforms(item, fields[key]) for key, item in value.items())
    if hint in (list, tuple) or origin in (list, collections.abc.Sequence, collections.abc.Iterable):
        item_hints = typing.get_args(hint)
        return isinstance(value, list) and (
            not item_hints or all(_conforms(item, item_hints[0]) for item in value)
        )
    if origin is tuple:  # `tuple[int, str]`: that many items; `tuple[int, ...]`: any number
        item_hints = typing.get_args(hint)
        if len(item_hints) == 2 and item_hints[1] is Ellipsis:
            return isinstance(value, list) and all(_conforms(item, item_hints[0]) for item in value)
        return isinstance(value, list) and len(value) == len(item_hints) and all(
            _conforms(item, item_hint) for item, item_hint in zip(value, item_hints))
    if hint is dict or origin in (dict, collections.abc.Mapping):
        key_and_value_hints = typing.get_args(hint)
        return isinstance(value, dict) and (  # JSON keys are strings: `dict[int, …]` fits no JSON object
            not key_and_value_hints
            or all(_conforms(key, key_and_value_hints[0]) and _conforms(item, key_and_value_hints[1])
                   for key, item in value.items())
        )
    return True


def _describe(hint: Any) -> str:
    if hint is None or hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_describe(option) for option in typing.get_args(hint))
    if origin is typing.Literal:
        return " | ".join(json.dumps(option) for option in typing.get_args(hint))
    if isinstance(hint, typing.NewType):
        return f"{hint.__name__} ({_describe(hint.__supertype__)})"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"{hint.__name__} (" + " | ".join(json.dumps(member.value, default=str) for member in hint) + ")"
    if origin is not None:
        return f"{origin.__name__}[{', '.join('...' if arg is Ellipsis else _describe(arg) for arg in typing.get_args(hint))}]"
    return getattr(hint, "__name__", repr(hint))


def _json_type(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _ToolStdout:
    """`sys.stdout` while a tool runs (`_stdout_to_stderr`): what a thread that is running a tool
    or loading tools writes goes to `sys.stderr`, what any other thread writes to the stream it
    stands in for."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stderr if getattr(_in_tools, "depth", 0) else self.stream, name)


_in_tools = threading.local()  # `depth`: how many tool calls or loads this thread is inside
_stdout_mutex = threading.Lock()
_stdout_users = 0  # the tool calls and loads in progress, on every thread


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """For the block, what this thread writes to standard output goes to standard error: plangate's
    standard output is its own (`plangate run` prints the run id on its first line). The first
    block to begin puts a `_ToolStdout` in `sys.stdout`, the last to end takes it out, so blocks on
    several threads (calls in the pool, hooks and rollbacks on threads of their own, a call that
    timed out and still runs) never restore each other's stream, and other threads' output is left
    where it was going."""
    global _stdout_users
    with _stdout_mutex:
        if _stdout_users == 0 and sys.stdout is not None and not isinstance(sys.stdout, _ToolStdout):
            sys.stdout = _ToolStdout(sys.stdout)  # type: ignore[assignment]
        _stdout_users += 1
    _in_tools.depth = getattr(_in_tools, "depth", 0) + 1
    try:
        yield
    finally:
        _in_tools.depth -= 1
        with _stdout_mutex:
            _stdout_users -= 1
            if _stdout_users == 0 and isinstance(sys.stdout, _ToolStdout):  # (unless replaced meanwhile)
                sys.stdout = sys.stdout.stream


def _call(function: Callable[..., Any], kwargs: dict[str, Any], what: str) -> Outcome:
    try:
        with _stdout_to_stderr():
            result = function(**kwargs)
            if inspect.iscoroutine(result):  # an `async def` tool or hook: run it to its end on this thread
                import asyncio  # only for such tools: importing it costs more than the rest of this module

                result = asyncio.run(result)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit too: a tool cannot end the run, only fail its attempt
        return Outcome(False, error=_exception_text(error))
    try:
        result_text = kept_json(result)
    except (TypeError, ValueError) as error:
        return Outcome(False, error=f"{what} returned a result that is not JSON that plangate can keep: {error}")
    return Outcome(True, result=json.loads(result_text))


def _import_file(path: Path) -> types.ModuleType | str:
    if not path.is_file():
        return f"there is no tools file at {path}"
    stem = re.sub(r"[^A-Za-z0-9_]", "_", path.stem)
    module_name = f"plangate_tools_{next(_module_numbers)}_{stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        return f"cannot load {path} as Python (is it a .py file?)"
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up while it runs
    try:
        with _first_on_path(str(path.resolve().parent)):  # as `python FILE`: its helpers beside it
            spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit too: a tools file cannot end plangate
        sys.modules.pop(module_name, None)
        return _loading_problem(str(path), error, path.resolve())
    return module


@contextlib.contextmanager
def _first_on_path(folder: str) -> Iterator[None]:
    """`folder` first on `sys.path` for the block, unless it is there already. Taken out again
    afterwards only if `sys.path` is otherwise as it was (an import that changed it on purpose
    keeps its change, and the entry with it)."""
    if folder in sys.path or ("" in sys.path and os.path.realpath(folder) == os.path.realpath(".")):
        yield
        return
    before = list(sys.path)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if sys.path[:1] == [folder] and sys.path[1:] == before:
            del sys.path[0]


def _import_module(module_name: str) -> types.ModuleType | str:
    try:
        try:
            here = os.getcwd()
        except OSError:  # the current directory was removed: nothing to add
            return importlib.import_module(module_name)
        with _first_on_path(here):  # as `python -m`: a module of the current directory
            return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name
        if missing is not None and (module_name + ".").startswith(missing + "."):
            return (
                f"there is no module named {module_name} "
                "(give the path of a .py file, or make the module importable)"
            )
        return _loading_problem(module_name, error, None)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        return _loading_problem(module_name, error, None)


def _loading_problem(what: str, error: BaseException, file: Path | None) -> str:
    """One sentence about an exception raised while importing tools: where, and what."""
    if isinstance(error, SyntaxError) and error.lineno is not None:  # else raised by running code (a string annotation)
        return f"syntax error in {error.filename or what}, line {error.lineno}: {error.msg}"
    frames = traceback.extract_tb(error.__traceback__)
    if file is not None:
        frames = [frame for frame in frames if Path(frame.filename) == file] or frames
    where = f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})" if frames else ""
    return f"loading tools from {what} failed{where}: {_exception_text(error)}"


def _exception_text(error: BaseException) -> str:
    """`Type: message`, as text a journal can keep: a lone surrogate (an undecodable file name from
    `os.fsdecode`, say) is written as its `\\udcff` escape, since JSON in UTF-8 cannot hold it."""
    try:
        message = str(error)
    except Exception:  # an exception whose own text fails: its type still says what happened
        message = "(its message could not be read)"
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return undecodable(text) or text

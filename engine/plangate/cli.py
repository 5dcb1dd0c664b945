"""The `plangate` command line: argument parsing and exit codes, no logic of its own.

Every subcommand calls the driver or the runtime and renders what comes back. Heavy modules
(lark, pydantic, networkx, z3, cel-python) are imported inside the subcommands, so that
`plangate --version` and `plangate explain` start at once. No input may end in a Python
traceback: unexpected failures are caught at the top and reported in one line (exit 2).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
from typing import Any, NoReturn, Sequence

from plangate import __version__

FORMATS = ("text", "json", "sarif", "github", "junit")
DEFAULT_JOURNAL = os.path.join(".plangate", "journal.db")


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 2, as the contract says; flags are spelt out (no `--out` for `--output`:
    a later flag sharing a prefix would silently change what an abbreviation means)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:
        self.print_usage(sys.stderr)
        self.exit(2, f"plangate: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="plangate", description="Check and run agent plans under policies.")
    parser.add_argument("--version", action="version", version=f"plangate {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = commands.add_parser("check", help="check plans statically against policies")
    check.add_argument("plans", nargs="+", metavar="PLAN")
    check.add_argument("--policy", action="append", default=[], metavar="FILE")
    check.add_argument("--format", choices=FORMATS, default="text")
    check.add_argument("--output", type=_output_file, metavar="FILE",
                       help="write the report to FILE instead of standard output (`-`)")
    check.add_argument("--strict", action="store_true", help="warnings fail the check too (exit 1)")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    check.add_argument("--solver-time", type=_seconds, default=None, metavar="SECONDS",
                       help="the time bound of the budget proofs' solver (default 5)")

    explain = commands.add_parser("explain", help="show the documentation of a diagnostic code")
    explain.add_argument("code", metavar="CODE")

    test = commands.add_parser("test", help="run the `test` blocks of policies")
    test.add_argument("policies", nargs="+", metavar="POLICY")
    test.add_argument("--format", choices=FORMATS, default="text")
    test.add_argument("--output", type=_output_file, metavar="FILE")
    test.add_argument("--strict", action="store_true", help="warnings fail the command too (exit 1)")

    policy = commands.add_parser("policy", help="policy tools")
    policy_commands = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", parser_class=_Parser)
    diff = policy_commands.add_parser("diff", help="what NEW allows that OLD denied, and back")
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.add_argument("--exit-code", action="store_true",
                      help="exit 1 when the policies differ in meaning (as `git diff --exit-code`)")

    run = commands.add_parser("run", help="execute a plan under a policy (or resume the run --run names)")
    run.add_argument("plan", metavar="PLAN")
    run.add_argument("--policy", action="append", default=[], metavar="FILE", required=True)
    run.add_argument("--tools", action="append", default=[], metavar="MODULE_OR_FILE", required=True)
    run.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")
    run.add_argument("--run", dest="run_id", metavar="ID")

    resume = commands.add_parser("resume", help="go on with a paused or interrupted run")
    resume.add_argument("run_id", metavar="RUN")
    resume.add_argument("--tools", action="append", default=[], metavar="MODULE_OR_FILE", required=True)
    resume.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")

    approve = commands.add_parser("approve", help="approve the exact call of a step")
    approve.add_argument("run_id", metavar="RUN")
    approve.add_argument("step", metavar="STEP")
    approve.add_argument("--as", dest="approver", required=True, metavar="NAME")
    approve.add_argument("--role", required=True, metavar="ROLE")
    approve.add_argument("--yes", action="store_true", help="record without asking for confirmation")
    approve.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")

    reconcile = commands.add_parser("reconcile", help="settle a step whose outcome is unknown")
    reconcile.add_argument("run_id", metavar="RUN")
    reconcile.add_argument("step", metavar="STEP")
    happened = reconcile.add_mutually_exclusive_group(required=True)
    happened.add_argument("--happened", action="store_true")
    happened.add_argument("--not-happened", action="store_true")
    reconcile.add_argument("--as", dest="approver", required=True, metavar="NAME")
    reconcile.add_argument("--result", metavar="JSON",
                           help="with --happened: the result the call gave, as JSON (later steps read it)")
    reconcile.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")

    status = commands.add_parser("status", help="the state of a run and its steps")
    status.add_argument("run_id", metavar="RUN")
    status.add_argument("--format", choices=("text", "json"), default="text")
    status.add_argument("--reasons", action="store_true",
                        help="with --format json, add `reasons` (why each step is in its state) and `message` "
                             "(why the run is in its state, and what settles it)")
    status.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")

    log = commands.add_parser("log", help="the journal of a run: effects, decisions, approvals, evidence")
    log.add_argument("run_id", metavar="RUN")
    log.add_argument("--format", choices=("text", "json"), default="text")
    log.add_argument("--verify", action="store_true", help="check the journal's hash chain (exit 1 if damaged)")
    log.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")

    abort = commands.add_parser("abort", help="stop a run; with --rollback undo its reversible steps")
    abort.add_argument("run_id", metavar="RUN")
    abort.add_argument("--rollback", action="store_true")
    abort.add_argument("--tools", action="append", default=[], metavar="MODULE_OR_FILE")
    abort.add_argument("--journal", default=DEFAULT_JOURNAL, metavar="PATH")
    return parser


# Commands that read their inputs and print: their process may skip the collector and the teardown.
_READING_COMMANDS = frozenset({"check", "test", "policy", "explain", "status", "log"})


def console() -> NoReturn:
    """The `plangate` script and `python -m plangate`: `main`, in a process that ends with it.

    A reading command runs with the cyclic garbage collector off and ends without tearing its
    objects down one by one (mypy does the same): its IR is large, long-lived and free of cycles,
    and a 10,000-step check spent a quarter of a second in one collection after the check and
    more in the teardown. Output is flushed first; a reading command leaves nothing else pending
    (the solver's worker process, if one was started, sees its input close and ends). Commands that
    run tools (`run`, `resume`, …) exit the ordinary way, unless a call that timed out is still
    running (`_abandoned_calls`).
    """
    argv = sys.argv[1:]
    reading = bool(argv) and argv[0] in _READING_COMMANDS
    if reading:
        gc.disable()
    code = main(argv)
    if not reading and not _abandoned_calls():
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: closed before the start
                stream.flush()
        except (OSError, ValueError):
            pass  # a reader that went away: what could not be written is dropped, as in `main`
    os._exit(code)


def _abandoned_calls() -> bool:
    """Whether a tool call that timed out is still running on a worker thread. Its outcome is
    journaled already (`outcome_unknown`, or a failed read-only attempt): the process must not wait
    for it at exit — a hung tool would hold `plangate run` forever — and ending it is a crash the
    journal is made for. So the process then ends without joining its threads."""
    return any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
               if thread is not threading.main_thread())


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` holds, else `parser`."""
    for name in ("command", "policy_command"):
        chosen = getattr(args, name, None)
        choices = next((action.choices for action in parser._actions  # argparse keeps subparsers there only
                        if isinstance(action, argparse._SubParsersAction)), None)
        if chosen is None or choices is None or chosen not in choices:
            break
        parser = choices[chosen]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # A reader that goes away (`plangate run … | head -1`) must not change what the command does
    # or its exit code: once its pipe is closed, output is dropped and the command goes on.
    out, err = _PipeOutput(sys.stdout), _PipeOutput(sys.stderr)
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    try:
        return _main(argv)
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = out.stream, err.stream


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # the command's own usage, not the top level's
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command is None:
        parser.print_help()
        return 2
    from plangate.runtime.canonical import undecodable

    for flag, value in (("the run id", getattr(args, "run_id", None)), ("the step id", getattr(args, "step", None)),
                        ("the name given to `--as`", getattr(args, "approver", None)),
                        ("the role given to `--role`", getattr(args, "role", None))):
        shown = undecodable(value) if isinstance(value, str) else None  # a byte the locale could not decode
        if shown is not None:
            print(f"plangate: {flag} `{shown}` holds a byte that is not UTF-8 text; no run, step or name has it",
                  file=sys.stderr)
            return 2
    try:
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("plangate: interrupted", file=sys.stderr)
        return 130
    except OSError as error:  # the system refused (a full disk for the output, say): not plangate's own failure
        print(f"plangate: could not finish: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # the last line of defence: one line, never a traceback
        print(f"plangate: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


class _PipeOutput:
    """A standard stream whose reader may go away: after a `BrokenPipeError` what is written is
    dropped (and the file descriptor points at the null device, so that the interpreter's last
    flush does not fail either); everything else is the stream's own."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.gone = stream is None  # closed before the start (`plangate check … >&-`): nobody reads it

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):  # a stream with no descriptor (tests capture)
            pass

    def __getattr__(self, name: str):
        if self.stream is None:
            raise AttributeError(name)  # no stream: `isatty`, `fileno`… are absent, as on a closed one
        return getattr(self.stream, name)


def _use_color(choice: str, stream: object) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _output_file(text: str) -> str | None:
    """`--output`'s value: a file, or None for `-` (standard output, as with no `--output`)."""
    return None if text == "-" else text


def _refused_output(args: argparse.Namespace, inputs: list[str]) -> int | None:
    """An `--output` that is one of the command's own input files is refused (exit 2) before
    anything is read: the report would replace the plan it is about."""
    if args.output is None or not os.path.exists(args.output):
        return None
    for name in inputs:
        try:
            same = os.path.samefile(name, args.output)
        except (OSError, ValueError):
            continue
        if same:
            print(f"plangate: `--output {args.output}` is one of the files to check; write the report elsewhere",
                  file=sys.stderr)
            return 2
    return None


def _emit(text: str, output: str | None) -> int | None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        return None
    try:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") or not text else text + "\n")
    except OSError as error:
        print(f"plangate: cannot write `{output}`: {error.strerror or error}", file=sys.stderr)
        return 2
    return None


def _seconds(text: str) -> float:
    """A solver time bound: a number of seconds, more than 0 and at most 600."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"`{text}` is not a number of seconds") from None
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"`{text}` is out of range: give more than 0 and at most 600 seconds")
    return value


def _check(args: argparse.Namespace) -> int:
    from plangate.diagnostics.render import render
    from plangate.driver import check

    refused = _refused_output(args, [*args.plans, *args.policy])
    if refused is not None:
        return refused
    options: dict[str, Any] = {"announce_no_policy": args.format == "text"}
    if args.solver_time is not None:
        options["solver_time_bound"] = args.solver_time
    result = check(args.plans, args.policy, options)
    color = args.output is None and args.format == "text" and _use_color(args.color, sys.stdout)
    listed = result.checked_files if args.format in ("text", "json") else result.files  # counted vs listed
    text = render(result.diagnostics, result.sources, args.format, files=listed, color=color,
                  tool_version=__version__, strict=args.strict)
    failed = _emit(text, args.output)
    return failed if failed is not None else result.exit_code(strict=args.strict)


def _explain(args: argparse.Namespace) -> int:
    from plangate.explain import explain, suggestion

    page = explain(args.code)
    if page is None:
        near = suggestion(args.code)
        written = os.fsencode(args.code).decode("utf-8", "backslashreplace")  # a byte not UTF-8 as `\xNN`
        print(terminal_text(f"plangate: `{written}` is not a diagnostic code or name"
                            + (f"; did you mean `{near}`?" if near else "")), file=sys.stderr)
        return 2
    sys.stdout.write(page if page.endswith("\n") else page + "\n")
    return 0


def _test(args: argparse.Namespace) -> int:
    from plangate.diagnostics.render import render, render_json, render_test_junit
    from plangate.policy.testing import run_policy_tests

    refused = _refused_output(args, args.policies)
    if refused is not None:
        return refused
    result = run_policy_tests(args.policies)
    if args.format == "junit":  # a test case per policy test, not per file
        text = render_test_junit(result.outcomes, result.diagnostics, result.sources, files=result.files,
                                 strict=args.strict)
    elif args.format == "json":  # the diagnostics, and every test with its verdict
        tests = [{"policy": o.policy, "name": o.name, "file": o.file, "passed": o.passed, "decided": o.decided}
                 for o in result.outcomes]
        text = render_json(result.diagnostics, result.sources, files=result.files, tests=tests)
    else:
        text = render(result.diagnostics, result.sources, args.format, files=result.files,
                      color=args.output is None and args.format == "text" and _use_color("auto", sys.stdout),
                      tool_version=__version__)
    if args.format == "text":  # the listing quotes the tests' names: shown as the diagnostics show input
        listing = "\n".join(terminal_text(line) for line in result.report.split("\n"))
        text = listing + ("\n" + text if result.diagnostics else "")
    failed = _emit(text, args.output)
    return failed if failed is not None else result.exit_code(strict=args.strict)


def _policy(args: argparse.Namespace) -> int:
    if args.policy_command != "diff":
        print("plangate: error: `plangate policy` needs a subcommand: `diff`", file=sys.stderr)
        return 2
    from plangate.policy.diff import diff_command

    return diff_command(args.old, args.new, args.format, exit_code=args.exit_code)


def _runtime(journal_path: str, tools: Sequence[str] = (), read_only: bool = False, create: bool = False):
    """The runtime over the journal at `journal_path`; only `run` may create the journal."""
    from plangate.runtime.host import Runtime, RunError
    from plangate.runtime.journal import Journal, JournalError
    from plangate.runtime.tools import ToolRegistry

    if not create and not os.path.isfile(journal_path):
        raise RunError(f"there is no journal at {journal_path} (start a run with `plangate run`, or pass --journal)")
    try:
        journal = Journal.open(journal_path, read_only=read_only, create=create)
    except JournalError as error:
        raise RunError(str(error)) from None
    registry = ToolRegistry()
    problems = [problem for module in tools for problem in registry.load(module)]
    if problems:
        journal.close()
        raise RunError("cannot load the tools: " + "; ".join(problems))
    return Runtime(journal, registry)


def _runtime_command(function):
    def run(args: argparse.Namespace) -> int:
        from plangate.runtime.host import RunError
        from plangate.runtime.journal import JournalError

        try:
            return function(args)
        except JournalError as error:  # found while reading or writing a journal that opened
            print(terminal_text(f"plangate: {error} (the journal is damaged, or cannot be written)"), file=sys.stderr)
            return 2
        except RunError as error:  # it may quote the journal: a reason, a name
            print(terminal_text(f"plangate: {error}"), file=sys.stderr)
            return 2
    return run


def terminal_text(text: str) -> str:
    from plangate.diagnostics.render import terminal_text as shown  # imported on use: `--version` stays fast

    return shown(text)


def unspoofed(text: str) -> str:
    from plangate.diagnostics.render import unspoofed as shown

    return shown(text)


def _print_report(report) -> int:
    print(terminal_text(f"run {report.run}: {report.state}"))
    for step_id, info in report.steps.items():
        reason = f" — {info['reason']}" if info.get("reason") else ""
        print(terminal_text(f"  {step_id:<20} {info['state']:<22} attempts {info['attempts']}{reason}"))
    if report.state != "succeeded":
        print(terminal_text(report.message))
    unsettled = [step_id for step_id, info in report.steps.items() if info["state"] == "outcome_unknown"]
    if report.state != "aborted" and (any(info["state"] == "waiting_for_approval" for info in report.steps.values())
                                      or any(step_id not in report.needs_reconcile for step_id in unsettled)):
        print(terminal_text(f"go on with: plangate resume {report.run} --tools …"))
    for step_id in report.needs_reconcile:
        print(terminal_text(f"settle it with: plangate reconcile {report.run} {step_id} --happened|--not-happened "
                             "--as NAME"))
    return report.exit_code


@_runtime_command
def _run(args: argparse.Namespace) -> int:
    from plangate.diagnostics import backticked
    from plangate.diagnostics.render import render
    from plangate.driver import check, display_name

    result = check([args.plan], args.policy)  # the policies are a set: `run --run ID` may give them in any order
    if result.errors or result.exit_code() == 2:
        sys.stderr.write(render(result.diagnostics, result.sources, "text", files=result.checked_files,
                                color=_use_color("auto", sys.stderr), tool_version=__version__))
        unread = [d.file for d in result.diagnostics if d.name == "unreadable-input"]
        print("plangate: " + (f"could not read {backticked(unread)}" if unread
                              else "the plan or its policies have errors") + "; nothing was run", file=sys.stderr)
        return 2
    plan_text = result.sources.get(display_name(args.plan)).text
    policy_texts = [(source.name, source.text) for source in result.policy_set]  # recorded in the set's order
    from plangate.runtime.host import new_run_id, remember_check

    remember_check(plan_text, display_name(args.plan), policy_texts, result)  # the run needs no second check

    if args.run_id is not None and not args.run_id.strip():
        print("plangate: `--run` needs a run id; leave it out to start a new run with a fresh id", file=sys.stderr)
        return 2
    if args.run_id is not None and (not args.run_id.isprintable() or args.run_id != args.run_id.strip()):
        print(f"plangate: the run id {args.run_id!r} holds white space at an end or a control character: "
              "it is printed alone on a line and is part of derived idempotency keys", file=sys.stderr)
        return 2
    runtime = _runtime(args.journal, args.tools, create=True)
    run_id = args.run_id if args.run_id is not None else new_run_id()
    with runtime.hold(run_id):  # one hold from the first record to the report: nobody runs it meanwhile
        if run_id in runtime.journal.runs():
            recorded = runtime.view(run_id).policy.hash
            if result.policy is not None and result.policy.hash != recorded:
                print(f"plangate: run `{run_id}` was started under another policy ({recorded}); a run keeps "
                      "its policy: start a new run to use these policies", file=sys.stderr)
                return 2
            runtime.new_version(run_id, plan_text, display_name(args.plan))
        else:
            runtime.start(plan_text, display_name(args.plan), policy_texts, run_id)
        _warn_of_keys_not_passed(runtime, run_id)
        print(run_id)  # alone on the first line, for scripts: `RUN=$(plangate run … | head -1)`
        return _print_report(runtime.advance(run_id))


@_runtime_command
def _resume(args: argparse.Namespace) -> int:
    runtime = _runtime(args.journal, args.tools)
    _warn_of_keys_not_passed(runtime, args.run_id)
    return _print_report(runtime.advance(args.run_id))


def _warn_of_keys_not_passed(runtime, run_id: str) -> None:
    """Say on standard error which plan keys the tools loaded cannot be given (`keys_not_passed`)."""
    view = runtime.view(run_id)
    for warning in runtime.keys_not_passed(view.plan, view.states):
        print(f"plangate: warning: {warning}", file=sys.stderr)


_ANSWER_BOUND = 64  # characters of a confirmation kept at most (`y`, `yes`; anything longer is a no)
_DRAIN_BOUND = 1 << 20  # characters of a longer line read and dropped at most


@_runtime_command
def _approve(args: argparse.Namespace) -> int:
    from plangate.runtime.canonical import canonical_json
    from plangate.runtime.host import approver_and_role

    approver, role = approver_and_role(args.approver, args.role)  # refused before anything is shown
    runtime = _runtime(args.journal)
    call = runtime.approval_call(args.run_id, args.step, role)  # refuses before anything is asked
    view = runtime.view(args.run_id)
    print(f"run:       {args.run_id}")
    print(f"plan:      {view.plan.id} version {call['plan_version']} ({call['plan_hash']})")
    print(f"step:      {args.step}")
    print(f"call:      {unspoofed(call['tool'] + '(' + canonical_json(call['args']) + ')')}")
    print(f"approver:  {unspoofed(approver)} as role \"{unspoofed(role)}\"")
    if not args.yes:  # the answer may come from a terminal or from a pipe; no answer is a no
        print("approve this exact call? [y/N] ", end="", flush=True)
        try:  # bounded: a pipe may never end a line (`< /dev/zero`)
            line = answer = sys.stdin.readline(_ANSWER_BOUND) if sys.stdin is not None else ""
            read = len(line)
            while line and not line.endswith("\n") and read < _DRAIN_BOUND:  # a longer line: its rest is
                line = sys.stdin.readline(min(1 << 16, _DRAIN_BOUND - read))  # read (bounded), not left
                read += len(line)                                            # to the shell after us
                if line:
                    answer = "no"  # too long to be a yes (`y` with no newline at the end is a yes)
            answer = answer.strip().lower()
        except (OSError, ValueError):  # not text, or no standard input to read: no answer
            answer = ""
        if answer not in ("y", "yes"):
            print("not approved (answer `y`, or pass --yes)")
            return 1
    body = runtime.approve(args.run_id, args.step, approver, role, shown=call)  # exactly what was shown
    print(f"approved; valid until {body['expires_at']}")
    return 0


@_runtime_command
def _reconcile(args: argparse.Namespace) -> int:
    import json

    from plangate.runtime.host import RunError

    result = None
    if args.result is not None:
        if not args.happened:
            raise RunError("`--result` goes with `--happened`: a call that did not happen has no result")
        def refuse(constant: str) -> None:
            raise ValueError(f"`{constant}` is not a JSON number")

        try:
            result = json.loads(args.result, parse_constant=refuse)
        except (ValueError, RecursionError) as error:
            raise RunError(f"`--result` is not JSON: {error}") from None
    runtime = _runtime(args.journal)
    runtime.reconcile(args.run_id, args.step, bool(args.happened), args.approver, result)
    print(f"step `{args.step}` settled: the call {'happened' if args.happened else 'did not happen'}")
    return 0


@_runtime_command
def _status(args: argparse.Namespace) -> int:
    import json

    runtime = _runtime(args.journal, read_only=True)
    report = runtime.report(args.run_id, runtime.view(args.run_id), record=False)
    if args.format == "json":
        # exactly the contract's object; why the run and each step are in their states only when asked for
        steps = {k: {"state": v["state"], "attempts": v["attempts"]} for k, v in report.steps.items()}
        shown: dict[str, Any] = {"run": report.run, "state": report.state, "steps": steps}
        if args.reasons:
            shown["reasons"] = {k: v["reason"] for k, v in report.steps.items() if v.get("reason")}
            shown["message"] = report.message
        print(json.dumps(shown, indent=2))
        return 0
    _print_report(report)
    return 0


@_runtime_command
def _log(args: argparse.Namespace) -> int:
    import json

    runtime = _runtime(args.journal, read_only=True)
    journal = runtime.journal
    records = journal.records(args.run_id)
    problems = journal.verify(args.run_id)  # a run whose records are all gone still has its head
    if not records and not problems:
        print(f"plangate: there is no run `{args.run_id}` in {args.journal}", file=sys.stderr)
        return 2
    if problems and not args.verify:  # shown anyway, but never silently
        print(f"plangate: warning: the journal of run `{args.run_id}` does not verify ({len(problems)} problem(s)): "
              f"see `plangate log {args.run_id} --verify`", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({"run": args.run_id, "records": [
            {"seq": r.seq, "kind": r.kind, "step": r.step, "at": r.at, "body": r.body, "hash": r.hash} for r in records],
            "problems": [{"seq": p.seq, "code": p.code, "message": p.message} for p in problems]}, indent=2))
    else:
        for record in records:
            print(terminal_text(f"{record.at}  {record.kind:<15} {record.step or '':<18} {_summary(record)}"))
        if args.verify:
            print("journal verified: the hash chain is whole" if not problems else
                  "journal damaged:\n" + "\n".join(terminal_text(f"  {p}") for p in problems))
    return 1 if problems and args.verify else 0


def _summary(record) -> str:
    from plangate.runtime.canonical import canonical_json

    body = record.body
    undo = "rollback " if body.get("rollback") is True else ""  # a step's rollback, not its own call
    if record.kind == "run_started":
        return f"plan {body['plan_hash'][:19]} v{body['plan_version']}, policy {body['policy_hash'][:19]}"
    if record.kind == "intent":
        unpassed = " (not passed: the tool takes no `idempotency_key`)" if body.get("key_passed") is False else ""
        return (f"{undo}call {body['tool']}({canonical_json(body['args'])}) key={body['idempotency_key']}{unpassed} "
                f"attempt {body['attempt']}")
    if record.kind == "result":
        text = canonical_json(body["result"])
        ref = f"ref={body['external_ref']} " if body["external_ref"] is not None else ""
        return f"{undo}result {ref}" + (text if len(text) < 100 else text[:100] + "…")
    if record.kind == "state":
        return f"→ {body['state']}: {body['reason']}"
    if record.kind == "approval":
        return f"approved by {body['approver']} (role {body['role']}) until {body['expires_at']}"
    if record.kind == "evidence":
        return f"{body['what']}: {body['proves']}"
    if record.kind == "attempt_failed":
        return f"{undo}failed: {body['error']}"
    if record.kind == "reconciled":
        return f"{undo}{'happened' if body['happened'] else 'did not happen'} (by {body['by']})"
    if record.kind == "recheck":
        if body["kept"]:
            return "kept: its call under the new plan version is the one it made"
        return "runs again: " + (body.get("reason") or "its call under the new plan version differs from the one it made")
    if record.kind == "run_state":
        return f"run {body['state']}" + (f": {body.get('reason')}" if body.get("reason") else "")
    return canonical_json(body)[:120]


@_runtime_command
def _abort(args: argparse.Namespace) -> int:
    runtime = _runtime(args.journal, args.tools)
    report = runtime.abort(args.run_id, args.rollback)
    _print_report(report)
    if report.state == "aborting":
        return 3  # an outcome is unknown: settle it, then `resume` (or `abort` again) finishes
    view = runtime.view(args.run_id)
    undone = ("compensated", "cancelled")  # cancelled: a call settled as not happened has nothing to undo
    return 1 if any(view.states.get(step_id) not in undone for step_id in view.to_roll_back) else 0


_COMMANDS = {"check": _check, "explain": _explain, "test": _test, "policy": _policy, "run": _run,
             "resume": _resume, "approve": _approve, "reconcile": _reconcile, "status": _status, "log": _log,
             "abort": _abort}


if __name__ == "__main__":
    console()

"""The `plangate` command line: argument parsing and exit codes, no logic of its own.

Every subcommand calls the driver or the runtime and renders what comes back. Heavy modules
(lark, pydantic, networkx, z3, cel-python) are imported inside the subcommands, so that
`plangate --version` and `plangate explain` start at once. No input may end in a Python
traceback: unexpected failures are caught at the top and reported in one line (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from plangate import __version__

FORMATS = ("text", "json", "sarif", "github", "junit")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2, as the contract says
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
    check.add_argument("--output", metavar="FILE", help="write the report to FILE instead of standard output")
    check.add_argument("--strict", action="store_true", help="warnings fail the check too (exit 1)")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")

    explain = commands.add_parser("explain", help="show the documentation of a diagnostic code")
    explain.add_argument("code", metavar="CODE")

    test = commands.add_parser("test", help="run the `test` blocks of policies")
    test.add_argument("policies", nargs="+", metavar="POLICY")
    test.add_argument("--format", choices=FORMATS, default="text")
    test.add_argument("--output", metavar="FILE")

    policy = commands.add_parser("policy", help="policy tools")
    policy_commands = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", parser_class=_Parser)
    diff = policy_commands.add_parser("diff", help="what NEW allows that OLD denied, and back")
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("plangate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:  # the last line of defence: one line, never a traceback
        print(f"plangate: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


def _use_color(choice: str, stream: object) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


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


def _check(args: argparse.Namespace) -> int:
    from plangate.diagnostics.render import render
    from plangate.driver import check

    result = check(args.plans, args.policy)
    color = args.output is None and args.format == "text" and _use_color(args.color, sys.stdout)
    text = render(result.diagnostics, result.sources, args.format, files=result.files, color=color,
                  tool_version=__version__)
    failed = _emit(text, args.output)
    return failed if failed is not None else result.exit_code(strict=args.strict)


def _explain(args: argparse.Namespace) -> int:
    from plangate.explain import explain

    page = explain(args.code)
    if page is None:
        print(f"plangate: `{args.code}` is not a diagnostic code or name", file=sys.stderr)
        return 2
    sys.stdout.write(page if page.endswith("\n") else page + "\n")
    return 0


def _test(args: argparse.Namespace) -> int:
    from plangate.diagnostics.render import render
    from plangate.policy.testing import run_policy_tests

    result = run_policy_tests(args.policies)
    text = render(result.diagnostics, result.sources, args.format, files=result.files,
                  color=args.output is None and args.format == "text" and _use_color("auto", sys.stdout),
                  tool_version=__version__)
    if args.format == "text":
        text = result.report + ("\n" + text if result.diagnostics else "")
    failed = _emit(text, args.output)
    return failed if failed is not None else result.exit_code()


def _policy(args: argparse.Namespace) -> int:
    if args.policy_command != "diff":
        print("plangate: error: `plangate policy` needs a subcommand: `diff`", file=sys.stderr)
        return 2
    from plangate.policy.diff import diff_command

    return diff_command(args.old, args.new, args.format)


_COMMANDS = {"check": _check, "explain": _explain, "test": _test, "policy": _policy}


if __name__ == "__main__":
    sys.exit(main())

"""Golden tests: plan and policy files that say, on their offending lines, what must be reported.

Layout (see `tests/golden/README.md`): a case is `NAME.plan` (checked with no policy), `NAME.plan`
with `NAME.policy` beside it (checked against it), `NAME.policy` alone (a policy checked on its
own, `driver.check([], [policy])`), or a folder `NAME/` whose `*.plan` files are the plans and
whose `*.policy` files are the policies. A line that carries `# expect: a-name, other-name` must be
the first line of the primary span of exactly those diagnostics, and every error or warning must
be expected somewhere: the multiset of (file, line, name) is compared both ways. Notes are
ignored unless the case expects a note of that name somewhere (then all of that name count). A file
with a line `# golden: test` makes the case run the policies' `test` blocks (`plangate test`)
instead of `plangate check`.

Each case also has a snapshot, `NAME.expected.txt`: the text report exactly as
`plangate check --color never` prints it (checked through the CLI too). `pytest
tests/test_golden.py --update` rewrites the snapshots; review the diff before committing it.

`PENDING` names the diagnostics that no check produces yet. A case that expects one of them is an
expected failure while it fails; once it passes, the test fails and asks for the name to be taken
out of `PENDING` (and for its snapshot to be written with `--update`). Nothing else is ever xfail.
"""

from __future__ import annotations

import collections
import difflib
import io
import re
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from plangate import __version__
from plangate.diagnostics.model import Diagnostic, Severity
from plangate.diagnostics.registry import BY_NAME
from plangate.diagnostics.render import render

GOLDEN = Path(__file__).parent / "golden"

# Diagnostics that no check produces yet. Keep it as small as the engine allows: a name leaves this
# set as soon as its check lands (the harness fails the case that starts passing, to say so).
PENDING: frozenset[str] = frozenset({
})

EXPECT = re.compile(r"#\s*expect:\s*([A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)*)")
MODE = re.compile(r"#\s*golden:\s*([a-z]+)")
SNAPSHOT_SUFFIX = ".expected.txt"

Key = tuple[str, int, str]  # (file as given to the driver, 1-based line, diagnostic name)


@dataclass(frozen=True)
class Case:
    name: str
    plans: tuple[str, ...]  # paths relative to GOLDEN, as passed to the driver
    policies: tuple[str, ...]
    mode: str  # "check" | "test"

    @property
    def snapshot(self) -> Path:
        return GOLDEN / f"{self.name}{SNAPSHOT_SUFFIX}"

    @property
    def files(self) -> tuple[str, ...]:
        return self.plans + self.policies

    def expectations(self) -> collections.Counter[Key]:
        expected: collections.Counter[Key] = collections.Counter()
        for file in self.files:
            for number, line in enumerate(_lines(GOLDEN / file), start=1):
                match = EXPECT.search(line)
                if match:
                    for name in match.group(1).split(","):
                        expected[(file, number, name.strip())] += 1
        return expected

    def expected_names(self) -> set[str]:
        return {name for _file, _line, name in self.expectations()}


def _lines(path: Path) -> list[str]:
    # Lines as the source map counts them (`\n`, `\r\n` or a lone `\r` ends one). Undecodable bytes
    # (the `unreadable-input` case) are replaced, so their comments can still be read.
    return re.split(r"\r\n?|\n", path.read_bytes().decode("utf-8", errors="replace"))


def discover() -> list[Case]:
    cases = []
    for entry in sorted(GOLDEN.iterdir()):
        if entry.is_dir():
            plans = tuple(f"{entry.name}/{p.name}" for p in sorted(entry.glob("*.plan")))
            policies = tuple(f"{entry.name}/{p.name}" for p in sorted(entry.glob("*.policy")))
            if plans or policies:
                cases.append(_case(entry.name, plans, policies))
        elif entry.suffix == ".plan":
            policy = entry.with_suffix(".policy")
            cases.append(_case(entry.stem, (entry.name,), (policy.name,) if policy.exists() else ()))
        elif entry.suffix == ".policy" and not entry.with_suffix(".plan").exists():
            cases.append(_case(entry.stem, (), (entry.name,)))
    return cases


def _case(name: str, plans: tuple[str, ...], policies: tuple[str, ...]) -> Case:
    modes = {match.group(1) for file in plans + policies for line in _lines(GOLDEN / file)
             if (match := MODE.search(line))}
    mode = "test" if "test" in modes else "check"
    return Case(name, plans, policies, mode)


CASES = discover()


@dataclass
class Outcome:
    diagnostics: list[Diagnostic]
    text: str
    exit_code: int
    lines: dict[int, int]  # id(diagnostic) → line


def run_case(case: Case, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    monkeypatch.chdir(GOLDEN)
    if case.mode == "test":
        from plangate.policy.testing import run_policy_tests

        result = run_policy_tests(list(case.policies))
    else:
        from plangate.driver import check

        result = check(list(case.plans), list(case.policies), {"announce_no_policy": True})
    counted = result.files if case.mode == "test" else result.checked_files  # as the command counts
    text = render(result.diagnostics, result.sources, "text", files=counted, color=False, tool_version=__version__)
    if case.mode == "test":  # as `plangate test` prints it
        text = result.report + ("\n" + text if result.diagnostics else "")
    lines = {}
    for item in result.diagnostics:
        resolved = result.sources.range(item.span)
        lines[id(item)] = resolved[0].line if resolved is not None else 1
    return Outcome(list(result.diagnostics), text, result.exit_code(), lines)


def compare(case: Case, outcome: Outcome) -> tuple[list[str], list[str]]:
    """(missing, unexpected), each as readable lines; both empty when the case holds."""
    expected = case.expectations()
    names = case.expected_names()
    found: collections.Counter[Key] = collections.Counter()
    described: dict[Key, list[str]] = collections.defaultdict(list)
    for item in outcome.diagnostics:
        if item.severity is Severity.NOTE and item.name not in names:
            continue
        key = (item.file, outcome.lines[id(item)], item.name)
        found[key] += 1
        described[key].append(f"{item.severity.value}[{item.code}]: {item.message}")
    missing = [f"{file}:{line}: expected `{name}`, not reported"
               for (file, line, name), count in sorted((expected - found).items()) for _ in range(count)]
    unexpected = [f"{file}:{line}: unexpected `{name}`" + (f" ×{count}" if count > 1 else "") + ": "
                  + "; ".join(dict.fromkeys(described[(file, line, name)]))
                  for (file, line, name), count in sorted((found - expected).items())]
    return missing, unexpected


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_golden(case: Case, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    pending = sorted(case.expected_names() & PENDING)
    try:
        outcome = run_case(case, monkeypatch)
    except Exception as error:
        if pending:
            pytest.xfail(_shorten(f"waits for {', '.join(pending)}: {type(error).__name__}: {error}"))
        raise
    missing, unexpected = compare(case, outcome)
    problems = missing + unexpected
    if pending:
        if problems:
            pytest.xfail(_shorten(f"waits for {', '.join(pending)}: " + " | ".join(problems)))
        pytest.fail(f"`{case.name}` passes now: take {', '.join(pending)} out of PENDING in "
                    f"tests/test_golden.py and write its snapshot with `--update`")
    assert not problems, "\n".join([*problems, "", "the report was:", outcome.text])

    if request.config.getoption("--update"):
        case.snapshot.write_text(outcome.text, encoding="utf-8")
    elif not case.snapshot.exists():
        pytest.fail(f"no snapshot {case.snapshot.name}: run `pytest tests/test_golden.py --update`")
    else:
        wanted = case.snapshot.read_text(encoding="utf-8")
        if outcome.text != wanted:
            diff = "".join(difflib.unified_diff(wanted.splitlines(True), outcome.text.splitlines(True),
                                                f"{case.snapshot.name} (snapshot)", "now"))
            pytest.fail(f"the report differs from its snapshot (`--update` rewrites it):\n{diff}")

    if case.mode == "check" and case.plans:  # the command prints exactly the snapshot
        from plangate.cli import main

        argv = ["check", *case.plans, *(a for p in case.policies for a in ("--policy", p)),
                "--color", "never"]
        stdout, stderr = io.StringIO(), io.StringIO()
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main(argv)
        assert stdout.getvalue() == outcome.text
        assert code == outcome.exit_code, stderr.getvalue()


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def test_expectations_name_registered_codes() -> None:
    unknown = sorted({f"{case.name}: `{name}`" for case in CASES for name in case.expected_names()
                      if name not in BY_NAME})
    assert not unknown, "expect comments name no registered diagnostic: " + ", ".join(unknown)


def test_pending_names_are_registered() -> None:
    assert PENDING <= set(BY_NAME), sorted(PENDING - set(BY_NAME))


def test_every_pending_name_has_a_case() -> None:
    expected = {name for case in CASES for name in case.expected_names()}
    assert PENDING <= expected, sorted(PENDING - expected)


def test_no_stray_snapshots() -> None:
    names = {case.name for case in CASES}
    stray = sorted(path.name for path in GOLDEN.glob(f"*{SNAPSHOT_SUFFIX}")
                   if path.name[: -len(SNAPSHOT_SUFFIX)] not in names)
    assert not stray, f"snapshots without a case: {stray}"


def test_missing_file_is_unreadable_input(tmp_path: Path) -> None:
    """A file that does not exist (or is a folder) cannot be a golden case; check it via the CLI."""
    from plangate.cli import main

    for target, words in ((tmp_path / "nowhere.plan", "no such file"), (tmp_path, "is a folder")):
        stdout = io.StringIO()
        with redirect_stdout(stdout):
            code = main(["check", str(target), "--format", "json"])
        assert code == 2
        assert '"name": "unreadable-input"' in stdout.getvalue()
        assert words in stdout.getvalue()

"""`docs/diagnostics.md` against the registry, the golden cases, `plangate explain` and the engine.

- Every registered code has its section, headed exactly `## PG304 approval-missing`, in code order,
  and no section names a code that is not registered.
- Every registered code has at least one golden case that expects it (`tests/golden/`), except the
  few in `NO_GOLDEN`, each with its reason.
- `plangate explain` prints a code's section (by code or by name) and exits 0; an unknown code
  exits 2.
- The examples of each section are run: the **bad** example must produce exactly the **message**
  shown (every diagnostic of that code, rendered as `plangate check --color never` renders it),
  and the **fixed** example must produce no error and no warning. Codes that no check produces yet
  (`PENDING` in `tests/test_golden.py`) are expected failures while they fail.
  `pytest tests/test_docs.py --update` rewrites the message blocks from real runs.

Example blocks: a fenced block whose info string is `plan [FILE]` is given as a plan, one whose
info string is `policy [FILE]` with `--policy` (FILE defaults to `example.plan` / `example.policy`).
"""

from __future__ import annotations

import importlib.util
import io
import re
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from plangate.diagnostics.model import Severity
from plangate.diagnostics.registry import CODES, Code

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "diagnostics.md"
GOLDEN = Path(__file__).parent / "golden"

# Codes with no golden case, and why.
NO_GOLDEN = {
    "internal-error": "only a bug in plangate produces it; no valid or invalid input is meant to",
    "budget-unknown": "it depends on the solver's time bound and the machine's speed, so no input "
                      "produces it reproducibly",
}

# Codes whose examples run as `plangate test` instead of `plangate check`.
TEST_MODE = {"policy-test-failed"}

HEADING = re.compile(r"^## (PG\d{3}) (\S+)$")
FENCE = re.compile(r"^```(.*)$")
MARKERS = ("**Bad**", "**Message**", "**Fixed**")


def _pending() -> frozenset[str]:
    spec = importlib.util.spec_from_file_location("_golden_harness", Path(__file__).parent / "test_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module.PENDING


PENDING = _pending()


def _sections(text: str) -> dict[str, tuple[str, list[str]]]:
    """code → (heading line, the section's lines including the heading), for `## PGxxx` headings."""
    lines = text.splitlines()
    found: dict[str, tuple[str, list[str]]] = {}
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    for position, start in enumerate(starts):
        end = starts[position + 1] if position + 1 < len(starts) else len(lines)
        match = HEADING.match(lines[start])
        if match:
            found[match.group(1)] = (lines[start], lines[start:end])
    return found


def _docs() -> str:
    return DOCS.read_text(encoding="utf-8")


@dataclass
class Block:
    info: str
    text: str
    start: int  # index of the first content line within the section
    end: int  # index of the closing fence


@dataclass
class Examples:
    bad: list[Block] = field(default_factory=list)
    message: list[Block] = field(default_factory=list)
    fixed: list[Block] = field(default_factory=list)


def _examples(lines: list[str]) -> Examples:
    examples = Examples()
    part: list[Block] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = next((m for m in MARKERS if line.startswith(m)), None)
        if marker is not None:
            part = {"**Bad**": examples.bad, "**Message**": examples.message, "**Fixed**": examples.fixed}[marker]
        fence = FENCE.match(line)
        if fence:
            close = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
            if part is not None:
                part.append(Block(fence.group(1).strip(), "\n".join(lines[index + 1:close]) + "\n",
                                  index + 1, close))
            index = close + 1
            continue
        index += 1
    return examples


def _inputs(blocks: list[Block]) -> list[tuple[str, str, str]]:
    """(kind, file name, text) of the `plan` and `policy` blocks."""
    inputs = []
    for block in blocks:
        words = block.info.split()
        if words and words[0] in ("plan", "policy"):
            inputs.append((words[0], words[1] if len(words) > 1 else f"example.{words[0]}", block.text))
    return inputs


def _run(code: Code, inputs: list[tuple[str, str, str]], folder: Path, monkeypatch: pytest.MonkeyPatch):
    folder.mkdir()
    for _kind, name, text in inputs:
        (folder / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(folder)
    plans = [name for kind, name, _ in inputs if kind == "plan"]
    policies = [name for kind, name, _ in inputs if kind == "policy"]
    if code.name in TEST_MODE:
        from plangate.policy.testing import run_policy_tests

        return run_policy_tests(policies)
    from plangate.driver import check

    return check(plans, policies, {"announce_no_policy": True})


# ------------------------------------------------------------------------------------ sections


def test_every_code_has_its_section_in_code_order() -> None:
    sections = _sections(_docs())
    missing = [f"## {code.code} {code.name}" for code in CODES
               if sections.get(code.code, ("",))[0] != f"## {code.code} {code.name}"]
    assert not missing, "docs/diagnostics.md lacks these sections (or their headings differ): " + ", ".join(missing)
    registered = {code.code for code in CODES}
    extra = sorted(set(sections) - registered)
    assert not extra, f"sections for codes that are not registered: {extra}"
    assert list(sections) == [code.code for code in CODES], "sections are not in code order"


@pytest.mark.parametrize("code", CODES, ids=[code.code for code in CODES])
def test_section_says_severity_and_when(code: Code) -> None:
    _heading, lines = _sections(_docs()).get(code.code, ("", []))
    text = "\n".join(lines)
    assert f"**Severity:** {code.severity}" in text
    assert "**When it fires.**" in text
    assert "**Message**" in text


def test_every_code_has_a_golden_case() -> None:
    expected: set[str] = set()
    pattern = re.compile(r"#\s*expect:\s*([A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)*)")
    for path in GOLDEN.rglob("*"):
        if path.suffix in (".plan", ".policy"):
            for line in path.read_bytes().decode("utf-8", errors="replace").split("\n"):
                match = pattern.search(line)
                if match:
                    expected.update(name.strip() for name in match.group(1).split(","))
    missing = [f"{code.code} {code.name}" for code in CODES if code.name not in expected and code.name not in NO_GOLDEN]
    assert not missing, "no golden case expects: " + ", ".join(missing)
    needless = sorted(name for name in NO_GOLDEN if name in expected)
    assert not needless, f"these have golden cases now; take them out of NO_GOLDEN: {needless}"


# ------------------------------------------------------------------------------------- explain


def _explain(argument: str) -> tuple[int, str, str]:
    from plangate.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(["explain", argument])
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.parametrize("argument", ["PG101", "unknown-step", "pg101"])
def test_explain_prints_the_section(argument: str) -> None:
    heading, lines = _sections(_docs())["PG101"]
    code, out, _err = _explain(argument)
    assert code == 0
    assert out.startswith(heading + "\n")
    assert out.rstrip("\n") == "\n".join(lines).rstrip("\n")


def test_explain_every_code() -> None:
    sections = _sections(_docs())
    for item in CODES:
        code, out, _err = _explain(item.name)
        assert code == 0, item.name
        assert out.rstrip("\n") == "\n".join(sections[item.code][1]).rstrip("\n"), item.name


@pytest.mark.parametrize("argument", ["PG999", "no-such-diagnostic", ""])
def test_explain_unknown_code_exits_2(argument: str) -> None:
    code, out, err = _explain(argument)
    assert code == 2
    assert out == ""
    assert "not a diagnostic code" in err


# ------------------------------------------------------------------------------------ examples


@pytest.mark.parametrize("code", CODES, ids=[f"{code.code}-{code.name}" for code in CODES])
def test_section_examples(code: Code, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          request: pytest.FixtureRequest) -> None:
    _heading, lines = _sections(_docs())[code.code]
    examples = _examples(lines)
    bad = _inputs(examples.bad)
    if not bad:
        assert examples.message, "a section without examples still shows a message"
        pytest.skip(f"{code.name} has no runnable example (the section says why)")
    assert len(examples.message) == 1 and examples.message[0].info == "text", "one ```text message block"
    fixed = _inputs(examples.fixed)
    assert fixed, "a bad example needs a fixed one"
    pending = code.name in PENDING
    try:
        _check_examples(code, bad, fixed, examples, tmp_path, monkeypatch, request)
    except (AssertionError, Exception) as error:
        if pending:
            pytest.xfail(f"{code.name} is not produced yet: {str(error)[:300]}")
        raise


def _check_examples(code: Code, bad, fixed, examples: Examples, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    from plangate.diagnostics.render import format_diagnostic

    result = _run(code, bad, tmp_path / "bad", monkeypatch)
    produced = [item for item in result.diagnostics if item.name == code.name]
    assert produced, f"the bad example does not produce {code.name}"
    shown = "\n\n".join(format_diagnostic(item, result.sources, color=False) for item in produced) + "\n"
    if shown != examples.message[0].text:
        if request.config.getoption("--update") and code.name not in PENDING:
            _rewrite_message(code, shown)
        else:
            raise AssertionError(f"the message block of {code.code} differs from what the bad example produces "
                                 f"(`pytest tests/test_docs.py --update` rewrites it):\n{shown}")

    result = _run(code, fixed, tmp_path / "fixed", monkeypatch)
    left = [f"{item.severity.value}[{item.code}] {item.name}: {item.message}" for item in result.diagnostics
            if item.severity is not Severity.NOTE]
    assert not left, "the fixed example still has: " + "; ".join(left)


def _rewrite_message(code: Code, shown: str) -> None:
    text = _docs()
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line == f"## {code.code} {code.name}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start:end]
    message = _examples(section).message[0]
    replaced = section[:message.start] + shown.rstrip("\n").split("\n") + section[message.end:]
    DOCS.write_text("\n".join(lines[:start] + replaced + lines[end:]), encoding="utf-8")

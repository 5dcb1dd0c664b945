"""Renderers: diagnostics as text, JSON, SARIF 2.1.0, GitHub workflow commands or JUnit XML.

Detection never formats; it hands plain `Diagnostic`s here. Every renderer is a pure function of
its arguments and keeps the diagnostics in the order given (the caller sorts), so output is
reproducible. `files` names every input that was checked, including those with nothing to report:
summaries, SARIF artifacts and JUnit test cases count them.

Positions: a span resolves through the `SourceMap` to 1-based (line, column), columns in code
points; the end is exclusive (the position just after the last character), as in SARIF. A span
whose file is empty or missing from the map resolves to line 1, column 1 at both ends and renders
without a source excerpt; a span with an empty file has no location at all where a format allows.

Text snippets: a source line is shown with tabs expanded to stops of `TAB_WIDTH` cells, wide
characters taking two cells and control characters replaced by visible stand-ins; the underline is
measured in the same cells, so the carets sit exactly under the span whatever the line holds. A
span that runs over several lines is underlined from its start to the end of its first line and
says on which line it ends. Secondary labels are underlined with `-` and carry their message; a
label in another file gets its own `:::` excerpt. ANSI colour is added only when asked for, and no
control character from the input reaches the terminal.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import unicodedata
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import quote

from plangate.diagnostics.model import Diagnostic, Severity, summarize
from plangate.diagnostics.registry import CODES, Code
from plangate.source import Position, SourceFile, SourceMap, Span

FORMATS = ("text", "json", "sarif", "github", "junit")
TAB_WIDTH = 4
SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/plangate/plangate"

_ORIGIN = Position(1, 1)
_RULE_INDEX = {code.code: index for index, code in enumerate(CODES)}


def render(
    diagnostics: list[Diagnostic],
    sources: SourceMap,
    format: str,
    *,
    files: list[str],
    color: bool = False,
    tool_version: str,
    strict: bool = False,
) -> str:
    """Render `diagnostics` in one of `FORMATS`; `color` only affects `text`, `strict` (warnings
    fail, as with `--strict`) only `junit`."""
    match format:
        case "text":
            return render_text(diagnostics, sources, files=files, color=color)
        case "json":
            return render_json(diagnostics, sources, files=files)
        case "sarif":
            return render_sarif(diagnostics, sources, files=files, tool_version=tool_version)
        case "github":
            return render_github(diagnostics, sources)
        case "junit":
            return render_junit(diagnostics, sources, files=files, strict=strict)
    raise ValueError(f"unknown format `{format}`; expected one of {', '.join(FORMATS)}")


def summary_line(diagnostics: list[Diagnostic], file_count: int) -> str:
    """`2 errors, 1 warning in 3 files`, or `no problems in 3 files`."""
    summary = summarize(diagnostics, file_count)
    counts = [
        _plural(count, word)
        for count, word in ((summary.errors, "error"), (summary.warnings, "warning"), (summary.notes, "note"))
        if count
    ]
    return f"{', '.join(counts) or 'no problems'} in {_plural(file_count, 'file')}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _range(span: Span, sources: SourceMap) -> tuple[Position, Position]:
    resolved = sources.range(span)
    return resolved if resolved is not None else (_ORIGIN, _ORIGIN)


def _location(span: Span, sources: SourceMap) -> str:
    start, _ = _range(span, sources)
    return f"{one_line(span.file)}:{start.line}:{start.column}"


def _full_message(item: Diagnostic) -> str:
    """The message followed by its notes and help, one per line (for formats with one text field)."""
    extra = [f"note: {note}" for note in item.notes]
    if item.help:
        extra.append(f"help: {item.help}")
    return "\n".join([item.message, *extra])


# --- text ------------------------------------------------------------------------------------------

_SEVERITY_STYLE = {Severity.ERROR: "1;31", Severity.WARNING: "1;33", Severity.NOTE: "1;36"}
_GUTTER_STYLE = "1;34"
_LABEL_STYLE = "1;34"
_BOLD = "1"


@dataclass(frozen=True)
class _Painter:
    color: bool

    def __call__(self, text: str, style: str) -> str:
        if not self.color or not text:
            return text
        return f"\x1b[{style}m{text}\x1b[0m"


def _visible_char(char: str) -> str:
    """A stand-in for a control character (its Unicode control picture, or U+FFFD)."""
    point = ord(char)
    if point < 0x20:
        return chr(0x2400 + point)
    if point == 0x7F:
        return "\u2421"
    if 0x80 <= point < 0xA0:
        return "\ufffd"
    return char


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    """`text` with every control character but tab and newline made visible."""
    return _CONTROL.sub(lambda match: _visible_char(match.group()), text)


_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """`text` with every control character made visible, newline and tab too. A message and a file
    name are one line each; a newline in them comes from the input (a file name, a rule's name)
    and would start a line of its own, which a CI log may read as a command (`::error`). The
    runtime's commands show what a journal holds through it too (`terminal_text`)."""
    return _ANY_CONTROL.sub(lambda match: _visible_char(match.group()), text)


def unspoofed(text: str) -> str:
    """`text` with invisible and reordering characters (bidi overrides, zero-width marks: Unicode
    format characters) and controls written as `\\uXXXX`: what is approved must read as it is."""
    return "".join(char if unicodedata.category(char) not in ("Cf", "Cc") else
                   f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}" for char in text)


def terminal_text(text: str) -> str:
    """Text that a command prints outside a diagnostic and that may quote its input or a journal
    (`run`, `resume`, `status`, `log`, `abort`, their errors; the lines of `test` and `policy
    diff`; `--format json` keeps it as it is): a tool's error message, a reason, a rule's or a
    test's name may hold anything. Each control character is shown as `check` shows one, by its
    control picture (`␛` for ESC, `␊` for a newline: no escape sequence reaches the terminal, and a
    line stays one line), and each invisible or reordering character (a bidi override) as
    `approve` shows one, as its `\\uXXXX` escape (`unspoofed`), so the text reads as it is."""
    return unspoofed(one_line(text))


def _cell_width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _layout(line: str) -> tuple[str, list[int]]:
    """The line as displayed, and the display cell where each character (and the line's end) starts."""
    shown: list[str] = []
    cells: list[int] = []
    cell = 0
    for char in line:
        cells.append(cell)
        if char == "\t":
            width = TAB_WIDTH - cell % TAB_WIDTH
            shown.append(" " * width)
        else:
            visible = _visible_char(char)
            width = _cell_width(visible)
            shown.append(visible)
        cell += width
    cells.append(cell)
    return "".join(shown), cells


@dataclass(frozen=True)
class _Mark:
    """One underline: the primary span (`^`, no message) or a label (`-`, with its message)."""

    span: Span
    message: str
    primary: bool


@dataclass(frozen=True)
class _Underline:
    line: int
    start: int  # character indexes in the line: where the underline starts and ends
    end: int
    text: str
    primary: bool


MAX_SHOWN_CHARS = 240  # of a longer line, only a window around its marks is shown
_CONTEXT_CHARS = 60  # shown before and after the marks in such a window


def _underline(mark: _Mark, source: SourceFile) -> _Underline:
    first = source.position(mark.span.start)
    last = source.position(max(mark.span.start, mark.span.end - 1))
    line_start, line_end = source.line_bounds(first.line)
    length = line_end - line_start
    start_index = min(first.column - 1, length)
    if last.line > first.line:
        end_index = length
        note = f"(to line {last.line})"
        text = f"{mark.message} {note}" if mark.message else note
    else:
        end_index = min(last.column if mark.span.end > mark.span.start else start_index, length)
        text = mark.message
    return _Underline(first.line, start_index, end_index, text, mark.primary)


def _window(underlines: list[_Underline], length: int) -> tuple[int, int]:
    """The characters of a line to show: all of it, or of a long line (a plan written on one line)
    a window around its marks, at most `MAX_SHOWN_CHARS` long."""
    if length <= MAX_SHOWN_CHARS:
        return 0, length
    low = max(0, min(item.start for item in underlines) - _CONTEXT_CHARS)
    high = min(length, max(item.end for item in underlines) + _CONTEXT_CHARS, low + MAX_SHOWN_CHARS)
    return low, high


def _excerpt(marks: list[_Mark], source: SourceFile, style: str, paint: _Painter) -> list[tuple[str, str]]:
    """(gutter, body) rows: each marked line, then its underlines; `...` where lines are skipped.
    A long line is cut to a window around its marks, with `…` where text is left out."""
    underlines = sorted((_underline(mark, source) for mark in marks),
                        key=lambda item: (item.line, not item.primary, item.start))
    rows: list[tuple[str, str]] = []
    previous_line = None
    for line, group in itertools.groupby(underlines, key=lambda item: item.line):
        on_line = list(group)
        if previous_line is not None and line > previous_line + 1:
            rows.append(("...", ""))
        previous_line = line
        line_start, line_end = source.line_bounds(line)
        low, high = _window(on_line, line_end - line_start)
        shown, cells = _layout(source.text[line_start + low:line_start + high])
        shift = 1 if low > 0 else 0
        rows.append((str(line), ("…" if low > 0 else "") + shown + ("…" if high < line_end - line_start else "")))
        for item in on_line:
            start = min(max(item.start - low, 0), high - low)
            end = min(max(item.end - low, start), high - low)
            marker = ("^" if item.primary else "-") * max(1, cells[end] - cells[start])
            body = marker + (f" {_visible(item.text)}" if item.text else "")
            rows.append(("", " " * (cells[start] + shift) + paint(body, style if item.primary else _LABEL_STYLE)))
    return rows


def format_diagnostic(item: Diagnostic, sources: SourceMap, *, color: bool = False) -> str:
    """One diagnostic as rustc-like text: header, source excerpts, then `= note:` and `= help:`."""
    paint = _Painter(color)
    style = _SEVERITY_STYLE[item.severity]
    header = (
        (f"{_location(item.span, sources)}: " if item.file else "")
        + paint(f"{item.severity.value}[{item.code}] {item.name}", style)
        + paint(": " + one_line(item.message), _BOLD)
    )

    files: dict[str, list[_Mark]] = {}
    unplaced: list[_Mark] = []
    for mark in [_Mark(item.span, "", True), *(_Mark(label.span, label.message, False) for label in item.labels)]:
        if mark.span.file and mark.span.file in sources:
            files.setdefault(mark.span.file, []).append(mark)
        elif not mark.primary:
            unplaced.append(mark)

    blocks: list[tuple[str | None, list[tuple[str, str]]]] = []
    for name, marks in files.items():
        source = sources.get(name)
        heading = None if name == item.file else _location(min(marks, key=lambda m: m.span.start).span, sources)
        blocks.append((heading, _excerpt(marks, source, style, paint)))

    trailer = [
        ("note", f"{mark.message} (at {_location(mark.span, sources)})" if mark.span.file else mark.message)
        for mark in unplaced
    ]
    trailer += [("note", note) for note in item.notes]
    if item.help:
        trailer.append(("help", item.help))

    width = max([1, *(len(gutter) for _, rows in blocks for gutter, _ in rows if gutter != "...")])
    bar = paint(" " * width + " |", _GUTTER_STYLE)
    out = [header]
    for heading, rows in blocks:
        if heading is not None:
            out.append(paint(" " * width + "::: ", _GUTTER_STYLE) + heading)
        out.append(bar)
        for gutter, body in rows:
            if gutter == "...":
                out.append(paint("...", _GUTTER_STYLE))
            else:
                out.append((paint(f"{gutter:>{width}} |", _GUTTER_STYLE) + f" {body}").rstrip())
    if trailer:
        if blocks:
            out.append(bar)
        for kind, text in trailer:  # one line each, as the message: a line break in one comes from the input
            out.append(" " * width + " = " + paint(f"{kind}:", _BOLD) + f" {one_line(text)}")
    return "\n".join(out)


def render_text(diagnostics: list[Diagnostic], sources: SourceMap, *, files: list[str], color: bool = False) -> str:
    paint = _Painter(color)
    blocks = [format_diagnostic(item, sources, color=color) for item in diagnostics]
    blocks.append(paint(summary_line(diagnostics, len(files)), _BOLD))
    return "\n\n".join(blocks) + "\n"


# --- json ------------------------------------------------------------------------------------------


def _json_span(span: Span, sources: SourceMap) -> dict:
    start, end = _range(span, sources)
    return {
        "start": {"line": start.line, "column": start.column},
        "end": {"line": end.line, "column": end.column},
    }


def _json_diagnostic(item: Diagnostic, sources: SourceMap) -> dict:
    return {
        "code": item.code,
        "name": item.name,
        "severity": item.severity.value,
        "message": item.message,
        "file": item.file,
        "span": _json_span(item.span, sources),
        "notes": list(item.notes),
        "help": item.help if item.help is not None else f"`plangate explain {item.code}` describes this diagnostic",
        "labels": [
            {"message": label.message, "file": label.span.file, "span": _json_span(label.span, sources)}
            for label in item.labels
        ],
    }


def render_json(diagnostics: list[Diagnostic], sources: SourceMap, *, files: list[str],
                tests: list[dict] | None = None) -> str:
    return json.dumps(json_document(diagnostics, sources, files=files, tests=tests), indent=2, ensure_ascii=False) + "\n"


def json_document(diagnostics: list[Diagnostic], sources: SourceMap, *, files: list[str],
                  tests: list[dict] | None = None) -> dict:
    """The contract's object (spec §5), as data; each diagnostic also carries its `labels`. For
    `plangate test`, `tests` lists every test run (`policy`, `name`, `file`, `passed`, `decided`)
    and the summary counts them (`tests`, `passed`, `failed`)."""
    summary = summarize(diagnostics, len(files))
    document: dict = {
        "version": 1,
        "diagnostics": [_json_diagnostic(item, sources) for item in diagnostics],
        "summary": {"errors": summary.errors, "warnings": summary.warnings, "files": summary.files},
    }
    if tests is not None:
        passed = sum(1 for test in tests if test["passed"])
        document["tests"] = tests
        document["summary"].update({"tests": len(tests), "passed": passed, "failed": len(tests) - passed})
    return document


# --- sarif -----------------------------------------------------------------------------------------


def _from_workspace(path: str) -> str:
    """`path` as code scanning and pull-request annotations look files up: relative to the working
    directory (a CI job runs in the repository's root) when it lies under it, with `/`; any other
    path absolute."""
    try:
        for start in _working_directories():
            relative = os.path.relpath(path, start)
            if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
                return relative.replace(os.sep, "/")
        return os.path.abspath(path).replace(os.sep, "/")
    except (ValueError, OSError):  # another drive; a working directory that no longer exists
        return path.replace(os.sep, "/")


def _working_directories() -> list[str]:
    """The working directory as the system has it, and as the shell named it (`$PWD`, when that is
    the same directory reached through a symbolic link): a path given through the link is under it."""
    found = [os.getcwd()]
    logical = os.environ.get("PWD")
    if logical and os.path.isabs(logical) and logical != found[0]:
        try:
            if os.path.samefile(logical, found[0]):
                found.append(logical)
        except OSError:
            pass
    return found


def _sarif_uri(path: str) -> str:
    """A relative reference for a file under the working directory, else a `file:` URI."""
    path = _from_workspace(path)
    if os.path.isabs(path):
        return "file://" + quote(("" if path.startswith("/") else "/") + path, safe="/:")
    return quote(path, safe="/")


def _sarif_rule(code: Code) -> dict:
    return {
        "id": code.code,
        "name": code.name,
        "shortDescription": {"text": code.summary},
        "fullDescription": {"text": f"{code.code} {code.name}: {code.summary}"},
        "helpUri": code.anchor,
        "help": {
            "text": f"{code.help or code.summary}\n\nsee {code.anchor}",
            "markdown": f"{code.help or code.summary}\n\nsee [{code.code} {code.name}]({code.anchor})",
        },
        "defaultConfiguration": {"level": code.severity},
    }


def _sarif_location(span: Span, sources: SourceMap, artifacts: dict[str, int]) -> dict:
    if not span.file:
        return {}
    start, end = _range(span, sources)
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": _sarif_uri(span.file), "index": artifacts[span.file]},
            "region": {
                "startLine": start.line,
                "startColumn": start.column,
                "endLine": end.line,
                "endColumn": end.column,
            },
        }
    }


def _sarif_result(item: Diagnostic, sources: SourceMap, artifacts: dict[str, int]) -> dict:
    result: dict = {"ruleId": item.code}
    if item.code in _RULE_INDEX:
        result["ruleIndex"] = _RULE_INDEX[item.code]
    result["level"] = item.severity.value
    result["message"] = {"text": _full_message(item)}
    if item.file:
        result["locations"] = [_sarif_location(item.span, sources, artifacts)]
    if item.labels:
        result["relatedLocations"] = [
            {"id": index, **_sarif_location(label.span, sources, artifacts), "message": {"text": label.message}}
            for index, label in enumerate(item.labels)
        ]
    return result


def render_sarif(diagnostics: list[Diagnostic], sources: SourceMap, *, files: list[str], tool_version: str) -> str:
    """One SARIF 2.1.0 run; rules are every registered code, artifacts every file checked or cited."""
    artifacts: dict[str, int] = {}
    spans = [span for item in diagnostics for span in (item.span, *(label.span for label in item.labels))]
    for name in [*files, *(span.file for span in spans)]:
        if name and name not in artifacts:
            artifacts[name] = len(artifacts)
    log = {
        "$schema": SARIF_SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "plangate",
                        "version": tool_version,
                        "informationUri": INFORMATION_URI,
                        "rules": [_sarif_rule(code) for code in CODES],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "artifacts": [{"location": {"uri": _sarif_uri(name)}} for name in artifacts],
                "results": [_sarif_result(item, sources, artifacts) for item in diagnostics],
            }
        ],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


# --- github ----------------------------------------------------------------------------------------

_GITHUB_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def _escape_github_data(text: str) -> str:
    """GitHub's escapes for a workflow command's data, then any other control character made
    visible (an escape sequence would reach the log's terminal otherwise)."""
    return _visible(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _escape_github_property(text: str) -> str:
    return _escape_github_data(text).replace(":", "%3A").replace(",", "%2C")


def _github_command(item: Diagnostic, sources: SourceMap) -> str:
    properties: list[tuple[str, str]] = []
    if item.file:
        start, end = _range(item.span, sources)
        properties += [
            ("file", _from_workspace(item.file)),
            ("line", str(start.line)),
            ("col", str(start.column)),
            ("endLine", str(end.line)),
            ("endColumn", str(end.column)),
        ]
    properties.append(("title", f"{item.code} {item.name}"))
    listed = ",".join(f"{key}={_escape_github_property(value)}" for key, value in properties)
    return f"::{_GITHUB_COMMAND[item.severity]} {listed}::{_escape_github_data(_full_message(item))}"


def render_github(diagnostics: list[Diagnostic], sources: SourceMap) -> str:
    """One workflow command (`::error`, `::warning`, `::notice`) per diagnostic."""
    return "".join(_github_command(item, sources) + "\n" for item in diagnostics)


# --- junit -----------------------------------------------------------------------------------------

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NO_FILE_CASE = "(no file)"


def _xml_text(text: str) -> str:
    """`text` with the characters XML 1.0 cannot hold replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def render_junit(diagnostics: list[Diagnostic], sources: SourceMap, *, files: list[str], strict: bool = False) -> str:
    """One test case per file: its errors are `<failure>`s (and, `strict`, its warnings), the rest
    `<system-out>`.

    `tests` counts test cases and `failures` the test cases with at least one failure. A diagnostic
    whose file was not among `files` gets a test case of its own, so that no error is dropped.
    """
    by_file: dict[str, list[Diagnostic]] = {name: [] for name in files}
    for item in diagnostics:
        by_file.setdefault(item.file or _NO_FILE_CASE, []).append(item)
    return _junit_document([("plangate", name, found, _has_failure(found, strict)) for name, found in by_file.items()],
                           sources, strict)


def render_test_junit(outcomes: list, diagnostics: list[Diagnostic], sources: SourceMap, *,
                      files: list[str], strict: bool = False) -> str:
    """`plangate test` as JUnit: one test case per policy `test` block (classname: its file), failed
    when it does not get its expected decision or reports an error; then one per file for what
    belongs to no test (a policy that does not parse, a malformed rule)."""
    owned = {id(item) for outcome in outcomes for item in outcome.problems}
    cases = [(outcome.file or outcome.policy, outcome.name, outcome.problems,
              not outcome.passed or _has_failure(outcome.problems, strict)) for outcome in outcomes]
    by_file: dict[str, list[Diagnostic]] = {}
    for item in diagnostics:
        if id(item) not in owned:
            by_file.setdefault(item.file or _NO_FILE_CASE, []).append(item)
    cases.extend(("plangate", name, found, _has_failure(found, strict)) for name, found in by_file.items())
    return _junit_document(cases, sources, strict)


def _fails(item: Diagnostic, strict: bool) -> bool:
    return item.severity is Severity.ERROR or (strict and item.severity is Severity.WARNING)


def _has_failure(found: list[Diagnostic], strict: bool = False) -> bool:
    return any(_fails(item, strict) for item in found)


def _junit_document(cases: list[tuple[str, str, list[Diagnostic], bool]], sources: SourceMap,
                    strict: bool = False) -> str:
    """cases: (classname, name, diagnostics, failed). Errors (and, `strict`, warnings) are
    `<failure>`s, the rest `<system-out>`."""
    counts = {"tests": str(len(cases)), "failures": str(sum(failed for *_, failed in cases)), "errors": "0"}
    root = ET.Element("testsuites", {"name": "plangate", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": "plangate", **counts, "skipped": "0"})
    for classname, name, found, failed in cases:
        case = ET.SubElement(suite, "testcase", {"classname": _xml_text(classname), "name": _xml_text(name)})
        output = []
        for item in found:
            text = _xml_text(format_diagnostic(item, sources))
            if _fails(item, strict):
                failure = ET.SubElement(
                    case, "failure", {"type": f"{item.code} {item.name}", "message": _xml_text(item.message)}
                )
                failure.text = text
            else:
                output.append(text)
        if failed and not _has_failure(found, strict):
            ET.SubElement(case, "failure", {"type": "failed", "message": "the test did not pass"})
        if output:
            ET.SubElement(case, "system-out").text = "\n\n".join(output)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

"""The renderers: every format from hand-built diagnostics over real source files.

The text format is checked down to the caret (tabs, wide characters, multi-line spans, labels in
another file); JSON against the contract's exact keys; SARIF against the 2.1.0 schema, loaded from
`tests/data` so no network and no sibling checkout is needed; GitHub commands and their escaping;
JUnit by parsing it back.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from plangate.diagnostics.model import Diagnostic, Label, Severity, diagnostic
from plangate.diagnostics.registry import CODES
from plangate.diagnostics.render import (
    FORMATS,
    format_diagnostic,
    render,
    render_github,
    render_json,
    render_junit,
    render_sarif,
    render_text,
)
from plangate.source import SourceFile, SourceMap, Span

SCHEMA_COPY = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
SHARED_SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "sarif-schema-2.1.0.json"

PLAN = (
    "plan deploy {\n"
    "\tstep build { call ci.build }\n"
    "  step ship {\n"
    '    note "名前" call deploy.prod\n'
    "  }\n"
    "}\n"
)
POLICY = "policy base {\n  require approval for deploy.*\n}\n"
FILES = ["deploy.plan", "base.policy", "quiet.plan"]


def _span(source: SourceFile, needle: str, occurrence: int = 0) -> Span:
    start = -1
    for _ in range(occurrence + 1):
        start = source.text.index(needle, start + 1)
    return source.span(start, start + len(needle))


@pytest.fixture
def sources() -> SourceMap:
    source_map = SourceMap()
    source_map.add(SourceFile("deploy.plan", PLAN))
    source_map.add(SourceFile("base.policy", POLICY))
    source_map.add(SourceFile("quiet.plan", "plan quiet { step a { call x.y } }\n"))
    return source_map


@pytest.fixture
def diagnostics(sources: SourceMap) -> list[Diagnostic]:
    plan, policy = sources.get("deploy.plan"), sources.get("base.policy")
    ship_start = PLAN.index("step ship")
    ship_end = PLAN.index("  }\n") + 3
    return [
        diagnostic(
            "approval-missing",
            _span(plan, "deploy.prod"),
            "step `ship` calls `deploy.prod` without an approval",
            labels=[
                Label(_span(plan, "ship"), "this step"),
                Label(_span(policy, "require approval for deploy.*"), "required here"),
            ],
            notes=["the policy asks for one approver", "first line\nsecond line"],
            help="add `approve by role ops`",
        ),
        diagnostic("unknown-tool", _span(plan, "ci.build"), "no catalogue entry matches `ci.build`"),
        diagnostic("unreachable-step", plan.span(ship_start, ship_end), "step `ship` can never run"),
        diagnostic("no-policy", Span("", 0, 0), "no policy was given"),
    ]


def _marker_row(rendered: str, line_number: int, marker: str) -> tuple[str, str]:
    """The source row of `line_number` and the first row under it that holds a `marker` run."""
    rows = rendered.splitlines()
    for index, row in enumerate(rows):
        if re.match(rf"^ *{line_number} \| ", row):
            for below in rows[index + 1:]:
                if re.match(r"^ *\| ", below) and marker in below:
                    return row, below
    raise AssertionError(f"no `{marker}` row under line {line_number}:\n{rendered}")


def _underlined(rendered: str, line_number: int, marker: str = "^") -> str:
    """The source text above the `marker` run (rows hold only single-width characters)."""
    row, below = _marker_row(rendered, line_number, marker)
    run = re.search(rf"{re.escape(marker)}+", below)
    return row[run.start():run.end()]


# --- text ------------------------------------------------------------------------------------------


def test_text_header_has_location_code_name_and_message(sources, diagnostics):
    rendered = render_text(diagnostics, sources, files=FILES)
    assert rendered.startswith(
        "deploy.plan:4:20: error[PG304] approval-missing: step `ship` calls `deploy.prod` without an approval\n"
    )
    assert "deploy.plan:2:20: error[PG301] unknown-tool: no catalogue entry matches `ci.build`" in rendered
    assert "deploy.plan:3:3: warning[PG109] unreachable-step: step `ship` can never run" in rendered
    assert "\nnote[PG315] no-policy: no policy was given" in rendered


def test_text_caret_sits_under_the_span_after_a_tab(sources, diagnostics):
    rendered = format_diagnostic(diagnostics[1], sources)
    assert _underlined(rendered, 2) == "ci.build"
    row, _ = _marker_row(rendered, 2, "^")
    assert "\t" not in rendered and row == "2 |     step build { call ci.build }"


def test_text_caret_counts_wide_characters_as_two_cells(sources, diagnostics):
    rendered = format_diagnostic(diagnostics[0], sources)
    row, below = _marker_row(rendered, 4, "^")
    assert row == '4 |     note "名前" call deploy.prod'
    # `名前` takes four cells but two characters, so the carets start two columns further right.
    assert below == "  |                      ^^^^^^^^^^^"


def test_text_labels_are_underlined_with_their_message(sources, diagnostics):
    rendered = format_diagnostic(diagnostics[0], sources)
    assert _underlined(rendered, 3, "-") == "ship"
    _, below = _marker_row(rendered, 3, "-")
    assert below.endswith("---- this step")
    assert " ::: base.policy:2:3\n" in rendered
    assert _underlined(rendered.split(":::", 1)[1], 2, "-") == "require approval for deploy.*"


def test_text_notes_and_help_follow_the_excerpt_one_line_each(sources, diagnostics):
    """A line break in a note or help comes from the input (a decision's text, a rule's name): it is
    shown as a control picture, as in a message, never as a line a CI log could take for its own."""
    rendered = format_diagnostic(diagnostics[0], sources)
    tail = rendered.splitlines()[-4:]
    assert tail == [
        "  |",
        "  = note: the policy asks for one approver",
        "  = note: first line\u240asecond line",
        "  = help: add `approve by role ops`",
    ]
    forged = diagnostic("open-decision", sources.get("deploy.plan").span(0, 4), "pending",
                        help='record it: `decision "a\n::error file=x.py,line=1::forged" resolved "…"`')
    (line,) = [line for line in format_diagnostic(forged, sources).splitlines() if "::error" in line]
    assert line.lstrip().startswith('= help: record it: `decision "a\u240a::error')


def test_text_multi_line_span_underlines_the_first_line_and_names_the_last(sources, diagnostics):
    rendered = format_diagnostic(diagnostics[2], sources)
    assert _underlined(rendered, 3) == "step ship {"
    _, below = _marker_row(rendered, 3, "^")
    assert below.endswith("^^^^^^^^^^^ (to line 5)")


def test_text_zero_width_span_gets_one_caret(sources):
    plan = sources.get("deploy.plan")
    end_of_line = PLAN.index("\n")
    rendered = format_diagnostic(
        diagnostic("syntax-error", plan.span(end_of_line, end_of_line), "expected `}`"), sources
    )
    row, below = _marker_row(rendered, 1, "^")
    assert below.index("^") == len(row) and below.count("^") == 1


def test_text_summary_line(sources, diagnostics):
    assert render_text(diagnostics, sources, files=FILES).endswith("\n\n2 errors, 1 warning, 1 note in 3 files\n")
    assert render_text([], sources, files=FILES) == "no problems in 3 files\n"
    assert render_text(diagnostics[1:2], sources, files=["deploy.plan"]).endswith("1 error in 1 file\n")


def test_text_colour_only_when_asked(sources, diagnostics):
    assert "\x1b" not in render_text(diagnostics, sources, files=FILES)
    coloured = render_text(diagnostics, sources, files=FILES, color=True)
    assert "\x1b[1;31merror[PG304] approval-missing\x1b[0m" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == render_text(diagnostics, sources, files=FILES)


def test_text_keeps_control_characters_from_the_input_off_the_terminal():
    sources = SourceMap()
    plan = sources.add(SourceFile("evil.plan", "step \x1b[31mred\r\n"))
    rendered = render_text(
        [diagnostic("syntax-error", _span(plan, "red"), "unexpected `\x1b[2J`")], sources, files=["evil.plan"]
    )
    assert "\x1b" not in rendered and "\r" not in rendered
    assert "2 |" not in rendered and "(to line" not in rendered
    assert _underlined(rendered, 1) == "red"


def test_text_and_github_keep_control_characters_of_file_names_and_messages_off_the_log():
    """A file name holding a newline would start a line of its own (`::error …`, which a CI log
    reads as a command); an escape sequence in a name or a message would reach the terminal."""
    sources = SourceMap()
    name = "a\n::error file=x::INJECT\x1b[31m.plan"
    plan = sources.add(SourceFile(name, "step s\n"))
    item = diagnostic("duplicate-step", _span(plan, "s"), "rule `r\x1b]0;TITLE\x07` fires",
                      labels=[Label(_span(plan, "step"), "there")])
    text = render_text([item], sources, files=[name])
    assert "\x1b" not in text and "\x07" not in text
    assert not any(line.startswith("::") for line in text.splitlines())
    github = render_github([item], sources)
    assert "\x1b" not in github and "\x07" not in github and len(github.splitlines()) == 1


def test_text_renders_without_source(sources):
    missing = diagnostic(
        "unreadable-input", Span("ghost.plan", 40, 50), "cannot read `ghost.plan`",
        labels=[Label(Span("gone.policy", 3, 4), "from here")],
    )
    rendered = format_diagnostic(missing, sources)
    assert rendered == (
        "ghost.plan:1:1: error[PG003] unreadable-input: cannot read `ghost.plan`\n"
        "  = note: from here (at gone.policy:1:1)"
    )


def test_text_marks_skipped_lines(sources):
    plan = sources.get("deploy.plan")
    item = diagnostic(
        "dependency-cycle", _span(plan, "plan deploy"), "the cycle goes `a` → `b`",
        labels=[Label(_span(plan, "deploy.prod"), "back here")],
    )
    rows = format_diagnostic(item, sources).splitlines()
    assert rows[rows.index("  | ^^^^^^^^^^^") + 1] == "..."


# --- json ------------------------------------------------------------------------------------------

CONTRACT_DIAGNOSTIC_KEYS = {"code", "name", "severity", "message", "file", "span", "notes", "help"}


def test_json_matches_the_contract(sources, diagnostics):
    document = json.loads(render_json(diagnostics, sources, files=FILES))
    assert set(document) == {"version", "diagnostics", "summary"}
    assert document["version"] == 1
    assert document["summary"] == {"errors": 2, "warnings": 1, "files": 3}
    for entry, item in zip(document["diagnostics"], diagnostics, strict=True):
        assert set(entry) == CONTRACT_DIAGNOSTIC_KEYS | {"labels"}
        assert (entry["code"], entry["name"], entry["severity"]) == (item.code, item.name, item.severity.value)
        assert set(entry["span"]) == {"start", "end"}
        assert set(entry["span"]["start"]) == set(entry["span"]["end"]) == {"line", "column"}


def test_json_positions_and_fields(sources, diagnostics):
    first, _, multi, fileless = json.loads(render_json(diagnostics, sources, files=FILES))["diagnostics"]
    assert first["file"] == "deploy.plan"
    assert first["span"] == {"start": {"line": 4, "column": 20}, "end": {"line": 4, "column": 31}}
    assert first["notes"] == ["the policy asks for one approver", "first line\nsecond line"]
    assert first["help"] == "add `approve by role ops`"
    assert first["labels"][1] == {
        "message": "required here",
        "file": "base.policy",
        "span": {"start": {"line": 2, "column": 3}, "end": {"line": 2, "column": 32}},
    }
    assert multi["span"] == {"start": {"line": 3, "column": 3}, "end": {"line": 5, "column": 4}}
    assert fileless["file"] == "" and fileless["notes"] == []
    assert fileless["help"] == f"`plangate explain {fileless['code']}` describes this diagnostic"  # never null
    assert fileless["span"]["start"] == fileless["span"]["end"] == {"line": 1, "column": 1}


def test_json_keeps_the_given_order(sources, diagnostics):
    reordered = list(reversed(diagnostics))
    codes = [entry["code"] for entry in json.loads(render_json(reordered, sources, files=FILES))["diagnostics"]]
    assert codes == [item.code for item in reordered]


# --- sarif -----------------------------------------------------------------------------------------


def _validate_sarif(log: dict) -> None:
    schema = json.loads(SCHEMA_COPY.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    validator(schema).validate(log)


def test_schema_copy_matches_the_shared_schema():
    if not SHARED_SCHEMA.exists():
        pytest.skip("no shared checkout next to this one")
    assert json.loads(SCHEMA_COPY.read_text(encoding="utf-8")) == json.loads(SHARED_SCHEMA.read_text(encoding="utf-8"))


def test_sarif_validates_against_the_schema(sources, diagnostics):
    missing = diagnostic("unreadable-input", Span("ghost plan.plan", 3, 9), "cannot read it")
    _validate_sarif(json.loads(render_sarif([*diagnostics, missing], sources, files=FILES, tool_version="0.1.0")))
    _validate_sarif(json.loads(render_sarif([], sources, files=[], tool_version="0.1.0")))


def test_sarif_driver_has_a_rule_for_every_code(sources, diagnostics):
    log = json.loads(render_sarif(diagnostics, sources, files=FILES, tool_version="9.8.7"))
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json" and log["version"] == "2.1.0"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("plangate", "9.8.7")
    assert driver["informationUri"].startswith("https://")
    assert [rule["id"] for rule in driver["rules"]] == [code.code for code in CODES]
    for rule, code in zip(driver["rules"], CODES, strict=True):
        assert rule["name"] == code.name
        assert rule["shortDescription"]["text"] == code.summary
        assert rule["helpUri"] == code.anchor
        assert rule["defaultConfiguration"]["level"] == code.severity
        assert rule["fullDescription"]["text"] and rule["help"]["text"]


def test_sarif_results_and_artifacts(sources, diagnostics):
    run = json.loads(render_sarif(diagnostics, sources, files=FILES, tool_version="0.1.0"))["runs"][0]
    assert [artifact["location"]["uri"] for artifact in run["artifacts"]] == FILES
    rules = run["tool"]["driver"]["rules"]
    first, second, third, fileless = run["results"]
    for result, item in zip(run["results"], diagnostics, strict=True):
        assert result["ruleId"] == item.code == rules[result["ruleIndex"]]["id"]
        assert result["level"] == item.severity.value
    assert first["message"]["text"] == (
        "step `ship` calls `deploy.prod` without an approval\n"
        "note: the policy asks for one approver\nnote: first line\nsecond line\nhelp: add `approve by role ops`"
    )
    (location,) = first["locations"]
    assert location["physicalLocation"] == {
        "artifactLocation": {"uri": "deploy.plan", "index": 0},
        "region": {"startLine": 4, "startColumn": 20, "endLine": 4, "endColumn": 31},
    }
    related = first["relatedLocations"]
    assert [entry["message"]["text"] for entry in related] == ["this step", "required here"]
    assert related[1]["physicalLocation"]["artifactLocation"] == {"uri": "base.policy", "index": 1}
    assert third["locations"][0]["physicalLocation"]["region"]["endLine"] == 5
    assert "locations" not in fileless and "relatedLocations" not in second


def test_sarif_adds_artifacts_for_files_only_diagnostics_name(sources):
    missing = diagnostic("unreadable-input", Span("dir/ghost plan.plan", 3, 9), "cannot read it")
    run = json.loads(render_sarif([missing], sources, files=["deploy.plan"], tool_version="0.1.0"))["runs"][0]
    assert [artifact["location"]["uri"] for artifact in run["artifacts"]] == ["deploy.plan", "dir/ghost%20plan.plan"]
    assert run["results"][0]["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "dir/ghost%20plan.plan", "index": 1},
        "region": {"startLine": 1, "startColumn": 1, "endLine": 1, "endColumn": 1},
    }


def test_sarif_and_github_name_files_as_the_repository_does(tmp_path, monkeypatch):
    """Code scanning and annotations look files up relative to the repository's root, where CI
    runs: an absolute path under the working directory is written relative to it, any other path
    as an absolute `file:` URI (SARIF) or path (GitHub)."""
    monkeypatch.chdir(tmp_path)
    inside, outside, climbing = str(tmp_path / "plans" / "a b.plan"), "/elsewhere/b.plan", "../c.plan"
    source_map = SourceMap()
    found = []
    for name in (inside, outside, climbing):
        source_map.add(SourceFile(name, "plan p { }\n"))
        found.append(diagnostic("unknown-step", Span(name, 5, 6), "m"))
    run = json.loads(render_sarif(found, source_map, files=[inside, outside, climbing], tool_version="0"))["runs"][0]
    above = (tmp_path.parent / "c.plan").as_posix()
    assert [artifact["location"]["uri"] for artifact in run["artifacts"]] == [
        "plans/a%20b.plan", "file:///elsewhere/b.plan", "file://" + above]
    assert [line.split(",")[0] for line in render_github(found, source_map).splitlines()] == [
        "::error file=plans/a b.plan", "::error file=/elsewhere/b.plan", "::error file=" + above]


def test_a_path_through_the_link_the_shell_names_the_working_directory_by_is_under_it(tmp_path, monkeypatch):
    import os

    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "link")
    monkeypatch.setenv("PWD", str(tmp_path / "link"))
    name = str(tmp_path / "link" / "t.plan")
    source_map = SourceMap()
    source_map.add(SourceFile(name, "plan p { }\n"))
    found = [diagnostic("unknown-step", Span(name, 5, 6), "m")]
    assert render_github(found, source_map).startswith("::error file=t.plan,")
    monkeypatch.setenv("PWD", str(tmp_path))  # a $PWD that is another directory is not taken
    assert render_github(found, source_map).startswith(f"::error file={tmp_path.as_posix()}/link/t.plan,")


def test_sarif_and_github_name_files_as_given_when_the_working_directory_is_gone(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    source_map = SourceMap()
    source_map.add(SourceFile("/abs/b.plan", "plan p { }\n"))
    found = [diagnostic("unknown-step", Span("/abs/b.plan", 5, 6), "m")]
    run = json.loads(render_sarif(found, source_map, files=["/abs/b.plan"], tool_version="0"))["runs"][0]
    assert run["artifacts"][0]["location"]["uri"] == "file:///abs/b.plan"
    assert render_github(found, source_map).startswith("::error file=/abs/b.plan,")


# --- github ----------------------------------------------------------------------------------------


def test_github_one_command_per_diagnostic(sources, diagnostics):
    lines = render_github(diagnostics, sources).splitlines()
    assert lines == [
        "::error file=deploy.plan,line=4,col=20,endLine=4,endColumn=31,title=PG304 approval-missing::"
        "step `ship` calls `deploy.prod` without an approval%0Anote: the policy asks for one approver"
        "%0Anote: first line%0Asecond line%0Ahelp: add `approve by role ops`",
        "::error file=deploy.plan,line=2,col=20,endLine=2,endColumn=28,title=PG301 unknown-tool::"
        "no catalogue entry matches `ci.build`",
        "::warning file=deploy.plan,line=3,col=3,endLine=5,endColumn=4,title=PG109 unreachable-step::"
        "step `ship` can never run",
        "::notice title=PG315 no-policy::no policy was given",
    ]
    assert render_github([], sources) == ""


def test_github_escapes_data_and_properties():
    sources = SourceMap()
    source = sources.add(SourceFile("a,b:c%.plan", "x\n"))
    item = diagnostic("syntax-error", source.span(0, 1), "100% wrong,\r\nreally: yes")
    (line,) = render_github([item], sources).splitlines()
    assert line == (
        "::error file=a%2Cb%3Ac%25.plan,line=1,col=1,endLine=1,endColumn=2,title=PG001 syntax-error"
        "::100%25 wrong,%0D%0Areally: yes"
    )


# --- junit -----------------------------------------------------------------------------------------


def test_junit_one_case_per_file_with_failures_for_errors(sources, diagnostics):
    root = ET.fromstring(render_junit(diagnostics, sources, files=FILES))
    assert root.tag == "testsuites"
    (suite,) = root
    assert suite.get("name") == "plangate"
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == [*FILES, "(no file)"]
    assert {case.get("classname") for case in cases} == {"plangate"}
    for element in (root, suite):
        assert (element.get("tests"), element.get("failures"), element.get("errors")) == ("4", "1", "0")

    failures = cases[0].findall("failure")
    assert [failure.get("type") for failure in failures] == ["PG304 approval-missing", "PG301 unknown-tool"]
    assert failures[0].get("message") == diagnostics[0].message
    assert failures[0].text == format_diagnostic(diagnostics[0], sources)
    assert "warning[PG109] unreachable-step" in cases[0].findtext("system-out")
    assert not list(cases[1]) and not list(cases[2])
    assert "note[PG315] no-policy" in cases[3].findtext("system-out")


def test_junit_under_strict_fails_warnings_too_as_the_exit_code_does(sources, diagnostics):
    root = ET.fromstring(render_junit(diagnostics, sources, files=FILES, strict=True))
    cases = root.find("testsuite").findall("testcase")
    assert root.get("failures") == "1"
    assert [failure.get("type") for failure in cases[0].findall("failure")] == [
        "PG304 approval-missing", "PG301 unknown-tool", "PG109 unreachable-step"]
    assert cases[0].find("system-out") is None
    assert "note[PG315] no-policy" in cases[3].findtext("system-out") and cases[3].find("failure") is None


def test_junit_survives_characters_xml_cannot_hold():
    sources = SourceMap()
    source = sources.add(SourceFile("bad.plan", "\x01\x02\n"))
    item = diagnostic("syntax-error", source.span(0, 1), "unexpected `\x01`")
    root = ET.fromstring(render_junit([item], sources, files=["bad.plan"]))
    failure = root.find("testsuite/testcase/failure")
    assert failure.get("message") == "unexpected `\ufffd`"
    assert "1 | \u2401\u2402" in failure.text


# --- dispatch --------------------------------------------------------------------------------------


def test_render_dispatches_every_format(sources, diagnostics):
    expected = {
        "text": render_text(diagnostics, sources, files=FILES, color=True),
        "json": render_json(diagnostics, sources, files=FILES),
        "sarif": render_sarif(diagnostics, sources, files=FILES, tool_version="1.2.3"),
        "github": render_github(diagnostics, sources),
        "junit": render_junit(diagnostics, sources, files=FILES),
    }
    assert set(expected) == set(FORMATS)
    for name, text in expected.items():
        assert render(diagnostics, sources, name, files=FILES, color=True, tool_version="1.2.3") == text


def test_render_rejects_an_unknown_format(sources):
    with pytest.raises(ValueError, match="unknown format `yaml`"):
        render([], sources, "yaml", files=[], tool_version="0.1.0")


def test_severity_override_changes_every_format(sources, diagnostics):
    demoted = diagnostics[1].with_severity(Severity.WARNING)
    assert "warning[PG301]" in format_diagnostic(demoted, sources)
    assert render_github([demoted], sources).startswith("::warning ")
    assert json.loads(render_json([demoted], sources, files=FILES))["summary"]["warnings"] == 1
    assert ET.fromstring(render_junit([demoted], sources, files=FILES)).get("failures") == "0"


def test_a_long_line_is_shown_as_a_window_around_its_marks():
    from plangate.diagnostics import Label, diagnostic
    from plangate.diagnostics.render import format_diagnostic
    from plangate.source import SourceFile, SourceMap, Span

    text = "plan p { " + " ".join(f"step s{i} {{ call t.x() }}" for i in range(2000)) + " }\n"
    sources = SourceMap()
    sources.add(SourceFile("p.plan", text))
    start = text.index("step s1500")
    item = diagnostic("duplicate-step", Span("p.plan", start + 5, start + 10), "twice",
                      labels=[Label(Span("p.plan", start + 30, start + 34), "here")])
    lines = format_diagnostic(item, sources).split("\n")
    assert all(len(line) < 400 for line in lines)
    shown = lines[2].split("| ", 1)[1]
    assert shown.startswith("…") and shown.endswith("…") and "step s1500 { call t.x() }" in shown
    column = lines[3].index("^")
    assert lines[2][column:column + 5] == "s1500"  # the underline stands under the mark
    assert lines[4][lines[4].index("-"):].startswith("---- here")

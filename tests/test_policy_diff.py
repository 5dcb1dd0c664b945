"""`plangate policy diff OLD NEW`: comparisons by meaning, with witnesses that really differ.

- A call is allowed by a policy only when its tool is catalogued (or `unknown_tools warn`), its
  arguments fit the entry's `args` and no deny rule fires; `step.risk` is the catalogue's risk (or
  the declared one, if higher). A witness is a call one side allows and the other denies, with a
  tool that exists per the catalogues and arguments of their declared types, replayed on concrete
  values by each policy's evaluator.
- Requirements (check, rollback, idempotency, approvals per role) are compared on the calls both
  policies allow: a witness needs one and not the other, or a weaker approval.
- Rewrites that change nothing are `rewritten` (listed, never counted): `--exit-code` exits 0.
- Changed warn rules show their old and new text, and a call on which they differ.
- Nothing undecided passes: a condition outside the solver's subset, or a timeout, is `changed`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plangate.cli import main
from plangate.driver import check
from plangate.policy.diff import diff_policies

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "policies" / "baseline.policy"
STRICT = ROOT / "policies" / "strict.policy"


def policy(body: str) -> str:
    return "policy p {\n" + body + "\n}\n"


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def diff(tmp_path: Path, capsys, old: str, new: str) -> tuple[int, dict, str]:
    """(exit code with --exit-code, the JSON report, the text report)."""
    old_path, new_path = tmp_path / "old.policy", tmp_path / "new.policy"
    old_path.write_text(old, encoding="utf-8")
    new_path.write_text(new, encoding="utf-8")
    code, out, err = run(capsys, "policy", "diff", old_path, new_path, "--format", "json", "--exit-code")
    assert code in (0, 1), err
    report = json.loads(out)
    assert report["same_meaning"] == (code == 0)
    assert all(change["kind"] in ("loosened", "tightened", "changed", "rewritten") for change in report["changes"])
    assert (code == 1) == any(change["kind"] != "rewritten" for change in report["changes"])
    text_code, text, _ = run(capsys, "policy", "diff", old_path, new_path, "--exit-code")
    assert text_code == code
    if code == 0:
        assert "have the same meaning" in text
    for change in report["changes"]:
        assert change["text"].split(": ")[0] in text  # the witness itself may differ between two runs
        witness = change["witness"]
        if witness is not None:
            assert witness["confirmed"], change
    return code, report, text


def subjects(report: dict) -> list[tuple[str, str]]:
    return [(change["kind"], change["subject"]) for change in report["changes"]]


REFUND = "tool pay.refund { risk irreversible args { amount: double } }\n"


# ------------------------------------------------------------------------ 1. catalogue and types

def test_a_rule_narrowed_to_its_only_tool_means_the_same(tmp_path, capsys):
    # Every call OLD's rule denies is a pay.refund: the other tools are unknown to both (denied).
    code, report, text = diff(tmp_path, capsys, policy(REFUND + 'deny "cap" when args.amount > 500.0'),
                              policy(REFUND + 'deny "cap" when call.tool == "pay.refund" && args.amount > 500.0'))
    assert code == 0
    assert subjects(report) == [("rewritten", "deny cap")]
    assert '`call.tool` = ""' not in text
    assert "deny rule `cap`: `args.amount > 500.0` → `call.tool == \"pay.refund\" && args.amount > 500.0`" in text


def test_a_rule_about_an_uncatalogued_tool_denies_nothing_more(tmp_path, capsys):
    old = policy('tool a.read { risk read_only }\ndeny "x" when call.tool == "db.drop"')
    code, report, text = diff(tmp_path, capsys, old, policy("tool a.read { risk read_only }"))
    assert code == 0
    assert subjects(report) == [("rewritten", "deny x")]
    assert "db.drop" not in text.split("rewritten, same meaning:")[0]


def test_baseline_against_strict_does_not_contradict_itself(capsys):
    code, out, _ = run(capsys, "policy", "diff", BASELINE, STRICT, "--format", "json")
    assert code == 0
    changes = json.loads(out)["changes"]
    allowed = [c for c in changes if c["subject"] == "allowed calls"]
    assert allowed
    strict_tools = {"web.search", "llm.summarize", "payments.refund", "pager.page"}
    for change in allowed:
        witness = change["witness"]
        assert witness["confirmed"]
        if change["kind"] == "loosened":  # NEW (strict alone) allows it: strict catalogues it
            assert witness["new"]["allowed"] and not witness["old"]["allowed"]
            assert set(witness["tools"]) <= strict_tools, witness
        else:
            assert witness["old"]["allowed"] and not witness["new"]["allowed"]
    tightened_tools = {tool for c in allowed if c["kind"] == "tightened" for tool in c["witness"]["tools"]}
    assert "dns.route" in tightened_tools  # it left the catalogue: denied by strict, not allowed
    loosened_text = " ".join(c["text"] for c in allowed if c["kind"] == "loosened")
    assert "dns.route" not in loosened_text
    # the strict refund cap: a refund between 100 and 500 is allowed by the baseline only
    (cap,) = [c for c in allowed if "refund-cap-strict" in c["text"]]
    assert cap["kind"] == "tightened" and 100.0 < cap["witness"]["args"]["amount"] <= 500.0


def test_witness_arguments_have_their_declared_types(tmp_path, capsys):
    tool = "tool t.x { risk read_only args { n: int, s: string? } }\n"
    code, report, text = diff(tmp_path, capsys, policy(tool + 'deny "neg" when args.n < 0'), policy(tool))
    assert code == 1
    (change,) = report["changes"][:1]
    assert (change["kind"], change["subject"]) == ("loosened", "allowed calls")
    n = change["witness"]["args"]["n"]
    assert isinstance(n, int) and not isinstance(n, bool) and n < 0
    assert "(OLD: denied by `neg`)" in change["text"]
    # A rule comparing an int argument with a string never fires: removing it changes nothing.
    code, report, _ = diff(tmp_path, capsys, policy(tool + 'deny "odd" when args.n == "x"'), policy(tool))
    assert code == 0 and subjects(report) == [("rewritten", "deny odd")]


@pytest.mark.parametrize("kind, old_rule, new_rule, witness_size", [
    ("list", "size(args.v) > 3", None, 4),
    ("list", "size(args.v) > 3", "size(args.v) > 4", 4),
    ("list", "args.v.size() >= 3", "args.v.size() > 3", 3),
    ("map", "size(args.v) > 1", "size(args.v) > 2", 2),
    ("list", "args.v == []", None, 0),
])
def test_rules_over_declared_lists_and_maps_are_compared(tmp_path, capsys, kind, old_rule, new_rule, witness_size):
    """A declared list or map is known by its size (and keys), as `plangate check` knows it: a rule
    on its size that changes is loosened, with a witness of that size, never "the same meaning"."""
    tool = f"tool q.q {{ risk read_only args {{ v: {kind} }} }}\n"
    rule = 'deny "r" when call.tool == "q.q" && {}'
    new = policy(tool + (rule.format(new_rule) if new_rule else ""))
    code, report, _ = diff(tmp_path, capsys, policy(tool + rule.format(old_rule)), new)
    assert code == 1
    change = report["changes"][0]
    assert (change["kind"], change["subject"]) == ("loosened", "allowed calls")
    assert len(change["witness"]["args"]["v"]) == witness_size


@pytest.mark.parametrize("old_rule, new_rule, shown", [
    (None, 'deny "slow" when step.time > duration("30m")', '`step.time` = duration("1801s")'),
    ('deny "long" when call.tool == "q.q" && args.d > duration("1h")', None, '`args.d` = duration("3601s")'),
    ('deny "big" when plan.budget.time > duration("1h")', 'deny "big" when plan.budget.time > duration("2h")',
     '`plan.budget.time` = duration('),
])
def test_rules_over_durations_are_compared_with_a_duration_witness(tmp_path, capsys, old_rule, new_rule, shown):
    tool = "tool q.q { risk read_only args { d: duration? } }\n"
    code, report, text = diff(tmp_path, capsys, policy(tool + (old_rule or "")), policy(tool + (new_rule or "")))
    assert code == 1
    change = report["changes"][0]
    assert change["kind"] in ("loosened", "tightened") and change["witness"]["confirmed"]
    assert shown in text and 'duration("duration(' not in text


def test_a_required_argument_is_a_tightening_with_a_witness(tmp_path, capsys):
    old = policy("tool t.x { risk read_only args { n: int? } }")
    new = policy("tool t.x { risk read_only args { n: int } }")
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 1
    (allowed,) = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    assert allowed["kind"] == "tightened"
    assert allowed["witness"]["args"] == {}
    assert "argument `n` is missing" in allowed["text"]
    assert ("changed", "tool t.x") in subjects(report)  # the schema edit, explained by the witness


def test_a_tool_that_loosens_for_two_reasons_shows_a_witness_for_each(tmp_path, capsys):
    """A deny rule removed *and* an optional argument added: NEW allows calls OLD denied for each
    reason, and each gets its own witness (and the reverse diff, a tightening for each)."""
    old = policy('tool a.b { risk external_write args { n: int } }\ndeny "big" when args.n > 10')
    new = policy("tool a.b { risk read_only args { n: int, m: string? } }")
    for first, second, kind in ((old, new, "loosened"), (new, old, "tightened")):
        _, report, _ = diff(tmp_path, capsys, first, second)
        allowed = [c for c in report["changes"] if c["subject"] == "allowed calls"]
        assert [c["kind"] for c in allowed] == [kind, kind]
        assert allowed[0]["witness"]["args"]["n"] > 10 and "denied by `big`" in allowed[0]["text"]
        assert "m" in allowed[1]["witness"]["args"] and "declares no argument `m`" in allowed[1]["text"]


def test_an_argument_type_change_is_seen_both_ways(tmp_path, capsys):
    old = policy("tool t.x { risk read_only args { n: int } }")
    new = policy("tool t.x { risk read_only args { n: string } }")
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 1
    found = {c["kind"]: c["witness"]["args"]["n"] for c in report["changes"] if c["subject"] == "allowed calls"}
    assert isinstance(found["loosened"], str) and isinstance(found["tightened"], int)


def test_step_risk_is_the_catalogues(tmp_path, capsys):
    # The tool is rated irreversible in NEW: a call that declares no risk now needs the approval.
    rule = 'require approval when step.risk == irreversible by role "fin"\n'
    old = policy("tool a.b { risk read_only }\n" + rule)
    new = policy("tool a.b { risk irreversible }\n" + rule)
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1
    (approval,) = [c for c in report["changes"] if c["subject"] == 'approval by role "fin"']
    assert approval["kind"] == "tightened"
    witness = approval["witness"]
    assert witness["risk"]["new"] == "irreversible" and witness["risk"]["old"] != "irreversible"
    assert witness["declared_risk"] in (None, "read_only", witness["risk"]["old"])  # OLD: the higher of it and read_only
    assert f"`step.risk` = {witness['risk']['old']} under OLD, irreversible under NEW" in approval["text"]
    assert ("tightened", "tool a.b") in subjects(report)


def test_a_prefix_witness_is_an_instance_no_longer_pattern_takes(tmp_path, capsys):
    catalogue = "tool deploy.* { risk reversible_write }\ntool deploy.history { risk read_only }\n"
    old = policy(catalogue + 'deny "prod" when call.tool.startsWith("deploy.prod")\n'
                 'deny "hist" when call.tool == "deploy.history"')
    code, report, _ = diff(tmp_path, capsys, old, policy(catalogue + 'deny "hist" when call.tool == "deploy.history"'))
    assert code == 1
    (change,) = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    tool = change["witness"]["tool"]
    assert change["kind"] == "loosened" and tool.startswith("deploy.prod") and tool != "deploy.history"
    assert change["witness"]["tools"] == ["deploy.*"]
    assert all(part and (part[0].isalpha() or part[0] == "_") for part in tool.split("."))


def test_unknown_tools_warn_lets_any_well_formed_name_through(tmp_path, capsys):
    old = policy("tool a.read { risk read_only }")
    new = policy("tool a.read { risk read_only }\nunknown_tools warn\n"
                 'deny "no-db" when call.tool.startsWith("db.")')
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 1
    (change,) = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    assert change["kind"] == "loosened"
    tool = change["witness"]["tool"]
    assert tool != "a.read" and not tool.startswith("db.")
    assert f"`{tool}` is not in its catalogue" in change["text"]


# ------------------------------------------------------------------------------- 2. requirements

def test_an_approval_narrowed_by_tool_is_loosened(tmp_path, capsys):
    old = policy('tool a.write { risk reversible_write }\nrequire approval when step.tool == "a.write" by role "ops"')
    new = policy('tool a.write { risk reversible_write }\nrequire approval when step.tool == "a.writ" by role "ops"')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1
    (change,) = [c for c in report["changes"] if c["subject"] == 'approval by role "ops"']
    assert change["kind"] == "loosened"
    assert change["witness"]["tool"] == "a.write"
    assert change["witness"]["old"]["approvals"] == {"ops": {"count": 1, "within": None}}
    assert change["witness"]["new"]["approvals"] == {}
    assert 'NEW asks less approval by role "ops" than OLD for a call: `call.tool` = "a.write"' in text
    assert "(none asked; OLD: 1 approver with no time bound; NEW: none)" in text


def test_a_check_narrowed_by_arguments_is_loosened_with_the_amount(tmp_path, capsys):
    old = policy(REFUND + 'require check when call.tool == "pay.refund" && args.amount > 100.0')
    new = policy(REFUND + 'require check when call.tool == "pay.refund" && args.amount > 200.0')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1
    (change,) = report["changes"]
    assert (change["kind"], change["subject"]) == ("loosened", "require check")
    assert 100.0 < change["witness"]["args"]["amount"] <= 200.0
    assert change["witness"]["old"]["requires"] == ["check"] and change["witness"]["new"]["requires"] == []
    assert "NEW no longer requires `check` for a call that OLD requires it for" in text
    # and back: tightened
    code, report, _ = diff(tmp_path, capsys, new, old)
    assert subjects(report) == [("tightened", "require check")]


def test_approval_specs_are_compared(tmp_path, capsys):
    tool = "tool a.b { risk irreversible }\n"
    base = policy(tool + 'require approval when step.risk == irreversible by 2 of role "ops" within 1h')
    cases = {
        'by 2 of role "ops" within 2h': [("loosened", 'approval by role "ops"')],
        'by 1 of role "ops" within 1h': [("loosened", 'approval by role "ops"')],
        'by 3 of role "ops" within 1h': [("tightened", 'approval by role "ops"')],
        'by 2 of role "ops" within 30m': [("tightened", 'approval by role "ops"')],
        'by 2 of role "ops"': [("loosened", 'approval by role "ops"')],
        'by 3 of role "ops" within 2h': [("loosened", 'approval by role "ops"'), ("tightened", 'approval by role "ops"')],
        'by 2 of role "admin" within 1h': [("loosened", 'approval by role "ops"'), ("tightened", 'approval by role "admin"')],
    }
    for spec, expected in cases.items():
        new = base.replace('by 2 of role "ops" within 1h', spec)
        code, report, _ = diff(tmp_path, capsys, base, new)
        assert code == 1, spec
        assert sorted(subjects(report)) == sorted(expected), spec


def test_requirements_rewritten_with_the_same_meaning_do_not_count(tmp_path, capsys):
    tool = "tool a.b { risk read_only }\n"
    old = policy(tool + 'require check when step.risk >= external_write\n'
                 'require approval when step.risk == irreversible by role "ops"')
    new = policy(tool + 'require check when step.risk == external_write || step.risk == irreversible\n'
                 'require approval when step.risk > external_write by role "ops"')
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 0
    assert sorted(subjects(report)) == [("rewritten", "require approval"), ("rewritten", "require check")]


def test_a_check_step_needs_no_check(tmp_path, capsys):
    # A requirement that only a `check` step could meet asks nothing: check steps need no check.
    tool = "tool a.b { risk reversible_write }\n"
    old = policy(tool + 'require check when step.kind == "check"')
    code, report, _ = diff(tmp_path, capsys, old, policy(tool))
    assert code == 0, report


# ----------------------------------------------------------------------------------- 3. exit codes

def test_a_deny_rule_rewritten_with_the_same_meaning_exits_0(tmp_path, capsys):
    old = policy(REFUND + 'deny "cap" when call.tool == "pay.refund" && args.amount > 500.0')
    new = policy(REFUND + 'deny "cap" when call.tool == "pay.refund" && 500.0 < args.amount')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 0
    assert report["changes"] == [{
        "kind": "rewritten", "subject": "deny cap", "witness": None,
        "text": 'deny rule `cap`: `call.tool == "pay.refund" && args.amount > 500.0` → '
                '`call.tool == "pay.refund" && 500.0 < args.amount` (both policies still allow and deny the same calls)'}]
    assert "rewritten, same meaning:" in text
    # Moving a condition between two rules: each rule differs, the policy does not.
    old = policy(REFUND + 'deny "a" when args.amount > 500.0\ndeny "b" when args.amount < 0.0')
    new = policy(REFUND + 'deny "a" when args.amount < 0.0 || args.amount > 500.0')
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 0
    assert sorted(subjects(report)) == [("rewritten", "deny a"), ("rewritten", "deny b")]


def test_an_edit_that_explains_no_witness_stays_rewritten_beside_one_that_does(tmp_path, capsys):
    """Each edit is judged on the witnesses: `sel` rewritten with the same meaning is `rewritten`
    even when another edit (`n`) changes what is allowed; so is an argument schema that only
    changes where another rule decides. The edit that explains the witness is `changed`."""
    tools = "tool db.q { risk read_only args { sql: string } }\ntool x.y { risk read_only }\n"
    old = policy(tools + 'deny "sel" when call.tool == "db.q" && !args.sql.startsWith("SELECT ")\n'
                         'deny "n" when call.tool == "x.y"')
    new = policy(tools + 'deny "sel" when call.tool == "db.q" && !args.sql.matches("^SELECT ")\n'
                         'deny "n" when call.tool == "x.z"')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1
    assert sorted(subjects(report)) == [("changed", "deny n"), ("loosened", "allowed calls"), ("rewritten", "deny sel")]
    (sel,) = [change for change in report["changes"] if change["subject"] == "deny sel"]
    assert sel["text"].endswith("(none of the differences in allowed calls comes from it)")
    assert "deny rule `sel`" in text.split("rewritten, same meaning:")[1]
    # A schema edit explains a witness only through the arguments of its own tool: here every call
    # of `db.q` is denied by a rule on both sides.
    schema = tools.replace("args { sql: string }", "args { sql: string, n: int? }")
    every_q = 'deny "q" when call.tool == "db.q"\n'
    code, report, _ = diff(tmp_path, capsys, policy(tools + every_q + 'deny "n" when call.tool == "x.y"'),
                           policy(schema + every_q))
    assert sorted(subjects(report)) == [("changed", "deny n"), ("loosened", "allowed calls"), ("rewritten", "tool db.q")]
    code, report, _ = diff(tmp_path, capsys, policy(tools), policy(schema.replace("n: int?", "n: int")))
    assert ("changed", "tool db.q") in subjects(report)  # a required argument: old calls are refused
    # Past the witnesses sought per tool, an edit may explain one not shown: every edit counts.
    tool = "tool t.x { risk read_only args { n: int } }\n"
    rules = "".join(f'deny "r{k}" when args.n == {k}\n' for k in range(1, 6))
    code, report, _ = diff(tmp_path, capsys, policy(tool + rules), policy(tool))
    assert sorted(change["subject"] for change in report["changes"] if change["kind"] == "changed") == [
        f"deny r{k}" for k in range(1, 6)]


def test_a_difference_the_solver_cannot_decide_counts(tmp_path, capsys):
    tool = "tool t.x { risk read_only args { s: string } }\n"
    old = policy(tool + 'deny "m" when args.s.matches("(?i)^a+$")')  # a flag: not translated
    new = policy(tool + 'deny "m" when args.s.matches("(?i)^b+$")')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1
    undecided = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    assert undecided and all(c["kind"] == "changed" for c in undecided)
    assert "could not be decided" in text and "`matches`" in text


def test_a_regular_expression_changed_is_decided_with_a_witness(tmp_path, capsys):
    tool = "tool t.x { risk read_only args { s: string } }\n"
    old = policy(tool + 'deny "m" when call.tool == "t.x" && args.s.matches("^a+$")')
    new = policy(tool + 'deny "m" when call.tool == "t.x" && args.s.matches("^a*$")')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1 and "could not be decided" not in text
    [change] = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    assert change["kind"] == "tightened" and '"s": ""' in json.dumps(change), change  # the empty string


def test_a_condition_outside_the_solver_cancels_out_when_both_sides_share_it(tmp_path, capsys):
    tool = "tool t.x { risk read_only args { s: string } }\n"
    old = policy(tool + 'deny "m" when args.s.matches("^a+$")')
    code, report, _ = diff(tmp_path, capsys, old, old)
    assert (code, report["changes"]) == (0, [])
    # A witness that needs a value of it is kept when the replay confirms it.
    code, report, _ = diff(tmp_path, capsys, old, policy(tool + 'deny "m" when args.s.matches("^a+$")\n'
                                                          'deny "cap" when size(args.s) > 3'))
    assert code == 1
    (change,) = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    assert change["kind"] == "tightened" and change["witness"]["confirmed"]
    assert len(change["witness"]["args"]["s"]) > 3


def test_a_timeout_is_reported_not_passed():
    old_result = check([], [str(BASELINE)])
    new_result = check([], [str(STRICT)])
    changes = diff_policies(old_result.policy, new_result.policy, time_bound=1e-6)
    undecided = [c for c in changes if "could not be decided" in c.text]
    assert undecided and all(c.kind == "changed" and c.counts for c in undecided)
    assert any("timed out" in c.text for c in undecided)


# ------------------------------------------------------------------------------------ 4. warn rules

def test_a_changed_warn_rule_shows_both_texts_and_a_witness(tmp_path, capsys):
    old = policy('tool a.read { risk read_only }\nwarn "w" when call.tool == "a.read" && args.x > 1')
    new = policy('tool a.read { risk read_only }\nwarn "w" when call.tool == "a.read" && args.x > 100')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1
    (change,) = report["changes"]
    assert (change["kind"], change["subject"]) == ("changed", "warn w")
    assert change["text"].startswith('warn rule `w`: `call.tool == "a.read" && args.x > 1` → '
                                     '`call.tool == "a.read" && args.x > 100`; OLD warns and NEW does not on ')
    assert 1 < change["witness"]["args"]["x"] <= 100
    assert change["witness"]["old"]["warns"] == ["w"] and change["witness"]["new"]["warns"] == []


def test_a_warn_rule_rewritten_with_the_same_meaning_does_not_count(tmp_path, capsys):
    old = policy('tool a.read { risk read_only }\nwarn "w" when call.tool == "a.read" && args.x > 1')
    new = policy('tool a.read { risk read_only }\nwarn "w" when 1 < args.x && "a.read" == call.tool')
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 0
    (change,) = report["changes"]
    assert (change["kind"], change["subject"]) == ("rewritten", "warn w")
    assert "`call.tool == \"a.read\" && args.x > 1` → `1 < args.x && \"a.read\" == call.tool`" in change["text"]


def test_a_warn_rule_renamed_does_not_count_but_a_warning_lost_does(tmp_path, capsys):
    """What counts is whether a call gets a warning; the name it bears is listed as a rewrite."""
    catalogue = "tool a.read { risk read_only }\n"
    old = policy(catalogue + 'warn "big" when args.x > 100')
    code, report, _ = diff(tmp_path, capsys, old, policy(catalogue + 'warn "large" when args.x > 100'))
    assert code == 0 and sorted(subjects(report)) == [("rewritten", "warn big"), ("rewritten", "warn large")]
    assert all("under another rule's name" in change["text"] for change in report["changes"])
    code, report, _ = diff(tmp_path, capsys, old, policy(catalogue + 'warn "large" when args.x > 200'))
    assert code == 1 and sorted(subjects(report)) == [("changed", "warn big"), ("changed", "warn large")]


@pytest.mark.parametrize("override, shown", [
    ("tool deploy.preview { risk read_only cost <= 10 usd }",
     ("loosened", "`deploy.preview` risk `reversible_write` → `read_only`")),
    ("tool deploy.preview { risk irreversible cost <= 10 usd }", ("tightened", "`deploy.preview` risk `reversible_write` → `irreversible`")),
    ("tool deploy.preview { risk reversible_write cost <= 50 usd }", ("loosened", "`deploy.preview` cost cap 10 usd → 50 usd")),
    ("tool deploy.preview { risk reversible_write cost <= 10 usd time <= 1m }",
     ("tightened", "`deploy.preview` time cap none → 1m")),
])
def test_an_entry_added_under_a_pattern_is_compared_with_the_pattern_it_overrides(tmp_path, capsys, override, shown):
    """`check` decides `deploy.preview` by the most specific entry: adding one changes that tool's
    risk or caps (risk-underdeclared, retry-without-idempotency, limit-exceeded) even where no rule
    reads them, and the diff says so, both ways."""
    old = policy("tool deploy.* { risk reversible_write cost <= 10 usd }")
    new = policy("tool deploy.* { risk reversible_write cost <= 10 usd }\n" + override)
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 1
    ((kind, subject, text),) = [(c["kind"], c["subject"], c["text"]) for c in report["changes"]]
    assert (kind, subject) == (shown[0], "tool deploy.preview")
    assert text == shown[1] + " (OLD by `deploy.*`, NEW by `deploy.preview`)"
    code, report, _ = diff(tmp_path, capsys, new, old)
    assert code == 1 and [c["kind"] for c in report["changes"]] == [
        "tightened" if shown[0] == "loosened" else "loosened"]


def test_an_entry_that_repeats_its_pattern_is_a_rewrite(tmp_path, capsys):
    old = policy("tool deploy.* { risk reversible_write }")
    code, report, _ = diff(tmp_path, capsys, old, policy("tool deploy.* { risk reversible_write }\n"
                                                         "tool deploy.preview { risk reversible_write }"))
    assert code == 0 and subjects(report) == [("rewritten", "tool deploy.preview")]
    # what the entry leaves unsaid (the cap) it takes from `deploy.*`: still the same meaning
    old = policy("tool deploy.* { risk reversible_write cost <= 10 usd }")
    code, report, _ = diff(tmp_path, capsys, old, policy("tool deploy.* { risk reversible_write cost <= 10 usd }\n"
                                                         "tool deploy.preview { risk reversible_write }"))
    assert code == 0 and subjects(report) == [("rewritten", "tool deploy.preview")]


def test_a_star_entry_that_changes_every_other_tools_risk_is_said_once(tmp_path, capsys):
    old = policy("tool a.read { risk read_only }\nunknown_tools warn")
    code, report, _ = diff(tmp_path, capsys, old, policy("tool a.read { risk read_only }\nunknown_tools warn\n"
                                                         "tool * { risk read_only }"))
    assert code == 1 and [(c["kind"], c["text"]) for c in report["changes"]] == [
        ("loosened", "any other tool risk `none` → `read_only` (OLD by no entry, NEW by `*`)")]


def test_an_admitted_unknown_tool_given_an_entry_changes_its_risk(tmp_path, capsys):
    """Under `unknown_tools warn` an uncatalogued tool is allowed and has no risk class (the
    highest); an entry that rates it `read_only` lowers it."""
    old = policy("tool a.read { risk read_only }\nunknown_tools warn")
    code, report, _ = diff(tmp_path, capsys, old, policy("tool a.read { risk read_only }\nunknown_tools warn\n"
                                                         "tool b.read { risk read_only }"))
    assert code == 1
    assert [(c["kind"], c["text"]) for c in report["changes"]] == [
        ("loosened", "`b.read` risk `none` → `read_only` (OLD by no entry, NEW by `b.read`)")]


@pytest.mark.parametrize("rated, dropped", [
    ("irreversible", "loosened"),  # steps declaring less are no longer `risk-underdeclared`
    ("read_only", "tightened"),  # steps declaring nothing become irreversible
    ("external_write", "changed"),  # both at once
])
def test_a_risk_against_no_entry_is_compared_as_check_sees_the_steps(tmp_path, capsys, rated, dropped):
    """With no entry (`unknown_tools warn`) a step's risk is its declared one, `irreversible` when
    it declares none: dropping a rating moves steps both ways unless it was an end of the order."""
    rated_policy, unrated_policy = policy(f"tool * {{ risk {rated} }}"), policy("unknown_tools warn")
    code, report, _ = diff(tmp_path, capsys, rated_policy, unrated_policy)
    assert code == 1 and [(c["kind"], c["text"]) for c in report["changes"] if c["kind"] != "rewritten"] == [
        (dropped, f"any other tool risk `{rated}` → `none` (OLD by `*`, NEW by no entry)")]
    code, report, _ = diff(tmp_path, capsys, unrated_policy, rated_policy)
    back = {"loosened": "tightened", "tightened": "loosened", "changed": "changed"}[dropped]
    assert [c["kind"] for c in report["changes"] if c["kind"] != "rewritten"] == [back]


def test_a_class_of_tools_is_decided_by_the_combined_catalogue_as_check_decides_it(tmp_path, capsys):
    """A file with two policies: the narrower entry of the second never loosens the first, in the
    diff as in `check`."""
    base = 'policy base { tool deploy.* { risk irreversible } require approval when step.risk == irreversible by role "ops" }\n'
    over = "policy over { tool deploy.preview.* { risk read_only } }\n"
    code, report, _ = diff(tmp_path, capsys, base, base + over)
    assert [change["kind"] for change in report["changes"] if change["kind"] in ("loosened", "tightened")] == []


def test_a_witness_the_replay_cannot_confirm_does_not_hide_a_plain_one(tmp_path, capsys):
    """`args.amount > 1.7976931348623157e308` holds for a real past the largest double, which no call
    can pass: that witness is not confirmed. The other new rule still gets its confirmed witness."""
    old = policy("tool pay.refund { risk irreversible args { amount: double, currency: string } }")
    new = old.replace("\n}\n", '\ndeny "huge" when args.amount > 1.7976931348623157e308\n'
                               'deny "note" when args.currency == "abc"\n}\n')
    (tmp_path / "old.policy").write_text(old, encoding="utf-8")
    (tmp_path / "new.policy").write_text(new, encoding="utf-8")
    code, out, _ = run(capsys, "policy", "diff", tmp_path / "old.policy", tmp_path / "new.policy", "--format", "json")
    assert code == 0
    allowed = [c for c in json.loads(out)["changes"] if c["subject"] == "allowed calls"]
    tightened = [c for c in allowed if c["kind"] == "tightened"]
    assert len(tightened) == 1 and "denied by `note`" in tightened[0]["text"]
    assert tightened[0]["witness"]["args"]["currency"] == "abc" and tightened[0]["witness"]["confirmed"]


def test_a_diff_spends_at_most_the_commands_solver_time_in_all(tmp_path, capsys, monkeypatch):
    """Each query has 2 s; all of them together the command's allowance (30 s): past it, what is
    left is "could not be decided", never a pass, and the diff ends."""
    from plangate.smt import solve

    monkeypatch.setattr(solve, "TOTAL_BOUND", 0.0)
    old = policy(REFUND + 'deny "cap" when call.tool == "pay.refund" && args.amount > 500.0')
    new = policy(REFUND + 'deny "cap" when call.tool == "pay.refund" && args.amount > 900.0')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 1 and "solver time of 0s in all is spent" in text
    assert all(change["kind"] == "changed" for change in report["changes"])


@pytest.mark.parametrize("figure, cap_old, cap_new, rule", [
    ("cost", "cost <= 5 usd", "cost <= 2 usd", "step.cost > 3.0"),
    ("time", "time <= 10m", "time <= 3m", 'step.time > duration("5m")'),
])
def test_a_lowered_tool_cap_frees_the_steps_that_declare_no_figure_from_a_rule_on_it(tmp_path, capsys, figure,
                                                                                      cap_old, cap_new, rule):
    """A step that declares no cost (time) sees its tool's cap as `step.cost` (`step.time`): lowering
    the cap below a rule's threshold lets such steps through, and raising it back denies them; the
    witness shows the figure each side sees, and `plangate check` agrees on that step."""
    old = policy(f'tool a.b {{ risk read_only {cap_old} }}\ndeny "d" when {rule}')
    new = policy(f'tool a.b {{ risk read_only {cap_new} }}\ndeny "d" when {rule}')
    code, report, text = diff(tmp_path, capsys, old, new)
    (loosened,) = [c for c in report["changes"] if c["subject"] == "allowed calls"]
    assert code == 1 and loosened["kind"] == "loosened"
    assert loosened["witness"]["old"]["denied_because"] == ["denied by `d`"] and loosened["witness"]["new"]["allowed"]
    assert f"under NEW (the tool's caps: the step declares no `{figure}`)" in text
    code, report, _ = diff(tmp_path, capsys, new, old)
    assert [c["kind"] for c in report["changes"] if c["subject"] == "allowed calls"] == ["tightened"]
    plan = tmp_path / "s.plan"
    plan.write_text("plan c { step s { call a.b() risk read_only } }")
    for text_, denied in ((old, True), (new, False)):
        (tmp_path / "p.policy").write_text(text_)
        names = [d.name for d in check([plan], [tmp_path / "p.policy"]).diagnostics]
        assert ("policy-deny" in names) == denied, names


@pytest.mark.parametrize("old_body, new_body", [
    ('tool a.b { risk read_only } limit retries <= 3\ndeny "r" when step.retry > 5', "tool a.b { risk read_only } limit retries <= 3"),
    ('tool a.b { risk read_only cost <= 2 usd }\ndeny "r" when step.cost > 5.0', "tool a.b { risk read_only cost <= 2 usd }"),
    ('tool a.b { risk read_only } limit cost <= 10 usd\ndeny "r" when plan.budget.cost > 20.0', "tool a.b { risk read_only } limit cost <= 10 usd"),
    ('tool a.b { risk read_only } limit time <= 1h\ndeny "r" when plan.budget.time > duration("2h")', "tool a.b { risk read_only } limit time <= 1h"),
])
def test_a_rule_that_only_denies_what_a_limit_or_cap_refuses_anyway_is_removed_without_a_difference(
        tmp_path, capsys, old_body, new_body):
    """Both policies refuse a step retrying more than `limit retries`, declaring more than its
    tool's cap or a budget over a limit (`limit-exceeded`): a deny rule that fires only there is
    dead, and removing it changes nothing (no witness NEW would refuse anyway)."""
    code, report, _ = diff(tmp_path, capsys, policy(old_body), policy(new_body))
    assert code == 0 and [c["kind"] for c in report["changes"]] == ["rewritten"], report


def test_an_approval_capped_by_approval_within_is_the_same_as_one_with_that_within(tmp_path, capsys):
    """The runtime caps every approval's expiry by `limit approval_within`: OLD's required approval
    with no `within` under a 1h cap asks what NEW's `within 1h` asks; only the limit's removal is
    a difference."""
    old = policy('tool c.d { risk irreversible }\nrequire approval when step.risk == irreversible by role "op"\n'
                 "limit approval_within <= 1h")
    new = policy('tool c.d { risk irreversible }\nrequire approval when step.risk == irreversible by role "op" within 1h')
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 1
    assert sorted((c["kind"], c["subject"]) for c in report["changes"]) == [
        ("loosened", "limit approval_within"), ("rewritten", "require approval")]


def test_an_approval_loosened_one_way_and_tightened_the_other_says_which_is_which(tmp_path, capsys):
    old = policy('tool c.d { risk irreversible }\nrequire approval when step.risk == irreversible by role "op" within 1h')
    new = policy('tool c.d { risk irreversible }\nrequire approval when step.risk == irreversible by 2 of role "op" within 2h')
    code, report, text = diff(tmp_path, capsys, old, new)
    kinds = {c["kind"]: c["text"] for c in report["changes"]}
    assert code == 1 and set(kinds) == {"loosened", "tightened"}
    assert "(a longer `within`, 1h → 2h; OLD: 1 approver within 1h; NEW: 2 approvers within 2h)" in kinds["loosened"]
    assert "(more approvers, 1 → 2; OLD: 1 approver within 1h; NEW: 2 approvers within 2h)" in kinds["tightened"]


def test_a_renamed_rule_a_new_reason_and_a_new_version_are_listed_as_rewrites(tmp_path, capsys):
    old = policy('version 1\ntool a.b { risk read_only }\ndeny "old-name" when args.x > 5 because "too big"\n'
                 'deny "kept" when args.y == 1 because "one"')
    new = policy('version 2\ntool a.b { risk read_only }\ndeny "new-name" when args.x > 5 because "too big"\n'
                 'deny "kept" when args.y == 1 because "no ones"')
    code, report, text = diff(tmp_path, capsys, old, new)
    assert code == 0 and sorted(subjects(report)) == [
        ("rewritten", "deny kept"), ("rewritten", "deny new-name"), ("rewritten", "version")]
    assert "deny rule `old-name` was renamed `new-name`: `args.x > 5` (its condition is the same)" in text
    assert 'deny rule `kept` gives another reason: "one" → "no ones"' in text and "`version` 1 → 2" in text
    # renamed and changed: a removal and an addition, as before
    code, report, _ = diff(tmp_path, capsys, old, new.replace("args.x > 5", "args.x > 6"))
    assert code == 1 and {"deny old-name", "deny new-name"} <= {c["subject"] for c in report["changes"]}


def test_a_witness_never_declares_less_risk_than_the_catalogue_of_a_side_that_allows_it(tmp_path, capsys):
    """A call declaring less than its tool's catalogue risk is refused there (`risk-underdeclared`,
    the gate, `plangate test`): a witness the allowing side would refuse shows no difference."""
    rules = 'require approval when step.risk >= external_write by role "op"\n'
    code, report, _ = diff(tmp_path, capsys, policy(REFUND + rules + 'deny "cap" when args.amount > 500.0'),
                           policy(REFUND + rules + 'deny "cap" when args.amount > 200.0'))
    [witness] = [change["witness"] for change in report["changes"] if change["kind"] == "tightened"]
    assert witness["declared_risk"] in (None, "irreversible") and witness["old"]["allowed"]
    # lowering a tool's risk lets through a call that declares the lower risk: a real loosening
    low = "tool pay.refund { risk reversible_write args { amount: double } }\n"
    code, report, text = diff(tmp_path, capsys, policy(REFUND + rules), policy(low + rules))
    assert "the call declares risk `reversible_write`, below `irreversible`" in text


def test_a_cap_or_limit_moved_to_another_currency_is_changed_not_looser(tmp_path, capsys):
    """plangate never converts: 20 eur is neither more nor less than 10 usd, for a cap as for a limit."""
    old = policy("tool t.* { risk read_only cost <= 10 usd }\nlimit cost <= 100 usd")
    new = policy("tool t.* { risk read_only cost <= 20 eur }\nlimit cost <= 50 eur")
    code, report, _ = diff(tmp_path, capsys, old, new)
    assert code == 1 and sorted(subjects(report)) == [("changed", "limit cost"), ("changed", "tool t.*")]

"""Policy as code: `plangate test`, `plangate policy diff`, and several policies combined in `check`.

- `plangate test` runs the `test` blocks of policies; the repository's own policies pass, and a
  failing expectation is a `policy-test-failed` diagnostic at its `expect` line (exit 1), with a
  "did you mean" when it names a rule that does not exist.
- `plangate policy diff OLD NEW` compares two policies by meaning (the changes sorted into
  loosened / tightened / changed, deny rules with a witness call): exit 0 when it could compare
  them, 2 when either file is broken; with `--exit-code`, 1 when they differ.
- `plangate check --policy a --policy b` combines policies: the tightest limit wins and any deny
  wins.

Small policies are written into `tmp_path` from one base text, so that each case changes one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from plangate.gate import Gate

from plangate.cli import main
from plangate.diagnostics import Severity
from plangate.driver import check

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "policies" / "baseline.policy"
STRICT = ROOT / "policies" / "strict.policy"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str) -> int:
    (number,) = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    return number


def line_after(text: str, header: str, needle: str) -> int:
    """The first line holding `needle` after the line holding `header`."""
    start = line_of(text, header)
    return next(n for n, line in enumerate(text.splitlines(), start=1) if n > start and needle in line)


# ---------------------------------------------------------------------------------- plangate test

def test_repository_policies_pass(capsys):
    code, out, _ = run(capsys, "test", BASELINE, STRICT)
    assert code == 0, out
    assert "FAIL" not in out
    tests = sum(len(re.findall(r'^\s*test "', p.read_text(encoding="utf-8"), re.M)) for p in (BASELINE, STRICT))
    assert tests >= 17  # 13 in the baseline, 4 in strict
    assert f"{tests} passed, 0 failed" in out


def test_repository_policies_pass_in_json(capsys):
    code, out, _ = run(capsys, "test", BASELINE, STRICT, "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["diagnostics"] == []
    assert report["summary"]["errors"] == 0


FAILING = """\
policy shop {
  version 1
  tool payments.refund { risk irreversible  args { charge_id: string, amount: double, currency: string } }
  tool http.get        { risk read_only     args { url: string } }
  unknown_tools deny

  require approval when step.risk >= external_write by role "operator" within 1h

  deny "refund-cap"   when call.tool == "payments.refund" && args.amount > 500.0
  warn "large-refund" when call.tool == "payments.refund" && args.amount > 200.0

  test "a small refund is denied" {
    call   payments.refund(charge_id: "ch_1", amount: 10.0, currency: "USD")
    expect deny
  }

  test "an unknown tool is allowed" {
    call   shell.exec(cmd: "rm -rf /")
    expect allow
  }

  test "a large refund warns" {
    call   payments.refund(charge_id: "ch_1", amount: 300.0, currency: "USD")
    expect warn "large-refunds"
  }

  test "a refund needs an approval" {
    call   payments.refund(charge_id: "ch_1", amount: 300.0, currency: "USD")
    expect allow
    expect require approval
    expect warn "large-refund"
  }

  test "a read needs an approval" {
    call   http.get(url: "https://example.com")
    expect allow
    expect require approval
  }
}
"""


def test_failing_policy_tests_exit_1_at_their_expect_lines(tmp_path, capsys):
    path = write(tmp_path, "shop.policy", FAILING)
    code, out, _ = run(capsys, "test", path, "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert report["summary"]["errors"] == 4
    failures = [d for d in report["diagnostics"] if d["name"] == "policy-test-failed"]
    assert len(failures) == len(report["diagnostics"]) == 4, [d["message"] for d in report["diagnostics"]]
    assert all(d["severity"] == "error" and d["file"] == str(path) for d in failures)
    by_line = {d["span"]["start"]["line"]: d for d in failures}

    # expect deny on a call that no rule denies
    deny = line_after(FAILING, 'test "a small refund is denied"', "expect deny")
    # expect allow for a tool outside the catalogue, under `unknown_tools deny`
    unknown = line_after(FAILING, 'test "an unknown tool is allowed"', "expect allow")
    # expect warn with a misspelt rule name
    misspelt = line_after(FAILING, 'test "a large refund warns"', 'expect warn "large-refunds"')
    # expect require approval on a read-only call
    read = line_after(FAILING, 'test "a read needs an approval"', "expect require approval")
    assert sorted(by_line) == sorted([deny, unknown, misspelt, read])

    assert "a small refund is denied" in by_line[deny]["message"]
    assert "decides: allow" in by_line[deny]["message"]
    assert "is not in the policy's catalogue" in by_line[unknown]["message"]
    assert by_line[misspelt]["help"] == "did you mean `large-refund`?"
    assert "expects `require approval`" in by_line[read]["message"]
    # The passing test ("a refund needs an approval": allow, require approval, warn) adds nothing.


def test_failing_policy_tests_text_report(tmp_path, capsys):
    path = write(tmp_path, "shop.policy", FAILING)
    code, out, _ = run(capsys, "test", path)
    assert code == 1
    assert "1 passed, 4 failed" in out
    assert "ok   shop › a refund needs an approval" in out
    assert "FAIL shop › an unknown tool is allowed" in out
    assert "policy-test-failed" in out
    assert "did you mean `large-refund`?" in out


def test_a_test_whose_call_is_missing_or_not_constant_fails_once_and_says_why(tmp_path, capsys):
    path = write(tmp_path, "q.policy", 'policy q { tool a.b { risk read_only }\n'
                                       '  test "computed" { call a.b(v: z.result.x) expect allow }\n'
                                       '  test "no call" { expect allow } }')
    code, out, _ = run(capsys, "test", path)
    assert code == 1
    assert "FAIL q › computed   (the call's arguments are not constants)" in out
    assert "FAIL q › no call   (no call to decide)" in out and "0 passed, 2 failed" in out
    assert out.count("missing-call") == 1 and "not in the catalogue" not in out
    assert out.count("policy-test-failed") == 2 and "test `no call` has no call: it decides nothing" in out


@pytest.mark.parametrize("argument, declared", [
    ("5", "uint"), ('"1h"', "duration"), ('"2024-01-01T00:00:00Z"', "timestamp"), ('"x"', "bytes"), ("1.0", "int"),
])
def test_a_tests_arguments_fit_the_tools_args_as_check_types_a_steps(tmp_path, capsys, argument, declared):
    """A test's call is written as a plan's: text is no `duration` there, `5` no `uint`; `check`
    says `arg-type` of the same call in a step, so a test must not find it allowed."""
    policy = (f'policy q {{ tool t.v {{ risk read_only args {{ v: {declared} }} }}\n'
              f'  test "misfit" {{ call t.v(v: {argument}) expect deny }}\n'
              f'  test "allowed" {{ call t.v(v: {argument}) expect allow }} }}')
    code, out, _ = run(capsys, "test", write(tmp_path, "q.policy", policy))
    assert code == 1 and "1 passed, 1 failed" in out
    assert f"FAIL q › allowed   (deny (the call does not fit its tool's `args`: argument `v` of `t.v` must be `{declared}`" in out
    plan = write(tmp_path, "s.plan", f"plan s {{ step a {{ call t.v(v: {argument}) }} }}")
    code, out, _ = run(capsys, "check", plan, "--policy", tmp_path / "q.policy", "--format", "json")
    assert [item["name"] for item in json.loads(out)["diagnostics"]] == ["arg-type"]


@pytest.mark.parametrize("call, refusal", [
    ("t.v(v: 0.0 / 0.0)", "argument `v`: the value cannot be passed to a tool"),
    ('t.v(v: 1.0, m: {1: "a"})', "argument `m`: a map passed to a tool must have string keys"),
])
def test_a_tests_call_refused_as_the_runtime_refuses_it_asks_no_rule(tmp_path, capsys, call, refusal):
    """A call no tool could be given (a NaN, a map key that is not a string) is refused before any
    rule, as at run time and by the gate: a deny rule that would fire on the values is not named,
    and its errors are not reported."""
    policy = (f'policy q {{ tool t.v {{ risk read_only args {{ v: int, m: map? }} }}\n'
              f'  deny "big" when args.v > 500\n'
              f'  test "named" {{ call {call} expect deny "big" }}\n'
              f'  test "refused" {{ call {call} expect deny }} }}')
    code, out, _ = run(capsys, "test", write(tmp_path, "q.policy", policy))
    assert code == 1 and "1 passed, 1 failed" in out, out
    assert f"FAIL q › named   (deny ({refusal}" in out and "no such overload" not in out
    gate = Gate.from_sources([("q.policy", policy)])
    decision = gate.decide(call.partition("(")[0], {"v": float("nan")} if "0.0 / 0.0" in call else
                           {"v": 1.0, "m": {1: "a"}} if "{1:" in call else {"v": 900.5 if "900.5" in call else 900})
    assert not decision.allowed and decision.denied_by == [] and decision.errors == []


def test_a_call_that_does_not_fit_its_tool_is_refused_and_still_names_the_rules_that_fire(tmp_path, capsys):
    """Arguments that do not fit the tool's `args` refuse the call whatever the rules say, and the
    rules are still asked (by `test` and the gate alike): a test that leaves out the currency of a
    refund over the cap passes `expect deny "refund-cap"`; `expect allow` fails with both reasons;
    a rule that cannot read a value of the wrong type reports no error (the refusal says why)."""
    policy = ('policy q { tool payments.refund { risk irreversible args { amount: double, currency: string } }\n'
              '  deny "refund-cap" when args.amount > 500.0\n'
              '  test "named" { call payments.refund(amount: 900.0) expect deny "refund-cap" }\n'
              '  test "refused" { call payments.refund(amount: 100.0) expect deny }\n'
              '  test "allowed" { call payments.refund(amount: 900.0) expect allow } }')
    code, out, _ = run(capsys, "test", write(tmp_path, "q.policy", policy))
    assert code == 1 and "2 passed, 1 failed" in out, out
    assert ("ok   q › named   (deny (the call does not fit its tool's `args`: `payments.refund` needs argument "
            "`currency` (`string`)); deny by `refund-cap`)") in out
    assert "FAIL q › allowed" in out and "ok   q › refused" in out
    gate = Gate.from_sources([("q.policy", policy)])
    decision = gate.decide("payments.refund", {"amount": 900.0})
    assert not decision.allowed and decision.denied_by == ["refund-cap"]
    assert decision.reasons[0] == "`payments.refund` needs argument `currency` (`string`)"
    wrong_type = gate.decide("payments.refund", {"amount": "lots", "currency": "EUR"})
    assert not wrong_type.allowed and wrong_type.denied_by == [] and wrong_type.errors == []


def test_a_deny_rule_naming_a_tool_outside_the_catalogue_is_asked_about_it(tmp_path, capsys):
    """The contract's own `no-prod-drops` names `db.drop`, which its catalogue leaves out: the tool
    is refused under `unknown_tools deny`, and the rule still fires and is named (by `test`, by the
    gate and by `check`)."""
    policy = ('policy production { tool ci.build { risk read_only } unknown_tools deny\n'
              '  deny "no-prod-drops" when call.tool == "db.drop" && args.env == "prod"\n'
              '  test "drops" { call db.drop(database: "orders", env: "prod") expect deny "no-prod-drops" } }')
    path = write(tmp_path, "p.policy", policy)
    code, out, _ = run(capsys, "test", path)
    assert code == 0 and "ok   production › drops   (deny (`db.drop` is not in the policy's catalogue); " \
                         "deny by `no-prod-drops`)" in out
    decision = Gate.from_sources([("p.policy", policy)]).decide("db.drop", {"database": "orders", "env": "prod"})
    assert decision.denied_by == ["no-prod-drops"] and "`db.drop` is not in the policy's catalogue" in decision.reasons
    plan = write(tmp_path, "d.plan", 'plan d { step x { call db.drop(database: "orders", env: "prod") } }')
    code, out, _ = run(capsys, "check", plan, "--policy", path, "--format", "json")
    assert {d["name"] for d in json.loads(out)["diagnostics"]} >= {"unknown-tool", "policy-deny"}


def test_a_tests_int_for_a_double_is_that_double_for_the_rules(tmp_path, capsys):
    policy = ('policy q { tool t.v { risk read_only args { v: double } }\n'
              '  deny "scaled" when args.v * 1.5 > 900.0\n'
              '  test "over" { call t.v(v: 900) expect deny "scaled" } test "under" { call t.v(v: 500) expect allow } }')
    code, out, _ = run(capsys, "test", write(tmp_path, "q.policy", policy))
    assert code == 0, out


def test_policy_tests_as_junit_one_case_per_test_block(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    path = write(tmp_path, "shop.policy", FAILING)
    code, out, _ = run(capsys, "test", path, "--format", "junit")
    assert code == 1
    suite = ET.fromstring(out).find("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert suite.get("tests") == "5" and suite.get("failures") == "4"
    assert len(cases) == 5
    assert cases["a refund needs an approval"].find("failure") is None
    failure = cases["an unknown tool is allowed"].find("failure")
    assert failure is not None and "policy-test-failed" in failure.get("type")
    assert all(case.get("classname") == str(path) for case in cases.values())


def test_expect_require_approval(tmp_path, capsys):
    text = """\
policy approvals {
  version 1
  tool dns.route { risk external_write  args { host: string, target: string } }
  tool http.get  { risk read_only       args { url: string } }
  require approval when step.risk >= external_write by role "operator" within 1h

  test "a route needs an approval" {
    call   dns.route(host: "v2.example.com", target: "pv-42")
    expect allow
    expect require approval
  }

  test "a read declared external_write needs one too" {
    call   http.get(url: "https://example.com")
    risk   external_write
    expect require approval
  }
}
"""
    code, out, _ = run(capsys, "test", write(tmp_path, "approvals.policy", text))
    assert code == 0, out
    assert "2 passed, 0 failed" in out

    failing = text.replace("    risk   external_write\n", "")
    code, out, _ = run(capsys, "test", write(tmp_path, "approvals2.policy", failing), "--format", "json")
    assert code == 1
    (failure,) = json.loads(out)["diagnostics"]
    assert failure["name"] == "policy-test-failed"
    assert failure["span"]["start"]["line"] == line_after(failing, 'test "a read declared', "expect require approval")
    assert "expects `require approval`" in failure["message"]


def test_unreadable_policy_exits_2(tmp_path, capsys):
    code, _, _ = run(capsys, "test", tmp_path / "missing.policy")
    assert code == 2


def test_no_test_runs_when_a_file_is_unread_and_a_file_given_twice_runs_once(tmp_path, capsys):
    good = write(tmp_path, "good.policy", 'policy good { tool x.y { risk read_only } test "t" { call x.y() expect allow } }')
    bad = write(tmp_path, "bad.policy", "policy bad {")
    code, out, _ = run(capsys, "test", good, bad)
    assert code == 1 and "syntax-error" in out and "no test ran" in out and "ok " not in out
    code, out, _ = run(capsys, "test", good, tmp_path / "missing.policy")
    assert code == 2 and "no test ran" in out and "ok " not in out
    code, out, _ = run(capsys, "test", good, tmp_path / "." / "good.policy")
    assert code == 0 and "1 passed" in out


# ---------------------------------------------------------------------------------- policy diff

BASE = """\
policy shop {
  version 1
  tool payments.refund { risk irreversible    args { charge_id: string, amount: double, currency: string } }
  tool dns.route       { risk external_write  args { host: string, target: string } }
  tool deploy.*        { risk reversible_write }
  tool http.get        { risk read_only       args { url: string } }
  unknown_tools deny

  require approval    when step.risk >= external_write by role "operator" within 1h
  require approval    when step.risk == irreversible   by 2 of role "approver" within 15m
  require check       when step.risk >= reversible_write
  require idempotency when step.risk >= reversible_write

  deny "refund-cap" when call.tool == "payments.refund" && args.amount > 500.0

  limit retries <= 3
  limit cost    <= 100 usd
}
"""


def diff(tmp_path: Path, capsys, new_text: str, old_text: str = BASE) -> tuple[int, list[dict]]:
    old = write(tmp_path, "old.policy", old_text)
    new = write(tmp_path, "new.policy", new_text)
    code, out, err = run(capsys, "policy", "diff", old, new, "--format", "json", "--exit-code")
    assert code in (0, 1), err
    report = json.loads(out)
    assert report["old"] == str(old) and report["new"] == str(new)
    for change in report["changes"]:
        assert set(change) == {"kind", "subject", "text", "witness"}
        assert change["kind"] in ("loosened", "tightened", "changed", "rewritten")
    assert report["same_meaning"] == (code == 0)
    return code, report["changes"]


def changed(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_identical_policies(tmp_path, capsys):
    code, changes = diff(tmp_path, capsys, BASE)
    assert (code, changes) == (0, [])
    code, out, _ = run(capsys, "policy", "diff", BASELINE, BASELINE)
    assert code == 0
    assert "allow and deny the same calls" in out


def test_a_difference_exits_0_unless_asked_to_gate(tmp_path, capsys):
    old = write(tmp_path, "old.policy", BASE)
    new = write(tmp_path, "new.policy", BASE.replace("limit", "# limit", 1))
    code, out, _ = run(capsys, "policy", "diff", old, new)
    assert code == 0 and "limit" in out
    code, _, _ = run(capsys, "policy", "diff", old, new, "--exit-code")
    assert code == 1


def test_same_meaning_different_text(tmp_path, capsys):
    # Comments, spacing and the order of items do not matter: only what the policy decides.
    lines = BASE.splitlines()
    reordered = "\n".join([lines[0], lines[1], "  # the catalogue, reordered"] + lines[2:7][::-1] + lines[7:]) + "\n"
    reordered = reordered.replace("limit retries <= 3", "limit retries   <=   3   # as before")
    code, changes = diff(tmp_path, capsys, reordered)
    assert (code, changes) == (0, [])


def test_raising_a_refund_cap_is_loosened_with_a_witness(tmp_path, capsys):
    new = changed(BASE, "args.amount > 500.0", "args.amount > 800.0")
    code, changes = diff(tmp_path, capsys, new)
    assert code == 1
    loosened = [c for c in changes if c["kind"] == "loosened"]
    assert loosened, changes
    (rules,) = [c for c in loosened if c["subject"] == "allowed calls"]
    witness = re.search(r"`args\.amount` = (-?[0-9.]+)", rules["text"])
    assert witness, rules["text"]
    assert 500.0 < float(witness.group(1)) <= 800.0  # OLD denies it, NEW allows it
    assert '`call.tool` = "payments.refund"' in rules["text"]
    assert not [c for c in changes if c["kind"] == "tightened"], changes


def test_lowering_a_refund_cap_is_tightened(tmp_path, capsys):
    new = changed(BASE, "args.amount > 500.0", "args.amount > 100.0")
    code, changes = diff(tmp_path, capsys, new)
    assert code == 1
    (rules,) = [c for c in changes if c["subject"] == "allowed calls"]
    assert rules["kind"] == "tightened"
    witness = re.search(r"`args\.amount` = (-?[0-9.]+)", rules["text"])
    assert witness and 100.0 < float(witness.group(1)) <= 500.0, rules["text"]


def test_lowering_a_limit_is_tightened(tmp_path, capsys):
    code, changes = diff(tmp_path, capsys, changed(BASE, "limit retries <= 3", "limit retries <= 1"))
    assert code == 1
    assert changes == [{"kind": "tightened", "subject": "limit retries", "text": "`limit retries` 3 → 1", "witness": None}]
    code, changes = diff(tmp_path, capsys, changed(BASE, "limit cost    <= 100 usd", "limit cost    <= 250 usd"))
    assert code == 1
    assert [(c["kind"], c["subject"]) for c in changes] == [("loosened", "limit cost")]


def test_unknown_tools_warn_is_loosened(tmp_path, capsys):
    # A witness names a tool that no pattern of either catalogue takes.
    code, changes = diff(tmp_path, capsys, changed(BASE, "unknown_tools deny", "unknown_tools warn"))
    assert code == 1
    assert [(c["kind"], c["subject"]) for c in changes] == [("loosened", "allowed calls"), ("loosened", "unknown_tools")]
    tool = changes[0]["witness"]["tool"]
    assert tool not in ("payments.refund", "dns.route", "http.get") and not tool.startswith("deploy.")
    assert f"`{tool}` is not in its catalogue" in changes[0]["text"]
    code, changes = diff(tmp_path, capsys, BASE, old_text=changed(BASE, "unknown_tools deny", "unknown_tools warn"))
    assert [(c["kind"], c["subject"]) for c in changes] == [("tightened", "allowed calls"), ("tightened", "unknown_tools")]


def test_dropping_the_external_write_approval_is_loosened(tmp_path, capsys):
    # The operator approval now applies to irreversible steps only: external_write steps lose it.
    new = changed(BASE, 'when step.risk >= external_write by role "operator"',
                  'when step.risk == irreversible   by role "operator"')
    code, changes = diff(tmp_path, capsys, new)
    assert code == 1
    assert [(c["kind"], c["subject"]) for c in changes] == [("loosened", 'approval by role "operator"')]
    witness = changes[0]["witness"]
    assert witness["risk"] == {"old": "external_write", "new": "external_write"}, witness
    assert witness["old"]["approvals"] == {"operator": {"count": 1, "within": 3600}}
    assert witness["new"]["approvals"] == {}
    assert "(none asked; OLD: 1 approver within 1h; NEW: none)" in changes[0]["text"]

    # Removed outright: loosened for every tool (an irreversible refund too), nothing else moves.
    new = "".join(line for line in BASE.splitlines(keepends=True) if 'role "operator"' not in line)
    code, changes = diff(tmp_path, capsys, new)
    assert code == 1
    assert [(c["kind"], c["subject"]) for c in changes] == [("loosened", 'approval by role "operator"')]
    assert sorted(changes[0]["witness"]["tools"]) == ["deploy.*", "dns.route", "http.get", "payments.refund"]


def test_a_broken_policy_exits_2(tmp_path, capsys):
    broken = write(tmp_path, "broken.policy", changed(BASE, "limit cost    <= 100 usd", "limit cost <= 100 usd +"))
    good = write(tmp_path, "good.policy", BASE)
    for old, new in ((good, broken), (broken, good)):
        code, out, err = run(capsys, "policy", "diff", old, new, "--format", "json")
        assert code == 2
        assert "syntax-error" in err
        assert out == ""
    code, _, _ = run(capsys, "policy", "diff", good, tmp_path / "missing.policy")
    assert code == 2


# ---------------------------------------------------------------------------------- combined check

REPORTS = """\
plan nightly_reports {
  version 1
  step daily {
    call   db.query(database: "orders", env: "prod", sql: "SELECT count(*) FROM orders")
    risk   read_only
    cost   40 usd
    time   5m
  }
  step weekly {
    call   db.query(database: "orders", env: "prod", sql: "SELECT sum(total) FROM orders")
    risk   read_only
    cost   40 usd
    time   5m
  }
  step monthly {
    call   db.query(database: "orders", env: "prod", sql: "SELECT avg(total) FROM orders")
    risk   read_only
    cost   40 usd
    time   5m
    retry  3
  }
}
"""

REFUND = """\
plan refund_150 {
  version 1
  step refund {
    call        payments.refund(charge_id: "ch_1", amount: 150.0, currency: "USD")
    risk        irreversible
    idempotency "refund-ch_1"
    approval    by role "operator" within 30m
    approval    by 2 of role "approver" within 15m
  }
  check refunded after refund {
    call   payments.get_refund(id: refund.result.refund_id)
    expect result.status == "succeeded"
  }
}
"""


def problems(plan: Path, *policies: Path) -> list:
    result = check([str(plan)], [str(p) for p in policies])
    return [d for d in result.diagnostics if d.severity in (Severity.ERROR, Severity.WARNING)]


def test_combined_policies_tightest_limit_wins(tmp_path):
    plan = write(tmp_path, "reports.plan", REPORTS)
    # 6 attempts × 40 usd = 240 usd: within the baseline's 500 usd, over strict's 100 usd;
    # retry 3: at the baseline's limit, over strict's 2.
    assert problems(plan, BASELINE) == []
    found = problems(plan, BASELINE, STRICT)
    cost = [d for d in found if d.name in ("budget-exceeded", "limit-exceeded") and "limit cost <= 100 usd" in d.message]
    assert cost, [f"{d.name}: {d.message}" for d in found]
    assert all(d.severity is Severity.ERROR for d in cost)
    assert "strict" in cost[0].message
    retries = [d for d in found if d.name == "limit-exceeded" and "limit retries <= 2" in d.message]
    assert len(retries) == 1, [f"{d.name}: {d.message}" for d in found]
    assert "monthly" in retries[0].message


def test_combined_policies_any_deny_wins(tmp_path):
    plan = write(tmp_path, "refund.plan", REFUND)
    assert problems(plan, BASELINE) == []
    found = problems(plan, BASELINE, STRICT)
    assert [(d.name, d.severity) for d in found] == [("policy-deny", Severity.ERROR)], [d.message for d in found]
    assert "refund-cap-strict" in found[0].message
    # The order the policies are given in does not matter.
    assert [(d.name, d.message) for d in problems(plan, STRICT, BASELINE)] == [(d.name, d.message) for d in found]


def test_combined_policies_on_the_command_line(tmp_path, capsys):
    plan = write(tmp_path, "refund.plan", REFUND)
    code, _, _ = run(capsys, "check", plan, "--policy", BASELINE)
    assert code == 0
    code, out, _ = run(capsys, "check", plan, "--policy", BASELINE, "--policy", STRICT, "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert [d["name"] for d in report["diagnostics"]] == ["policy-deny"]
    assert report["diagnostics"][0]["span"]["start"]["line"] == line_of(REFUND, "payments.refund(")


def test_a_computed_argument_is_reasoned_about_through_its_computation():
    """`amount: look.result.total * 2` against `args.amount > 500.0`: the witness names the result
    the amount is computed from, and a `when` that bounds that result rules the deny out."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = SourceFile("p.policy", """policy p {
      tool shop.look { risk read_only }
      tool shop.pay  { risk read_only args { amount: double } }
      deny "cap" when call.tool == "shop.pay" && args.amount > 500.0
    }""")
    plan = """plan p {
      step look { call shop.look() }
      step pay { call shop.pay(amount: look.result.total * 2.0) WHEN }
    }"""
    found = check_sources([SourceFile("p.plan", plan.replace("WHEN", ""))], [policy]).diagnostics
    assert [d.name for d in found] == ["policy-deny-possible"]
    prefix = "deny rule `cap` may fire for step `pay`: it fires when `look.result.total` = "
    assert found[0].message.startswith(prefix)
    assert float(found[0].message[len(prefix):]) * 2.0 > 500.0  # the witness really makes it fire
    bounded = plan.replace("WHEN", "when look.result.total <= 250.0")
    assert check_sources([SourceFile("p.plan", bounded)], [policy]).diagnostics == []


def test_a_field_the_call_does_not_give_is_decided_before_the_run():
    """`args.tags.exists(…)` on a call with no `tags`: an error whatever the run brings, so the rule
    never fires there, even though another argument is known only at run time."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = SourceFile("p.policy", """policy p {
      tool shop.look { risk read_only }
      deny "prod" when args.tags.exists(t, t == "prod")
    }""")
    plan = """plan p {
      step a { call shop.look() }
      step b { call shop.look(v: a.result.n) }
      step c { call shop.look(tags: a.result.tags) }
    }"""
    found = check_sources([SourceFile("p.plan", plan)], [policy]).diagnostics
    assert [(d.name, d.message.split(":")[0]) for d in found] == [
        ("decided-at-run-time", "rule `prod` cannot be decided before the run for step `c`")]


def test_a_requirement_stated_by_two_policies_is_required_once():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    text = """
policy NAME {
  tool deploy.* { risk reversible_write }
  require check when step.risk >= reversible_write
  require idempotency when step.risk >= reversible_write
}
"""
    policies = [SourceFile(f"{name}.policy", text.replace("NAME", name)) for name in ("one", "two")]
    result = check_sources([SourceFile("p.plan", "plan p { step a { call deploy.x(v: 1) } }")], policies)
    names = sorted(item.name for item in result.diagnostics)
    assert names == ["check-missing", "idempotency-missing"]
    again = check_sources([SourceFile("p.plan", "plan p { step a { call deploy.x(v: 1) } }")], policies[:1] * 2)
    assert sorted(item.name for item in again.diagnostics) == names


def test_policy_test_exit_codes_with_strict(tmp_path, capsys):
    from plangate.diagnostics import diagnostic
    from plangate.policy.testing import PolicyTestResult
    from plangate.source import SourceMap, Span

    result = PolicyTestResult([diagnostic("policy-conflict", Span("p.policy", 0, 1), "they disagree")], SourceMap(), [])
    assert (result.exit_code(), result.exit_code(strict=True)) == (0, 1)
    path = write(tmp_path, "clean.policy", 'policy c { tool a.b { risk read_only } test "t" { call a.b() expect allow } }')
    assert run(capsys, "test", path, "--strict")[0] == 0


def test_unknown_tools_combine_as_any_deny_wins():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    quiet = SourceFile("quiet.policy", "policy quiet { tool a.b { risk read_only } }")  # the default: deny
    lax = SourceFile("lax.policy", "policy lax { tool a.b { risk read_only } unknown_tools warn }")
    plan = SourceFile("p.plan", "plan p { step s { call x.y() risk read_only } }")
    assert check_sources([plan], [quiet, lax]).policy.unknown_tools == "deny"
    assert check_sources([plan], [lax, lax]).policy.unknown_tools == "warn"
    assert [(item.name, item.severity.value) for item in check_sources([plan], [lax, quiet]).diagnostics] == [
        ("unknown-tool", "error")]


def test_a_combined_entry_points_at_the_policy_whose_risk_it_keeps():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    low = SourceFile("low.policy", "policy low { tool t.write { risk reversible_write } }")
    high = SourceFile("high.policy", "policy high { tool t.write { risk external_write } }")
    plan = SourceFile("p.plan", 'plan p { step w { call t.write() risk reversible_write idempotency "k" } }')
    for policies in ([low, high], [high, low]):
        found = [item for item in check_sources([plan], policies).diagnostics if item.name == "risk-underdeclared"]
        assert len(found) == 1 and found[0].labels[0].span.file == "high.policy"


def test_a_more_specific_entry_in_another_policy_never_loosens_a_tool():
    """Each policy speaks through its own most specific entry; across policies they combine as one
    pattern's entries do (highest risk, tightest caps), and the schema of the most specific entry
    that declares one is kept."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    base = SourceFile("base.policy", """policy base {
      tool deploy.* { risk reversible_write cost <= 5 usd args { artifact: string } }
      require rollback when step.risk == reversible_write }""")
    overlay = SourceFile("overlay.policy", "policy overlay { tool deploy.preview { risk read_only cost <= 50 usd } }")
    plan = SourceFile("p.plan", 'plan p { step a { call deploy.preview(artifact: 42) cost 20 usd } }')
    alone = sorted(item.name for item in check_sources([plan], [base]).diagnostics)
    assert alone == ["arg-type", "limit-exceeded", "rollback-missing"]
    for policies in ([base, overlay], [overlay, base]):
        assert sorted(item.name for item in check_sources([plan], policies).diagnostics) == alone
    compiled = check_sources([], [base, overlay]).policy
    entry = compiled.match("deploy.preview")
    assert (entry.pattern, entry.risk.name, entry.cost_cap, entry.policies) == (
        "deploy.*", "reversible_write", 5, ("base", "overlay"))
    assert compiled.match("deploy.other").policies == ("base",)  # the overlay says nothing of it
    # within one policy the most specific entry still wins
    one = SourceFile("one.policy", "policy one { tool deploy.* { risk external_write } tool deploy.preview { risk read_only } }")
    assert check_sources([], [one]).policy.match("deploy.preview").risk.name == "read_only"


def test_a_pattern_two_policies_share_does_not_speak_for_a_tool_one_of_them_rates_itself():
    """`deploy.*` is in both policies, and the overlay rates `deploy.preview` itself: the overlay
    speaks of it through that entry (read_only), the base through `deploy.*` (reversible_write),
    so the tool is reversible_write; the overlay's `deploy.*` risk (external_write) is not about
    it, but its cost cap is, since `deploy.preview` states none (what an entry leaves unsaid comes
    from its policy's next entry for the tool)."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    base = SourceFile("base.policy", "policy base { tool deploy.* { risk reversible_write } }")
    overlay = SourceFile("overlay.policy", """policy overlay {
      tool deploy.* { risk external_write cost <= 3 usd } tool deploy.preview { risk read_only } }""")
    for policies in ([base, overlay], [overlay, base]):
        compiled = check_sources([], policies).policy
        preview = compiled.match("deploy.preview")
        assert (preview.risk.name, preview.cost_cap, preview.policies) == ("reversible_write", 3, ("base", "overlay"))
        other = compiled.match("deploy.other")
        assert (other.risk.name, other.cost_cap) == ("external_write", 3)


def test_the_policy_hash_names_what_each_policy_says_of_a_shared_pattern():
    """Two sets whose merged catalogue reads alike but whose policies say different things of
    `deploy.*` decide `deploy.preview` differently: their hashes differ (a run keeps its policy by
    its hash). A run recorded before entries had origins is still read (`legacy_hash`)."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    a = SourceFile("a.policy", "policy a { tool deploy.* { risk irreversible } tool deploy.preview { risk read_only } }")
    compiled = {}
    for risk in ("read_only", "irreversible"):
        b = SourceFile("b.policy", f"policy b {{ tool deploy.* {{ risk {risk} }} }}")
        compiled[risk] = check_sources([], [a, b]).policy
    assert compiled["read_only"].match("deploy.preview").risk.name == "read_only"
    assert compiled["irreversible"].match("deploy.preview").risk.name == "irreversible"
    assert compiled["read_only"].hash != compiled["irreversible"].hash
    assert compiled["read_only"].legacy_hash() == compiled["irreversible"].legacy_hash()  # what it missed


def test_a_condition_about_a_named_tool_is_typed_by_that_tools_arguments():
    """`call.tool == "notes.save" && args.pth == "x"` can never fire on the calls it is about:
    `notes.save` has no `pth`. A condition some named tool's arguments fit is fine."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = """policy p {
      tool notes.save { risk reversible_write args { path: string, size: int? } }
      tool notes.read { risk read_only args { pth: string } }
      tool notes.any  { risk read_only }
      deny "no-x" when call.tool == "notes.save" && args.path > 5
      deny "typo" when call.tool == "notes.save" && args.pth == "x"
      deny "either" when (call.tool == "notes.save" || call.tool == "notes.read") && args.pth == "x"
      deny "free" when call.tool == "notes.any" && args.whatever == 1
      deny "fine" when call.tool == "notes.save" && args.path.startsWith("/etc") && has(args.size) && args.size > 10
    }"""
    found = check_sources([], [SourceFile("p.policy", policy)]).diagnostics
    assert [(d.name, d.message, d.help) for d in found] == [
        ("cel-type-error", "cannot compare `string` with `int`", None),
        ("cel-type-error", "`args` has no field `pth`", "did you mean `path`?")]
    assert all("the tool the condition names" in d.notes[-1] for d in found)


def test_a_tests_arguments_are_typed_whatever_the_rules_are():
    """Test arguments are typed on their own, after every condition (typing a condition by its
    tools' schemas must not take their place)."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = """policy p {
      tool t.x { risk read_only args { n: int } }
      deny "big" when call.tool == "t.x" && args.n > 10
      test "typed" { call t.x(n: nope) expect allow }
    }"""
    found = check_sources([], [SourceFile("p.policy", policy)]).diagnostics
    assert [(d.name, d.message) for d in found] == [("unknown-name", "unknown name `nope`")]


def test_unknown_tool_help_never_suggests_a_pattern_as_a_tool():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = SourceFile("p.policy", "policy p { tool deploy.* { risk reversible_write } tool dns.route { risk read_only } }")
    for call, help_text in (("deploy", "`deploy.*` matches the tools under `deploy.` (`deploy.name`), not `deploy` itself"),
                            ("dns.rout", "did you mean `dns.route`?")):
        plan = SourceFile("p.plan", f"plan p {{ step s {{ call {call}() risk read_only }} }}")
        [found] = [d for d in check_sources([plan], [policy]).diagnostics if d.name == "unknown-tool"]
        assert found.help == help_text


def test_overlapping_entries_with_different_schemas_are_ambiguous_and_same_named_policies_each_speak():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    base = SourceFile("base.policy", """policy base { tool pay.* { risk external_write args { amount: double } }
      deny "cap" when call.tool.startsWith("pay.") && args.amount > 500.0 }""")
    overlay = SourceFile("overlay.policy", "policy overlay { tool pay.refund { risk irreversible args { amount: string } } }")
    found = check_sources([], [base, overlay]).diagnostics
    assert [(d.name, d.severity.value) for d in found] == [("ambiguous-tool", "error")]
    assert "`pay.refund` different `args` (through `pay.refund` and `pay.*`)" in found[0].message
    # two files with one policy id are still two policies: neither loosens the other
    low = SourceFile("a.policy", "policy base { tool deploy.* { risk read_only } }")
    high = SourceFile("b.policy", "policy base { tool deploy.preview { risk irreversible } }")
    for policies in ([low, high], [high, low]):
        assert check_sources([], policies).policy.match("deploy.preview").risk.name == "irreversible"
    same = SourceFile("c.policy", "policy base { tool deploy.* { risk irreversible } }")
    assert check_sources([], [low, same]).policy.match("deploy.x").risk.name == "irreversible"


def test_a_combined_cap_is_named_by_the_entry_that_gives_it():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    base = SourceFile("base.policy", "policy base { tool deploy.* { risk irreversible cost <= 100 usd time <= 1h } }")
    over = SourceFile("over.policy", "policy over { tool deploy.preview { risk read_only cost <= 5 usd time <= 10m } }")
    plan = SourceFile("p.plan", 'plan p { step a { call deploy.preview() cost 20 usd time 30m } }')
    found = [(d.message, d.labels[0].span.file) for d in check_sources([plan], [base, over]).diagnostics
             if d.name == "limit-exceeded"]
    assert found == [("step `a` may cost `20 usd`, over the `5 usd` cap of tool `deploy.preview`", "over.policy"),
                     ("step `a` may take `30m`, over the `10m` time cap of tool `deploy.preview`", "over.policy")]


def test_a_compiled_policy_is_frozen_limits_included():
    """The runtime and the gate decide by the compiled policy and name it by its hash: nothing may
    change it after compiling, so that the hash keeps naming what decides."""
    import dataclasses

    from plangate.driver import compile_policy
    from plangate.policy.compiled import LimitValue

    policy, _ = compile_policy([str(BASELINE)])
    assert policy is not None and policy.limit("retries") is not None
    with pytest.raises(TypeError):
        policy.limits["retries"] = LimitValue("retries", count=100)  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.rules = ()  # type: ignore[misc]
    assert hash(policy) == hash(compile_policy([str(BASELINE)])[0])
    import copy
    import pickle

    for copied in (pickle.loads(pickle.dumps(policy)), copy.deepcopy(policy)):  # to another process, say
        assert copied.hash == policy.hash and copied.limits == policy.limits and copied.canonical() == policy.canonical()
        with pytest.raises(TypeError):
            copied.limits.update(retries=None)  # type: ignore[attr-defined]


def test_a_rule_whose_condition_fails_on_every_call_is_reported(tmp_path):
    """`1 / 0 == 1` errs on every call, so its rule never fires: a mistake in the policy, said where
    the failing part is. A part that `&&` may absorb is left alone, as in plans."""
    policy = tmp_path / "p.policy"
    policy.write_text('policy p {\n  tool t.x { risk read_only }\n  deny "x" when 1 / 0 == 1\n'
                      '  deny "y" when call.tool == "t.x" && int("x") == 1\n'
                      '  require approval when 2 * 4611686018427387904 > 0 by role "ops"\n}\n')
    found = [(d.name, d.span.start, d.message) for d in check([], [policy]).diagnostics]
    text = policy.read_text()
    assert found == [("cel-type-error", text.index("1 / 0"), "`1 / 0` always fails: division by zero"),
                     ("cel-type-error", text.index("2 * 46"),
                      "`2 * 4611686018427387904` always fails: integer overflow")]


def test_a_test_without_expect_fails_alone_and_the_others_run(tmp_path, capsys):
    """A test that expects nothing would pass whatever the policy decides: it fails, with the
    decision it got, and it does not stop the other tests (it used to be a syntax error that
    stopped every test of every file)."""
    policy = write(tmp_path, "p.policy", 'policy p { tool a.b { risk read_only }\n'
                                         '  test "nothing expected" { call a.b() }\n'
                                         '  test "allowed" { call a.b() expect allow } }')
    other = write(tmp_path, "q.policy", 'policy q { tool c.d { risk read_only } test "fine" { call c.d() expect allow } }')
    code, out, _ = run(capsys, "test", str(policy), str(other))
    assert code == 1 and "2 passed, 1 failed" in out, out
    assert "FAIL p › nothing expected   (allow)" in out
    assert "policy-test-failed: test `nothing expected` has no `expect`: it checks nothing" in out


def test_the_json_of_plangate_test_lists_every_test_and_counts_them(tmp_path, capsys):
    policy = write(tmp_path, "p.policy", 'policy p { tool a.b { risk read_only } deny "no-x" when args.x == 1\n'
                                         '  test "denied" { call a.b(x: 1) expect deny "no-x" }\n'
                                         '  test "wrongly allowed" { call a.b(x: 1) expect allow } }')
    code, out, _ = run(capsys, "test", str(policy), "--format", "json")
    document = json.loads(out)
    assert code == 1
    assert document["tests"] == [
        {"policy": "p", "name": "denied", "file": str(policy), "passed": True, "decided": "deny by `no-x`"},
        {"policy": "p", "name": "wrongly allowed", "file": str(policy), "passed": False, "decided": "deny by `no-x`"}]
    assert document["summary"] == {"errors": 1, "warnings": 0, "files": 1, "tests": 2, "passed": 1, "failed": 1}
    assert [d["name"] for d in document["diagnostics"]] == ["policy-test-failed"]


def test_a_failed_test_notes_only_the_errors_of_the_conditions_it_is_about(tmp_path, capsys):
    """The contract's `long-plan` reads `plan.budget.time`, which a test's call has not: its error
    is noted on a failed `expect warn`, not on a failed `expect deny "refund-cap"`."""
    policy = write(tmp_path, "p.policy", 'policy p { tool pay.refund { risk irreversible }\n'
                                         '  deny "refund-cap" when args.amount > 500.0\n'
                                         '  warn "long-plan" when plan.budget.time > duration("1h")\n'
                                         '  test "capped" { call pay.refund(amount: 10.0) expect deny "refund-cap" }\n'
                                         '  test "warned" { call pay.refund(amount: 10.0) expect warn "long-plan" } }')
    code, out, _ = run(capsys, "test", str(policy))
    assert code == 1 and "0 passed, 2 failed" in out
    assert out.count("note: long-plan: ") == 1
    capped, warned = out.split("expects `deny \"refund-cap\"`")[1].split("expects `warn \"long-plan\"`")
    assert "note:" not in capped and "note: long-plan: " in warned


def test_a_test_block_with_an_error_inside_fails(tmp_path, capsys):
    """Two `call`s or an unknown risk in a test block: what the policy decided is not what the test
    says, so the test fails (with the error), instead of being listed as ok above the error."""
    import xml.etree.ElementTree as ET

    policy = write(tmp_path, "p.policy", 'policy p { tool a.b { risk read_only }\n'
                                         '  test "two calls" { call a.b() call a.b() expect allow }\n'
                                         '  test "bad risk" { call a.b() risk medium expect allow }\n'
                                         '  test "fine" { call a.b() expect allow } }')
    code, out, _ = run(capsys, "test", str(policy))
    assert code == 1 and "1 passed, 2 failed" in out
    assert "FAIL p › two calls" in out and "FAIL p › bad risk" in out and "ok   p › fine" in out
    code, out, _ = run(capsys, "test", str(policy), "--format", "junit")
    cases = {case.get("name"): case for case in ET.fromstring(out).iter("testcase")}
    assert cases["two calls"].find("failure") is not None and "duplicate-clause" in ET.tostring(cases["two calls"], "unicode")
    assert cases["fine"].find("failure") is None
    code, out, _ = run(capsys, "test", str(policy), "--format", "json")
    report = json.loads(out)
    failed = [d for d in report["diagnostics"] if d["name"] == "policy-test-failed"]
    assert len(failed) == report["summary"]["failed"] == 2  # each failure says why, as PG601
    assert "its block holds an error (`duplicate-clause`" in failed[0]["message"]


def test_an_entry_takes_what_it_leaves_unsaid_from_its_policys_next_entry_for_the_tool():
    """`deploy.preview { args { … } }` under `deploy.* { risk reversible_write }` keeps the risk:
    no false `irreversible` requirements for a step that declares none, and a step declaring
    `read_only` is `risk-underdeclared` (it was accepted); `pay.refund { risk irreversible }` under
    `pay.* { args { amount: double } }` keeps the schema (a string amount was accepted)."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = SourceFile("w.policy", """policy w {
      tool deploy.* { risk reversible_write cost <= 5 usd }
      tool deploy.preview { args { artifact: string } }
      tool pay.* { risk external_write args { amount: double } }
      tool pay.refund { risk irreversible }
      require approval when step.risk == irreversible by 2 of role "finance" within 15m
      require rollback when step.risk == reversible_write }""")
    plan = SourceFile("p.plan", """plan p {
      step a { call deploy.preview(artifact: "a") rollback deploy.delete(id: result.id) }
      step b { call deploy.preview(artifact: "b") risk read_only rollback deploy.delete(id: result.id) }
      step c { call pay.refund(amount: "900") approval by 2 of role "finance" within 15m } }""")
    result = check_sources([plan], [policy])
    assert sorted((d.name, plan.position(d.span.start)[0]) for d in result.diagnostics) == [
        ("arg-type", 4), ("risk-underdeclared", 3)]
    preview = result.policy.match("deploy.preview")
    assert (preview.risk.name, preview.cost_cap, preview.pattern) == ("reversible_write", 5, "deploy.preview")
    assert preview.risk_source()[0] == "deploy.*" and preview.args_source()[0] == "deploy.preview"
    [underdeclared] = [d for d in result.diagnostics if d.name == "risk-underdeclared"]
    assert underdeclared.labels[0].message == "`deploy.*` is `reversible_write` here"


def test_a_schema_a_policy_inherits_or_shares_through_a_pattern_is_compared_with_the_others():
    """Each policy speaks of a tool through its own most specific entry, with the schema it leaves
    unsaid taken from its next: that schema, not only one stated on an overlapping pattern, makes
    a tool ambiguous — else which schema (and the deny rules written for it) applied depended on
    the policies' texts."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    base = SourceFile("base.policy", """policy base { tool pay.* { risk irreversible args { amount: double } }
      tool pay.refund { cost <= 1 usd }
      deny "refund-cap" when call.tool == "pay.refund" && args.amount > 500.0 }""")
    plan = SourceFile("p.plan", 'plan p { step r { call pay.refund(amount: "900.0") idempotency "r" } }')
    for comment in ("# v1", "# v2", "# v3"):
        team = SourceFile("team.policy", f"policy team {{ tool pay.refund {{ risk irreversible args {{ amount: string }} }} }}\n{comment}\n")
        for policies in ([base, team], [team, base]):
            found = [d for d in check_sources([plan], policies).diagnostics if d.name == "ambiguous-tool"]
            assert [(d.message, d.span.file, d.labels[0].span.file) for d in found] == [
                ("policies `team` and `base` give `pay.refund` different `args` (through `pay.refund` and `pay.*`)",
                 "team.policy", "base.policy")]
    # both policies name the wider pattern; one also names the tool
    a = SourceFile("A.policy", "policy A { tool t.* { risk read_only } tool t.w { risk read_only args { m: int } } }")
    b = SourceFile("B.policy", "policy B { tool t.* { risk read_only args { n: int } } }")
    for policies in ([a, b], [b, a]):
        [found] = [d for d in check_sources([], policies).diagnostics if d.name == "ambiguous-tool"]
        assert found.message == "policies `A` and `B` give `t.w` different `args` (through `t.w` and `t.*`)"
    # a more specific entry of the policy with the wider schema speaks for it: no ambiguity
    c = SourceFile("C.policy", "policy C { tool q.* { risk read_only args { x: int } } tool q.r { args { m: int } } }")
    d = SourceFile("D.policy", "policy D { tool q.r { risk read_only args { m: int } } }")
    assert [x.name for x in check_sources([], [c, d]).diagnostics] == []


def test_one_schema_with_its_arguments_in_another_order_is_not_ambiguous():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    c = SourceFile("C.policy", "policy C { tool t.y { risk read_only args { a: int, b: string? } } }")
    d = SourceFile("D.policy", "policy D { tool t.y { risk read_only args { b: string?, a: int } } }")
    e = SourceFile("E.policy", "policy E { tool t.* { risk read_only args { b: string?, a: int } } }")
    plan = SourceFile("p.plan", 'plan p { step c { call t.y(a: 1, b: "s") } }')
    for policies in ([c, d], [d, c], [c, e]):
        assert [x.name for x in check_sources([plan], policies).diagnostics] == []
    f = SourceFile("F.policy", "policy F { tool t.y { risk read_only args { b: string, a: int } } }")  # not optional
    assert [x.name for x in check_sources([], [c, f]).diagnostics] == ["ambiguous-tool"]


def test_one_unmet_requirement_asked_by_two_policies_is_one_diagnostic_naming_both():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    base = SourceFile("base.policy", "policy base { tool t.w { risk reversible_write } require check when step.risk >= reversible_write }")
    team = SourceFile("team.policy", 'policy team { require check when call.tool == "t.w" require rollback }')
    plan = SourceFile("p.plan", 'plan p { step w { call t.w() idempotency "w" } }')
    found = [d for d in check_sources([plan], [base, team]).diagnostics if d.name.endswith("-missing")]
    assert [d.name for d in found] == ["check-missing", "rollback-missing"]
    assert list(found[0].notes) == ["required by `require check when step.risk >= reversible_write` in policy `base`",
                              'required by `require check when call.tool == "t.w"` in policy `team`']
    assert [label.span.file for label in found[0].labels] == ["base.policy", "team.policy"]


def test_two_policies_of_one_id_are_told_apart_by_their_files_in_messages():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    a = SourceFile("a.policy", "policy base { tool t.x { risk read_only args { a: int } } }")
    b = SourceFile("b.policy", "policy base { tool t.x { risk irreversible args { b: int } } }")
    messages = sorted(d.message for d in check_sources([], [a, b]).diagnostics)
    assert messages == [
        "policies `base` (`a.policy`) and `base` (`b.policy`) disagree on `t.x`: risk `read_only` against "
        "`irreversible`: `irreversible` is kept",
        "policies `base` (`a.policy`) and `base` (`b.policy`) give `t.x` different `args`"]


@pytest.mark.parametrize("condition", ['args["amount"] > 400.0', 'call.args["amount"] > 400.0', "size(args) > 0",
                                       'args.exists(k, k == "amount") && args.amount > 400.0',
                                       'args == {"amount": 450.0}', '"amount" in args && args.amount > 400.0'])
def test_a_rule_naming_its_tool_may_use_args_as_the_map_it_is(condition):
    """Typed with the tool's schema, `args` is still a map at run time (its keys the arguments):
    indexing, `size`, macros and comparing it with a map are fine, and the rule fires."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = SourceFile("a.policy", f"""policy p {{
      tool pay.refund {{ risk read_only args {{ amount: double }} }}
      deny "cap" when call.tool == "pay.refund" && {condition}
    }}""")
    plan = SourceFile("x.plan", "plan x { step s { call pay.refund(amount: 450.0) } }")
    assert [d.name for d in check_sources([plan], [policy]).diagnostics] == ["policy-deny"]


def test_an_index_of_an_argument_the_schema_lacks_is_a_rule_that_never_fires():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = SourceFile("a.policy", """policy p {
      tool pay.refund { risk read_only args { amount: double } }
      deny "cap" when call.tool == "pay.refund" && args["amont"] > 400.0
    }""")
    [found] = check_sources([], [policy]).diagnostics
    assert found.name == "cel-type-error" and "no field `amont`" in found.message


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_a_limit_without_a_currency_never_hides_a_mismatch_between_two_others(order):
    """`limit cost <= 10` beside `<= 50 eur` and `<= 30 usd`: the two coded limits still meet."""
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    texts = [("a.policy", "policy a { tool t.x { risk read_only } limit cost <= 10 }"),
             ("b.policy", "policy b { limit cost <= 50 eur }"), ("c.policy", "policy c { limit cost <= 30 usd }")]
    result = check_sources([], [SourceFile(*texts[index]) for index in order])
    assert [d.name for d in result.diagnostics] == ["currency-mismatch"]

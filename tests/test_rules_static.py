"""Deny rules decided before the run: number guards, computed arguments, witnesses shown as CEL."""

from __future__ import annotations

import re

import pytest

from plangate.cel.evaluate import Duration, Uint, value_source
from plangate.driver import check_sources
from plangate.source import SourceFile


def diagnostics(plan: str, policy: str):
    result = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)])
    return [d for d in result.diagnostics if d.name != "no-policy"]


INT_POLICY = """policy p {
  tool t.x   { risk read_only args { n: int } }
  tool t.d   { risk read_only args { x: double } }
  tool t.get { risk read_only }
  deny "neg" when call.tool == "t.x" && args.n < 0
  deny "negd" when call.tool == "t.d" && args.x < 0
  deny "big" when call.tool == "t.d" && args.x > 100.0
}"""


@pytest.mark.parametrize("step", [
    "call t.x(n: g.result.n) when g.result.n > 0",
    "call t.x(n: g.result.n) when g.result.n >= 1 && g.result.n < 100",
    "call t.x(n: g.result.n) when g.result.n > -0.5",
    "call t.x(n: g.result.n) when g.result.n > 0 && g.result.n % 2 == 0",
    "call t.d(x: g.result.x) when g.result.x >= 0 && g.result.x <= 100",
    "call t.d(x: g.result.x) when g.result.x >= 1 && g.result.x < 100",
])
def test_a_guard_rules_the_deny_out(step):
    assert diagnostics(f"plan p {{ step g {{ call t.get() }} step a {{ {step} }} }}", INT_POLICY) == []


def test_an_int_argument_guarded_too_loosely_may_be_denied():
    found = diagnostics("plan p { step g { call t.get() } step a { call t.x(n: g.result.n) when g.result.n > -5 } }",
                        INT_POLICY)
    assert [d.name for d in found] == ["policy-deny-possible"]
    assert "`g.result.n` = -" in found[0].message and "." not in found[0].message.split("= ")[1]


def test_a_deny_that_may_fire_on_an_untyped_argument_says_a_value_of_another_type_slips_past():
    """A failing rule does not fire (as in CEL policy engines), so a string `amount` passes
    `args.amount > 500.0` at run time; where the catalogue gives the argument no type, the warning
    says so and how to close it. With `args` declared, it does not (such a call is refused)."""
    untyped = """policy p { tool pay.refund { risk read_only } tool t.get { risk read_only }
      deny "cap" when call.tool == "pay.refund" && args.amount > 500.0 }"""
    plan = 'plan p { step g { call t.get() } step r { call pay.refund(env: "prod", amount: g.result.amount) } }'
    (found,) = diagnostics(plan, untyped.replace("args.amount > 500.0", 'args.amount > 500.0 && args.env == "prod"'))
    assert found.name == "policy-deny-possible"
    assert any(note.startswith("the catalogue gives `amount` no type: a value of another type")  # not `env`: a
               for note in found.notes)                                                          # constant string
    typed = untyped.replace("tool pay.refund { risk read_only }",
                            "tool pay.refund { risk read_only args { amount: double, env: string } }")
    (found,) = diagnostics(plan, typed)
    assert found.name == "policy-deny-possible" and not any("no type" in note for note in found.notes)


def test_a_double_witness_shows_as_a_double_everywhere():
    found = diagnostics("plan p { step g { call t.get() } step a { call t.d(x: g.result.x) when g.result.x > 0 } }",
                        INT_POLICY)
    assert [d.message.split(": it fires when ")[1] for d in found] == ["`g.result.x` = 101.0"]


def test_a_deny_that_fires_for_every_value_of_a_concatenation_is_an_error():
    policy = """policy p {
      tool db.q  { risk read_only args { sql: string } }
      tool t.get { risk read_only }
      deny "no-drop" when call.tool == "db.q" && args.sql.startsWith("DROP")
    }"""
    found = diagnostics('plan p { step g { call t.get() } step q { call db.q(sql: "DROP TABLE " + g.result.name) } }',
                        policy)
    assert [d.name for d in found] == ["policy-deny"]


def test_witnesses_are_cel_values():
    policy = """policy p {
      tool t.x   { risk read_only args { m: map, du: duration } }
      tool t.get { risk read_only }
      deny "danger" when call.tool == "t.x" && has(args.m.danger)
      deny "long" when call.tool == "t.x" && args.du > duration("1h")
    }"""
    found = diagnostics("plan p { step g { call t.get() } step a { call t.x(m: g.result.m, du: g.result.du) } }",
                        policy)
    shown = sorted(d.message.split(": it fires when ")[1] for d in found)
    assert shown == ['`g.result.du` = duration("3601s")', '`g.result.m` = {"danger": null}']  # a map shown whole


@pytest.mark.parametrize("value, text", [
    (None, "null"), (True, "true"), (5, "5"), (Uint(5), "5u"), (101.0, "101.0"), (0.5, "0.5"),
    ("a\"b", '"a\\"b"'), (Duration(3601 * 10 ** 9), 'duration("3601s")'), ([1, None], "[1, null]"),
    ({"k": 1.0}, '{"k": 1.0}'), (float("inf"), 'double("Infinity")'),
])
def test_value_source(value, text):
    assert value_source(value) == text


def test_nothing_fires_and_nothing_is_required_for_a_step_that_never_runs():
    """`when false` (and what uses its result) never runs: `unreachable-step` says so, and no rule
    or requirement is held against it — a deny that "must fire" there would contradict it."""
    policy = """policy q {
      tool ro.get { risk read_only }
      tool ext.send { risk external_write args { to: string } }
      require approval when step.risk >= external_write by role "operator" within 1h
      deny "no-evil" when call.tool == "ext.send" && args.to == "evil"
    }"""
    plan = """plan wf {
      step a { call ro.get() }
      step b { call ext.send(to: "evil") when 1 > 2 idempotency "k" }
      step c { call ext.send(to: b.result.x) idempotency "k" }
      step d { call ext.send(to: "evil") idempotency "k" approval by role "operator" }
    }"""
    found = [(d.name, d.span.start) for d in diagnostics(plan, policy)]
    assert [name for name, _ in found] == ["unreachable-step", "unreachable-step", "policy-deny"]
    assert found[-1][1] == plan.index('ext.send(to: "evil") idempotency "k" approval')


@pytest.mark.parametrize("check_step", [
    'check c after p { call http.get(url: z.result.u) }',  # uses the result of a step that never runs
    'check c after p { when false call http.get(url: "u") }',  # its own `when` is false
])
def test_a_check_that_never_runs_verifies_nothing(check_step):
    policy = """policy q { tool deploy.* { risk reversible_write } tool http.get { risk read_only }
                require check when step.risk >= reversible_write }"""
    plan = f"""plan s {{
      step p {{ call deploy.preview(artifact: "a") }}
      step z {{ when false call http.get(url: "z") }}
      {check_step}
    }}"""
    names = [d.name for d in diagnostics(plan, policy)]
    assert "check-missing" in names and "unreachable-step" in names
    runs = plan.replace(check_step, 'check c after p { call http.get(url: "u") }')
    assert "check-missing" not in [d.name for d in diagnostics(runs, policy)]


def test_a_check_that_declares_a_write_is_reported_without_a_policy_too():
    plan = 'plan p { check c { call rw.put(k: "y") risk reversible_write } check d { call ro.get() } }'
    found = check_sources([SourceFile("p.plan", plan)]).diagnostics
    assert [(d.name, d.message) for d in found if d.name != "no-policy"] == [
        ("check-not-read-only", "check `c` calls `rw.put`, which is `reversible_write` by its declared risk")]


@pytest.mark.parametrize("name", ["plan", "args", "step", "call", "read_only", "irreversible"])
def test_a_step_named_like_a_rule_variable_is_still_reasoned_about(name):
    """A step may be called `plan` or `args`; where its result meets a rule (an argument computed
    from it, a `when` over it), the rule's own `plan`/`args` must not stand in for it."""
    policy = """policy q {
      tool src.* { risk read_only }
      tool sink.* { risk read_only args { n: double } }
      deny "r" when call.tool == "sink.put" && args.n > 10.0
      require approval when call.tool == "sink.put" && args.n > 10.0 by role "fin"
    }"""
    plan = f"""plan p {{
      step {name} {{ call src.get() }}
      step b {{ call sink.put(n: {name}.result.v * 2.0) }}
      step c {{ when {name}.result.v > 5.0 call sink.put(n: {name}.result.v) }}
    }}"""
    found = [(d.name, d.message) for d in diagnostics(plan, policy)]
    assert ("policy-deny-possible", f"deny rule `r` may fire for step `b`: it fires when `{name}.result.v` = 6.0") in found
    assert [n for n, m in found if n == "policy-deny-possible"] == ["policy-deny-possible"] * 2
    assert [n for n, m in found if n == "approval-missing"] == ["approval-missing"] * 2


def test_a_value_of_no_declared_type_may_be_of_another_type_than_its_uses_say():
    """A result compared with `false` may be `null` (unequal to it, not an error), and one compared
    with numbers may be a string (then neither `> 5` nor `<= 5` holds: an error, no firing)."""
    policy = """policy q {
      tool src.* { risk read_only }
      tool sink.* { risk read_only }
      deny "r" when call.tool == "sink.put" && args.ok != false
      deny "n" when call.tool == "sink.num" && (args.n > 5 || args.n <= 5)
    }"""
    plan = """plan p {
      step a { call src.get() }
      step b { when a.result.ok != true call sink.put(ok: a.result.ok) }
      step c { call sink.num(n: a.result.n) }
    }"""
    found = [(d.name, d.message) for d in diagnostics(plan, policy)]
    assert [name for name, _ in found] == ["policy-deny-possible", "policy-deny-possible"]  # not `policy-deny`
    assert found[0][1] == "deny rule `r` may fire for step `b`: it fires when `a.result.ok` = null"
    assert re.fullmatch(r"deny rule `n` may fire for step `c`: it fires when `a\.result\.n` = -?[0-9.]+", found[1][1])


def test_in_over_args_asks_whether_an_argument_is_given():
    """`args` is a map of the call's arguments: `"n" in args` is well typed, and decided."""
    policy = """policy q { tool r.r { risk read_only args { n: int?, s: string } }
                deny "b" when call.tool == "r.r" && "n" in args
                warn "odd" when 1 in args }"""
    plan = 'plan i { step a { call r.r(n: 1, s: "x") } step b { call r.r(s: "x") } }'
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)]).diagnostics
    assert [(d.name, d.message) for d in found] == [
        ("policy-deny", "deny rule `b` fires for step `a`"),
        ("cel-type-error", "cannot look for an `int` among the keys of a `map(string, dyn)`"),
    ]
    typed = policy.replace("warn \"odd\" when 1 in args", "warn \"odd\" when call.tool == \"r.r\" && 1 in args")
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", typed)]).diagnostics
    assert [d.name for d in found] == ["policy-deny", "cel-type-error"]  # typed by `r.r`'s arguments too


def test_a_checks_rollback_that_writes_is_not_read_only():
    policy = "policy q { tool http.get { risk read_only } tool pay.refund { risk irreversible } }"
    plan = 'plan p { check c { call http.get(url: "u") rollback pay.refund(amount: 1.0) } }'
    found = [(d.name, d.message) for d in diagnostics(plan, policy)]
    assert found == [("check-not-read-only", "check `c` has the rollback `pay.refund`, which is `irreversible` by the catalogue")]


def test_a_step_without_cost_or_time_is_seen_at_its_tools_caps():
    policy = """policy p {
  tool r.get { risk read_only cost <= 9 usd time <= 2h }
  tool r.free { risk read_only }
  deny "pricey" when step.cost > 5.0
  deny "slow" when step.time > duration("1h")
}"""
    plan = """plan p {
  step capped { call r.get() }
  step declared { call r.get() cost 1 usd time 1m }
  step uncapped { call r.free() }
}"""
    found = sorted((d.name, d.message) for d in diagnostics(plan, policy))
    assert found == [("policy-deny", "deny rule `pricey` fires for step `capped`"),
                     ("policy-deny", "deny rule `slow` fires for step `capped`")]


REGEX_POLICY = """policy p {
  tool t.get     { risk read_only }
  tool dns.route { risk read_only args { host: string } }
  require approval when call.tool == "dns.route" && args.host.matches("^dev-") by role "dev-lead"
  deny "dev-hosts" when call.tool == "dns.route" && args.host.matches("^dev-[0-9]+$")
}"""


@pytest.mark.parametrize("host, names", [
    ('"prod-" + g.result.id', []),  # never starts with `dev-`: no approval, no deny
    ('"dev-" + g.result.id', ["approval-missing", "policy-deny-possible"]),
    ('"dev-" + g.result.id + "x"', ["approval-missing"]),  # never all digits after `dev-`
])
def test_a_regex_over_a_computed_argument_is_decided_through_the_computation(host, names):
    found = diagnostics(f"plan p {{ step g {{ call t.get() }} step s {{ call dns.route(host: {host}) }} }}",
                        REGEX_POLICY)
    assert sorted(d.name for d in found) == names, [d.message for d in found]
    for item in found:
        if item.name == "policy-deny-possible":
            assert re.search(r"`g\.result\.id` = \"[0-9]+\"", item.message), item.message  # a value of the result


def test_a_regex_that_every_computed_value_matches_must_fire():
    policy = """policy p {
      tool t.get     { risk read_only }
      tool dns.route { risk read_only args { host: string } }
      deny "prod-hosts" when call.tool == "dns.route" && args.host.matches("^prod-")
    }"""
    found = diagnostics('plan p { step g { call t.get() } step s { call dns.route(host: "prod-" + g.result.id) } }',
                        policy)
    assert [d.name for d in found] == ["policy-deny"]


LITERAL_POLICY = """policy p {
  tool t.get { risk read_only }
  tool t.m   { risk external_write args { m: map } }
  tool t.l   { risk read_only args { l: list } }
  require approval when call.tool == "t.m" && args.m.env == "prod" by role "prod-op"
  deny "prod"    when call.tool == "t.m" && args.m.env == "prod"
  deny "has-env" when call.tool == "t.m" && has(args.m.env)
  deny "evil"    when call.tool == "t.l" && "evil" in args.l
  deny "three"   when call.tool == "t.l" && size(args.l) == 3
}"""


@pytest.mark.parametrize("call, fired", [
    # the literal's own entries decide, whatever the result in it holds
    ('t.m(m: {"env": "dev", "build": g.result.id}) risk external_write', {"has-env": "policy-deny"}),
    ('t.m(m: {"build": g.result.id}) risk external_write', {}),
    ('t.m(m: {"env": g.result.e}) risk external_write',
     {"has-env": "policy-deny", "prod": "policy-deny-possible", "approval": "approval-missing"}),
    ('t.l(l: ["evil", g.result.b])', {"evil": "policy-deny"}),
    ('t.l(l: [g.result.a, g.result.b])', {"evil": "policy-deny-possible"}),  # and never three items
    ('t.l(l: [g.result.a, g.result.b, 1])', {"evil": "policy-deny-possible", "three": "policy-deny"}),
])
def test_a_list_or_map_literal_holding_results_is_decided_through_its_items(call, fired):
    found = diagnostics(f"plan p {{ step g {{ call t.get() }} step s {{ call {call} }} }}", LITERAL_POLICY)
    named = {("approval" if d.name == "approval-missing" else d.message.split("`")[1]): d.name for d in found}
    assert named == fired, [d.message for d in found]
    for item in found:
        if item.name == "policy-deny-possible":
            assert "`g.result." in item.message and "`s.args." not in item.message, item.message


UINT_POLICY = """policy p {
  tool t.get  { risk read_only }
  tool t.sink { risk read_only args { v: uint } }
  deny "big"  when call.tool == "t.sink" && args.v > 9223372036854775807
  deny "neg"  when call.tool == "t.sink" && args.v < 0
  deny "plus" when call.tool == "t.sink" && args.v + 1u > 5u
}"""


def test_a_uint_argument_takes_every_uint_and_no_negative_value():
    """A `uint` reaches 2⁶⁴-1 (past an int's bound) and is never negative; arithmetic on it (uint
    only, in CEL) is left to the run."""
    found = diagnostics("plan p { step g { call t.get() } step k { call t.sink(v: g.result.v) } }", UINT_POLICY)
    by_rule = {d.message.split("`")[1]: d for d in found if d.name != "decided-at-run-time"}
    assert sorted(by_rule) == ["big"]
    assert by_rule["big"].name == "policy-deny-possible"
    assert by_rule["big"].message.endswith("`g.result.v` = 9223372036854775808u")
    assert [d.name for d in found if d.name == "decided-at-run-time"] == ["decided-at-run-time"]


def sink_rule(condition: str, declared: str):
    """The diagnostics of `deny "r" when call.tool == "t.sink" && CONDITION` for a call
    `t.sink(v: g.result.v)`, `v` declared `DECLARED`."""
    policy = f"""policy p {{
      tool t.get  {{ risk read_only }}
      tool t.sink {{ risk read_only args {{ v: {declared} }} }}
      deny "r" when call.tool == "t.sink" && {condition}
    }}"""
    return diagnostics("plan p { step g { call t.get() } step k { call t.sink(v: g.result.v) } }", policy)


def test_a_string_witness_is_never_a_lone_surrogate():
    [item] = sink_rule('args.v > "\\uD7FF" && args.v < "\\uE000"', "string")
    witness = item.message.split("= ")[1]
    assert item.name == "policy-deny-possible" and witness.startswith('"\ud7ff') and len(witness) > 3, witness
    witness.encode("utf-8")  # no surrogate: every output format can hold it


@pytest.mark.parametrize("condition", ["args.v > 1.0 && args.v < 1.0000000000000002", "args.v * args.v == 2.0"])
def test_a_witness_the_runtime_does_not_confirm_leaves_the_rule_to_the_run(condition):
    """The solver's reals are not doubles: nothing lies strictly between 1.0 and the next double, and
    no double squares to exactly 2.0. An example that does not fire once rounded is never shown."""
    found = sink_rule(condition, "double")
    assert [d.name for d in found] == ["decided-at-run-time"]
    assert "does not fire when the runtime computes it" in found[0].message


@pytest.mark.parametrize("condition, name", [
    ('[args.v.a][0] == args.v.a.f', "decided-at-run-time"),  # a value read whole and by a field
    ('{"f": args.v.a, "g": args.v.b}.f == args.v.a.f', "decided-at-run-time"),
    ('has({"k": args.v.f}.k)', "policy-deny-possible"),  # the literal fails where `f` is absent
    ('"k" in {"k": args.v.f}', "policy-deny-possible"),
])
def test_a_literal_read_back_is_no_internal_error_and_fails_with_its_items(condition, name):
    found = sink_rule(condition, "map")
    assert [d.name for d in found] == [name], [d.message for d in found]


DIFFERENTIAL_POLICY = """policy p {
  tool src.get { risk read_only }
  tool t.ty { risk read_only  args { d: double, i: int } }
  tool t.un { risk read_only }
  deny "typed" when call.tool == "t.ty" && args.d > 0.0 && args.i > 0
  deny "suffix" when call.tool == "t.un" && has(args.v) && args.v.endsWith("")
  deny "scaled" when call.tool == "t.un" && has(args.w) && args.w * 0.0 < 10.0
  deny "sign" when call.tool == "t.un" && has(args.s) && (args.s >= 0 || args.s < 0)
}"""


@pytest.mark.parametrize("step, rule, note", [
    # an int result passes for a double argument, and another argument does int arithmetic with it
    ("call t.ty(d: a.result.f, i: a.result.f + 1)", "typed", None),
    # on the runs where the step runs, a rule that fails (a number has no endsWith) does not fire
    ("call t.un(v: a.result.g) when a.result.ok == true", "suffix", None),
    # `-f` of an int is an int, which `* 0.0` fails on
    ("call t.un(w: -a.result.f)", "scaled", "it does not fire where `a.result.f` is an int"),
    # `g + g` of strings is a string, which no comparison with a number takes
    ("call t.un(s: a.result.g + a.result.g)", "sign", "it does not fire where `a.result.g` is a string or a list"),
])
def test_a_deny_whose_runs_include_a_value_on_which_it_fails_may_fire_not_must_nor_never(step, rule, note):
    """Found by differential fuzzing against the runtime: each verdict was `policy-deny` (or none),
    and a concrete result contradicted it (`Gate.decide` allowed the call, or the run blocked it)."""
    plan = f"plan p {{ step a {{ call src.get(k: 1) }} step x {{ {step} }} }}"
    (found,) = diagnostics(plan, DIFFERENTIAL_POLICY)
    assert found.name == "policy-deny-possible" and f"`{rule}`" in found.message
    if note is not None:
        assert any(line.startswith(note) for line in found.notes)


PRECISION_POLICY = """policy p {
  tool src.get { risk read_only }
  tool t.ty { risk read_only  args { d: double } }
  tool t.un { risk read_only }
  deny "both" when call.tool == "t.ty" && (args.d >= 0.0 || args.d < 0.0)
  deny "scale" when call.tool == "t.ty" && args.d * 0.0 < 1.0
  deny "half" when call.tool == "t.un" && has(args.v) && args.v > 0.5
  deny "mix" when call.tool == "t.un" && has(args.p) && args.p + args.q > 0
  deny "nulls" when call.tool == "t.un" && has(args.x) && args.x == args.y && (args.z + args.x > 0 || true) && args.x == null
}"""


@pytest.mark.parametrize("step, expected", [
    # the argument check refuses a value of another type before any rule: the rules see a double
    ("call t.ty(d: a.result.r)", ["policy-deny", "policy-deny"]),
    # a double fires; the narrowing that the `when` makes is kept (`||` could absorb the use that
    # fails on an int, and the run would count): may, not must
    ("call t.un(v: a.result.r) when a.result.r * 2.0 > 1.0", ["policy-deny-possible"]),
    # an int and a double do not add: that run does not fire
    ("call t.un(p: a.result.x, q: a.result.y) when a.result.x > 0 && a.result.x < 10 && a.result.y > 0 "
     "&& a.result.y < 10", ["policy-deny-possible"]),
    # two nulls are equal, and fire (`|| true` absorbs the error of the sum)
    ("call t.un(x: a.result.n1, y: a.result.n2, z: a.result.n3)", ["decided-at-run-time"]),
])
def test_must_is_kept_where_every_counted_run_fires_and_dropped_where_one_does_not(step, expected):
    plan = f"plan p {{ step a {{ call src.get(k: 1) }} step x {{ {step} }} }}"
    assert [d.name for d in diagnostics(plan, PRECISION_POLICY)] == expected


ROUND_TWO_POLICY = """policy p {
  tool src.get { risk read_only }
  tool u.x { risk read_only }
  tool t.x { risk read_only args { path: string, tags: list? } }
  tool t.am { risk read_only args { amount: double } }
  deny "branches" when call.tool == "u.x" && has(args.v) && (args.v ? 0 : args.w) == "a"
  deny "tagged" when call.tool == "t.x" && args.path.startsWith("/etc/") && has(args.tags)
  deny "cap" when call.tool == "t.am" && args.amount * 1.1 > 500.0
  deny "timeout" when call.tool == "u.x" && has(args.timeout) && args.timeout != duration("30m") && args.job == "backup"
}"""


@pytest.mark.parametrize("step, expected", [
    # `c ? 0 : x` with x a string: one branch's type is not the other's
    ("call u.x(v: a.result.c, w: a.result.x)", "decided-at-run-time"),
    # `tags` is read only through has(): its computation reads `b`, which nothing else does
    ('call t.x(path: "/etc/" + a.result.name, tags: [b.result.tag])', "policy-deny"),
    # an int computed for a double argument reaches the rules converted (qty 5: 500.0 * 1.1)
    ("call t.am(amount: a.result.qty * 100)", "policy-deny-possible"),
    # an int is never equal to a duration: `!=` holds
    ("call u.x(timeout: 1800, job: a.result.job)", "policy-deny-possible"),
])
def test_second_round_of_differential_findings(step, expected):
    """Each was a `never` (or a `must`) that a concrete run contradicted."""
    plan = f"plan p {{ step a {{ call src.get(k: 1) }} step b {{ call src.get(k: 2) }} step x {{ {step} }} }}"
    assert [d.name for d in diagnostics(plan, ROUND_TWO_POLICY)] == [expected]



def test_a_negated_duration_is_a_duration():
    """`-duration("1h")` is a duration in CEL: a rule over it is decided, not dropped as an error."""
    policy = """policy p {
      tool src.get { risk read_only }
      tool a.put { risk read_only }
      deny "r" when call.tool == "a.put" && args.id == "k" && step.time > -duration("1h")
    }"""
    plan = 'plan p { step s0 { call src.get(k: 1) } step s1 { call a.put(id: s0.result.id) time 5m } }'
    assert [d.name for d in diagnostics(plan, policy)] == ["policy-deny-possible"]



@pytest.mark.parametrize("step, expected", [
    # the rules see a double (the int 0 converted): `+ 1` fails on every run
    ("call t.act(x: a.result.v) when a.result.v == 0", "decided-at-run-time"),
    # 2.0 is a run where `+ 1` fails: not every run fires
    ("call t.un(x: a.result.v) when a.result.v == 2.0", "policy-deny-possible"),
])
def test_int_arithmetic_never_claims_must_on_a_value_that_may_be_a_whole_double(step, expected):
    policy = """policy q {
      tool t.get { risk read_only }
      tool t.act { risk read_only args { x: double } }
      tool t.un { risk read_only }
      deny "r" when call.tool == "t.act" && args.x + 1 > 0
      deny "u" when call.tool == "t.un" && args.x + 1 == 3
    }"""
    plan = f"plan p {{ step a {{ call t.get() }} step b {{ {step} }} }}"
    found = [d.name for d in diagnostics(plan, policy) if d.name != "cel-type-error"]  # `double + int` in rule r
    assert found == [expected]


def test_a_missing_approval_asks_for_the_within_that_limit_approval_within_allows():
    """The help used to say `within 1h` under `limit approval_within <= 30m`, and writing it was
    then `limit-exceeded`; the run caps every approval at 30m anyway."""
    policy = ('policy q { tool dns.route { risk external_write } limit approval_within <= 30m\n'
              '  require approval when step.risk >= external_write by role "operator" within 1h }')
    [found] = diagnostics('plan p { step a { call dns.route(host: "h") risk external_write } }', policy)
    assert found.name == "approval-missing" and found.help == 'add `approval by role "operator" within 30m`'
    assert diagnostics('plan p { step a { call dns.route(host: "h") risk external_write\n'
                       '  approval by role "operator" within 30m } }', policy) == []


def test_a_policy_test_declaring_a_risk_below_the_catalogue_is_refused(tmp_path):
    from plangate.policy.testing import run_policy_tests

    path = tmp_path / "p.policy"
    path.write_text('policy p { tool pay.refund { risk irreversible }\n'
                    '  test "low" { call pay.refund() risk read_only expect deny }\n'
                    '  test "allowed" { call pay.refund() risk read_only expect allow } }')
    result = run_policy_tests([str(path)])
    assert [(o.name, o.passed) for o in result.outcomes] == [("low", True), ("allowed", False)]
    assert "below `irreversible`" in result.outcomes[0].decided


REFUNDS = ('policy q { tool http.get { risk read_only } tool payments.refund { risk irreversible '
           'args { amount: double, currency: string } }\n'
           '  deny "refund-cap" when call.tool == "payments.refund" && args.amount > 500.0\n'
           '  require approval when call.tool == "payments.refund" && args.amount > 100.0 by role "fin" }')


@pytest.mark.parametrize("guard, expected", [
    ("look.result.total <= 100.0", []),  # never over the cap, never over the approval's threshold
    ("look.result.total <= 500.0", ["approval-missing"]),  # may need the approval, never denied
    ("look.result.total > 600.0", ["approval-missing", "policy-deny"]),  # must: every run where it runs
    ("true", ["approval-missing", "policy-deny-possible"]),
])
def test_a_step_is_decided_under_the_conditions_of_the_steps_whose_results_it_uses(guard, expected):
    """`t` uses `s.result`, so it is skipped whenever `s` is: the rules and requirements decide it
    on the runs where `s`'s `when` holds (a false `approval-missing`, a witness of a run that
    cannot happen, and a "may" that is a "must" came from deciding it alone)."""
    plan = f"""plan p {{
      step look {{ call http.get(url: "u") }}
      step s {{ when {guard} call http.get(url: "v") }}
      step t {{ call payments.refund(amount: look.result.total, currency: s.result.cur) risk irreversible }}
    }}"""
    found = sorted(d.name for d in diagnostics(plan, REFUNDS) if d.severity.value != "note")
    assert found == expected


def test_a_rule_that_reads_only_the_plan_sees_the_risk_constants():
    """`irreversible > read_only` in a plan-level rule made it fail to evaluate (no such name), so it
    never fired; the gate, which sees the constants, fired it."""
    policy = ('policy q { tool t.x { risk read_only }\n'
              '  warn "w" when plan.version >= 1 && irreversible > read_only\n'
              '  warn "e2" when external_write == 2 }')
    found = diagnostics("plan p { version 3 step a { call t.x() } }", policy)
    assert sorted(d.message.split(" fires")[0] for d in found if d.name == "policy-warn") == ["warn rule `e2`", "warn rule `w`"]


def test_a_check_that_never_runs_is_named_as_such_by_check_missing():
    policy = 'policy q { tool deploy.* { risk reversible_write } tool http.get { risk read_only } require check when step.risk >= reversible_write }'
    plan = 'plan p { step w { call deploy.x(a: 1) risk reversible_write } check c after w { when false call http.get(u: 1) } }'
    [found] = [d for d in diagnostics(plan, policy) if d.name == "check-missing"]
    assert found.message == "step `w` must be verified by a `check` step, and `c` never runs"
    assert found.notes[0].startswith("`c` never runs")


def test_conditions_a_step_runs_under_that_the_solver_cannot_read_leave_the_verdict_as_it_was():
    """`g`'s `when` uses `exists`: as a premise for `s` (which uses `g.result`) it is outside the
    subset, and the verdict over every run stands (a must stays `policy-deny`, not a note)."""
    policy = ('policy gp { tool t.read { risk read_only } tool t.write { risk read_only args { x: int } }\n'
              '  deny "big" when args.x > 5\n  deny "always" when args.x > 5 || args.x <= 5 }')
    plan = """plan guard {
      step a { call t.read() }
      step g { when a.result.l.exists(i, i == 1)  call t.read() }
      step s { call t.write(x: g.result.v) }
    }"""
    found = sorted((d.name, d.message.split(":")[0]) for d in diagnostics(plan, policy) if d.severity.value != "note")
    assert found == [("policy-deny", "deny rule `always` fires for step `s`"),
                     ("policy-deny-possible", "deny rule `big` may fire for step `s`")]


def test_a_rule_comparing_two_run_time_values_and_a_constant_of_another_type_is_not_never():
    """`args.x == args.y` holds for two equal strings: `args.x == "x"` does not contradict it."""
    plan = "plan peerrule { step a { call t.read() } step w { call t.write(x: a.result.s, y: a.result.t) } }"
    for rule in ('args.x == args.y && args.x != 1 && args.x == "x"', 'args.x < args.y && args.x == "a"'):
        policy = f'policy pr {{ tool t.* {{ risk read_only }} deny "same-x" when {rule} }}'
        assert [d.name for d in diagnostics(plan, policy)] in (["policy-deny-possible"], ["decided-at-run-time"]), rule


@pytest.mark.parametrize("condition", [
    "size(args.b) > 0", "args.b.size() == 3", 'string(args.n) == "1"', 'string(args.d) == "60s"',
    "size(string(args.n)) == 1", "double(args.n) == 1.0", "size(args.b + args.b) == 6",
])
def test_a_known_value_of_a_type_the_solver_does_not_model_is_computed_as_the_runtime_computes_it(condition):
    """With a run-time value elsewhere in the rule the solver decides it; the known parts (bytes, a
    uint, a duration) are computed by the runtime's own evaluator, so a rule that fires at run
    time is never "never" before it (`size(b"abc")` was an error, `string(1u)` "1u", a duration's
    string its seconds)."""
    policy = f"""policy q {{
      tool t.x {{ risk read_only args {{ b: bytes, g: bool, n: uint, d: duration }} }}
      tool t.src {{ risk read_only }}
      deny "r" when args.g == true && {condition}
    }}"""
    plan = """plan p { step src { call t.src() }
      step s { call t.x(b: bytes("abc"), g: src.result.go, n: 1u, d: duration("1m")) } }"""
    found = [(d.name, d.message) for d in diagnostics(plan, policy) if d.name.startswith("policy-deny")]
    assert found == [("policy-deny-possible", "deny rule `r` may fire for step `s`: it fires when `src.result.go` = true")]


def test_the_encoder_computes_known_values_as_the_runtime_does():
    from plangate.cel.evaluate import compile_expr
    from plangate.smt.encode import Encoder, Error
    from plangate.syntax.parser import parse_expression

    activation = {"args": {"n": Uint(1), "b": b"abc", "d": 2.5}}
    for text in ["args.n + 1", "args.n * args.n", "args.n < 2.5", "string(args.d)", "string(args.b)",
                 "size(args.b + args.b)", 'string(duration("1m") + duration("30s"))', "double(args.n)",
                 'duration("1m") + duration("500ms") > duration("60s")', "size(args.n)"]:
        expr, _ = parse_expression(SourceFile("x", text))
        encoded, evaluated = Encoder(activation).evaluate(expr), compile_expr(expr)(activation)
        if isinstance(evaluated, Exception) or type(evaluated).__name__ == "CelError":
            assert isinstance(encoded, Error), text
        else:
            assert encoded == evaluated and type(encoded) is type(evaluated), text


PINNED_POLICY = """policy p {
  tool src.get { risk read_only }
  tool page.send { risk read_only }
  tool t.n { risk read_only }
  require approval when call.tool == "page.send" && args.level > 3 by role "op"
  deny "gt5" when call.tool == "t.n" && args.x > 5
  deny "fast" when call.tool == "t.n" && args.x == "fast"
}"""


@pytest.mark.parametrize("step, expected", [
    # the `when` makes the value a string, a bool: the rule's comparison with a number is an error
    ('when a.result.level == "high" call page.send(level: a.result.level)', []),
    ("when a.result.t call t.n(x: a.result.t)", []),
    ("when !a.result.t call t.n(x: a.result.t)", []),
    ('when a.result.g == "abc" && a.result.n > 0 call t.n(x: a.result.g)', []),
    # the `when` fixes the value the rule reads: decided on it
    ('when a.result.mode == "fast" call t.n(x: a.result.mode)', [("policy-deny", "deny rule `fast` fires for step `s`")]),
    ("when a.result.level == 7 call page.send(level: a.result.level)",
     [("approval-missing", 'step `s` needs approval `by role "op"`, and asks for none')]),
    # a disjunction fixes nothing: the number may come
    ('when a.result.level == "x" || a.result.n > 2 call page.send(level: a.result.level)',
     [("approval-missing", 'step `s` needs approval `by role "op"`, and asks for none')]),
])
def test_a_value_the_when_fixes_is_decided_with_its_type(step, expected):
    """On every run where the step runs, a value its `when` tests for equality with a string, a
    bool or null (or tests alone, or negated) is exactly that value: a rule comparing it with a
    number cannot fire (it was a false `approval-missing`, a `policy-deny-possible` whose example
    the `when` refused)."""
    found = diagnostics(f"plan q {{ step a {{ call src.get() }} step s {{ {step} }} }}", PINNED_POLICY)
    assert [(d.name, d.message) for d in found] == expected


def test_a_witness_names_the_values_the_when_fixes():
    found = diagnostics('plan q { step a { call src.get() } step s { when a.result.mode == "fast" && a.result.x > 0 '
                        "call t.n(x: a.result.x) } }", PINNED_POLICY)
    assert [d.message for d in found] == [
        "deny rule `gt5` may fire for step `s`: it fires when `a.result.mode` = \"fast\", `a.result.x` = 6"]


def test_a_rule_is_decided_on_the_runs_where_every_computed_argument_of_the_call_evaluates():
    """The call is made only when all its arguments evaluate, not only those the rule reads:
    `y: a.result.g.startsWith("ab")` makes `g` a string, so `b: a.result.g` is never `true` and
    `args.b != true` must fire (it was a "may" with the example `g` = null, a run where `y` fails
    and the call is not made)."""
    policy = """policy p {
      tool src.get { risk read_only }
      tool t.n { risk read_only }
      deny "d" when args.b != true
    }"""
    plan = 'plan q { step a { call src.get() } step s { call t.n(b: a.result.g, y: a.result.g.startsWith("ab")) } }'
    assert [(d.name, d.message) for d in diagnostics(plan, policy)] == [("policy-deny", "deny rule `d` fires for step `s`")]


def test_a_value_the_when_fixes_is_not_pinned_where_the_rule_asks_whether_it_is_there():
    """`has()` of a pinned field, or a read of the map above it, would not know of the constant: the
    rule is then decided under the `when` as a premise, as before pinning (`has` must fire)."""
    policy = """policy p { tool src.get { risk read_only } tool t.n { risk read_only }
      deny "has" when call.tool == "t.n" && has(args.x.level)
      deny "missing" when call.tool == "t.n" && !has(args.x.level) }"""
    plan = 'plan q { step a { call src.get() } step s { when a.result.level == "high" call t.n(x: a.result) } }'
    assert [(d.name, d.message) for d in diagnostics(plan, policy)] == [("policy-deny", "deny rule `has` fires for step `s`")]


@pytest.mark.parametrize("when, expected", [
    # 500.0 * 0.1 is exactly 50.0 once rounded: the solver's example (500.0) does not fire, and the
    # example over every run (501.0) is a run where the step is skipped
    ("a.result.w <= 500.0", ("decided-at-run-time", "the solver's example does not fire")),
    # a conjunct the solver does not follow (`exists`) is left out of the premise: "never" and
    # "must" under the rest hold under all of it; a "may" needs an example that satisfies all of it
    ("a.result.w < 50.0 && a.result.xs.exists(x, x > 1)", None),
    ("a.result.w > 600.0 && a.result.xs.exists(x, x > 1)", ("policy-deny", "deny rule `fee` fires for step `r`")),
    ("a.result.w > 400.0 && a.result.xs.exists(x, x > 1)", ("decided-at-run-time", "`exists` is outside the subset")),
    # one that holds on the example (the runtime's evaluator says so) keeps the "may" and its example
    ('a.result.tag.matches("^x")', ("policy-deny-possible", "it fires when `a.result.tag` = \"x\", `a.result.w` = 501.0")),
])
def test_a_may_over_every_run_stands_under_an_undecided_when_only_with_an_example_where_the_step_runs(when, expected):
    policy = """policy p {
      tool src.get { risk read_only }
      tool pay.refund { risk read_only args { amount: double } }
      deny "fee" when args.amount * 0.1 > 50.0
    }"""
    plan = f"plan q {{ step a {{ call src.get() }} step r {{ when {when} call pay.refund(amount: a.result.w) }} }}"
    found = diagnostics(plan, policy)
    assert [(d.name, expected[1] in d.message) for d in found] == ([] if expected is None else [(expected[0], True)]), found


def test_steps_that_ask_one_question_of_values_of_one_shape_are_solved_once(monkeypatch):
    """The encoder names constants by order, not by value: `size("app-" + sK.result.name) > 12` is
    one query text for every K, solved once (a plan of 800 such steps took the whole solver
    allowance, and its must-fire denies were left to run time)."""
    from plangate.smt import solve

    sent: list[int] = []
    request = solve._request

    def counting(message, time_bound):
        sent.append(len(message.get("queries", ())))
        return request(message, time_bound)

    monkeypatch.setattr(solve, "_request", counting)
    policy = """policy p {
      tool src.read { risk read_only }
      tool svc.op { risk read_only args { name: string } }
      deny "long-name" when size(args.name) > 12
    }"""

    def plan(steps: int) -> str:
        body = " ".join(f'step s{i} {{ call svc.op(name: "app-" + s{i - 1}.result.name + ".internal") }}'
                        for i in range(1, steps))
        return f"plan q {{ step s0 {{ call src.read() }} {body} }}"

    solve.forget_answers()
    few = diagnostics(plan(3), policy)
    queries_for_few = sum(sent)
    solve.forget_answers()
    sent.clear()
    many = diagnostics(plan(40), policy)
    assert [d.name for d in few] == ["policy-deny"] * 2 and [d.name for d in many] == ["policy-deny"] * 39
    assert sum(sent) == queries_for_few > 0


def test_a_rule_left_to_run_time_says_for_how_many_steps():
    policy = """policy p {
      tool src.read { risk read_only }
      tool svc.op { risk read_only }
      deny "tagged" when args.tags.exists(t, t == "x")
    }"""
    body = " ".join(f"step s{i} {{ call svc.op(tags: s0.result.tags) }}" for i in range(1, 9))
    [note] = diagnostics(f"plan q {{ step s0 {{ call src.read() }} {body} }}", policy)
    assert note.name == "decided-at-run-time" and note.message.startswith(
        "rule `tagged` cannot be decided before the run for step `s1` and 7 more steps "
        "(`s2`, `s3`, `s4`, `s5`, `s6`, …): ")


def test_a_must_narrowed_to_may_under_part_of_a_when_keeps_no_example_that_skips_the_step():
    """Untyped, `amount` may be an int, on which `* 0.1` errs: "must" is read as "may". Its example
    (found under `w > 600.0` alone) has no `xs`, so the whole `when` fails there: no such "may"."""
    policy = """policy p { tool src.get { risk read_only } tool pay.refund { risk read_only }
      deny "fee" when args.amount * 0.1 > 50.0 }"""
    plan = ("plan q { step a { call src.get() } step r { when a.result.w > 600.0 && a.result.xs.exists(x, x > 1) "
            "call pay.refund(amount: a.result.w) } }")
    assert [d.name for d in diagnostics(plan, policy)] == ["decided-at-run-time"]


@pytest.mark.parametrize("items, expected", [
    ("[100.0, 120.0]", []),                                  # no item is over the cap: never
    ("[200.0, 300.0]", [("policy-deny", "deny rule `cap` fires for step `rf`")]),  # every item is: must
    ("[100.0, 200.0]", [("policy-deny-possible", "deny rule `cap` may fire for step `rf`: it fires when "
                                                 "`look.result.i` = 1")]),
])
def test_a_list_literal_indexed_by_a_run_time_value_is_one_of_its_items(items, expected):
    """An index out of range fails the argument, so the call is not made: only the items count."""
    policy = """policy p { tool http.get { risk read_only } tool pay.refund { risk read_only args { amount: double } }
      deny "cap" when call.tool == "pay.refund" && args.amount > 150.0 }"""
    plan = f"plan m {{ step look {{ call http.get() }} step rf {{ call pay.refund(amount: {items}[look.result.i]) }} }}"
    assert [(d.name, d.message) for d in diagnostics(plan, policy)] == expected

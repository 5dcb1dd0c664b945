"""Plan expressions: names in scope, step ids only as `x.result…`, constant parts that always fail."""

from __future__ import annotations

from plangate.driver import check_sources
from plangate.source import SourceFile


def diagnostics(plan: str, policy: str | None = None):
    policies = [SourceFile("p.policy", policy)] if policy is not None else []
    result = check_sources([SourceFile("p.plan", plan)], policies)
    return [d for d in result.diagnostics if d.name != "no-policy"]


def test_a_bare_step_id_is_an_unknown_name():
    found = diagnostics("plan p { step a { call a.read() } step b { call a.read(v: a) } }")
    assert [(d.name, d.message, d.help) for d in found] == [
        ("unknown-name", "unknown name `a`", "did you mean `a.result`?")]


def test_a_field_of_a_step_id_is_an_unknown_name():
    found = diagnostics("plan p { step a { call a.read() } step b { call a.read(v: a.status) } }")
    assert [(d.name, d.help) for d in found] == [("unknown-name", "did you mean `a.result.status`?")]


def test_a_misspelt_result_is_suggested_as_result_not_as_a_field_under_it():
    found = diagnostics("plan p { step a { call a.read() } step b { call a.read(v: a.reslt.body) } }")
    assert [(d.name, d.help) for d in found] == [("unknown-name", "did you mean `a.result`?")]


def test_the_help_lists_only_names_in_scope():
    plan = ("plan p { step a { call a.read() } step b { call a.read(v: foo) } "
            "step c { call a.read() expect foo == 1 } }")
    call, expect = diagnostics(plan)
    assert call.help == "the names here are `a.result`, `c.result`"
    assert expect.help == "the names here are `a.result`, `b.result`, `result`"


def test_a_near_miss_suggests_the_result():
    found = diagnostics("plan p { step build { call a.read() } step b { call a.read(v: biuld) } }")
    assert found[0].help == "did you mean `build.result`?"


def test_result_out_of_scope_is_reported_once():
    found = diagnostics("plan p { step a { call a.read(v: result) } }")
    assert [d.name for d in found] == ["result-out-of-scope"]


def test_macro_variables_shadow_step_ids():
    assert diagnostics("plan p { step a { call a.read() } step b { call a.read() when [1].all(a, a > 0) } }") == []


def test_constant_parts_that_always_fail():
    found = diagnostics('plan p { step a { call a.read(v: 1 / 0, w: {"k": 1, "k": 2}) } }')
    assert [(d.name, d.message) for d in found] == [
        ("cel-type-error", "`1 / 0` always fails: division by zero"),
        ("cel-type-error", 'duplicate map key `"k"`')]


def test_absorbed_constant_errors_pass():
    assert diagnostics("plan p { step a { call a.read(v: false && 1 / 0 == 1, w: true ? 1 : 1 / 0) } }") == []


def test_a_map_key_passed_to_a_tool_must_be_a_string():
    """A tool is given JSON: `{1: "a"}` would arrive as `{"1": "a"}`, unlike what the rules saw."""
    plan = """plan k {
      step s { call cfg.set(v: {1: "evil"}) }
      step t { call cfg.set(v: [{"a": 1, true: 2}]) rollback cfg.unset(v: {"x": {3u: 1}}) }
      step u { call cfg.set(v: {"1": "x"}, w: {1: "a"}[1], x: {s.result.k: 1}) }
    }"""
    found = [(d.name, d.message) for d in diagnostics(plan) if d.name != "no-policy"]
    assert found == [
        ("arg-type", "a map in the `call` of step `s` has the key `1`, but a tool is given JSON, whose keys are strings"),
        ("arg-type", "a map in the `call` of step `t` has the key `true`, but a tool is given JSON, whose keys are strings"),
        ("arg-type", "a map in the `rollback` of step `t` has the key `3u`, but a tool is given JSON, whose keys are "
                     "strings"),
    ]


def test_an_escape_that_is_no_character_is_a_syntax_error_at_the_escape():
    plan = 'plan p {\n  decision "\\uD800" pending\n  step a { call x.y(v: "\\UFFFFFFFF", w: "\\U0001F600", z: "\\u+12a") }\n}\n'
    found = [(d.name, d.span.start, d.message) for d in diagnostics(plan) if d.name == "syntax-error"]
    assert found == [
        ("syntax-error", plan.index("\\uD800"), "the escape `\\uD800` is not a character: it is a surrogate, half of a UTF-16 pair"),
        ("syntax-error", plan.index("\\UFFFF"), "the escape `\\UFFFFFFFF` is not a character: it is past the last code point, U+10FFFF"),
        ("syntax-error", plan.index("\\u+"), "malformed escape `\\u+12a` in a string"),
    ]


def test_a_duration_where_an_amount_goes_is_not_an_amount_of_currency_m():
    found = diagnostics("plan p { step a { call x.y() cost 5m } step b { call x.y() cost 2..5h } }")
    assert [(d.name, d.message) for d in found] == [
        ("invalid-value", "`5m` is a duration, but an amount goes here"),
        ("invalid-value", "`5h` is a duration, but an amount goes here"),
    ]


def test_a_double_literal_past_the_range_of_double_is_an_error_not_an_infinity():
    found = diagnostics("plan p { step a { call t.d(v: 1e400 - 1e300) } step b { call t.d(v: -1e400) } step c { call t.d(v: 1e300) } }")
    assert [(d.name, d.message) for d in found] == [("cel-type-error", "the number is out of the range of `double`")] * 2
    from plangate.cel.evaluate import CelError, compile_expr
    from plangate.source import SourceFile
    from plangate.syntax import parse_expression

    expr, _ = parse_expression(SourceFile("e", "1e400 > 0.0"))
    assert isinstance(compile_expr(expr)({}), CelError)


def test_an_empty_role_rule_or_test_name_names_nothing():
    from plangate.driver import check_sources
    from plangate.source import SourceFile

    policy = 'policy q { deny "" when false warn " " when false test "" { call a.b() expect allow } }'
    plan = 'plan p { step a { call a.b() approval by role "" } }'
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("q.policy", policy)]).diagnostics
    assert sorted(d.message for d in found if d.name == "invalid-value") == [
        "a deny rule's name cannot be empty", "a role cannot be empty", "a test's name cannot be empty",
        "a warn rule's name cannot be empty"]


def test_a_constant_argument_that_fails_as_a_whole_always_fails():
    found = diagnostics('plan p {\n  step a { call t.x(v: [1, 0].map(x, 10 / x)) }\n}\n')
    assert [(d.name, d.message) for d in found if d.name != "no-policy"] == [
        ("cel-type-error", "`[1, 0].map(x, 10 / x)` always fails: division by zero")]


def test_a_constant_argument_that_builds_too_much_is_refused_quickly():
    ten = "[0,1,2,3,4,5,6,7,8,9]"
    entries = ", ".join(f'"{i}": 0' for i in range(2000))
    plan = f"plan p {{\n  step a {{ call t.x(v: {ten}.map(a, {ten}.map(b, {ten}.map(c, {ten}.map(d, {{{entries}}}))))) }}\n}}\n"
    [found] = [d for d in diagnostics(plan) if d.name != "no-policy"]
    assert found.name == "cel-type-error" and "too much work" in found.message


def test_map_keys_that_reach_the_tool_through_a_macro_or_a_branch_must_be_strings():
    found = diagnostics('plan p {\n  step g { call t.g() }\n'
                        '  step a { call t.x(v: [1].map(x, {1: x}), w: g.result.f ? {4: 1} : {2: 2}, '
                        'u: {3: "lookup"}[3]) }\n}\n')
    keys = sorted(d.message.split("the key ")[1] for d in found if d.name == "arg-type")
    assert [key.split("`")[1] for key in keys] == ["1", "2", "4"]  # a lookup table is no argument


def test_numbers_past_what_can_be_counted_are_invalid_values_not_crashes():
    nines = "9" * 5000
    plan = (f"plan p {{\n  budget {{ cost <= 1e-999999999 usd }}\n"
            f"  step a {{ call t.x(n: {nines}, h: 0x{'F' * 5000}) retry {nines} time {nines}s }}\n}}\n")
    found = sorted(d.message[:40] for d in diagnostics(plan) if d.name == "invalid-value")
    assert len(found) == 5, found
    policy = f"policy q {{\n  tool t.* {{ risk read_only cost <= 1e99999999 usd }}\n  limit retries <= {nines}\n}}\n"
    found = [d.name for d in diagnostics("plan p {\n  step a { call t.x() }\n}\n", policy)]
    assert found.count("invalid-value") == 2 and "internal-error" not in found


def test_a_within_too_long_to_count_is_one_diagnostic_not_also_an_approval_that_expires_at_once():
    found = diagnostics('plan p {\n  step a { call t.x() approval by role "o" within 9999999999999999d }\n'
                        '  step b { call t.x() approval by role "o" within 000s }\n}\n')
    assert [(d.name, d.message) for d in found if d.name == "invalid-value"] == [
        ("invalid-value", "the duration `9999999999999999d` is too long to count"),
        ("invalid-value", "an approval `within 000s` expires at once")]


def test_a_constant_argument_holding_a_nan_or_an_infinity_cannot_reach_a_tool():
    found = diagnostics('plan p {\n  step a { call t.x(v: double("NaN"), w: [1.0, -double("inf")], u: 1.5) }\n}\n')
    assert [(d.name, d.message.split("`")[1]) for d in found] == [
        ("arg-type", 'double("NaN")'), ("arg-type", '[1.0, -double("inf")]')]


def test_a_name_repeated_in_after_is_one_mistake_and_references_are_each_reported():
    """`after zz, zz, …` (a generated file printed 100,000 `unknown-step`s) is one `unknown-step` per
    step and name, at its first place, and `after u, u` in `u` one `dependency-cycle`; references
    stand in different places, so each is reported."""
    many = ", ".join(["zz"] * 1000)
    found = diagnostics(f"plan p {{ step s {{ call t.x() after {many}, yy }} step u {{ call t.y() after u, u, u }}"
                        " step v { call t.z(a: zz.result.a, b: zz.result.b) } }")
    assert sorted((d.name, d.message) for d in found) == sorted([
        ("unknown-step", "step `s` names `zz` in `after`, but the plan has no such step"),
        ("unknown-step", "step `s` names `yy` in `after`, but the plan has no such step"),
        ("dependency-cycle", "step `u` depends on itself: it is after itself"),
        ("unknown-step", "step `v` names `zz` in a reference, but the plan has no such step"),
        ("unknown-step", "step `v` names `zz` in a reference, but the plan has no such step")])


def test_a_constant_idempotency_key_that_names_no_call_is_an_invalid_value():
    """The runtime refuses `null`, `""` and a key with no canonical text (the step fails on every
    run): a key that reads nothing is decided before the run, so the plan does not pass `require
    idempotency` with a key that never works."""
    for key, reason in [("null", "the key is null"), ('""', "the key is an empty string"),
                        ('{"a": null}.a', "the key is null"), ("1.0 / 0.0", "the key has no canonical text"),
                        ("[0.0 / 0.0]", "the key has no canonical text")]:
        found = [(d.name, d.message) for d in diagnostics(
            f"plan p {{ step s {{ call t.w(x: 1) risk reversible_write idempotency {key} }} }}")]
        assert len(found) == 1 and found[0][0] == "invalid-value", (key, found)
        assert found[0][1].startswith(f"`{key}` is no idempotency key for step `s`: {reason}"), found
    for key in ('"k"', "5", "[1, 2]", "g.result.id", "result.id"):
        plan = f"plan p {{ step g {{ call t.r() }} step s {{ call t.w(x: 1) risk reversible_write idempotency {key} }} }}"
        assert [d.name for d in diagnostics(plan)] == [], key


def test_the_span_of_an_expression_that_begins_or_ends_with_a_parenthesis_covers_it():
    plan = """plan p {
  step s { call t.read(x: 1) expect (-9223372036854775807 - 1) / -1 > 0 }
  step t { call t.read(x: 1) expect -(-9223372036854775807 - 1) > 0 }
}"""
    found = diagnostics(plan)
    texts = [plan[d.span.start:d.span.end] for d in found]
    assert texts == ["(-9223372036854775807 - 1) / -1", "-(-9223372036854775807 - 1)"]


def test_a_macro_variable_hides_a_step_of_its_name_and_result_result_is_a_field():
    """`c.result` inside `xs.all(c, …)` reads the macro's variable, not a step `c`; `result.result`
    is a field of the step's own result (`result` is no step id); a macro's variable named `result`
    is not the step's own result."""
    plan = """plan p {
  check verify { call http.get(url: "https://x") risk read_only expect result.checks.all(c, c.result == "pass") }
  step fetch { call t.g() risk read_only }
  step u { when fetch.result.items.exists(item, item.result == "ok") call t.x() risk read_only }
  step d { call t.x(v: [{"result": 1}].map(d, d.result)) risk read_only }
  step r { call t.x() risk read_only expect result.result == 1 rollback t.u(id: result.result.id) }
  step q { call t.x(v: [1].exists(result, result > 0)) risk read_only }
}"""
    assert [d.name for d in diagnostics(plan)] == []


def test_a_macro_variable_named_as_a_step_makes_no_edge_to_it():
    from plangate.graph import build_graph
    from plangate.source import SourceFile
    from plangate.syntax import parse_source

    plan = parse_source(SourceFile("p.plan", """plan p {
  step a { when false call t.x() risk read_only }
  step b { when [{"result": 1}].exists(a, a.result == 1) && a.result.ok call t.x() risk read_only }
  step c { when [{"result": 1}].exists(a, a.result == 1) call t.x() risk read_only }
}""")).document.plans[0]
    graph = build_graph(plan)
    assert list(graph.pred["b"]) == ["a"] and list(graph.pred["c"]) == []  # `b` reads `a.result` outside too


def test_unknown_step_never_suggests_the_step_itself():
    found = diagnostics("plan p { step buildx after buildy { call t.x() } step deploy { call t.y() } }")
    assert [(d.name, d.help) for d in found] == [("unknown-step", "the other steps are `deploy`")]
    found = diagnostics("plan p { step buildx after buildy { call t.x() } step buildz { call t.y() } }")
    assert [d.help for d in found] == ["did you mean `buildz`?"]


def test_a_cycle_names_the_other_steps_of_its_group_and_a_self_dependency_is_one_diagnostic():
    found = diagnostics("""plan p {
  step a after b, c { call t.x() risk read_only }
  step b after a { call t.x() risk read_only }
  step c after a { call t.x() risk read_only }
}""")
    [cycle] = found
    assert cycle.message == "the steps form a cycle through `after`: `a` → `b` → `a`"
    assert cycle.notes[-1] == ("`c` and these steps depend on each other too: a cycle through them may remain when "
                               "this one is broken")
    [itself] = diagnostics("plan p { step a after a { call t.x(v: a.result.v, w: a.result.w) risk read_only } }")
    assert itself.message == "step `a` depends on itself: it is after itself and uses its own result as `a.result`"
    assert [label.message for label in itself.labels] == ["and here", "and here"]
    [both] = diagnostics("plan p { step a after b { call t.x(v: b.result.v) } step b { call t.x(v: a.result.v) } }")
    assert "`a` depends on `b` by `after` and a reference to `b.result`" in both.notes


def test_a_long_cycle_is_shown_by_its_ends():
    steps = "\n".join(f"  step s{i} after s{(i + 1) % 40} {{ call t.x() }}" for i in range(40))
    [found] = diagnostics(f"plan p {{\n{steps}\n}}")
    assert " → … (25 more) → " in found.message and len(found.notes) == 9 and len(found.labels) == 8

"""Fuzzing the front end: whatever the input, only diagnostics come out.

The contract says no input, however broken, produces a Python traceback. These tests drive random
and mutated inputs through the whole static pipeline and hold it to that:

- Hypothesis: token soup drawn from an alphabet weighted towards the language's own keywords and
  punctuation; mutations of real plans and policies (the contract's examples, embedded below, and
  the repository's `examples/*.plan` and `policies/*.policy` when present): slices deleted,
  duplicated and swapped, tokens inserted; raw bytes (invalid UTF-8, NUL, byte-order marks)
  through `decode_source`. For every input: no exception, no `internal-error` (a check that raised),
  every span inside its file, every parse yields a document or an error, every format renders.
- Pathological sizes, each in a child process with a bound on its CPU time (a safety bound, not a
  benchmark; the child also keeps a crash of the interpreter out of this process): 10 MB of `(`,
  `[`, `{`; 1 MB of each inside a plan (under the size bound, so the nesting bound must stop it);
  2 MB operator chains inside an `expect`; a 100,000-name `after` list.
- The command line on a binary file: one diagnostic, exit 2, no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from plangate import __version__
from plangate.diagnostics.model import Diagnostic, Severity
from plangate.diagnostics.render import render
from plangate.driver import check_sources, decode_source
from plangate.source import SourceFile
from plangate.syntax import parse_source
from plangate.syntax.parser import MAX_SYNTAX_ERRORS

ROOT = Path(__file__).resolve().parents[1]

# The contract's example plan and policy (docs/plangate-v0 §3 and §4), verbatim.
CONTRACT_PLAN = '''\
plan deploy_v2 {
  version 3
  objective "Route v2.example.com to the new deployment"
  non_goal  "migrate the database"
  scope     "service:web", "dns:v2.example.com"
  success   "v2.example.com serves commit abc123"
  decision  "canary size" pending          # an open decision: execution may not start

  budget {
    cost  <= 40 usd
    time  <= 30m
    calls <= 20
  }

  step build {
    call   ci.build(commit: "abc123")
    risk   read_only
    cost   2..5 usd                        # a range, or a single amount
    time   5m                              # the step's time bound (and timeout)
    retry  2                               # at most 2 retries: 3 attempts
    expect result.status == "ok"           # postcondition over the step's own result
  }

  step preview after build {
    call        deploy.preview(artifact: build.result.artifact)
    risk        reversible_write
    cost        1 usd
    idempotency "preview-" + build.result.artifact
    rollback    deploy.delete_preview(id: result.id)
  }

  check preview_up after preview {         # a verification step: read-only, its results are evidence
    call   http.get(url: preview.result.url)
    expect result.status == 200
  }

  step route after preview_up {
    call     dns.route(host: "v2.example.com", target: preview.result.id)
    risk     external_write
    approval by role "operator" within 1h
  }

  step announce after route {
    when     route.result.changed == true  # a conditional step: skipped when false at run time
    call     chat.post(channel: "#deploys", text: "v2 is live")
    risk     external_write
    approval by role "operator"
  }
}
'''

CONTRACT_POLICY = '''\
policy production {
  version 7

  tool ci.build         { risk read_only        cost <= 10 usd }
  tool deploy.*         { risk reversible_write }
  tool dns.route        { risk external_write   args { host: string, target: string } }
  tool payments.refund  { risk irreversible     args { amount: double, currency: string } }
  tool http.get         { risk read_only }
  unknown_tools deny                           # or: warn

  require approval    when step.risk >= external_write by role "operator" within 1h
  require approval    when step.risk == irreversible   by 2 of role "finance" within 15m
  require check       when step.risk >= reversible_write
  require rollback    when step.risk == reversible_write
  require idempotency when step.risk >= reversible_write

  deny "no-prod-drops" when call.tool == "db.drop" && args.env == "prod"
       because "dropping a production database is never planned work"
  deny "refund-cap"    when call.tool == "payments.refund" && args.amount > 500.0
  warn "long-plan"     when plan.budget.time > duration("1h")

  limit retries     <= 3
  limit concurrency <= 4
  limit cost        <= 100 usd
  limit time        <= 2h
  limit calls       <= 50

  test "refunds over the cap are denied" {
    call payments.refund(amount: 900.0, currency: "EUR")
    expect deny "refund-cap"
  }
}
'''


def _repository_texts(pattern: str) -> list[str]:
    texts = []
    for path in sorted(ROOT.glob(pattern)):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return texts


PLAN_SEEDS = [CONTRACT_PLAN, *_repository_texts("examples/*.plan")]
POLICY_SEEDS = [CONTRACT_POLICY, *_repository_texts("policies/*.policy")]
SEEDS = PLAN_SEEDS + POLICY_SEEDS

KEYWORDS = [
    "plan", "policy", "step", "check", "version", "objective", "non_goal", "scope", "success",
    "constraint", "decision", "pending", "resolved", "budget", "cost", "time", "calls", "call", "risk",
    "retry", "expect", "idempotency", "rollback", "approval", "when", "after", "by", "of", "role",
    "within", "tool", "unknown_tools", "require", "deny", "warn", "allow", "because", "limit", "test",
    "args", "true", "false", "null", "in", "read_only", "reversible_write", "external_write",
    "irreversible", "result", "usd", "eur", "string", "int", "double", "bool", "list", "map",
    "duration", "concurrency", "retries",
]
PUNCTUATION = ["{", "}", "(", ")", "[", "]", ",", ":", ".", "..", ".*", "*", "?", "!", "-", "+", "/",
               "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "="]
LITERALS = ["0", "1", "2", "3", "42", "0.5", "2.50", "1e3", "7u", "0x1F", "30s", "5m", "2h", "1d",
            "250ms", "99999999999999999999999", '"abc"', '""', '"a\\"b"', '"\\n"', '"unterminated',
            "'sq'", "'", "a", "b", "x1", "build", "route", "_", "ci.build", "deploy.preview",
            "build.result.artifact", "result.status", "step.risk", "args.amount"]
SPACE = [" ", " ", " ", "\n", "\t", "\r\n", "# comment\n", "\ufeff", "\u00a0", "\u2028", "é", "名前",
         "\x0b", "\x00", "\ud7ff", "\U0001f600"]

token = st.one_of(
    st.sampled_from(KEYWORDS),
    st.sampled_from(PUNCTUATION),
    st.sampled_from(LITERALS),
    st.sampled_from(SPACE),
    st.text(max_size=4),
)


@st.composite
def token_soup(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["", "plan p { ", "policy q { ", "plan p { step a { ",
                                   "policy q { tool a.b { ", "plan p { step a { expect "]))
    tokens = draw(st.lists(token, max_size=80))
    separators = draw(st.lists(st.sampled_from([" ", "", "\n"]), min_size=len(tokens), max_size=len(tokens)))
    suffix = draw(st.sampled_from(["", "}", "} }", " } } }"]))
    return prefix + "".join(t + s for t, s in zip(tokens, separators)) + suffix


@st.composite
def mutated(draw: st.DrawFn, seeds: list[str] = SEEDS) -> str:
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        n = len(text)
        a = draw(st.integers(0, n))
        b = draw(st.integers(a, min(n, a + draw(st.sampled_from([1, 2, 8, 40, 200])))))
        operation = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "replace"]))
        if operation == "delete":
            text = text[:a] + text[b:]
        elif operation == "duplicate":
            text = text[:b] + text[a:b] + text[b:]
        elif operation == "swap":
            c = draw(st.integers(b, n))
            d = draw(st.integers(c, min(n, c + (b - a) + 20)))
            text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        elif operation == "insert":
            text = text[:a] + draw(st.sampled_from([" ", "", "\n"])) + draw(token) + " " + text[a:]
        else:
            text = text[:a] + draw(token) + text[b:]
    return text


# ---------------------------------------------------------------------------------- invariants

def _assert_only_diagnostics(sources: list[SourceFile], diagnostics: list[Diagnostic]) -> None:
    lengths = {source.name: len(source.text) for source in sources}
    for item in diagnostics:
        assert isinstance(item, Diagnostic)
        assert item.name != "internal-error", f"a stage raised: {item.message}"
        assert item.code.startswith("PG") and len(item.code) == 5, item
        for span in (item.span, *(label.span for label in item.labels)):
            assert span.file in lengths, (item, sorted(lengths))
            assert 0 <= span.start <= span.end <= lengths[span.file], (item, lengths[span.file])


def _assert_parses_or_reports(source: SourceFile) -> None:
    result = parse_source(source)
    _assert_only_diagnostics([source], result.diagnostics)
    assert result.document is not None or any(d.severity is Severity.ERROR for d in result.diagnostics), \
        "a parse that yields no document must say why"
    syntax_errors = [d for d in result.diagnostics if d.name == "syntax-error"]
    assert len(syntax_errors) <= MAX_SYNTAX_ERRORS
    # (A document may come with a `syntax-error`: the lowering reports a bad string escape and goes
    # on with U+FFFD in its place. Only the grammar's own errors withhold the document.)


def _check_and_render(plans: list[SourceFile], policies: list[SourceFile] = ()) -> None:
    for source in [*plans, *policies]:
        _assert_parses_or_reports(source)
    result = check_sources(plans, policies)
    _assert_only_diagnostics([*plans, *policies], result.diagnostics)
    assert result.exit_code() in (0, 1, 2)
    for fmt in ("text", "json", "sarif", "github", "junit"):
        output = render(result.diagnostics, result.sources, fmt, files=result.files, tool_version=__version__)
        assert isinstance(output, str)
        if fmt in ("json", "sarif"):
            json.loads(output)


FUZZ = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------- property tests

def test_seeds_are_clean_of_internal_errors() -> None:
    """The unmutated seeds pass the same invariants (so failures below are about the mutations)."""
    _check_and_render([SourceFile("seed.plan", text) for text in PLAN_SEEDS[:1]],
                      [SourceFile("seed.policy", text) for text in POLICY_SEEDS[:1]])


@FUZZ
@given(token_soup())
@example("")
@example("   \n# only a comment\n")
@example("plan")
@example("plan p {")
@example("}}}}")
@example('plan p { step a { call t.x(v: "\\") } }')
def test_token_soup_as_plan(text: str) -> None:
    _check_and_render([SourceFile("soup.plan", text)])


@FUZZ
@given(token_soup())
def test_token_soup_as_policy(text: str) -> None:
    _check_and_render([SourceFile("plan.plan", CONTRACT_PLAN)], [SourceFile("soup.policy", text)])


@FUZZ
@given(mutated(PLAN_SEEDS))
def test_mutated_plan_against_the_contract_policy(text: str) -> None:
    _check_and_render([SourceFile("mutant.plan", text)], [SourceFile("production.policy", CONTRACT_POLICY)])


@FUZZ
@given(mutated(POLICY_SEEDS))
def test_mutated_policy_against_the_contract_plan(text: str) -> None:
    _check_and_render([SourceFile("deploy.plan", CONTRACT_PLAN)], [SourceFile("mutant.policy", text)])


@FUZZ
@given(mutated(SEEDS), mutated(SEEDS))
def test_mutants_in_the_wrong_roles(first: str, second: str) -> None:
    """A policy passed as a plan and a plan passed as a policy (and both mutated)."""
    _check_and_render([SourceFile("a.plan", first), SourceFile("b.plan", second)],
                      [SourceFile("a.policy", second)])


@FUZZ
@given(st.binary(max_size=3000))
@example(b"")
@example(b"\x00")
@example(b"\xff\xfe\x00p\x00l\x00a\x00n")
@example(b"\xef\xbb\xbfplan p { step a { call t.x() } }")
@example(b"plan p { step a { call t.x(v: \"\xc3\x28\") } }")
@example(b"\xed\xa0\x80")  # an encoded surrogate: not UTF-8
def test_binary_junk(data: bytes) -> None:
    _decode_and_check(data)


@FUZZ
@given(st.sampled_from(SEEDS), st.integers(0, 10**6), st.binary(min_size=1, max_size=16))
def test_bytes_spliced_into_real_files(seed: str, position: int, junk: bytes) -> None:
    data = seed.encode("utf-8")
    position %= len(data) + 1
    _decode_and_check(data[:position] + junk + data[position:])


def _decode_and_check(data: bytes) -> None:
    decoded = decode_source("junk.plan", data)
    if isinstance(decoded, Diagnostic):
        assert decoded.name == "unreadable-input", decoded
        assert decoded.severity is Severity.ERROR
        limit = len(data.decode("utf-8", errors="replace"))
        assert 0 <= decoded.span.start <= decoded.span.end <= limit
        return
    assert isinstance(decoded, SourceFile)
    assert "\0" not in decoded.text
    _check_and_render([decoded])


# ---------------------------------------------------------------------------------- large inputs

MB = 1024 * 1024
BOUND_SECONDS = 4.0  # CPU seconds in the child, after its imports; a safety bound, not a benchmark

_CHILD = textwrap.dedent('''
    import collections, json, sys, time
    from plangate.driver import check_sources, decode_source
    from plangate.source import SourceFile
    from plangate.syntax import parse_source
    check_sources([SourceFile("warm.plan", "plan w { step a { call t.x() } }")])  # load the parser first
    import os, signal
    def out_of_time(signum, frame):
        print(json.dumps({"timeout": True}), flush=True)
        os._exit(0)
    signal.signal(signal.SIGPROF, out_of_time)
    MB = 1024 * 1024
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2048 * MB, 2048 * MB))  # memory is bounded too
    text = eval(sys.argv[1])
    signal.setitimer(signal.ITIMER_PROF, float(sys.argv[2]))  # CPU time: another process's load is not counted
    start = time.process_time()
    source = decode_source("big.plan", text.encode("utf-8"))
    assert isinstance(source, SourceFile), source
    result = check_sources([source])
    elapsed = time.process_time() - start
    signal.setitimer(signal.ITIMER_PROF, 0)
    bad = [d for d in result.diagnostics
           if d.name == "internal-error" or not (0 <= d.span.start <= d.span.end <= len(text))]
    parsed = parse_source(source)
    print(json.dumps({"elapsed": elapsed, "chars": len(text),
                      "names": collections.Counter(d.name for d in result.diagnostics),
                      "bad": [f"{d.name}: {d.message}" for d in bad[:5]],
                      "document": parsed.document is not None,
                      "errors": sum(d.severity.value == "error" for d in parsed.diagnostics)}))
''')

STEPS_1000 = '"".join(f"step s{i} {{ call t.x() }}\\n" for i in range(1000))'

LARGE = {
    "paren-10mb": '"(" * (10 * MB)',
    "bracket-10mb": '"[" * (10 * MB)',
    "brace-10mb": '"{" * (10 * MB)',
    "paren-10mb-in-plan": '"plan p { step a { call t.x(v: " + "(" * (10 * MB) + " } }"',
    "paren-1mb-in-expect": '"plan p { step a { call t.x() expect " + "(" * MB + "1 } }"',
    "bracket-1mb-in-arg": '"plan p { step a { call t.x(v: " + "[" * MB + ") } }"',
    "brace-1mb-in-expect": '"plan p { step a { call t.x() expect " + "{" * MB + " } }"',
    "brace-1mb-blocks": '"plan p { " + "step a { " * (MB // 9)',
    "plus-chain-2mb": '"plan p { step a { call t.x() expect " + "1+" * MB + "1 } }"',
    "and-chain-2mb": '"plan p { step a { call t.x() expect " + "a&&" * (2 * MB // 3) + "a } }"',
    "select-chain-2mb": '"plan p { step a { call t.x() expect " + "a." * MB + "b } }"',
    "not-chain-2mb": '"plan p { step a { call t.x() expect " + "!" * (2 * MB) + "a } }"',
    "string-8mb": '"plan p { step a { call t.x(v: \\"" + "a" * (8 * 1000 * 1000) + "\\") } }"',
    "escapes-4mb": '"plan p { step a { call t.x(v: \\"" + "\\\\n" * (2 * 1000 * 1000) + "\\") } }"',
    "comment-8mb": '"plan p { step a { call t.x() } } # " + "c" * (8 * 1000 * 1000)',
    "after-100k-known": ('"plan p {\\n" + ' + STEPS_1000 + ' + "step big after " + '
                         '", ".join(f"s{i % 1000}" for i in range(100_000)) + " { call t.y() } }"'),
    "after-100k-unknown": ('"plan p {\\n" + ' + STEPS_1000 + ' + "step big after " + '
                           '", ".join(f"s{i}" for i in range(100_000)) + " { call t.y() } }"'),
}


@pytest.mark.parametrize("case", sorted(LARGE))
def test_large_input_is_refused_or_checked_quickly(case: str) -> None:
    try:
        completed = subprocess.run([sys.executable, "-c", _CHILD, LARGE[case], str(BOUND_SECONDS)],
                                   capture_output=True, text=True, timeout=BOUND_SECONDS + 20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{case}` ran past the {BOUND_SECONDS + 20:.0f} s backstop")
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert not report.get("timeout"), f"`{case}` was still running after {BOUND_SECONDS:.0f} s"
    assert not report["bad"], report["bad"]
    assert report["document"] or report["errors"], report
    assert report["elapsed"] < BOUND_SECONDS, f"`{case}` took {report['elapsed']:.2f} s: {report['names']}"


# ---------------------------------------------------------------------------------- command line

def plangate_command() -> list[str]:
    script = Path(sys.executable).with_name("plangate")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "plangate.cli"]


def test_cli_on_a_binary_file(tmp_path: Path) -> None:
    binary = tmp_path / "image.plan"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    completed = subprocess.run([*plangate_command(), "check", str(binary), "--color", "never"],
                               capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert completed.returncode == 2, (completed.stdout, completed.stderr)
    assert "Traceback" not in completed.stderr
    assert "unreadable-input" in completed.stdout
    assert "image.plan" in completed.stdout


def test_a_long_flat_chain_is_an_expression_not_a_nesting() -> None:
    """A 200-term blocklist written with `||` (each term a level deep) is checked and decided like
    any rule; only past `MAX_EXPRESSION_DEPTH` is it `input-too-large`, with the `in […]` hint."""
    from plangate.ir.lower import MAX_EXPRESSION_DEPTH

    def blocklist(terms: int) -> str:
        chain = " || ".join(f'args.host == "h{i}.example.com"' for i in range(terms))
        return f'policy p {{\n  tool dns.route {{ risk read_only args {{ host: string }} }}\n  deny "blocked" when {chain}\n}}\n'

    plan = 'plan q {\n  step a { call dns.route(host: "h150.example.com") }\n  step b { call dns.route(host: "ok.example.com") }\n}\n'
    result = check_sources([SourceFile("q.plan", plan)], [SourceFile("p.policy", blocklist(200))])
    assert [(d.name, d.message) for d in result.diagnostics] == [
        ("policy-deny", "deny rule `blocked` fires for step `a`")]

    too_deep = check_sources([], [SourceFile("p.policy", blocklist(MAX_EXPRESSION_DEPTH))])
    (refused,) = too_deep.diagnostics
    assert refused.name == "input-too-large" and "`x in [" in refused.help
    arithmetic = " + ".join(["1"] * 200)
    summed = check_sources([SourceFile("s.plan", f"plan s {{ step a {{ call t.x(n: {arithmetic}) expect result.n == {arithmetic} }} }}")])
    assert not [d for d in summed.diagnostics if d.name == "input-too-large"]


def test_a_plan_that_names_too_many_steps_in_after_lists_is_input_too_large(monkeypatch) -> None:
    """Each step after every earlier one gives a quadratic graph (2,250 steps once took 34 s and
    2.4 GB): past the bound the plan is parsed but not checked."""
    from plangate import driver

    def dense(steps: int) -> str:
        lines = [f"  step s{i} {{ call t.x() after {', '.join(f's{j}' for j in range(i))} }}" for i in range(1, steps)]
        return "plan dense {\n  step s0 { call t.x() }\n" + "\n".join(lines) + "\n}\n"

    monkeypatch.setattr(driver, "MAX_AFTER_EDGES", 40)
    assert check_sources([SourceFile("d.plan", dense(9))]).diagnostics == []  # 36 names
    (refused,) = check_sources([SourceFile("d.plan", dense(10))]).diagnostics  # 45 names
    assert (refused.name, refused.message) == (
        "input-too-large", "plan `dense` names 45 steps in its `after` lists, over the bound of 40")

"""Broken twins: each example plan has a copy in `tests/twins/` with realistic mistakes in it.

`examples/<name>.plan` is clean under `policies/baseline.policy`; `tests/twins/<name>.plan` is the
same plan with one or two mistakes a reviewer would want flagged (an approval dropped, a check that
writes, a retried page with no idempotency key, a refund amount read from a lookup, a misspelt
`after`…). Every line where a diagnostic must land carries a trailing comment

    # expect: name[, name…]

and the test asserts that the errors and warnings `plangate check` reports for the twin are exactly
those (line, name) pairs, counted as a multiset: nothing missing, nothing extra. A new check that
fires on a twin, or a change in where a diagnostic points, shows up here as a precise difference.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from plangate.diagnostics import Severity
from plangate.driver import check

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TWINS = ROOT / "tests" / "twins"
BASELINE = ROOT / "policies" / "baseline.policy"

EXPECT = re.compile(r"#\s*expect:\s*(?P<names>[a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)\s*$")

EXAMPLE_NAMES = sorted(path.stem for path in EXAMPLES.glob("*.plan"))


def expected_marks(path: Path) -> Counter:
    marks: Counter = Counter()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        found = EXPECT.search(line)
        if found:
            for name in found.group("names").split(","):
                marks[(number, name.strip())] += 1
    return marks


def reported(path: Path) -> tuple[Counter, list[str]]:
    """(line, name) of every error and warning in `path`, and a readable listing of them."""
    result = check([str(path)], [str(BASELINE)])
    source = result.sources.get(str(path))
    assert source is not None, f"{path} was not read"
    found: Counter = Counter()
    listing = []
    for item in result.diagnostics:
        if item.severity not in (Severity.ERROR, Severity.WARNING):
            continue
        assert item.file == str(path) or item.severity is not Severity.ERROR, (
            f"an error outside the plan: {item.file}: {item.name}: {item.message}")
        if item.file != str(path):
            continue
        line = source.position(item.span.start).line
        found[(line, item.name)] += 1
        listing.append(f"{path.name}:{line} {item.severity.value} {item.name}: {item.message}")
    return found, listing


def test_every_example_has_a_twin():
    assert EXAMPLE_NAMES, "no example plans found"
    assert sorted(path.stem for path in TWINS.glob("*.plan")) == EXAMPLE_NAMES


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_is_clean(name):
    found, listing = reported(EXAMPLES / f"{name}.plan")
    assert not found, "\n".join(listing)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_twin_reports_exactly_its_marks(name):
    twin = TWINS / f"{name}.plan"
    expected = expected_marks(twin)
    assert expected, f"{twin} marks no expected diagnostic"
    found, listing = reported(twin)
    missing = expected - found
    extra = found - expected
    assert not missing and not extra, (
        f"missing: {sorted(missing.elements())}\nextra: {sorted(extra.elements())}\nreported:\n"
        + "\n".join(listing))


# A few twins are also about what the diagnostic says, not only where it lands.

def _messages(name: str, diagnostic_name: str) -> list:
    twin = TWINS / f"{name}.plan"
    result = check([str(twin)], [str(BASELINE)])
    return [d for d in result.diagnostics if d.name == diagnostic_name and d.file == str(twin)]


def test_misspelt_after_suggests_the_step():
    (found,) = _messages("research", "unknown-step")
    assert "summarize" in found.message
    assert "did you mean `summarise`" in (found.help or "")


def test_refund_from_a_lookup_gives_a_witness_above_the_cap():
    (found,) = _messages("refund", "policy-deny-possible")
    assert found.severity is Severity.WARNING
    assert "refund-cap" in found.message
    witness = re.search(r"`charge\.result\.amount` = ([0-9.]+)", found.message)
    assert witness, found.message
    assert float(witness.group(1)) > 500.0


def test_missing_approval_names_the_required_role():
    (found,) = _messages("deploy", "approval-missing")
    assert 'role "operator"' in found.message
    (short,) = _messages("deploy", "approval-insufficient")
    assert "2h" in short.message and "1h" in short.message

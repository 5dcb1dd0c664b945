"""Shared pytest configuration for the plangate tests.

Property tests (hypothesis) draw their examples from a fixed seed per test, so a run of the suite
— CI's included — tries the same cases every time and passes or fails for a reason in the code,
not in the draw. `PLANGATE_HYPOTHESIS=explore python -m pytest` draws fresh examples instead, to
look for new failures (each one found then becomes a test of its own).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("PLANGATE_HYPOTHESIS", "fixed"))


def pytest_addoption(parser):
    parser.addoption(
        "--update",
        action="store_true",
        default=False,
        help="rewrite the snapshots: tests/golden/*.expected.txt and the message blocks of docs/diagnostics.md",
    )


@pytest.fixture(autouse=True)
def solver_answers_of_this_test_only():
    """Each test starts with no remembered solver answers (`solve.check` keeps them for the
    process): a test that bounds the solver's time must reach the solver, whatever ran before."""
    from plangate.smt.solve import forget_answers

    forget_answers()


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A fresh folder for the demo tools (`examples/tools/local.py`), and no fault injection."""
    folder = tmp_path / "demo"
    monkeypatch.setenv("PLANGATE_DEMO_DIR", str(folder))
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    return folder

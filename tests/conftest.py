"""Shared pytest configuration for the plangate tests."""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--update",
        action="store_true",
        default=False,
        help="rewrite the snapshots: tests/golden/*.expected.txt and the message blocks of docs/diagnostics.md",
    )


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A fresh folder for the demo tools (`examples/tools/local.py`), and no fault injection."""
    folder = tmp_path / "demo"
    monkeypatch.setenv("PLANGATE_DEMO_DIR", str(folder))
    monkeypatch.delenv("PLANGATE_FAULT", raising=False)
    return folder

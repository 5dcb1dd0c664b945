"""Shared pytest configuration for the plangate tests."""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption(
        "--update",
        action="store_true",
        default=False,
        help="rewrite the snapshots: tests/golden/*.expected.txt and the message blocks of docs/diagnostics.md",
    )

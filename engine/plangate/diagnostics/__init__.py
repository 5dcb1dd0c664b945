"""Diagnostics: plain data (`Diagnostic`), the registry of codes, and renderers (in `render`)."""

from plangate.diagnostics.model import Diagnostic, Label, Severity, backticked, diagnostic, summarize
from plangate.diagnostics.registry import CODES, BY_CODE, Code, lookup

__all__ = [
    "BY_CODE",
    "CODES",
    "Code",
    "Diagnostic",
    "Label",
    "Severity",
    "backticked",
    "diagnostic",
    "lookup",
    "summarize",
]

"""The diagnostic record: plain, immutable data.

Detection code builds `Diagnostic`s with `diagnostic(name, span, message, …)`, which fills the code
and the default severity from the registry; nothing here renders. Ordering (`sort_key`) is by file,
offset, then code, so that output is stable whatever order the checks ran in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterable

from plangate.diagnostics.registry import lookup
from plangate.source import Span


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Label:
    """A secondary span with a short explanation ("the cycle goes through here")."""

    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    severity: Severity
    message: str
    span: Span
    labels: tuple[Label, ...] = ()
    notes: tuple[str, ...] = ()
    help: str | None = None

    @property
    def file(self) -> str:
        return self.span.file

    def sort_key(self) -> tuple:
        return (self.span.file, self.span.start, self.span.end, self.code, self.message)

    def with_severity(self, severity: Severity) -> "Diagnostic":
        return replace(self, severity=severity)


def diagnostic(
    name: str,
    span: Span,
    message: str,
    *,
    labels: Iterable[Label] = (),
    notes: Iterable[str] = (),
    help: str | None = None,
    severity: Severity | None = None,
) -> Diagnostic:
    """Build a diagnostic for the registered `name`; an unregistered name is a programming error."""
    code = lookup(name)
    return Diagnostic(
        code=code.code,
        name=code.name,
        severity=severity or Severity(code.severity),
        message=message,
        span=span,
        labels=tuple(labels),
        notes=tuple(notes),
        help=help if help is not None else code.help,
    )


@dataclass
class Summary:
    errors: int = 0
    warnings: int = 0
    notes: int = 0
    files: int = 0
    by_file: dict[str, int] = field(default_factory=dict)


def backticked(names: Iterable[object], separator: str = ", ") -> str:
    """Names as a message shows user input: each in backticks, `separator` between them."""
    return separator.join(f"`{name}`" for name in names)


def summarize(diagnostics: Iterable[Diagnostic], files: int) -> Summary:
    summary = Summary(files=files)
    for item in diagnostics:
        if item.severity is Severity.ERROR:
            summary.errors += 1
        elif item.severity is Severity.WARNING:
            summary.warnings += 1
        else:
            summary.notes += 1
        summary.by_file[item.file] = summary.by_file.get(item.file, 0) + 1
    return summary

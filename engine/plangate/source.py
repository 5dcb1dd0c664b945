"""Source files, spans and the source map.

A `Span` is a pair of character offsets into one `SourceFile`; it carries the file's name so a
diagnostic can be rendered without a lookup, but it never takes part in semantic equality or in
content hashes (IR nodes compare and hash without their spans).

Invariant: `SourceFile.position(offset)` returns 1-based line and column; columns count code points,
and a tab counts as one column (editors and SARIF viewers agree on that, not on tab stops).
Lines end at `\n`, `\r\n` or a lone `\r`.
Offsets past the end clamp to the end of the text.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import NamedTuple


class Position(NamedTuple):
    line: int
    column: int


class Span(NamedTuple):
    """Half-open range `[start, end)` of character offsets in the file `file`."""

    file: str
    start: int
    end: int

    def cover(self, other: "Span") -> "Span":
        return Span(self.file, min(self.start, other.start), max(self.end, other.end))


NO_SPAN = Span("", 0, 0)
_LINE_BREAK = re.compile(r"\r\n?|\n")


@dataclass
class SourceFile:
    """The text of one input file and the offsets where its lines start."""

    name: str
    text: str
    _line_starts: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        starts = [0]
        if "\r" in self.text:  # `\r\n` and a lone `\r` end lines too
            starts.extend(match.end() for match in _LINE_BREAK.finditer(self.text))
        else:
            find = self.text.find
            index = find("\n")
            while index != -1:
                starts.append(index + 1)
                index = find("\n", index + 1)
        self._line_starts = starts

    def position(self, offset: int) -> Position:
        offset = max(0, min(offset, len(self.text)))
        line_index = bisect.bisect_right(self._line_starts, offset) - 1
        return Position(line_index + 1, offset - self._line_starts[line_index] + 1)

    def offset(self, line: int, column: int) -> int:
        """The offset of a 1-based line and column (the inverse of `position`)."""
        line = max(1, min(line, len(self._line_starts)))
        return min(self._line_starts[line - 1] + column - 1, len(self.text))

    def line_text(self, line: int) -> str:
        start, end = self.line_bounds(line)
        return self.text[start:end]

    def line_bounds(self, line: int) -> tuple[int, int]:
        """The offsets where a 1-based line starts and where its text ends (before its line break)."""
        if line < 1 or line > len(self._line_starts):
            return 0, 0
        start = self._line_starts[line - 1]
        end = self._line_starts[line] if line < len(self._line_starts) else len(self.text)
        while end > start and self.text[end - 1] in "\r\n":
            end -= 1
        return start, end

    @property
    def line_count(self) -> int:
        return len(self._line_starts)

    def span(self, start: int, end: int) -> Span:
        return Span(self.name, start, end)


class SourceMap:
    """Every file read in one run, by name."""

    def __init__(self) -> None:
        self._files: dict[str, SourceFile] = {}

    def add(self, source: SourceFile) -> SourceFile:
        self._files[source.name] = source
        return source

    def get(self, name: str) -> SourceFile | None:
        return self._files.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._files

    def range(self, span: Span) -> tuple[Position, Position] | None:
        source = self._files.get(span.file)
        if source is None:
            return None
        return source.position(span.start), source.position(span.end)

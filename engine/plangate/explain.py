"""`plangate explain CODE`: the section of `docs/diagnostics.md` for one code (or name).

Sections start with a level-2 heading `## PG304 approval-missing`; a section runs to the next
level-2 heading.
"""

from __future__ import annotations

from plangate.assets import read_asset
from plangate.diagnostics.registry import lookup


def explain(code_or_name: str) -> str | None:
    try:
        code = lookup(code_or_name.strip())
    except KeyError:
        return None
    try:
        text = read_asset("docs", "diagnostics.md")
    except OSError:
        text = ""
    lines = text.splitlines()
    heading = f"## {code.code} "
    for index, line in enumerate(lines):
        if line.startswith(heading):
            end = next((j for j in range(index + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
            return "\n".join(lines[index:end]).rstrip() + "\n"
    return f"{code.code} {code.name} ({code.severity})\n\n{code.summary}\n"

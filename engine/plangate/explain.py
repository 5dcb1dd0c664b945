"""`plangate explain CODE`: the section of `docs/diagnostics.md` for one code (or name).

Sections start with a level-2 heading `## PG304 approval-missing`; a section runs to the next
level-2 heading.
"""

from __future__ import annotations

from plangate.assets import read_asset
from plangate.diagnostics.registry import CODES, RETIRED, lookup


def explain(code_or_name: str) -> str | None:
    try:
        code = lookup(code_or_name.strip())
    except KeyError:
        return None
    key = code_or_name.strip()
    retired = RETIRED.get(key.lower().replace("_", "-")) or RETIRED.get(key.upper())
    page = _page(code)
    if retired is not None:  # an old code or name: say what replaced it, then its successor's page
        return f"`{code_or_name.strip()}` is retired: it is now {code.code} `{code.name}`\n\n" + page
    return page


def suggestion(code_or_name: str) -> str | None:
    """The nearest code or name, for an argument that is neither."""
    from plangate.suggest import closest

    found = closest(code_or_name.strip().lower(), [code.name for code in CODES] + [code.code.lower() for code in CODES])
    return found.upper() if found is not None and found.startswith("pg") else found  # codes are written `PG309`


def _page(code) -> str:
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

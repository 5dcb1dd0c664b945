"""Files shipped with plangate: the grammar and the diagnostics reference.

In a wheel they live inside the package (`plangate/grammar/`, `plangate/docs/`); in a source
checkout (an editable install) they are the top-level `grammar/` and `docs/` folders.
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def read_asset(folder: str, name: str) -> str:
    packaged = Path(__file__).resolve().parent / folder / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (_CHECKOUT / folder / name).read_text(encoding="utf-8")

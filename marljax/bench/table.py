"""How every benchmark reports: an aligned table of its figures, then, LAST, one JSON line (a flat
dict) that scripts read with `json.loads(output.splitlines()[-1])`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

Row = tuple[str, str, str]  # (label, value, unit or note)


def table(rows: Sequence[Row]) -> str:
    """Labels left-aligned, values right-aligned in one column, notes after them."""
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table: the header, a rule, then one line per row (numbers right-aligned)."""
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("---:" for _ in header) + "|", *map(line, rows)])


def report(rows: Sequence[Row], result: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    """Log the table of `rows`, then `result` as the JSON line; return `result`."""
    return report_text(table(rows), result, log)


def report_text(text: str, result: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    """Log `text` (a rendered table), then `result` as the JSON line; return `result`."""
    log(text)
    log(json.dumps(result))
    return result

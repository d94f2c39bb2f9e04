"""The algorithm support table, generated from what each algorithm declares (`Supports`): the
README's and docs/guide/algorithms.md's table is this module's output, between marker comments, so
a cell says what the code checks and nothing else.

    python -m marljax.algos.support            # print the table
    python -m marljax.algos.support --write    # rewrite it in README.md and docs/guide/algorithms.md

tests/test_support_table.py checks the files hold the generated table and that every "no" cell is
refused in one line; every "yes" cell runs a 2-update smoke there (nightly).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from marljax.algos import registry
from marljax.arguments import Arguments, Option, UsageError
from marljax.config import AlgorithmSchema

START, END = "<!-- support-table:start (python -m marljax.algos.support --write) -->", "<!-- support-table:end -->"
FILES = ("README.md", "docs/guide/algorithms.md")
PROG = "python -m marljax.algos.support"
ARGUMENTS = Arguments(options=(Option("--write"),))  # --write: rewrite the table in FILES


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _agent_axis(s: AlgorithmSchema) -> str:
    if not s.supports.agent_axis:
        return "no"
    return "split or replicated (`mesh.placement=balanced`)" if s.supports.agent_replicate else "split"


# (header, the cell of one algorithm): every column but the first two is a `Supports` field
COLUMNS: tuple[tuple[str, Callable[[AlgorithmSchema], str]], ...] = (
    ("`algo=`", lambda s: f"`{s.name}`"),
    ("what it is", lambda s: s.summary),
    ("sections", lambda s: ", ".join(f"`{k}.*`" for k in s.sections) or "none"),
    ("actions", lambda s: ", ".join(s.supports.actions)),
    ("GRU (`recurrent=true`)", lambda s: _yes(s.supports.recurrent)),
    ("`mode=async`", lambda s: _yes(s.supports.async_mode)),
    ("PettingZoo host envs", lambda s: _yes(s.supports.host_envs)),
    ("`mesh.agent`", _agent_axis),
    ("resume", lambda s: _yes(s.supports.resume)),
    ("sweeps", lambda s: _yes(s.supports.sweeps)),
    ("several processes", lambda s: _yes(s.supports.processes)),
)


def table() -> str:
    """The markdown table, one row per registered algorithm."""
    rows = [[cell(registry.get(name).schema) for _, cell in COLUMNS] for name in registry.names()]
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def replaced(text: str, where: str) -> str:
    """`text` with the table between the markers generated anew (ValueError naming `where` if a marker is missing)."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{where}: no support-table markers ({START} ... {END})")
    return text[: start + len(START)] + "\n" + table() + "\n" + text[end:]


def main(argv: list[str]) -> int:
    """Print the table, or with --write rewrite it in FILES."""
    if "--help" in argv or "-h" in argv:
        print(
            f"usage: {PROG} {ARGUMENTS.usage()}\n\nPrint the support table; --write rewrites it in {' and '.join(FILES)}."
        )
        return 0
    try:
        write = ARGUMENTS.parse(argv).options["write"]
    except UsageError as exc:
        print(f"{PROG}: {ARGUMENTS.refusal(PROG, exc)}", file=sys.stderr)
        return 2
    if not write:
        print(table())
        return 0
    root = Path(__file__).resolve().parents[2]
    for name in FILES:
        path = root / name
        path.write_text(replaced(path.read_text(), name))
        print(f"wrote the support table in {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

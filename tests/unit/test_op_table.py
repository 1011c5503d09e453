"""docs/graph-format.md's table of op types names every op with the slots of its schema."""

from __future__ import annotations

import re
from pathlib import Path

from graph_format import SIGNATURES

DOC = Path(__file__).resolve().parents[2] / "docs" / "graph-format.md"


def _rows() -> dict[str, tuple[str, str]]:
    """op -> (arguments, outputs) of each row of the "Op types" table."""
    section = DOC.read_text().split("### Op types", 1)[1].split("\n\n##", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `(\w+)` \| ([^|]*) \| ([^|]*) \|", line)
        if match:
            rows[match.group(1)] = (match.group(2).strip(), match.group(3).strip())
    return rows


def test_the_op_table_matches_the_schemas() -> None:
    expected = {
        op: (
            ", ".join(f"{a.name}{'?' if a.optional else ''}: {a.kind}" for a in sig.args),
            ", ".join(f"{name}: {kind}" for name, kind in sig.outputs) or "none",
        )
        for op, sig in SIGNATURES.items()
    }
    assert _rows() == expected

"""The test suite itself: it runs on any machine.

- No test reads a path that exists on one machine only (a local checkout, a home folder):
  what a test needs from elsewhere is vendored under tests/data with its licence.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# Roots under which a path belongs to one machine's layout, not to the system's.
MACHINE_SPECIFIC = re.compile(r"^(~|/(work|home|root|Users|mnt|media|srv|opt|scratch))(/|$)")


def test_no_test_reads_a_machine_specific_path() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if "data" in path.relative_to(TESTS).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and MACHINE_SPECIFIC.match(text):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text!r}")
    assert not found, "paths that exist on one machine only:\n" + "\n".join(found)

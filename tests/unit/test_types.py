"""The type gate: `mypy --strict` over the packages pyproject's `[tool.mypy]` lists.

mypy runs as its own process, with the configuration and the pinned version of the `test`
extras, exactly as `mypy` typed at the repository root would; its incremental cache lives
in `.mypy_cache/` there, so a rerun checks only what changed (a cold run takes a few seconds).
Run the gate alone with `pytest -m types`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.types

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
# An ignore must name the error it silences and say why, in a comment on the same line.
EXPLAINED_IGNORE = re.compile(r"# type: ignore\[[a-z-]+(, *[a-z-]+)*\] +# *\S")


def _checked_files() -> list[Path]:
    return sorted(p for package in CONFIG["files"] for p in (ROOT / package).rglob("*.py"))


def test_mypy_strict_is_clean() -> None:
    assert CONFIG["strict"] is True, "the gate is mypy --strict; pyproject must keep strict"
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mypy --strict found errors:\n{report}"
    # The configuration, not the command line, chose the files: they were all checked.
    assert f"no issues found in {len(_checked_files())} source files" in report, report


def test_every_type_ignore_names_its_error_and_says_why() -> None:
    unexplained = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _checked_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line and not EXPLAINED_IGNORE.search(line)
    ]
    assert not unexplained, "type: ignore without [code] and a comment:\n" + "\n".join(unexplained)

"""The test suite itself: it runs on any machine, and a machine without a driver skips the
device tests only when asked to.

- No test reads a path that exists on one machine only (a local checkout, a home folder):
  what a test needs from elsewhere is vendored under tests/data with its licence.
- With PARITY_SKIP_GPU_TESTS=1 and no Vulkan driver, every `gpu` test is skipped, those
  that start `parity` processes and those whose session fixtures start runs included, while
  the rest still run; without the variable the same tests end in an error naming what is
  missing, so that CI cannot pass without a device.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# Roots under which a path belongs to one machine's layout, not to the system's.
MACHINE_SPECIFIC = re.compile(r"^(~|/(work|home|root|Users|mnt|media|srv|opt|scratch))(/|$)")

# Device tests of each kind: runtimes from the session fixtures (test_api.py), `parity`
# subprocesses and a session fixture that starts a run (test_workers.py); beside them, in one
# module, device-free tests that must still run (test_golden.py's sdpa reference steps).
SELECTED = [
    "tests/diff/test_api.py",
    "tests/test_workers.py",
    "tests/test_golden.py::test_sdpa_reference_steps_match_pytorch",
    "tests/test_golden.py::test_sdpa_backends_steps_match_pytorch",
]
NO_DRIVER = {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json"}


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


def _pytest_without_driver(tmp_path: Path, skip: bool) -> dict[str, list[str]]:
    """Run SELECTED in a fresh pytest with no Vulkan driver visible: by outcome ("passed",
    "skipped", "failure", "error"), each test's name and message."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "PARITY_SKIP", "VK_ADD_DRIVER"))  # no driver added
    }
    env.update(NO_DRIVER)
    if skip:
        env["PARITY_SKIP_GPU_TESTS"] = "1"
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
            "--basetemp", str(tmp_path / "basetemp"), "--junitxml", str(junit), *SELECTED,
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert junit.is_file(), proc.stdout + proc.stderr
    outcomes: dict[str, list[str]] = {}
    for case in ET.parse(junit).iter("testcase"):
        ends = [child for child in case if child.tag in ("skipped", "failure", "error")]
        outcome, message = (ends[0].tag, ends[0].get("message", "")) if ends else ("passed", "")
        outcomes.setdefault(outcome, []).append(f"{case.get('name')}: {message}")
    return outcomes


@pytest.mark.parametrize("skip", [True, False], ids=["PARITY_SKIP_GPU_TESTS=1", "unset"])
def test_without_a_driver_device_tests_skip_only_when_asked(tmp_path: Path, skip: bool) -> None:
    outcomes = _pytest_without_driver(tmp_path, skip)
    # The device-free golden tests still ran, and passed.
    assert any(name.startswith("test_sdpa_reference") for name in outcomes.get("passed", []))
    # Without the variable a missing device stops each test at its set-up: an error.
    device = outcomes.get("skipped" if skip else "error", [])
    # test_api's two, test_workers' seven, each golden sdpa case on the backends.
    assert len(device) > 9, outcomes
    for line in device:
        assert "vulkan unavailable" in line and "no usable driver" in line, line
        assert skip or "set PARITY_SKIP_GPU_TESTS=1 to skip" in line, line
    # Nothing else: no failure, and no error from a fixture that started a run and failed.
    assert set(outcomes) == {"passed", "skipped" if skip else "error"}, outcomes

"""One exit rule, end to end: the process's exit status, summary.json, the console's last
lines and the report's title agree (harness.run.exitrule), a clean run of any family exits 0,
and a run that leaves a required coverage cell empty says which and what would fill it.

The run of every family alone under `--profile pr` is long (3 to 6 minutes on a loaded
2-core machine): it is marked slow.
"""

from __future__ import annotations

import html as html_module
import re
from pathlib import Path

import pytest

from harness.families import FAMILIES
from tests.cli_support import parity, read_summary

pytestmark = pytest.mark.gpu

QUIET = ("--no-database", "--no-expectations", "--jobs", "1", "--seed", "0")


def _title(folder: Path) -> str:
    html = (folder / "index.html").read_text()
    match = re.search(r"<title>(.*?)</title>", html, re.S)
    assert match, html[:500]
    return html_module.unescape(match.group(1))  # cells such as `width>=4096` are escaped


def _assert_agree(proc_status: int, out: Path) -> None:
    """The process, summary.json and the report say the same."""
    summary = read_summary(out)
    assert summary["exit_status"] == summary["runs"][0]["exit_status"] == proc_status
    if not summary["totals"]["unexpected_cases"]:
        assert "unexpected divergences found" not in (out / "index.html").read_text()
    assert summary["verdict"] in _title(out)


def test_a_single_chunk_of_a_family_under_pr_requires_no_fold(tmp_path: Path) -> None:
    # One chunk of 15 examples: none under the lowered limit, so no fold is required (the
    # process used to require it while summary.json did not, and exited 1).
    out = tmp_path / "mul"
    proc = parity(
        "run", "--families", "mul", "--profile", "pr", "--max-examples", "15", *QUIET,
        "--out", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(out)
    assert summary["coverage_required"] == {} and summary["coverage_missing"] == []
    assert summary["verdict"] == "no unexpected divergence"
    assert proc.stderr.splitlines()[-1].endswith("(exit status 0: no unexpected divergence)")
    _assert_agree(proc.returncode, out)


def test_an_empty_required_cell_is_named_with_what_would_fill_it(tmp_path: Path) -> None:
    # Two nightly examples of rms_norm (chunks of one): a one-step case, which can neither
    # grow nor shrink, leaves the family's step=grow and step=shrink cells empty.
    out = tmp_path / "short"
    proc = parity(
        "run", "--families", "rms_norm", "--profile", "nightly", "--max-examples", "2",
        "--chunk-examples", "1", *QUIET, "--out", out,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr[-3000:]
    summary = read_summary(out)
    missing = {tuple(cell) for cell in summary["coverage_missing"]}
    for backend in ("webgpu", "vulkan"):
        assert {("rms_norm", backend, "step=grow"), ("rms_norm", backend, "step=shrink")} <= missing
    last = proc.stderr.splitlines()[-3:]
    assert last[0] == f"parity: required coverage short: {len(missing)} required cells left empty"
    assert last[1].startswith("parity:   rms_norm size=mid, step=grow, step=shrink"), last
    assert "family rms_norm ran 2 examples" in last[1], last
    assert last[1].endswith("(e.g. --families rms_norm --max-examples 4)"), last
    assert last[2].endswith("(exit status 4: required coverage short)"), last
    assert summary["verdict"].startswith("required coverage short: rms_norm size=mid, step=grow")
    assert summary["coverage_fill"] == [last[1].removeprefix("parity:   ")]
    _assert_agree(proc.returncode, out)
    assert summary["coverage_fill"][0] in html_module.unescape((out / "index.html").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_alone_under_pr_exits_0_on_a_clean_tree(family: str, tmp_path: Path) -> None:
    out = tmp_path / family
    proc = parity("run", "--families", family, "--profile", "pr", *QUIET, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(out)
    assert summary["status"] == "complete" and summary["coverage_missing"] == []
    _assert_agree(proc.returncode, out)

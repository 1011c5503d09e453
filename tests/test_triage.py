"""Findings a triager can trust, on the report of a run with a planted bug (tests/cli_support.py).

The planted WGSL rms_norm ignores its weight, and both chunks of the planted run shrink it to
the same 1x1 case. The tests show that the two chunks make one finding and one bundle; that
the CLI's lines, summary.json and index.html count the same cases; that the failure page
shows the values at the worst element (inputs, both backends' outputs, the float64
reference, the budget) and the bundle's repeatability record; that replay commands work
from the run folder wherever it is copied; that the commands the bundle, the failure page
and the index print, run from the run folder, reproduce the run; and that replay warns when
the Python code differs from the code a bundle was found with.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.check.divergence import BugKey
from harness.gen.case import Case
from harness.run.findings import finding_id
from tests.cli_support import parity, read_records, read_summary

pytestmark = pytest.mark.gpu

TOTALS_LINE = re.compile(
    r"(?P<cases>\d+) cases, (?P<steps>\d+) steps, (?P<divergent_cases>\d+) divergent cases "
    r"\((?P<unexpected_cases>\d+) unexpected, (?P<known_cases>\d+) known\), "
    r"(?P<findings>\d+) findings"
)


def _only_finding(folder: Path) -> dict[str, Any]:
    findings = read_summary(folder)["findings"]
    assert len(findings) == 1, [f["id"] for f in findings]
    return findings[0]


def _first_finding(folder: Path) -> dict[str, Any]:
    return read_summary(folder)["findings"][0]


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def _rows(page: str, table_class: str) -> list[tuple[dict[str, str], list[str]]]:
    """(attributes of the row, text of its cells) of every body row of table.<class>."""
    table = re.search(rf'<table class="{table_class}">(.*?)</table>', page, re.S)
    assert table, f"no table.{table_class} on the page"
    rows = []
    for attrs, body in re.findall(r"<tr([^>]*)>(.*?)</tr>", table.group(1), re.S):
        cells = [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
        if cells:
            rows.append((dict(re.findall(r'([\w-]+)="([^"]*)"', attrs)), cells))
    return rows


def test_chunks_that_find_the_same_bug_share_one_finding_and_bundle(planted_run: Path) -> None:
    records = [json.loads(line) for line in (planted_run / "cases.jsonl").read_text().splitlines()]
    chunk_findings = [f for r in records if r["record"] == "chunk" for f in r["findings"]]
    assert len(chunk_findings) == 2  # each chunk shrank to a minimal case
    assert len({(f["case_id"], f["bug"]) for f in chunk_findings}) == 1
    finding = _only_finding(planted_run)
    assert finding["chunks"] == ["rms_norm/0", "rms_norm/1"]
    assert finding["id"] == finding_id(finding["case_id"], BugKey.parse(finding["bug"]))
    assert finding["bundle"] == f"bundles/{finding['id']}"
    assert {f["bundle"] for f in chunk_findings} == {finding["bundle"]}
    assert [p.name for p in (planted_run / "bundles").iterdir()] == [finding["id"]]
    assert [p.stem for p in (planted_run / "failures").iterdir()] == [finding["id"]]
    page = (planted_run / "failures" / f"{finding['id']}.html").read_text()
    found_by = _text(re.search(r'<p id="found-by">(.*?)</p>', page, re.S).group(1))
    assert "2 chunks" in found_by and "rms_norm/0" in found_by and "rms_norm/1" in found_by
    # Both chunks still fail in JUnit.
    assert 'failures="2"' in (planted_run / "junit.xml").read_text()


def test_cli_lines_summary_and_html_count_the_same(planted_run: Path, tmp_path: Path) -> None:
    stderr = (planted_run.parent / "planted-run.stderr").read_text()
    last = [line for line in stderr.splitlines() if line.startswith("parity: complete:")]
    assert last, stderr[-2000:]
    run_line = TOTALS_LINE.search(last[-1])
    assert run_line, last[-1]
    totals = read_summary(planted_run)["totals"]
    assert {k: int(v) for k, v in run_line.groupdict().items()} == {
        k: totals[k] for k in run_line.groupdict()
    }
    copy = tmp_path / "run"
    shutil.copytree(planted_run, copy)
    proc = parity("report", copy)
    assert proc.returncode == 1, proc.stderr
    report_line = TOTALS_LINE.search(proc.stderr)
    assert report_line and report_line.groupdict() == run_line.groupdict(), proc.stderr
    index = (copy / "index.html").read_text()
    for key in [*run_line.groupdict(), "divergences", "bugs"]:
        assert f'data-total="{key}">{totals[key]}<' in index, key
    # The bug table's "divergent cases" are cases: never more than the run's.
    summary = read_summary(copy)
    for group in summary["bugs"]:
        assert group["cases"] <= totals["divergent_cases"] <= totals["cases"]
        assert group["cases"] <= group["divergences"]
    assert sum(g["divergences"] for g in summary["bugs"]) == totals["divergences"]
    # Divergences count every divergent step of each distinct case (a case once, however
    # many chunks ran it), divergent cases count the cases.
    per_case = {
        r["case_id"]: len(r["divergences"])
        for r in read_records(copy)
        if r["record"] == "case" and r["divergences"]
    }
    assert totals["divergences"] == sum(per_case.values())
    assert totals["divergent_cases"] == len(per_case)


def test_failure_page_shows_the_values_at_the_worst_element(planted_run: Path) -> None:
    finding = _first_finding(planted_run)
    case = Case.load(planted_run / finding["bundle"] / "case")
    graph = case.graph
    x = case.steps[0]["x"]
    assert x.shape == (1, 1)  # the shrunk case: one element, one red square on the heatmap
    weight = graph.constants["weight"]
    (node,) = graph.ops
    eps = graph.values[node.args["eps"]].value
    x64, w64 = float(x[0, 0]), float(weight[0])
    reference = x64 / np.sqrt(x64 * x64 + eps) * w64  # rms_norm of one element, in float64
    without_weight = x64 / np.sqrt(x64 * x64 + eps)  # what the planted kernel computes

    page = (planted_run / "failures" / f"{finding['id']}.html").read_text()
    assert 'id="worst-elements"' in page
    outputs = {attrs["data-backend"]: cells for attrs, cells in _rows(page, "element-values")}
    assert set(outputs) == {"webgpu", "vulkan"}
    for backend, cells in outputs.items():
        _, actual, ref, error, budget, _ratio, _ = cells
        assert float(ref) == pytest.approx(reference, rel=1e-6), backend
        assert float(budget) > 0  # the shown values are rounded to 7 digits:
        assert float(error) == pytest.approx(abs(float(actual) - float(ref)), abs=1e-6)
    assert float(outputs["vulkan"][1]) == pytest.approx(reference, rel=1e-5)
    assert float(outputs["webgpu"][1]) == pytest.approx(without_weight, rel=1e-5)
    assert abs(float(outputs["webgpu"][1]) - reference) > float(outputs["webgpu"][4])
    inputs = {attrs["data-slot"]: cells for attrs, cells in _rows(page, "element-inputs")}
    assert float(inputs["x"][2]) == pytest.approx(x64, rel=1e-6)
    assert float(inputs["weight"][2]) == pytest.approx(w64, rel=1e-6)


def test_nondeterminism_comes_from_the_bundles_repeatability_record(planted_run: Path) -> None:
    finding = _first_finding(planted_run)
    doc = json.loads((planted_run / finding["bundle"] / "bundle.json").read_text())
    assert doc["repeatability"]["class"] == "deterministic"
    assert len(doc["repeatability"]["hashes"]["webgpu"]) == 3  # --repeats 3 by default
    page = (planted_run / "failures" / f"{finding['id']}.html").read_text()
    section = _text(re.search(r'<p[^>]* id="repeatability">(.*?)</p>', page, re.S).group(1))
    assert section.startswith("Class: deterministic") and "bundle" in section
    assert "Not recorded" not in page


def test_replay_commands_are_relative_and_work_from_a_copied_run_folder(
    planted_run: Path, tmp_path: Path
) -> None:
    published = tmp_path / "published" / "run-42"  # CI publishes the folder elsewhere
    shutil.copytree(planted_run, published)
    finding = _first_finding(published)
    page = (published / "failures" / f"{finding['id']}.html").read_text()
    assert "from the run folder" in page
    commands = _text(re.search(r'<pre id="replay-commands">(.*?)</pre>', page, re.S).group(1))
    readme = (published / finding["bundle"] / "README.md").read_text()
    assert "from the run folder" in readme.lower()
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    for text in (commands, block):
        lines = text.strip().splitlines()
        assert lines[0] == "cd <run folder>"
        assert f"parity replay {finding['bundle']}" in lines
        for line in lines[1:]:
            assert not any(Path(word).is_absolute() for word in shlex.split(line)), line
            assert str(planted_run) not in line
    replay = next(line for line in commands.splitlines() if line.startswith("parity replay"))
    proc = parity(*shlex.split(replay)[1:], "--json", cwd=published)
    assert proc.returncode == 1, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "still_failing"
    assert outcome["python_mismatch"] == []  # found and replayed with the same code


def test_replay_warns_when_the_python_code_differs(planted_run: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(planted_run / _first_finding(planted_run)["bundle"], bundle)
    doc = json.loads((bundle / "bundle.json").read_text())
    python = doc["sources"]["python"]
    assert "harness/check/oracles/numerics.py" in python and "webgpu_backend/__init__.py" in python
    assert set(doc["sources"]["shaders"]) == {"wgsl", "glsl"}
    python["harness/check/oracles/numerics.py"] = "0" * 16  # found with another oracle
    python["vulkan_ref/gone.py"] = "1" * 16  # and a file that no longer exists
    (bundle / "bundle.json").write_text(json.dumps(doc))
    proc = parity("replay", bundle, "--json")
    assert proc.returncode == 1, proc.stderr  # the shader bug still reproduces
    assert json.loads(proc.stdout)["python_mismatch"] == [
        "harness/check/oracles/numerics.py",
        "vulkan_ref/gone.py",
    ]
    warning = next(line for line in proc.stderr.splitlines() if "Python code differs" in line)
    assert "2 file(s)" in warning and "harness/check/oracles/numerics.py" in warning


def _readme_commands(bundle: Path) -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (bundle / "README.md").read_text(), re.S)
    assert block, bundle / "README.md"
    lines = block.group(1).strip().splitlines()
    assert lines[0] == "cd <run folder>"
    return lines[1:]


def _page_commands(page: Path, pre_id: str) -> list[str]:
    pre = re.search(rf'<pre id="{pre_id}">(.*?)</pre>', page.read_text(), re.S)
    assert pre, f"no pre#{pre_id} in {page}"
    lines = _text(pre.group(1)).splitlines()
    assert lines[0] == "cd <run folder>"
    return lines[1:]


def test_the_printed_commands_reproduce_the_run(
    planted_run: Path, planted_wgsl: Path, tmp_path: Path
) -> None:
    # The run folder and the --wgsl-dir folder it was given, copied side by side as they were.
    assert planted_wgsl.parent == planted_run.parent
    run = tmp_path / planted_run.name
    shutil.copytree(planted_run, run)
    shutil.copytree(planted_wgsl, tmp_path / planted_wgsl.name)
    finding = _only_finding(run)
    bundle = run / finding["bundle"]
    commands = _readme_commands(bundle)
    # bundle.json, the README and the failure page print the same commands.
    assert json.loads((bundle / "bundle.json").read_text())["commands"] == commands
    assert _page_commands(run / "failures" / f"{finding['id']}.html", "replay-commands") == (
        commands
    )
    replay, worktree, regress, rerun = commands
    assert regress == f"parity regress {finding['bundle']}"  # (writes into the repo: not run)
    # The bundle replays as still failing with its own shaders, and as fixed with the
    # working tree's, which do not carry the planted bug.
    for command, status in ((replay, "still_failing"), (worktree, "fixed")):
        proc = parity(*shlex.split(command)[1:], "--json", cwd=run)
        assert proc.returncode == (1 if status == "still_failing" else 0), proc.stderr
        assert json.loads(proc.stdout)["status"] == status, command
    # The index's command is the run's own (one family, so the finding's rerun too); run
    # from the run folder, it finds the same minimal case and bug.
    (whole,) = _page_commands(run / "index.html", "run-commands")
    assert whole == rerun
    words = shlex.split(whole)
    assert words[words.index("--wgsl-dir") + 1] == f"../{planted_wgsl.name}"
    assert "--no-database" in words and "--no-expectations" in words
    proc = parity(*words[1:], "--jobs", "1", cwd=run, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    again = read_summary(run / "rerun")["findings"]
    assert [(f["case_id"], f["bug"]) for f in again] == [(finding["case_id"], finding["bug"])]

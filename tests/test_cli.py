"""The `parity` command end to end, in subprocesses, on both backends.

A bug is planted by shader text substitution (a WGSL rms_norm that drops its weight, in a
copy of wgsl/ passed with --wgsl-dir). The tests show that a run finds it and writes a
bundle that replays on a fresh clone of the repository; that a nightly run sharded two
ways and merged finds exactly what the unsharded run finds; that a killed run leaves a
readable report; and that known divergences do not fail a run while stale ones are flagged.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import (
    PLANTED_RUN_ARGS,
    REPO,
    claimed_bundles,
    divergent_cases,
    divergent_records,
    parity,
    popen_parity,
    read_records,
    read_summary,
    wait_for,
)

pytestmark = pytest.mark.gpu


def _findings(summary: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    return sorted((f["chunk"], f["case_id"], (f["bug"],)) for f in summary["findings"])


def test_planted_bug_is_found_recorded_and_bundled(planted_run: Path) -> None:
    summary = read_summary(planted_run)
    assert summary["exit_status"] == 1
    assert summary["status"] == "complete"
    # Both chunks shrink to the same case: one finding (tests/test_triage.py).
    assert summary["totals"]["findings"] == 1
    for finding in summary["findings"]:
        assert finding["shrunk"] and not finding["provisional"]
        assert finding["bug"].startswith("rms_norm|numeric|webgpu|")
        bundle = planted_run / finding["bundle"]
        doc = json.loads((bundle / "bundle.json").read_text())
        assert doc["format"] == "parity-bundle/2"
        assert doc["run"]["seed"] == 7 and doc["run"]["profile"] == "nightly"
        # The bundle keeps the shaders the run used: the planted WGSL, the repo's GLSL.
        assert "weight[i] * 0.0" in (bundle / "shaders/wgsl/rms_norm.wgsl").read_text()
        assert set(doc["shaders"]) >= {
            "wgsl/rms_norm.wgsl",
            "wgsl/rms_norm_vec4.wgsl",
            "glsl/rms_norm.comp",
            "glsl/include/tensor_meta.glslh",
        }
        for path in ("case/case.json", "case/graph.json", "case/steps.npz", "arrays.npz"):
            assert (bundle / path).is_file(), path
    records = read_records(planted_run)
    cases = [r for r in records if r["record"] == "case"]
    chunks = [r for r in records if r["record"] == "chunk"]
    assert [c["chunk"] for c in chunks] == ["rms_norm/0", "rms_norm/1"]
    assert all(c["status"] == "complete" for c in chunks)
    divergent = [c for c in cases if c["divergences"]]
    assert divergent and all(c["timeline"] for c in divergent)
    assert all(d["blame"] == "webgpu" for c in divergent for d in c["divergences"])
    # Adapters with driver versions for both backends, and the versions of the stack.
    for backend in ("webgpu", "vulkan"):
        assert summary["adapters"][backend]["adapter"]
        assert summary["adapters"][backend]["driver"]
    assert set(summary["versions"]) >= {"python", "wgpu", "vulkan", "hypothesis", "numpy"}
    assert summary["per_op"]["rms_norm"]["divergences"]["numeric"] >= 1
    assert summary["coverage"]["rms_norm"]["webgpu"]["variants"]
    junit = (planted_run / "junit.xml").read_text()
    assert 'failures="2"' in junit and "rms_norm|numeric|webgpu" in junit
    stderr = (planted_run.parent / "planted-run.stderr").read_text()
    assert "cases" in stderr and "left" in stderr  # progress lines


def test_sharded_nightly_run_merges_to_the_same_findings(
    planted_run: Path, planted_wgsl: Path, tmp_path: Path
) -> None:
    shards = []
    for index in (1, 2):
        out = tmp_path / f"shard{index}"
        proc = parity(
            "run", *PLANTED_RUN_ARGS, "--wgsl-dir", planted_wgsl, "--shard", f"{index}/2",
            "--out", out,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        shards.append(out)
    merged = tmp_path / "published" / "merged"  # not beside the shards
    proc = parity("merge", "--out", merged, *shards)
    assert proc.returncode == 1, proc.stderr
    whole, combined = read_summary(planted_run), read_summary(merged)
    assert _findings(combined) == _findings(whole)
    assert combined["totals"] == whole["totals"]

    # Case by case: every chunk searched exactly the same examples.
    def case_ids(records: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(r["chunk"], r["case_id"]) for r in records if r["record"] == "case"}

    assert case_ids(read_records(merged)) == case_ids(read_records(planted_run))
    assert combined["shards"] == ["1/2", "2/2"]
    for f in combined["findings"]:
        assert (merged / f["bundle"] / "bundle.json").is_file()
    # Both shards bundled the same finding: the merge keeps one copy.
    assert len(list((merged / "bundles").iterdir())) == len(combined["findings"])
    assert (merged / "index.html").is_file()
    # The merged bundles' commands are rendered for the merged folder, like its pages'.
    for f in combined["findings"]:
        readme = (merged / f["bundle"] / "README.md").read_text()
        block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1).strip().splitlines()
        page = (merged / "failures" / f"{f['id']}.html").read_text()
        pre = re.search(r'<pre id="replay-commands">(.*?)</pre>', page, re.S).group(1)
        assert html.unescape(pre).strip().splitlines() == block
        assert f"--wgsl-dir {os.path.relpath(planted_wgsl, merged)} " in block[-1]
    # A shard of another plan does not merge.
    other = tmp_path / "other"
    proc = parity(
        "run", "--families", "add", "--max-examples", "1", "--no-database",
        "--no-expectations", "--jobs", "1", "--out", other,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = parity("merge", "--out", tmp_path / "bad-merge", shards[0], other)
    assert proc.returncode == 2
    assert "another plan" in proc.stderr and "Traceback" not in proc.stderr


def test_bundle_replays_on_a_fresh_clone(planted_run: Path, tmp_path: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    # Set up as scripts/setup.sh would: the clone shares this checkout's virtual environment
    # and its npm package for WGSL reflection (.cache/node, which every WebGPU kernel needs).
    (clone / ".cache").mkdir()
    (clone / ".cache" / "node").symlink_to(REPO / ".cache" / "node")
    bundle = planted_run / read_summary(planted_run)["findings"][0]["bundle"]
    env = {"PYTHONPATH": str(clone), "VULKAN_PARITY_CACHE": str(tmp_path / "spirv")}
    where = subprocess.run(
        [sys.executable, "-c", "import harness; print(harness.__file__)"],
        cwd=clone,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(clone)  # the clone's code runs
    assert not (clone / "wgsl/rms_norm.wgsl").read_text().count("weight[i] * 0.0")

    proc = parity("replay", bundle, "--json", cwd=clone, env=env)
    assert proc.returncode == 1, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "still_failing"
    assert outcome["expected"].startswith("rms_norm|numeric|webgpu|")
    assert outcome["expected"] in outcome["found"]
    assert "still failing" in proc.stderr

    proc = parity("replay", bundle, "--shaders", "worktree", cwd=clone, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "fixed" in proc.stderr and "wgsl/rms_norm" in proc.stderr


def test_hypothesis_notes_about_itself_stay_off_a_run_s_console(
    planted_wgsl: Path, tmp_path: Path
) -> None:
    """Issue 18: Hypothesis's "PLEASE REPORT THIS" notice on slow shrinking reached the
    console. With its five-minute limit set to zero, every shrink of the planted bug is
    "very slow": the run says so in one progress line, and the finding is still made."""
    code = (
        "import sys\n"
        "import hypothesis.internal.conjecture.engine as engine\n"
        "engine.MAX_SHRINKING_SECONDS = 0\n"
        "from harness.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "run", "--families", "rms_norm", "--max-examples", "10",
         "--no-database", "--no-expectations", "--jobs", "1", "--repeats", "0",
         "--wgsl-dir", str(planted_wgsl), "--out", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "PLEASE REPORT" not in proc.stdout + proc.stderr
    assert "parity: rms_norm/0: Hypothesis stopped shrinking" in proc.stderr
    assert read_summary(tmp_path / "run")["findings"]


def test_regress_turns_a_bundle_into_a_regression_test(planted_run: Path, tmp_path: Path) -> None:
    bundle = planted_run / read_summary(planted_run)["findings"][0]["bundle"]
    dest = tmp_path / "regressions"
    proc = parity("regress", bundle, "--dest", dest, "--name", "rms-norm-weight")
    assert proc.returncode == 0, proc.stderr
    folder = dest / "rms-norm-weight"
    meta = json.loads((folder / "regression.json").read_text())
    assert meta["expect"] == "fixed"
    assert meta["bug"].startswith("rms_norm|numeric|webgpu|")
    assert (folder / "case/case.json").is_file() and not (folder / "arrays.npz").exists()
    assert "passes" in proc.stderr  # the working tree's rms_norm applies the weight
    proc = parity("regress", bundle, "--dest", dest, "--name", "rms-norm-weight")
    assert proc.returncode == 2 and "--force" in proc.stderr


def test_killed_run_leaves_a_readable_report(planted_wgsl: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = popen_parity(
        "run", "--families", "rms_norm", "--max-examples", "200", "--no-expectations",
        "--no-database", "--wgsl-dir", planted_wgsl, "--jobs", "1", "--out", out,
        stderr_path=tmp_path / "stderr",
    )  # fmt: skip
    try:
        # Killed while Hypothesis is still at work on the bug (five divergent records, the
        # shrinker's re-runs of a case among them), so that its finding is provisional.
        wait_for(lambda: divergent_records(out) >= 5, 120, "5 divergent case records")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "summary.json").exists()  # it never got to finalize
    report = parity("report", out)
    assert report.returncode == 1, report.stderr  # the findings so far: divergences
    summary = read_summary(out)
    assert summary["status"] == "killed" and not summary["complete"]
    # Every divergent case recorded before the kill is counted, each once.
    assert summary["totals"]["unexpected_cases"] == divergent_cases(out) >= 1
    provisional = [f for f in summary["findings"] if f["provisional"]]
    # Each bug's first divergent record names its provisional bundle before the bundle is
    # written, so the kill may have cut the last one short: the report then drops the claim.
    written, pending = claimed_bundles(out)
    assert {f["bundle"] for f in provisional if f["bundle"]} == set(written) != set()
    assert len([f for f in provisional if not f["bundle"]]) <= len(pending) <= 1
    for f in provisional:
        if not f["bundle"]:
            continue
        page = (out / "failures" / f"{f['id']}.html").read_text()
        assert "provisional" in page and "rms_norm" in page and "Step 0" in page
        # Bundled as soon as it was seen, while Hypothesis went on shrinking: replayable.
        doc = json.loads((out / f["bundle"] / "bundle.json").read_text())
        assert doc["provisional"] and not doc["shrunk"] and doc["case_id"] == f["case_id"]
        assert (out / f["bundle"] / "case" / "steps.npz").is_file()
    index = (out / "index.html").read_text()
    assert "did not finish" in index and "killed" in index
    junit = (out / "junit.xml").read_text()
    assert "no result: the run stopped" in junit


def test_sigterm_stops_after_the_current_case_and_reports(
    planted_wgsl: Path, tmp_path: Path
) -> None:
    out = tmp_path / "terminated"
    proc = popen_parity(
        "run", "--families", "rms_norm", "--max-examples", "200", "--no-expectations",
        "--no-database", "--wgsl-dir", planted_wgsl, "--jobs", "1", "--out", out,
        "--chunk-examples", "200",  # one chunk: the signal stops its search
        stderr_path=tmp_path / "stderr",
    )  # fmt: skip
    try:
        wait_for(lambda: divergent_cases(out) >= 3, 120, "3 divergent case records")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130  # interrupted, by SIGINT or SIGTERM alike
    summary = read_summary(out)
    assert summary["status"] == "interrupted"
    assert summary["exit_status"] == summary["runs"][0]["exit_status"] == 130
    assert summary["findings"], "the smallest failing case so far is kept"
    finding = summary["findings"][0]
    assert not finding["shrunk"] and finding["bundle"]
    assert (out / finding["bundle"] / "bundle.json").is_file()
    assert "SIGTERM" in (tmp_path / "stderr").read_text()


def test_known_divergences_pass_and_stale_ones_are_flagged(
    planted_wgsl: Path, tmp_path: Path
) -> None:
    expectations = tmp_path / "expectations.toml"
    expectations.write_text(
        """
[[known]]
id = "rms-norm-weight"
op = "rms_norm"
kind = "numeric"
blame = "webgpu"
device = "*"
driver = "*"
reason = "planted: the WGSL rms_norm drops its weight"
link = "https://example.invalid/issues/1"

[[known]]
id = "rms-norm-dispatch"
op = "rms_norm"
kind = "dispatch"
device = "*"
driver = "*"
reason = "fixed long ago <b>bold</b>"
link = "https://example.invalid/issues/2"

[[known]]
id = "other-gpu"
op = "rms_norm"
device = "No Such GPU*"
driver = "*"
reason = "only on a device this run does not have"
link = "https://example.invalid/issues/3"
"""
    )
    out = tmp_path / "known"
    proc = parity(
        "run", "--families", "rms_norm", "--max-examples", "3", "--no-database", "--expectations",
        expectations, "--wgsl-dir", planted_wgsl, "--jobs", "1", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = read_summary(out)
    status = {e["id"]: e["status"] for e in summary["expectations"]}
    assert status == {
        "rms-norm-weight": "matched",
        "rms-norm-dispatch": "stale",
        "other-gpu": "not_applicable",
    }
    assert summary["totals"]["known_cases"] == summary["totals"]["divergent_cases"] > 0
    assert summary["totals"]["unexpected_cases"] == 0
    index = (out / "index.html").read_text()
    assert "stale: no longer reproduces" in index
    assert "&lt;b&gt;bold&lt;/b&gt;" in index and "<b>bold</b>" not in index


def _main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """Run the command in this process (fast: no interpreter start-up, no imports)."""
    from harness.run.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse: --help and bad arguments
        status = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def test_list_shows_families_ops_variants_and_adapters(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _main(capsys, "list")
    assert status == 0
    for text in ("rms_norm", "rms_norm_vec4", "dag", "nightly", "webgpu", "vulkan", "driver"):
        assert text in out
    assert "rms_norm  (runs family rms_norm; float32, float16)" in out
    assert "dag  (float16 in 25% of cases)" in out and "| f16 yes" in out
    assert "roles:  out, x, weight, scales, bias\n      values: m, n, k, k_words," in out
    status, out, _ = _main(capsys, "list", "--json")
    doc = json.loads(out)
    assert doc["adapters"]["vulkan"]["available"] and doc["adapters"]["webgpu"]["available"]
    assert "rms_norm_vec4" in doc["ops"]["rms_norm"]
    gemv = doc["ops"]["linear_q4gsw"]["q4gsw_gemv"]  # each slot's interface, with its docs
    assert gemv["tensors"] == ["out", "x", "weight", "scales", "bias"]
    assert gemv["values"]["k_words"].startswith("K in u32 words")
    # Half precision: which ops take f16, which families draw it, which devices offer it.
    assert doc["op_dtypes"]["rms_norm"] == ["float32", "float16"]
    assert doc["op_dtypes"]["fused_sdpa"] == ["float32"]
    assert "float16" in doc["families"]["dag"]["dtypes"]
    assert "rms_norm_f16" in doc["ops"]["rms_norm"]
    assert all(doc["adapters"][b]["shader_f16"] for b in ("webgpu", "vulkan"))


def test_list_names_the_vulkan_version_the_runtime_uses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 21, item 5: `parity list` printed the device's newest version ("Vulkan
    1.3.230" on lavapipe) as if the runtime used it; it requests Vulkan 1.1, and so takes
    SPIR-V 1.0 to 1.3."""
    status, out, _ = _main(capsys, "list")
    assert status == 0
    (line,) = [x for x in out.splitlines() if x.startswith("  vulkan ")]
    assert "| Vulkan 1.1 (device supports 1." in line, line
    assert "; SPIR-V 1.0 to 1.3) via vulkan (python)" in line, line


def test_usage_errors_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (("run", "--families", "nope"), "unknown families ['nope']"),
        (("run", "--ops", "rms_nrom"), "unknown op 'rms_nrom'"),
        (("run", "--shard", "3/2"), "1 <= I <= N"),
        (("run", "--shard", "x"), "I/N"),
        (("run", "--wgsl-dir", tmp_path / "none"), "no such folder"),
        (("run", "--expectations", tmp_path / "none.toml"), "no such expectations file"),
        (("replay", tmp_path / "no-bundle"), "no such bundle folder"),
        (("report", tmp_path / "no-run"), "no such run folder"),
        (("merge", "--out", tmp_path / "m", tmp_path / "no-run"), "no such run folder"),
        (("run", "--max-examples", "0"), "positive integer"),
        (("run", "--profile", "weekly"), "invalid choice: 'weekly'"),
    ]
    for args, message in cases:
        status, _, err = _main(capsys, *args)
        assert status == 2, (args, err)
        assert message in err, (args, err)
        assert "Traceback" not in err, args
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "not-a-run" / "notes.txt").write_text("mine")
    status, _, err = _main(
        capsys, "run", "--families", "add", "--jobs", "1", "--out", tmp_path / "not-a-run"
    )
    assert status == 2 and "refusing to write" in err
    assert (tmp_path / "not-a-run" / "notes.txt").exists()


def test_corrupt_records_are_reported_not_crashed_on(planted_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(planted_run, copy)
    lines = (copy / "cases.jsonl").read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]  # a damaged line in the middle
    (copy / "cases.jsonl").write_text("\n".join(lines) + "\n")
    proc = parity("report", copy)
    assert proc.returncode == 2
    assert f"{copy / 'cases.jsonl'}:3: corrupt record" in proc.stderr
    assert "Traceback" not in proc.stderr
    # A last line cut short (a kill mid-write) is skipped, not an error.
    lines = (planted_run / "cases.jsonl").read_text().splitlines()
    (copy / "cases.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:20])
    assert parity("report", copy).returncode == 1


def test_help_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ((), ("run",), ("report",), ("merge",), ("replay",), ("regress",), ("list",)):
        status, out, _ = _main(capsys, *command, "--help")
        assert status == 0, command
        assert "usage: parity" in out
    _, run_help, _ = _main(capsys, "run", "--help")
    for option in ("--time-budget", "--shard", "--max-examples", "--profile", "(default"):
        assert option in run_help


def test_time_budget_stops_generation_and_skips_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "timed"
    status, _, err = _main(
        capsys, "run", "--families", "rms_norm,add", "--max-examples", "400",
        "--chunk-examples", "100", "--time-budget", "1", "--no-database", "--no-expectations",
        "--jobs", "1", "--out", out,
    )  # fmt: skip
    assert status == 0, err
    summary = read_summary(out)
    assert summary["status"] == "time_budget" and not summary["complete"]
    chunks = [r for r in read_records(out) if r["record"] == "chunk"]
    assert len(chunks) == 8  # every chunk of the plan is accounted for
    statuses = "".join(c["status"][0] for c in chunks)  # complete, time_budget, skipped
    assert re.fullmatch(r"c*t?s+", statuses), statuses
    assert all(c["reason"] == "time_budget" for c in chunks if c["status"] == "skipped")
    # Far fewer than the plan's 800 cases on any machine (an H200 runs about 50 a second).
    assert summary["totals"]["cases"] < 800
    assert "time budget 1 s" in err


def test_a_rounding_difference_far_under_budget_is_found_by_the_exact_tier(
    tmp_path: Path,
) -> None:
    # rms_norm_vec4's lanes sum each texel's squares in reverse order: as accurate, rounded
    # otherwise, so every output stays far within budget; only the exact tier can see it.
    wgsl = tmp_path / "wgsl"
    shutil.copytree(REPO / "wgsl", wgsl)
    kernel = wgsl / "rms_norm_vec4.wgsl"
    kernel.write_text(
        kernel.read_text().replace(
            "acc += dot(v, v);", "acc += v.w * v.w + v.z * v.z + v.y * v.y + v.x * v.x;"
        )
    )
    args = ("run", "--profile", "pr", "--families", "rms_norm", "--max-examples", "10")
    args += ("--no-database", "--no-expectations", "--jobs", "1", "--shrink-budget", "5")
    proc = parity(*args, "--wgsl-dir", wgsl, "--out", tmp_path / "run")
    assert proc.returncode == 1, proc.stderr
    summary = read_summary(tmp_path / "run")
    kinds = {kind for st in summary["per_op"].values() for kind in st["divergences"]}
    assert kinds == {"bit_mismatch"}, summary["per_op"]
    assert summary["per_op"]["rms_norm"]["exact"]["webgpu~vulkan"][1] == 0
    assert summary["totals"]["max_utilization"] < 0.5

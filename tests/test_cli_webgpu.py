"""`parity run --webgpu`: several WebGPU implementations, each its own backend in lockstep with
Vulkan (docs/design.md §2.1), end to end in subprocesses.

A pr run over a family on all three implementations is clean (f16 cases sit out on Chrome,
whose SwiftShader offers no shader-f16); a build error only Dawn's Tint raises is found,
blamed on webgpu-dawn alone, bundled with the backends it was found on, and replays there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli_support import REPO, parity, read_summary

pytestmark = pytest.mark.gpu

ADD = "        out[i] = a[i] + b[i];\n"


@pytest.mark.browser
def test_a_pr_run_on_every_implementation_is_clean(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = parity(
        "run", "--profile", "pr", "--families", "rms_norm", "--max-examples", "8",
        "--webgpu", "wgpu,dawn,chrome", "--jobs", "1", "--no-database", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "backends webgpu,webgpu-dawn,webgpu-chrome,vulkan" in proc.stderr
    summary = read_summary(out)
    run = json.loads((out / "run.json").read_text())
    assert list(run["adapters"]) == ["webgpu", "webgpu-dawn", "webgpu-chrome", "vulkan"]
    assert run["adapters"]["webgpu-chrome"]["shader_f16"] is False
    # Coverage per backend (f16 cells are not required of a run with Chrome).
    assert set(summary["coverage"]["rms_norm"]) == set(run["adapters"])


def test_unknown_implementation_is_a_usage_error(tmp_path: Path) -> None:
    proc = parity("run", "--webgpu", "wgpu,naga", "--out", tmp_path / "run")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("parity run: --webgpu wgpu,naga: unknown WebGPU implementation 'naga'")
    )


def test_a_dawn_only_build_error_is_found_bundled_and_replayed_on_dawn(tmp_path: Path) -> None:
    planted = tmp_path / "wgsl"
    shutil.copytree(REPO / "wgsl", planted)
    kernel = planted / "binary_flat.wgsl"
    source = kernel.read_text()
    assert ADD in source
    kernel.write_text(
        source.replace(ADD, "        out[i] = max(a[i] + b[i], LOWEST);\n").replace(
            "override wg_size", "const LOWEST: f32 = -3.4028235e38;\noverride wg_size"
        )
    )
    out = tmp_path / "run"
    proc = parity(
        "run", "--profile", "pr", "--families", "add", "--max-examples", "4",
        "--chunk-examples", "4", "--webgpu", "wgpu,dawn", "--wgsl-dir", planted, "--jobs", "1",
        "--no-database", "--no-expectations", "--no-cold-rerun", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    summary = read_summary(out)
    bugs = {f["bug"] for f in summary["findings"]}
    assert bugs == {"add|build_error|webgpu-dawn"}
    finding = summary["findings"][0]
    bundle = out / finding["bundle"]
    doc = json.loads((bundle / "bundle.json").read_text())
    assert doc["run"]["backends"] == ["webgpu", "webgpu-dawn", "vulkan"]
    page = (out / "failures" / f"{finding['id']}.html").read_text()
    assert "only webgpu-dawn shows it" in page
    # The re-run command names the implementations; the replay runs on them and still fails.
    assert any("--webgpu wgpu,dawn" in command for command in doc["commands"])
    replay = parity("replay", bundle, "--json")
    assert replay.returncode == 1, replay.stderr
    assert json.loads(replay.stdout)["found"] == ["add|build_error|webgpu-dawn"]


def test_a_kernel_manifest_runs_on_every_webgpu_implementation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = parity(
        "run", "--profile", "pr", "--families", "rms_norm,rope_hf", "--max-examples", "6",
        "--kernels", REPO / "examples" / "foreign-kernels", "--webgpu", "wgpu,dawn",
        "--jobs", "1", "--no-database", "--no-cold-rerun", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(out)
    # The manifest's [webgpu.<slot>] kernels ran on both WebGPU implementations, each held
    # to the contract model's prediction of its own dispatches.
    rms = summary["coverage"]["rms_norm"]
    for backend in ("webgpu", "webgpu-dawn"):
        assert set(rms[backend]["foreign"]) & {"rms_norm", "rms_norm_vec4"}, backend
    assert "rms_norm.wgsl (manifest" in summary["kernel_sources"]["rms_norm"]["webgpu-dawn"]

"""Findings that only one WebGPU implementation shows (docs/design.md §2.1), planted in a copy
of a project kernel and run in lockstep with the other implementations and Vulkan:

- a literal Tint refuses and Naga accepts (`-3.4028235e38`, above FLT_MAX before rounding:
  what six attention kernels had) is a `build_error` blamed on Dawn alone;
- a kernel that prefetches one tile past its binding and masks the value with a zero weight
  relies on an out-of-bounds read returning zero, which native implementations give (Vulkan's
  robust buffer access drops the access) and Chrome does not: its robustness clamps the read
  into the binding, whose last word is a guard (a NaN), so only Chrome computes NaN.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graph_format import Runtime
from harness.api import single_op_graph
from harness.check.backends import open_runtime
from harness.check.divergence import Kind, blame_meaning
from harness.check.lockstep import LockstepRunner
from harness.gen.case import Case

pytestmark = pytest.mark.gpu

WGSL = Path(__file__).resolve().parents[2] / "wgsl"
ADD = "        out[i] = a[i] + b[i];\n"


@pytest.fixture
def planted_dir(tmp_path: Path) -> Iterator[Path]:
    """A copy of wgsl/ to plant into."""
    copy = tmp_path / "wgsl"
    shutil.copytree(WGSL, copy)
    yield copy


def _plant(folder: Path, stem: str, old: str, new: str) -> None:
    path = folder / f"{stem}.wgsl"
    source = path.read_text()
    assert old in source, f"{stem}.wgsl does not contain {old!r}"
    path.write_text(source.replace(old, new))


def _add_case() -> Case:
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((3, 40)).astype(np.float32) for _ in range(2))
    return single_op_graph("add", {"a": a, "b": b})


def _runtimes(names: list[str], planted: Path) -> list[Runtime]:
    return [open_runtime(n, planted if n.startswith("webgpu") else None) for n in names]


def test_a_literal_tint_refuses_is_a_build_error_of_dawn_alone(
    webgpu: Runtime, dawn: Runtime, planted_dir: Path
) -> None:
    _plant(
        planted_dir,
        "binary_flat",
        ADD,
        "        out[i] = max(a[i] + b[i], LOWEST);\n",
    )
    _plant(
        planted_dir,
        "binary_flat",
        "override wg_size",
        "const LOWEST: f32 = -3.4028235e38;\noverride wg_size",
    )
    names = ["webgpu", "webgpu-dawn", "vulkan"]
    result = LockstepRunner(_runtimes(names, planted_dir)).run(_add_case())
    [finding] = result.divergences
    assert (finding.kind, finding.blame) == (Kind.BUILD_ERROR, "webgpu-dawn")
    # Tint's own words, with the line and column of the literal in the planted file; the
    # other implementation (Naga) and Vulkan loaded the graph.
    assert finding.details.kernel == "add_flat" and finding.op == "add"
    assert f"{planted_dir / 'binary_flat.wgsl'}:15:21 error: value " in finding.details.compiler
    assert "cannot be represented as 'f32'" in finding.details.compiler
    assert "only webgpu-dawn shows it" in blame_meaning(finding.blame, names)


@pytest.mark.browser
def test_a_read_past_the_binding_masked_by_zero_is_nan_on_chrome_alone(
    webgpu: Runtime, chrome: Runtime, planted_dir: Path
) -> None:
    _plant(
        planted_dir,
        "binary_flat",
        ADD,
        "        // The next tile, prefetched; its weight is zero past the live size.\n"
        "        let ahead = a[i + arrayLength(&a)];\n"
        "        out[i] = a[i] + b[i] + ahead * f32(i >= params.numel);\n",
    )
    names = ["webgpu", "webgpu-chrome", "vulkan"]
    result = LockstepRunner(_runtimes(names, planted_dir)).run(_add_case())
    assert result.divergences, "the planted read past the binding went unnoticed"
    assert {d.blame for d in result.divergences} == {"webgpu-chrome"}
    assert Kind.NAN_INF in {d.kind for d in result.divergences}
    # Natively the masked read is zero: wgpu computes the sum exactly as Vulkan.
    webgpu_step = result.steps[0].backends["webgpu"]
    assert all(u <= 1.0 for u in webgpu_step.utilization.values())

"""Shared by the reflection tests: where the shipped and the test kernels are, and upstream
ExecuTorch's generated WGSL read from the local mirror (never copied into this repository)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "reflection"
SHIPPED_WGSL = sorted(
    [*(ROOT / "wgsl").glob("*.wgsl"), *(ROOT / "benchmarks" / "shaders").rglob("*.wgsl")]
)
TEST_WGSL = sorted(DATA.glob("*.wgsl"))

# The public ExecuTorch repository, as the manual check pins it.
UPSTREAM_MIRROR = Path("/work/.mirror/pytorch+executorch/repo")
UPSTREAM_COMMIT = "cff6f4dd32e630945b7188512c1f2b4f102b05ad"
UPSTREAM_OPS = "backends/webgpu/runtime/ops"
# A C++ raw string literal: R"delimiter( ... )delimiter".
_RAW_STRING = re.compile(r'R"([^()\\\s]{0,16})\((.*?)\)\1"', re.S)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(UPSTREAM_MIRROR), *args], capture_output=True, text=True, check=True
    ).stdout


def upstream_wgsl() -> dict[str, str]:
    """The WGSL inside every `*_wgsl.h` header of upstream's WebGPU ops, by header path
    (`rms_norm/rms_norm_wgsl.h`); skips the test when the mirror is absent (as in CI)."""
    if not (UPSTREAM_MIRROR / "HEAD").exists():
        pytest.skip(f"no ExecuTorch mirror at {UPSTREAM_MIRROR} (only on development machines)")
    try:
        _git("cat-file", "-e", f"{UPSTREAM_COMMIT}^{{commit}}")
    except subprocess.CalledProcessError:
        pytest.skip(f"the ExecuTorch mirror lacks commit {UPSTREAM_COMMIT}")
    paths = _git("ls-tree", "-r", "--name-only", UPSTREAM_COMMIT, UPSTREAM_OPS).split()
    sources = {}
    for path in paths:
        if not path.endswith("_wgsl.h"):
            continue
        header = _git("show", f"{UPSTREAM_COMMIT}:{path}")
        bodies = [body for _, body in _RAW_STRING.findall(header)]
        assert len(bodies) == 1, f"{path}: expected one raw string, found {len(bodies)}"
        sources[path.removeprefix(UPSTREAM_OPS + "/")] = bodies[0]
    return sources

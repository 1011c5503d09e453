"""Shared by the reflection tests: where the shipped and the test kernels are, and the
upstream ExecuTorch kernels vendored under tests/data/executorch (README.md there: origin,
licence, why these)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "reflection"
SHIPPED_WGSL = sorted(
    [*(ROOT / "wgsl").glob("*.wgsl"), *(ROOT / "benchmarks" / "shaders").rglob("*.wgsl")]
)
TEST_WGSL = sorted(DATA.glob("*.wgsl"))

# ExecuTorch's generated WGSL headers, copied from pytorch/executorch at this commit.
UPSTREAM = Path(__file__).parent / "data" / "executorch"
UPSTREAM_COMMIT = "cff6f4dd32e630945b7188512c1f2b4f102b05ad"
# A C++ raw string literal: R"delimiter( ... )delimiter".
_RAW_STRING = re.compile(r'R"([^()\\\s]{0,16})\((.*?)\)\1"', re.S)


def upstream_wgsl() -> dict[str, str]:
    """The WGSL inside each vendored `*_wgsl.h` header, by its path under upstream's
    `backends/webgpu/runtime/ops` (`rms_norm/rms_norm_wgsl.h`)."""
    sources = {}
    for path in sorted((UPSTREAM / "ops").rglob("*_wgsl.h")):
        bodies = [body for _, body in _RAW_STRING.findall(path.read_text())]
        assert len(bodies) == 1, f"{path}: expected one raw string, found {len(bodies)}"
        sources[path.relative_to(UPSTREAM / "ops").as_posix()] = bodies[0]
    assert sources, f"no upstream kernels under {UPSTREAM}"
    return sources

"""The statistical tier (docs/oracles.md, "The statistical tier") on a foreign kernel.

A foreign kernel declares no bit identity, so between backends only the budgets judge it. A
single weight code off by one in examples/foreign-kernels' WGSL GEMV is an error of one term
in a K-term dot product: at K = 4096 and 8192 it stays within the rigorous budget, whose
gamma_K grows like K, and breaks the statistical bound, which grows like sqrt(K) (at
K = 2048 the rigorous budget of these data already catches it). It is a
`numeric_suspect` blamed on WebGPU, with both utilizations; the kernel without the bug passes
both tiers at the same sizes; a pr run over the family finds it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.check.divergence import Kind
from tests.cli_support import parity
from tests.diff.test_foreign_kernels import EXAMPLES, _linear, foreign_runner, plant

pytestmark = pytest.mark.gpu

GEMV = "wgsl/q4_gemv.wgsl"
# The row's last weight code, read one too high: one term of the dot product off by its
# scale times the activation (`condition` narrows it to rows of at least so many words).
CODE = "            let q = f32(i32((packed >> (4u * j)) & 0xFu) - 8);\n"


def plant_wrong_code(folder: Path, condition: str = "true") -> None:
    """The GEMV's last weight code of each row read one too high where `condition` holds."""
    planted = CODE + (
        f"            let off = select(0.0, 1.0, w == words - 1u && j == 7u && {condition});\n"
    )
    plant(folder, GEMV, CODE, planted)
    plant(folder, GEMV, "dot = fma(q, vec_in", "dot = fma(q + off, vec_in")


@pytest.fixture()
def planted_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "foreign-kernels"
    shutil.copytree(EXAMPLES, folder)
    return folder


@pytest.mark.parametrize("k", [4096, 8192])
def test_one_wrong_weight_code_at_long_k_is_a_numeric_suspect(planted_folder: Path, k: int) -> None:
    case = _linear(k, 32, [1, 1])  # one activation row: the GEMV route
    clean = foreign_runner(EXAMPLES).run(case)
    assert not clean.divergences, [str(d) for d in clean.divergences]
    assert clean.max_statistical_utilization < 1.0

    plant_wrong_code(planted_folder)
    found = foreign_runner(planted_folder).run(case).divergences
    assert found, f"one wrong weight code at K = {k} went unnoticed"
    assert {(d.kind, d.blame) for d in found} == {(Kind.NUMERIC_SUSPECT, "webgpu")}, [
        str(d) for d in found
    ]
    for d in found:
        # Within the rigorous budget (the hard tier alone let it pass), over the bound.
        assert d.details.hard_utilization < 1.0 < d.details.statistical_utilization


@pytest.mark.slow  # a whole `parity run --profile pr` of the family: about a minute
def test_a_pr_run_finds_a_wrong_code_on_the_long_path_as_a_suspect(
    planted_folder: Path, tmp_path: Path
) -> None:
    # Only rows of 4096 codes or more (512 words) carry the bug: some long cases of the family.
    plant_wrong_code(planted_folder, "words >= 512u")
    out = tmp_path / "run"
    proc = parity(
        "run",
        "--profile",
        "pr",
        "--families",
        "linear_q4gsw",
        "--kernels",
        str(planted_folder),
        "--out",
        str(out),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    bugs = {b["bug"] for b in json.loads((out / "summary.json").read_text())["bugs"]}
    # The statistical tier's finding alone: without it the run exits 0.
    assert bugs == {"linear_q4gsw|numeric_suspect|webgpu"}, bugs

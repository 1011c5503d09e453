"""`parity run --kernels` over a kernel that computes in f16 (issue 21 item 4), end to end:
the failure page of a bug planted in it says which kernel computes in f16, the arithmetic
its op's budget was derived for."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.cli_support import parity

SILU_F16 = Path(__file__).resolve().parent / "data" / "kernels" / "silu_f16"
PLANT = ("1.0h + exp(-v));", "1.0h + exp(-v * 0.99h));")


@pytest.fixture(scope="module")
def planted_f16_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A silu family run whose WebGPU f16 silu (declared `precision = "f16"`) takes exp of
    0.99 x."""
    root = tmp_path_factory.mktemp("f16-run")
    folder = root / "kernels"
    shutil.copytree(SILU_F16, folder)
    source = (folder / "silu.wgsl").read_text()
    assert source.count(PLANT[0]) == 1, "the planted substitution no longer applies"
    (folder / "silu.wgsl").write_text(source.replace(*PLANT))
    out = root / "out"
    done = parity(
        "run",
        "--kernels",
        folder,
        "--families",
        "silu",
        "--max-examples",
        "4",
        "--jobs",
        "1",
        "--repeats",
        "0",
        "--shrink-budget",
        "10",
        "--no-expectations",
        "--out",
        out,
        timeout=900,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    return out


def test_the_failure_page_says_the_kernel_computes_in_f16(planted_f16_run: Path) -> None:
    summary = json.loads((planted_f16_run / "summary.json").read_text())
    (finding,) = [f for f in summary["findings"] if f["bug"].startswith("silu@float16|numeric")]
    assert finding["bug"].split("|")[2] == "webgpu"
    page = (planted_f16_run / "failures" / f"{finding['id']}.html").read_text()
    table = re.search(r'<table id="kernels-ran">(.*?)</table>', page, re.S)
    assert table, page
    (row,) = re.findall(r'<tr data-slot="silu_f16">(.*?)</tr>', table.group(1), re.S)
    webgpu, vulkan = re.findall(r"<td>(.*?)</td>", row, re.S)[1:]
    for cell in (webgpu, vulkan):
        assert "computes in f16: budget for f16 arithmetic" in cell, cell


def test_check_kernels_says_which_kernels_compute_in_f16() -> None:
    done = parity("check-kernels", SILU_F16, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.endswith("(computes in f16)")]
    assert [line.split(": ")[-2] for line in lines] == ["webgpu.silu_f16", "vulkan.silu_f16"]

"""Several WebGPU implementations as backends: their names, the blame of a finding several
of them show, expectations that name them, and `--webgpu` (docs/design.md §2.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graph_format import runtime_api, webgpu_implementation, webgpu_runtime_name
from harness.check.backends import ALL_BACKENDS, lockstep_backends, shader_language
from harness.check.divergence import (
    MODEL,
    BugKey,
    Divergence,
    Kind,
    blame_from,
    blame_meaning,
    blame_of,
)
from harness.check.oracles import merge_blame
from harness.run.expectations import ExpectationsError, load_expectations

THREE = ("webgpu", "webgpu-dawn", "vulkan")


def test_runtime_names_round_trip() -> None:
    for implementation in ("wgpu", "dawn", "chrome"):
        name = webgpu_runtime_name(implementation)
        assert runtime_api(name) == "webgpu" and shader_language(name) == "wgsl"
        assert webgpu_implementation(name) == implementation
    assert webgpu_runtime_name("wgpu") == "webgpu"  # the name records had before
    assert runtime_api("vulkan") == "vulkan" and webgpu_implementation("vulkan") == ""
    for bad in ("metal", "webgpu-naga", "webgpu-", "vulkan-x"):
        with pytest.raises(ValueError, match="unknown backend"):
            runtime_api(bad)


def test_lockstep_backends_put_vulkan_last_and_refuse_nonsense() -> None:
    assert lockstep_backends() == ("webgpu", "vulkan")
    assert lockstep_backends(["dawn", "wgpu"]) == ("webgpu-dawn", "webgpu", "vulkan")
    with pytest.raises(ValueError, match="unknown WebGPU implementation 'naga'"):
        lockstep_backends(["naga"])
    with pytest.raises(ValueError, match="dawn named twice"):
        lockstep_backends(["dawn", "dawn"])
    with pytest.raises(ValueError, match="no WebGPU implementation"):
        lockstep_backends([])


def test_blame_names_one_several_or_every_backend() -> None:
    assert blame_of(["webgpu-dawn"], THREE) == "webgpu-dawn"
    # Every WebGPU implementation but not Vulkan: named, in the run's order.
    assert blame_of(["webgpu-dawn", "webgpu"], THREE) == "webgpu,webgpu-dawn"
    # Every backend: "both", however many ran, so the key survives a third backend.
    assert blame_of(THREE, THREE) == "both" == blame_of(["webgpu", "vulkan"], THREE[::2])
    wrong = {"webgpu": True, "webgpu-dawn": True, "vulkan": False}
    assert blame_from(wrong) == "webgpu,webgpu-dawn"
    assert blame_from(dict.fromkeys(THREE, True), agree_with_each_other=True) == MODEL
    assert BugKey.parse("sdpa|numeric|webgpu,webgpu-dawn|x10").blame == "webgpu,webgpu-dawn"


def test_merged_numeric_findings_blame_the_backends_that_show_them() -> None:
    def numeric(blame: str) -> Divergence:
        return Divergence(0, Kind.NUMERIC, blame, "over", op="n", tensor="y", factor=3.0)

    merged = merge_blame([numeric("webgpu"), numeric("webgpu-dawn")], THREE)
    assert [d.blame for d in merged] == ["webgpu,webgpu-dawn"]
    merged = merge_blame([numeric(b) for b in THREE], THREE)
    assert [d.blame for d in merged] == ["both"]


def test_blame_meaning_tells_one_implementation_from_the_wgsl() -> None:
    only = blame_meaning("webgpu-dawn", THREE)
    assert "only webgpu-dawn" in only and "(webgpu)" in only and "portability" in only
    assert "every WebGPU implementation" in blame_meaning("webgpu,webgpu-dawn", THREE)
    # One WebGPU implementation in the run: nothing to tell apart.
    assert blame_meaning("webgpu", ("webgpu", "vulkan")) == ""
    assert blame_meaning("vulkan", THREE) == ""


@pytest.mark.parametrize(
    ("blame", "ok"),
    [
        ("webgpu-dawn", True),
        ("webgpu-chrome", True),
        ("webgpu,webgpu-dawn", True),
        ("both", True),
        ("dawn", False),
        ("webgpu,webgpu", False),
        ("webgpu-naga", False),
    ],
)
def test_expectations_name_implementations(tmp_path: Path, blame: str, ok: bool) -> None:
    path = tmp_path / "expectations.toml"
    path.write_text(
        f'[[known]]\nid = "x"\ndevice = "*"\ndriver = "*"\nreason = "r"\nlink = "l"\n'
        f'op = "rms_norm"\nkind = "build_error"\nblame = "{blame}"\n'
    )
    if ok:
        load_expectations(path)
    else:
        with pytest.raises(ExpectationsError, match="blame must be one of"):
            load_expectations(path)
    assert set(ALL_BACKENDS) == {"webgpu", "webgpu-dawn", "webgpu-chrome", "vulkan"}

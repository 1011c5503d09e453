"""The dispatch oracle per backend (docs/design.md §9, docs/oracles.md): a slot a manifest
replaces on one backend has its dispatch log checked against the manifest's dispatch
expressions evaluated on the harness's own slot values, not against the project's kernel
design; a kernel's `requires` are expected refusals of that backend only.

- Foreign kernels on both backends (tests/data/kernels/foreign: an RMS norm with its own
  workgroup size, an HF rope split into a q and a k dispatch), or on one backend only, run
  every generated rms_norm and HF-rope case without a divergence.
- A backend that dispatches other counts than its manifest declares, or ignores a declared
  `requires`, is a finding blamed on that backend.
- A `requires` over live values refuses the step on that backend only; one over values
  fixed at load refuses the graph there, and the other backend still runs the case.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_format import Runtime
from graph_format.kernels import KernelManifest, load_manifest
from harness import single_op_graph
from harness.check.divergence import Kind
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.gen.case import Case
from harness.ops.rms_norm import rms_norm_cases
from harness.ops.rotary import rope_hf_cases
from vulkan_ref import VulkanRuntime
from webgpu_backend import WebGPURuntime
from webgpu_backend.graph import Dispatch

pytestmark = pytest.mark.gpu

FOREIGN = Path(__file__).resolve().parents[1] / "data" / "kernels" / "foreign"
FIXTURES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def _webgpu(manifest: KernelManifest | None) -> WebGPURuntime:
    return WebGPURuntime(manifest=manifest)


def _vulkan(vulkan: Runtime, manifest: KernelManifest | None) -> VulkanRuntime:
    assert isinstance(vulkan, VulkanRuntime)
    return VulkanRuntime(vulkan.context, manifest=manifest)


def _only(backend: str, folder: Path) -> KernelManifest:
    """The foreign manifest with only `backend`'s sections."""
    text = (FOREIGN / "kernels.toml").read_text()
    head, *sections = text.split("\n[")
    kept = [s for s in sections if s.startswith((f"{backend}.", f"[{backend}."))]
    for name in ("rms.wgsl", "rope.wgsl", "rms_norm_foreign.comp", "rope_hf_split.comp"):
        shutil.copy(FOREIGN / name, folder / name)
    (folder / "kernels.toml").write_text("\n[".join([head, *kept]))
    return load_manifest(folder)


@pytest.fixture(scope="module")
def foreign(vulkan: Runtime) -> LockstepRunner:
    manifest = load_manifest(FOREIGN)
    return LockstepRunner([_webgpu(manifest), _vulkan(vulkan, manifest)])


@pytest.fixture(scope="module", params=["webgpu", "vulkan"])
def one_side(
    request: pytest.FixtureRequest, vulkan: Runtime, tmp_path_factory: pytest.TempPathFactory
) -> LockstepRunner:
    """Foreign kernels on one backend, the project's on the other."""
    manifest = _only(request.param, tmp_path_factory.mktemp(request.param))
    assert {backend for backend, _ in manifest.entries} == {request.param}
    webgpu = _webgpu(manifest if request.param == "webgpu" else None)
    return LockstepRunner(
        [webgpu, _vulkan(vulkan, manifest if request.param == "vulkan" else None)]
    )


def _clean(result: CaseResult) -> None:
    assert result.ok, [d.message for d in result.divergences]


@FIXTURES
@given(case=st.one_of(rms_norm_cases(), rope_hf_cases()))
def test_foreign_kernels_on_both_backends_agree(foreign: LockstepRunner, case: Case) -> None:
    _clean(foreign.run(case))


@FIXTURES
@given(case=st.one_of(rms_norm_cases(), rope_hf_cases()))
def test_a_slot_replaced_on_one_backend_only_is_not_a_divergence(
    one_side: LockstepRunner, case: Case
) -> None:
    _clean(one_side.run(case))


def _rope_case() -> Case:
    rng = np.random.default_rng(3)
    xq, xk = rng.standard_normal((1, 3, 4, 8)), rng.standard_normal((1, 3, 2, 8))
    table = rng.standard_normal((6, 8))
    return single_op_graph(
        "apply_rotary_emb_hf",
        {
            "xq": xq.astype(np.float32),
            "xk": xk.astype(np.float32),
            "cos": table.astype(np.float32),
            "sin": table.astype(np.float32),
            "start_pos": 1,
        },
        constants={"cos", "sin"},
        name="rope",
    )


@pytest.fixture
def counts_off_by_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A WebGPU bug (planted here): a manifest kernel's every count one too many."""
    original = Dispatch.set

    def planted(self: Dispatch, step: object, slot: str | None = None) -> None:
        original(self, step, slot)  # type: ignore[arg-type]
        self.counts = tuple(c + 1 if isinstance(c, int) and c else c for c in self.counts)

    monkeypatch.setattr(Dispatch, "set", planted)
    yield


def test_counts_other_than_the_manifest_declares_are_blamed_on_that_backend(
    foreign: LockstepRunner, counts_off_by_one: None
) -> None:
    result = foreign.run(_rope_case())
    dispatch = [d for d in result.divergences if d.kind == Kind.DISPATCH]
    assert dispatch and {d.blame for d in dispatch} == {"webgpu"}, result.divergences
    assert dispatch[0].details.expected_by_manifest


def _with_requires(folder: Path, requirement: str) -> KernelManifest:
    """The foreign WebGPU RMS norm with a declared limit."""
    manifest = _only("webgpu", folder)
    text = manifest.path.read_text().replace(
        "fold = true\n", f"fold = true\nrequires = [{requirement!r}]\n"
    )
    manifest.path.write_text(text)
    return load_manifest(folder)


def _rms_steps(rows: list[int], width: int = 30) -> Case:
    rng = np.random.default_rng(5)
    case = single_op_graph(
        "rms_norm",
        {
            "x": rng.standard_normal((rows[0], width)).astype(np.float32),
            "weight": rng.standard_normal(width).astype(np.float32),
            "eps": 1e-5,
        },
        constants={"weight"},
        max_dims={"x": [max(rows), width]},
        name="norm",
    )
    case.steps = [{"x": rng.standard_normal((r, width)).astype(np.float32)} for r in rows]
    return case


def test_a_live_requirement_refuses_the_step_on_that_backend_only(
    vulkan: Runtime, tmp_path: Path
) -> None:
    manifest = _with_requires(tmp_path, "num_rows <= 2")
    runner = LockstepRunner([_webgpu(manifest), _vulkan(vulkan, None)])
    result = runner.run(_rms_steps([2, 4, 1]))
    _clean(result)
    refused = result.steps[1].backends["webgpu"].error
    assert refused is not None and "requires num_rows <= 2" in refused
    assert result.steps[1].backends["vulkan"].error is None


def test_a_backend_ignoring_a_requirement_is_blamed(
    vulkan: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _with_requires(tmp_path, "num_rows <= 2")
    runner = LockstepRunner([_webgpu(manifest), _vulkan(vulkan, None)])
    from webgpu_backend import graph as webgpu_graph

    original = webgpu_graph.WebGPUGraph._build_slot

    def planted(self: webgpu_graph.WebGPUGraph, *args: object, **kwargs: object) -> object:
        kernel = original(self, *args, **kwargs)  # type: ignore[arg-type]
        kernel.live_requires = ()  # a backend that forgets the declared limit
        return kernel

    monkeypatch.setattr(webgpu_graph.WebGPUGraph, "_build_slot", planted)
    result = runner.run(_rms_steps([2, 4]))
    asymmetry = [d for d in result.divergences if d.kind == Kind.ERROR_ASYMMETRY]
    assert asymmetry and asymmetry[0].blame == "webgpu", result.divergences
    assert "kernel_requires" in asymmetry[0].message


def test_a_requirement_fixed_at_load_refuses_the_graph_there_and_the_other_runs(
    vulkan: Runtime, tmp_path: Path
) -> None:
    manifest = _with_requires(tmp_path, "row_width % 7 == 0")
    runner = LockstepRunner([_webgpu(manifest), _vulkan(vulkan, None)])
    result = runner.run(_rms_steps([2, 3]))
    _clean(result)
    assert [list(s.backends) for s in result.steps] == [["vulkan"], ["vulkan"]]

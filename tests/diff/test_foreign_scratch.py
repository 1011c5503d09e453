"""Scratch sized by the manifest: a split-K decode pair from elsewhere with its own layout.

tests/data/kernels/split_k/ holds a split-K decode attention pair (WGSL and GLSL) that keeps
its partials at a FIXED 128 chunks of 32 cache rows per head, where the project's kernels
keep them dense over ceil(context / 64) splits. Its manifest sizes the op's `part_o` and
`part_ml` for that layout (`scratch.<role>`, bytes over the values fixed at load); the split
kernel writes them, the reduce kernel reads them, one buffer per role per op, with the
runtimes' guard after it.

- The pair runs clean in lockstep on both backends over prefill and decode steps.
- Sized too small in one backend's manifest (64 chunks a head for kernels that keep 128), the
  pair writes past the buffers into their guards: a canary_write blamed on that backend.
- A wrong stride planted in one backend's reduce kernel is found and blamed on it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from graph_format import Runtime
from graph_format.kernels import load_manifest
from harness import GraphBuilder
from harness.check.divergence import Kind
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.gen.case import Case
from vulkan_ref import VulkanRuntime
from webgpu_backend import WebGPURuntime

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "kernels"
SPLIT_K = DATA / "split_k"
ATTENTION3 = DATA / "attention3"
SLOTS = ("sdpa_fd_split", "sdpa_fd_reduce")


def runner_for(folder: Path) -> LockstepRunner:
    """Both runtimes running the folder's kernels for the slots it replaces."""
    manifest = load_manifest(folder)
    runtimes: list[Runtime] = [WebGPURuntime(manifest=manifest), VulkanRuntime(manifest=manifest)]
    return LockstepRunner(runtimes)


def decode_case() -> Case:
    """sdpa_with_kv_cache, 4 query heads over 2 kv heads, D = 16, a 100-row cache: prefills
    of 3 and 2 tokens, decode steps whose context spans 1, 2 and 4 chunks of 32 rows (the
    project's route would use 1 or 2 splits of 64)."""
    rng = np.random.default_rng(11)
    heads, kv_heads, dim, rows = 4, 2, 16, 100
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 3, heads, dim])
    k = b.input("k", "float32", [1, 3, kv_heads, dim])
    v = b.input("v", "float32", [1, 3, kv_heads, dim])
    pos = b.symint_input("input_pos")
    caches = {n: b.state(n, "float32", [1, rows, kv_heads, dim]) for n in ("k_cache", "v_cache")}
    b.output(b.op("sdpa_with_kv_cache", name="attn", q=q, k=k, v=v, input_pos=pos, **caches))

    def step(seq: int, at: int) -> dict[str, np.ndarray | int]:
        def f32(*shape: int) -> np.ndarray:
            return rng.standard_normal(shape).astype(np.float32)

        return {
            "q": f32(1, seq, heads, dim),
            "k": f32(1, seq, kv_heads, dim),
            "v": f32(1, seq, kv_heads, dim),
            "input_pos": at,
        }

    steps = [step(3, 0), step(1, 3), step(1, 40), step(2, 50), step(1, 99)]
    return Case(b.build(), steps, name="sdpa split-K decode")


def _slots_run(result: CaseResult) -> dict[str, set[str]]:
    ran: dict[str, set[str]] = {}
    for step in result.steps:
        for backend, seen in step.backends.items():
            ran.setdefault(backend, set()).update(d["kernel"] for d in seen.dispatches if d["ran"])
    return ran


def test_the_pair_runs_clean_with_its_own_partials_layout() -> None:
    result = runner_for(SPLIT_K).run(decode_case())
    assert result.divergences == [], [str(d) for d in result.divergences]
    ran = _slots_run(result)
    assert set(ran) == {"webgpu", "vulkan"}
    assert all(set(SLOTS) <= slots for slots in ran.values()), ran


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "split_k"
    shutil.copytree(SPLIT_K, folder)
    return folder


@pytest.mark.parametrize("backend", ["webgpu", "vulkan"])
def test_partials_sized_too_small_are_overrun_into_the_guard(tmp_path: Path, backend: str) -> None:
    """One backend's manifest sizes the partials for 64 chunks a head while its kernels keep
    128: head 2 of 4 writes just past both buffers, into their guards (a canary_write of the
    op's scratch), head 3 past the guards; found and blamed on that backend only."""
    folder = _copy(tmp_path)
    manifest = folder / "kernels.toml"
    text = manifest.read_text()
    section = text.index(f"[{backend}.sdpa_fd_split]")
    end = text.index("\n[", section)
    planted = text[section:end].replace("q_heads * 128 *", "q_heads * 64 *")
    assert planted.count("q_heads * 64 *") == 2
    manifest.write_text(text[:section] + planted + text[end:])
    result = runner_for(folder).run(decode_case())
    found = result.divergences
    assert {d.blame for d in found} == {backend}, [str(d) for d in found]
    canaries = [d for d in found if d.kind == Kind.CANARY_WRITE]
    assert canaries, [str(d) for d in found]
    assert all("attn.part_" in d.message for d in canaries), [d.message for d in canaries]


@pytest.mark.parametrize(
    ("file", "backend"), [("flash_reduce.wgsl", "webgpu"), ("flash_reduce.comp", "vulkan")]
)
def test_a_wrong_stride_in_the_reduce_is_found_and_blamed(
    tmp_path: Path, file: str, backend: str
) -> None:
    """The reduce reads the partials at the project's stride of 64 splits a head, not 128:
    every head but the first folds another head's chunks."""
    folder = _copy(tmp_path)
    path = folder / file
    source = path.read_text()
    old = "MAX_CHUNKS: u32 = 128u;" if file.endswith(".wgsl") else "MAX_CHUNKS = 128;"
    assert source.count(old) == 1
    path.write_text(source.replace(old, old.replace("128", "64")))
    result = runner_for(folder).run(decode_case())
    found = result.divergences
    assert found, f"the wrong stride in {file} went unnoticed"
    assert {d.blame for d in found} == {backend}, [str(d) for d in found]
    assert {d.kind for d in found} <= {Kind.NUMERIC, Kind.NAN_INF}, [str(d) for d in found]


# --- an out-of-place softmax: a three-kernel attention with its own scores layout -----------


def test_an_out_of_place_three_kernel_attention_runs_clean() -> None:
    """tests/data/kernels/attention3 on both backends: scores in rows of cache_rows columns,
    masked columns written by its qk, an out-of-place softmax into `probs` (a role its
    manifest adds to the op), read by its av."""
    result = runner_for(ATTENTION3).run(decode_case())
    assert result.divergences == [], [str(d) for d in result.divergences]
    ran = _slots_run(result)
    assert set(ran) == {"webgpu", "vulkan"}
    assert all({"sdpa_qk", "sdpa_softmax", "sdpa_av"} <= slots for slots in ran.values()), ran


@pytest.mark.parametrize(
    ("file", "old", "backend"),
    [
        ("qk.wgsl", "        sc[at] = -1.0e30;\n", "webgpu"),
        ("qk.comp", "    sc[at] = -1.0e30;\n", "vulkan"),
    ],
)
def test_a_qk_leaving_the_masked_columns_it_declares_written_is_found(
    tmp_path: Path, file: str, old: str, backend: str
) -> None:
    """The qk says masked_columns = "written" but skips them: the softmax over whole rows
    reads what an earlier step (or nothing) left there, found and blamed on its backend."""
    folder = tmp_path / "attention3"
    shutil.copytree(ATTENTION3, folder)
    path = folder / file
    source = path.read_text()
    assert source.count(old) == 1
    path.write_text(source.replace(old, ""))
    result = runner_for(folder).run(decode_case())
    found = result.divergences
    assert found, "the unwritten masked columns went unnoticed"
    assert {d.blame for d in found} == {backend}, [str(d) for d in found]
    assert {d.kind for d in found} <= {Kind.NUMERIC, Kind.NAN_INF}, [str(d) for d in found]


def test_a_precision_whose_qk_skips_the_masked_columns_is_refused_by_that_backend(
    tmp_path: Path,
) -> None:
    """The manifest replaces the f32 qk only: a float16 graph would run the project's
    sdpa_qk_f16, which leaves the masked columns unwritten, before the softmax that reads
    them. Each backend refuses the graph at load, naming that; the harness finds the same on
    its own, so the refusals are expected; with WebGPU's section alone, Vulkan runs it."""
    case = decode_case()
    b = GraphBuilder()
    q = b.input("q", "float16", [1, 3, 4, 16])
    k = b.input("k", "float16", [1, 3, 2, 16])
    v = b.input("v", "float16", [1, 3, 2, 16])
    pos = b.symint_input("input_pos")
    caches = {n: b.state(n, "float16", [1, 100, 2, 16]) for n in ("k_cache", "v_cache")}
    b.output(b.op("sdpa_with_kv_cache", name="attn", q=q, k=k, v=v, input_pos=pos, **caches))
    steps = [
        {n: x.astype(np.float16) if isinstance(x, np.ndarray) else x for n, x in step.items()}
        for step in case.steps
    ]
    graph = b.build()
    result = runner_for(ATTENTION3).run(Case(graph, steps, name="sdpa f16"))
    assert result.divergences == [], [str(d) for d in result.divergences]
    assert result.steps == []  # both refused the graph at load, as expected
    folder = tmp_path / "attention3"
    shutil.copytree(ATTENTION3, folder)
    manifest = folder / "kernels.toml"
    text = manifest.read_text()
    manifest.write_text(text[: text.index("# The same three kernels in GLSL")])
    result = runner_for(folder).run(Case(graph, steps, name="sdpa f16"))
    assert result.divergences == [], [str(d) for d in result.divergences]
    assert set(_slots_run(result)) == {"vulkan"}


def test_a_size_reading_a_live_value_is_a_build_error_naming_its_key(tmp_path: Path) -> None:
    """A buffer is allocated at load: a size over `context` fails on each backend whose
    manifest says it, a finding naming the manifest key, the values fixed at load (the fix),
    and no compiler (none ran)."""
    folder = _copy(tmp_path)
    manifest = folder / "kernels.toml"
    text = manifest.read_text()
    assert text.count('"q_heads * 128 * head_dim * 4"') == 2
    manifest.write_text(text.replace('"q_heads * 128 * head_dim * 4"', '"q_heads * context * 64"'))
    result = runner_for(folder).run(decode_case())
    found = result.divergences
    assert {d.blame for d in found} == {"webgpu", "vulkan"}, [str(d) for d in found]
    for d in found:
        assert d.kind == Kind.BUILD_ERROR
        key = f"{d.blame}.sdpa_fd_split.scratch.part_o"
        assert f"{key}: 'q_heads * context * 64' reads context" in d.message, d.message
        assert "size it by values fixed at load (cache_rows, head_dim," in d.message, d.message
        assert "its manifest fails on this step's values" in d.message, d.message
        assert "compiler" not in d.message, d.message

"""WebGPU binds every kernel through one path (webgpu_backend/binding.py): the project's own
kernels and kernels from a manifest alike are reflected, bound by role, their params packed
from their own struct layout by name, their overrides, workgroup size and counts taken from
their declarations (docs/bring-your-own-kernels.md).

- The project's kernels, bound through reflection: a fixed case per op runs every slot on
  the WebGPU runtime alone under every oracle of the lockstep runner (contract dims and
  dispatch log, canaries, the float64 reference within budget), and the params bytes of a
  few ops equal what the former hand-written `struct` formats packed.
- Foreign kernels through a manifest: an RMS norm in a foreign style (other binding names and
  order, a params block with other names, order and units, its own workgroup size) and an HF
  rope split into one dispatch for q and one for k give the reference's values; a replaced
  slot the op skips is skipped whatever its formula says.
- Every load error: its class and message (file, field or binding, what the kernel declares
  and what the op offers); `requires` at load and per step; `fold = false` past the limit.
- Adapters: a derived value and a scratch buffer; refused without `allow_adapters`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from graph_format import (
    SLOTS,
    InputError,
    KernelBuildError,
    Runtime,
)
from graph_format.kernels import (
    MANIFEST_NAME,
    KernelManifestError,
    KernelRequirementError,
    load_manifest,
)
from harness import GraphBuilder, op_budget, single_op_graph
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import assert_parity
from harness.gen.case import Case
from harness.gen.half import half_precision
from harness.model import model_dtypes, q4
from webgpu_backend import WebGPURuntime
from webgpu_backend.graph import WebGPUGraph

pytestmark = pytest.mark.gpu

RNG_SEED = 12


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# --- the project's kernels, bound through reflection -----------------------------------------


def _linear_case(accumulate_bits: int | None = None) -> Case:
    """GEMM at M = 6, then the GEMV at M = 1 (K % 8 == 0, group 32), with a bias (and the
    graph's accumulate_bits, for the f16 twin's f16-accumulating GEMM)."""
    rng = np.random.default_rng(RNG_SEED)
    n, k, group = 13, 64, 32
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group)
    b = GraphBuilder()
    x = b.input("x", "float32", [6, k])
    out = b.op(
        "linear_q4gsw",
        name="lin",
        out_dims=[6, n],
        x=x,
        weight=b.constant("weight", packed),
        scales=b.constant("scales", scales),
        group_size=b.int(group, "group_size"),
        bias=b.constant("bias", _f32(rng, n)),
        accumulate_bits=None if accumulate_bits is None else b.int(accumulate_bits),
    )
    b.output(out)
    return Case(b.build(), [{"x": _f32(rng, 6, k)}, {"x": _f32(rng, 1, k)}], name="linear")


def _embedding_case(is_linear_weight: int | None = None) -> Case:
    rng = np.random.default_rng(RNG_SEED)
    vocab, dim, group = 11, 64, 32
    weight = rng.integers(0, 256, (vocab, dim // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 1.0, (vocab, dim // group)).astype(np.float32)
    ids = rng.integers(0, vocab, (2, 3)).astype(np.int32)
    args = {"weight": weight, "scales": scales, "group_size": group, "indices": ids}
    if is_linear_weight is not None:
        args["is_linear_weight"] = is_linear_weight
    return single_op_graph("embedding_q4gsw", args, constants={"weight", "scales"})


def _update_cache_case() -> Case:
    """Two rows written at position 2 of a 6-row cache, then one at 0; the cache the output."""
    rng = np.random.default_rng(RNG_SEED)
    b = GraphBuilder()
    value = b.input("value", "float32", [1, 2, 3, 4])
    cache = b.state("cache", "float32", [1, 6, 3, 4])
    b.op("update_cache", name="update", value=value, cache=cache, input_pos=b.symint_input("pos"))
    b.output(cache)
    steps: list[dict[str, np.ndarray | int]] = [
        {"value": _f32(rng, 1, 2, 3, 4), "pos": 2},
        {"value": _f32(rng, 1, 1, 3, 4), "pos": 0},
    ]
    return Case(b.build(), steps, name="update_cache")


def _sdpa_case() -> Case:
    """A prefill of 3 tokens, then a decode step at position 3 (the split-K route)."""
    rng = np.random.default_rng(RNG_SEED)
    heads, kv_heads, dim, rows = 4, 2, 16, 8
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 3, heads, dim])
    k = b.input("k", "float32", [1, 3, kv_heads, dim])
    v = b.input("v", "float32", [1, 3, kv_heads, dim])
    pos = b.symint_input("input_pos")
    caches = {n: b.state(n, "float32", [1, rows, kv_heads, dim]) for n in ("k_cache", "v_cache")}
    b.output(b.op("sdpa_with_kv_cache", name="attn", q=q, k=k, v=v, input_pos=pos, **caches))

    def step(seq: int, at: int) -> dict[str, np.ndarray | int]:
        return {
            "q": _f32(rng, 1, seq, heads, dim),
            "k": _f32(rng, 1, seq, kv_heads, dim),
            "v": _f32(rng, 1, seq, kv_heads, dim),
            "input_pos": at,
        }

    return Case(b.build(), [step(3, 0), step(1, 3)], name="sdpa")


def _rope_case(op: str) -> Case:
    rng = np.random.default_rng(RNG_SEED)
    xq, xk = _f32(rng, 1, 3, 4, 8), _f32(rng, 1, 3, 2, 8)
    if op == "apply_rotary_emb":
        tables = {"freqs_cos": _f32(rng, 3, 4), "freqs_sin": _f32(rng, 3, 4)}
        return single_op_graph(op, {"xq": xq, "xk": xk, **tables})
    tables = {"cos": _f32(rng, 7, 8), "sin": _f32(rng, 7, 8)}
    return single_op_graph(
        op, {"xq": xq, "xk": xk, **tables, "start_pos": 2}, constants={"cos", "sin"}
    )


def _project_cases() -> dict[str, Case]:
    rng = np.random.default_rng(RNG_SEED)
    binary = {"a": _f32(rng, 2, 3, 4), "b": _f32(rng, 2, 3, 4)}
    add = single_op_graph("add", binary, max_dims={"b": [2, 3, 4]})
    add.steps.append({"a": _f32(rng, 2, 3, 4), "b": _f32(rng, 1, 3, 4)})  # broadcast
    mul = single_op_graph("mul", binary, max_dims={"b": [2, 3, 4]})
    mul.steps.append({"a": _f32(rng, 2, 3, 4), "b": _f32(rng, 2, 1, 4)})
    rms = {"x": _f32(rng, 3, 64), "weight": _f32(rng, 64), "eps": 1e-6}
    rms_odd = {"x": _f32(rng, 3, 30), "weight": _f32(rng, 30), "eps": 1e-5}
    return {
        "rms_norm_vec4": single_op_graph("rms_norm", rms, constants={"weight"}),
        "rms_norm": single_op_graph("rms_norm", rms_odd, constants={"weight"}),
        "add": add,
        "mul": mul,
        "sigmoid": single_op_graph("sigmoid", {"x": _f32(rng, 5, 7)}),
        "silu": single_op_graph("silu", {"x": _f32(rng, 5, 7)}),
        "silu_mul": single_op_graph("silu_mul", {"gate": _f32(rng, 70), "up": _f32(rng, 70)}),
        "view_copy": single_op_graph("view_copy", {"x": _f32(rng, 4, 6), "sizes": [3, 8]}),
        "linear_q4gsw": _linear_case(),
        "embedding_q4gsw": _embedding_case(),
        "apply_rotary_emb": _rope_case("apply_rotary_emb"),
        "apply_rotary_emb_hf": _rope_case("apply_rotary_emb_hf"),
        "apply_rotary_emb_interleaved": single_op_graph(
            "apply_rotary_emb_interleaved", {"x": _f32(rng, 2, 3, 8), "freqs_cis": _f32(rng, 3, 8)}
        ),
        "apply_rotary_emb_pos": single_op_graph(
            "apply_rotary_emb_pos",
            {
                "xq": _f32(rng, 1, 3, 4, 8),
                "xk": _f32(rng, 1, 3, 2, 8),
                "positions": np.arange(40, 43, dtype=np.int32),
                "theta_base": 10000.0,
                "freq_scale": 0.5,
                "freq_factors": np.linspace(1.0, 4.0, 4).astype(np.float32),
            },
            constants={"freq_factors"},
        ),
        "sdpa_with_kv_cache": _sdpa_case(),
        "add_scalar": single_op_graph("add", {"a": _f32(rng, 2, 5), "scalar": 0.1}),
        "mul_scalar": single_op_graph("mul", {"a": _f32(rng, 3, 1), "scalar": -3.0}),
        "embedding_q4gsw_even_high": _embedding_case(is_linear_weight=0),
        "update_cache": _update_cache_case(),
        "fused_sdpa": single_op_graph(
            "fused_sdpa",
            {"q": _f32(rng, 1, 2, 3, 8), "k": _f32(rng, 1, 2, 5, 8), "v": _f32(rng, 1, 2, 5, 8)},
        ),
        "fused_sdpa_masked": single_op_graph(
            "fused_sdpa",
            {
                "q": _f32(rng, 2, 2, 3, 8),
                "k": _f32(rng, 2, 2, 5, 8),
                "v": _f32(rng, 2, 2, 5, 8),
                "attn_mask": _f32(rng, 2, 1, 1, 5),
            },
        ),
        **_half_precision_cases(rng),
    }


def _half_precision_cases(rng: np.random.Generator) -> dict[str, Case]:
    """One case per op with f16 kernels, on float16 data: every `_f16` slot runs."""

    def f16(*shape: int) -> np.ndarray:
        return _f32(rng, *shape).astype(np.float16)

    add = single_op_graph("add", {"a": f16(2, 3, 4), "b": f16(2, 3, 4)})
    add.steps.append({"a": f16(2, 3, 4), "b": f16(1, 3, 4)})  # broadcast
    mul = single_op_graph("mul", {"a": f16(2, 3, 4), "b": f16(2, 3, 4)})
    mul.steps.append({"a": f16(2, 3, 4), "b": f16(2, 1, 4)})
    rms = {"x": f16(3, 30), "weight": f16(30), "eps": 1e-5}
    return {
        "rms_norm_f16": single_op_graph("rms_norm", rms, constants={"weight"}),
        "add_f16": add,
        "mul_f16": mul,
        "sigmoid_f16": single_op_graph("sigmoid", {"x": f16(5, 7)}),
        "silu_f16": single_op_graph("silu", {"x": f16(5, 7)}),
        "silu_mul_f16": single_op_graph("silu_mul", {"gate": f16(70), "up": f16(70)}),
        "view_copy_f16": single_op_graph("view_copy", {"x": f16(4, 6), "sizes": [3, 8]}),
    }


def _takes_f16(case: Case) -> bool:
    """Whether every op of the case has f16 kernels (fused_sdpa and update_cache do not)."""
    return all("float16" in model_dtypes(node.op) for node in case.graph.ops)


def _project_cases_f16() -> dict[str, Case]:
    """Each case's half-precision twin (q4 scales and the rope's frequency factors kept
    float32), and the f16-accumulating GEMM: every `_f16` slot runs."""
    cases = {
        f"{name}_f16": half_precision(case, keep={"scales", "freq_factors"})
        for name, case in _project_cases().items()
        if _takes_f16(case)
    }
    cases["linear_q4gsw_f16acc"] = half_precision(_linear_case(16), keep={"scales"})
    return cases


def test_the_project_kernels_bound_by_reflection_pass_every_oracle(webgpu: Runtime) -> None:
    """Every slot runs at least once, and every step agrees with the contract (dims,
    dispatch log) and stays within the float64 reference's budget, on WebGPU alone."""
    runner = LockstepRunner([webgpu])
    ran: set[str] = set()
    for name, case in (_project_cases() | _project_cases_f16()).items():
        result = runner.run(case)
        assert_parity(result)
        for step in result.steps:
            ran |= {d["kernel"] for d in step.backends["webgpu"].dispatches if d["ran"]}
        assert result.steps, name
    assert ran == set(SLOTS)


# The struct formats the op modules packed by hand before reflection: the params the
# runtime packs from each kernel's own declaration must be the same bytes.
RMS_NORM = struct.Struct("<IIfI")  # num_rows, row_width, eps, _pad
BINARY = struct.Struct("<4I4I4I4I")  # numel, pad x3, out_sizes, a_strides, b_strides
LINEAR = struct.Struct("<8I")  # m, n, k, k_words, group_size, n_padded, has_bias, gemv_workgroups
ROPE_HF = struct.Struct("<8I")  # q_pairs, total_pairs, half_dim, seq, q_heads, k_heads, start_pos
SDPA = struct.Struct("<8If3I")  # seq, input_pos, context, q_heads, kv_heads, head_dim, splits,
# pad, scale, pad x3


def _params(graph: WebGPUGraph, slot: str) -> bytes:
    (data,) = [
        params.data
        for d in graph.dispatches
        if slot in d.kernels
        for run in d.kernels[slot].runs
        for params, _ in run.params
    ]
    return data


def _run(runtime: Runtime, case: Case, steps: int | None = None) -> WebGPUGraph:
    graph = runtime.load(case.graph)
    assert isinstance(graph, WebGPUGraph)
    for inputs in case.steps[:steps]:
        graph.execute(inputs)
    return graph


def test_params_are_the_bytes_the_former_struct_formats_packed(webgpu: Runtime) -> None:
    cases = _project_cases()
    graph = _run(webgpu, cases["rms_norm_vec4"])
    assert _params(graph, "rms_norm_vec4") == RMS_NORM.pack(3, 64, 1e-6, 0)
    graph = _run(webgpu, cases["add"])  # step 1: [2, 3, 4] + [1, 3, 4]
    out4, a_strides, b_strides = (1, 2, 3, 4), (0, 12, 4, 1), (0, 0, 4, 1)
    assert _params(graph, "add_broadcast") == BINARY.pack(
        24, 0, 0, 0, *out4, *a_strides, *b_strides
    )
    assert _params(graph, "add_flat") == BINARY.pack(24, 0, 0, 0, *([0] * 12))[:16]
    graph = _run(webgpu, cases["linear_q4gsw"])  # step 0: the GEMM at M = 6; step 1: the GEMV
    assert _params(graph, "q4gsw_gemm") == LINEAR.pack(6, 13, 64, 8, 32, 16, 1, 7)
    assert _params(graph, "q4gsw_gemv") == LINEAR.pack(1, 13, 64, 8, 32, 16, 1, 7)
    graph = _run(webgpu, cases["apply_rotary_emb_hf"])
    assert _params(graph, "rotary_emb_hf") == ROPE_HF.pack(48, 72, 4, 3, 4, 2, 2, 0)
    graph = _run(webgpu, cases["sdpa_with_kv_cache"], steps=1)  # the prefill at position 0
    scale = 1 / np.sqrt(16)
    packed = SDPA.pack(3, 0, 3, 4, 2, 16, 1, 0, scale, 0, 0, 0)
    assert [_params(graph, s) for s in ("sdpa_update_cache", "sdpa_qk", "sdpa_av")] == [packed] * 3


def test_an_op_offers_each_slot_exactly_its_declared_values(webgpu: Runtime) -> None:
    for case in _project_cases().values():
        graph = _run(webgpu, case)
        for dispatch in graph.dispatches:
            kernel = dispatch.kernels[dispatch.kernel]
            if kernel.checked:
                names = set(dispatch.values) - {"max_workgroups_per_dim"}
                assert names == set(SLOTS[dispatch.kernel].values), dispatch.kernel


# --- foreign kernels through a manifest -------------------------------------------------------

# The kernels live in tests/data/kernels/foreign/ (tests/test_kernels_cli.py runs them too).
FOREIGN_DATA = Path(__file__).parents[1] / "data" / "kernels" / "foreign"

# An RMS norm written elsewhere: a config uniform first with its own names, order and units
# (the row in bytes), the tensors in another order and under other names, an entry point of
# its own, a workgroup-size override of another name; it recovers its row from a 2-D grid.
FOREIGN_RMS = (FOREIGN_DATA / "rms.wgsl").read_text()

RMS_MANIFEST = """\
format = "parity-kernels/1"

[webgpu.rms_norm]
file = "rms.wgsl"
entry = "rms_main"
overrides = { block_size = "workgroup_size // 2" }
params.epsilon = "eps"
params.row_bytes = "row_width * 4"
params.n_rows = "num_rows"
padding = ["reserved"]
bindings = { cfg = "params", gamma = "weight", input_data = "x", output_data = "out" }
dispatch = "num_rows"
fold = true
"""

# HF rope as upstream dispatches it: one output per dispatch, q and k one after the other,
# a params block of its own.
SPLIT_ROPE = (FOREIGN_DATA / "rope.wgsl").read_text()

ROPE_MANIFEST = """\
format = "parity-kernels/1"

[webgpu.rotary_emb_hf]
file = "rope.wgsl"
bindings = { args = "params" }
params.half = "half_dim"
params.seq_len = "seq"
params.start = "start_pos"

[[webgpu.rotary_emb_hf.dispatch_list]]
bindings = { t_in = "xq", t_out = "xq_out" }
params.pairs = "q_pairs"
params.heads = "q_heads"
dispatch = "div_up(q_pairs, 64)"

[[webgpu.rotary_emb_hf.dispatch_list]]
bindings = { t_in = "xk", t_out = "xk_out" }
params.pairs = "total_pairs - q_pairs"
params.heads = "k_heads"
dispatch = "div_up(total_pairs - q_pairs, 64)"
"""


def _folder(tmp_path: Path, manifest: str, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / MANIFEST_NAME).write_text(manifest)
    return tmp_path


def _runtime(folder: Path, **kwargs: object) -> WebGPURuntime:
    return WebGPURuntime(manifest=load_manifest(folder), **kwargs)  # type: ignore[arg-type]


def _rms_case(rows: int = 3, width: int = 30, max_rows: int | None = None) -> Case:
    rng = np.random.default_rng(RNG_SEED)
    return single_op_graph(
        "rms_norm",
        {"x": _f32(rng, rows, width), "weight": _f32(rng, width), "eps": 1e-5},
        constants={"weight"},
        max_dims={"x": [max_rows or rows, width]},
        name="norm",
    )


def _within_budget(runtime: Runtime, case: Case) -> list[object]:
    """Run every step; each output within the reference's budget. The dispatch records."""
    graph = runtime.load(case.graph)
    records = []
    try:
        for index, inputs in enumerate(case.steps):
            result = graph.execute(inputs)
            budget = op_budget(case, index)
            node = case.graph.ops[0]
            for slot, name in node.outputs.items():
                assert budget.within(slot, result.outputs[name]), (slot, index)
            assert not result.guard_writes
            records.append(result.dispatches)
    finally:
        graph.close()
    return records


def test_a_foreign_rms_norm_runs_through_its_manifest(tmp_path: Path) -> None:
    folder = _folder(tmp_path, RMS_MANIFEST, {"rms.wgsl": FOREIGN_RMS})
    runtime = _runtime(folder)
    case = _rms_case(rows=3, max_rows=5)
    case.steps.append({"x": _f32(np.random.default_rng(1), 5, 30)})
    (first,), (second,) = _within_budget(runtime, case)
    assert (first.kernel, first.workgroup_size, first.logical_count) == (
        "rms_norm",
        (32, 1, 1),  # the kernel's own size, with the override the manifest passes
        (3, 1, 1),
    )
    assert second.logical_count == (5, 1, 1)
    assert runtime.info()["kernels"] == {"rms_norm": str(folder / "rms.wgsl")}


def test_a_folded_foreign_grid_and_one_that_may_not_fold(tmp_path: Path) -> None:
    folder = _folder(tmp_path, RMS_MANIFEST, {"rms.wgsl": FOREIGN_RMS})
    case = _rms_case(rows=5)
    (record,) = _within_budget(_runtime(folder, max_workgroups_per_dim=3), case)[0]
    assert record.logical_count == (5, 1, 1) and record.physical_grid == (3, 2, 1)

    folder = _folder(tmp_path, RMS_MANIFEST.replace("fold = true", "fold = false"), {})
    graph = _runtime(folder, max_workgroups_per_dim=3).load(case.graph)
    with pytest.raises(InputError) as refused:
        graph.execute(case.steps[0])
    assert refused.value.key() == ("norm", "grid_limit")
    assert "does not fold" in str(refused.value)
    graph.execute({"x": case.steps[0]["x"][:2]})  # two rows fit: the graph is usable


def test_an_hf_rope_split_into_q_and_k_dispatches(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ROPE_MANIFEST, {"rope.wgsl": SPLIT_ROPE})
    case = _rope_case("apply_rotary_emb_hf")
    ((q, k),) = _within_budget(_runtime(folder), case)
    # q: 1 * 3 * 4 heads * 4 pairs = 48 pairs; k: 24; each its own dispatch and count
    assert [(d.kernel, d.logical_count, d.ran) for d in (q, k)] == [
        ("rotary_emb_hf", (1, 1, 1), True),
        ("rotary_emb_hf", (1, 1, 1), True),
    ]


def test_a_replaced_slot_the_op_skips_is_skipped(tmp_path: Path) -> None:
    """The project's GEMV, replaced by itself with a count that is never 0: at M > 1 the op
    skips the slot, and so does the runtime, whatever the formula gives."""
    gemv = (Path(__file__).parents[2] / "wgsl" / "q4gsw_gemv.wgsl").read_text()
    manifest = """\
format = "parity-kernels/1"

[webgpu.q4gsw_gemv]
file = "gemv.wgsl"
overrides = { wg_size = "workgroup_size", group_size = "group_size" }
dispatch = "gemv_workgroups"
"""
    folder = _folder(tmp_path, manifest, {"gemv.wgsl": gemv})
    records = _within_budget(_runtime(folder), _linear_case())
    assert [(d.kernel, d.ran, d.logical_count) for d in records[0]] == [
        ("q4gsw_gemm", True, (1, 1, 1)),
        ("q4gsw_gemv", False, (0, 0, 0)),
    ]
    assert [(d.kernel, d.ran, d.logical_count) for d in records[1]] == [
        ("q4gsw_gemm", False, (0, 0, 0)),
        ("q4gsw_gemv", True, (7, 1, 1)),
    ]


# --- load errors -------------------------------------------------------------------------------


def _edit(old: str, new: str, text: str = RMS_MANIFEST) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _load_error(tmp_path: Path, manifest: str, kernel: str = FOREIGN_RMS) -> KernelBuildError:
    folder = _folder(tmp_path, manifest, {"rms.wgsl": kernel})
    with pytest.raises(KernelBuildError) as info:
        _runtime(folder).load(_rms_case().graph)
    assert info.value.op == "norm" and info.value.kernel == "rms_norm"
    assert info.value.shader == str(folder / "rms.wgsl")
    return info.value


@pytest.mark.parametrize(
    ("manifest", "kernel", "message"),
    [
        (
            _edit('block_size = "workgroup_size // 2"', 'group_size = "64"'),
            FOREIGN_RMS,
            "rms_norm: override 'group_size' is not declared in {rms} (declared: block_size)",
        ),
        (
            _edit('params.row_bytes = "row_width * 4"\n', ""),
            FOREIGN_RMS,
            "rms_norm: params member 'row_bytes' (u32 at offset 4) of {rms} has no value; "
            "rms_norm offers [num_rows, row_width, eps, workgroup_size, workgroups]; map it "
            'with params.row_bytes = "<expression>" or list it in padding',
        ),
        (
            _edit('params.n_rows = "num_rows"', 'params.n_rows = "num_rows"\nparams.rows = "1"'),
            FOREIGN_RMS,
            "rms_norm: params.rows: the params block of {rms} declares no member 'rows' "
            "(declared: epsilon, row_bytes, n_rows, reserved)",
        ),
        (
            _edit('gamma = "weight", ', ""),
            FOREIGN_RMS,
            "rms_norm: binding 1 ('gamma') of {rms} fills no role of the slot (the kernel "
            "declares: 0 'cfg', 1 'gamma', 2 'input_data', 3 'output_data'; the slot's roles: "
            "out, x, weight; or 'params'); map it with bindings = { gamma = \"<role>\" }",
        ),
        (
            _edit('cfg = "params"', 'cfg = "x"'),
            FOREIGN_RMS,
            "rms_norm: binding 0 'cfg' of {rms} is a uniform (Config) but is given 'x'; it "
            "takes a uniform packed from values ('params')",
        ),
        (
            _edit('input_data = "x"', 'input_data = "out"'),
            FOREIGN_RMS,
            "binding 3 'output_data' of {rms} binds role 'out' a second time, and one of them "
            "writes it",
        ),
        (
            _edit('entry = "rms_main"', 'entry = "main"'),
            FOREIGN_RMS,
            "rms_norm: entry: {rms} has no compute entry point 'main' (declared: rms_main)",
        ),
        (
            _edit('overrides = { block_size = "workgroup_size // 2" }\n', ""),
            FOREIGN_RMS.replace("block_size: u32 = 128u", "block_size: u32"),
            "rms_norm: override 'block_size' of {rms} has no default and no value; map it with "
            'overrides = { block_size = "<expression>" } (rms_norm offers [num_rows, ',
        ),
        (
            _edit('"workgroup_size // 2"', '"num_rows"'),
            FOREIGN_RMS,
            "rms_norm: overrides.block_size: 'num_rows' reads num_rows, which rms_norm sets "
            "only per step (an override is fixed when the pipeline is built; fixed values: eps, "
            "max_workgroups_per_dim, row_width, workgroup_size)",
        ),
        (
            _edit('padding = ["reserved"]', 'padding = ["reserved"]\nparams.extra = "eps"'),
            FOREIGN_RMS.replace("reserved: u32,", "reserved: u32,\n    extra: mat2x2<f32>,"),
            "rms_norm: cfg.extra (mat2x2<f32> at offset 16) of {rms}: a params member is "
            "f32, u32, i32 or a vector of them",
        ),
        (
            RMS_MANIFEST,
            FOREIGN_RMS.replace("@group(0) @binding(1)", "@group(1) @binding(1)"),
            "rms_norm: binding 1 'gamma' of {rms} is in @group(1); the webgpu runtime binds "
            "@group(0) only",
        ),
    ],
    ids=[
        "undeclared override",
        "member without a value",
        "member not declared",
        "binding without a role",
        "uniform given a role",
        "written role bound twice",
        "entry point",
        "required override",
        "override read per step",
        "member type",
        "bind group",
    ],
)
def test_a_kernel_that_does_not_fit_its_slot_is_named_at_load(
    tmp_path: Path, manifest: str, kernel: str, message: str
) -> None:
    error = _load_error(tmp_path, manifest, kernel)
    assert message.replace("{rms}", str(tmp_path / "rms.wgsl")) in error.compiler, error.compiler


def test_a_shader_naga_refuses_carries_naga_s_whole_text(tmp_path: Path) -> None:
    # wgsl_reflect parses this one; naga refuses the types.
    error = _load_error(
        tmp_path, RMS_MANIFEST, FOREIGN_RMS.replace("var acc = 0.0;", "var acc = 0u;")
    )
    assert "Caused by" in error.compiler and "acc" in error.compiler, error.compiler
    # Neither parses this one: naga's text, not the reflection tool's, with line and column.
    error = _load_error(tmp_path, RMS_MANIFEST, FOREIGN_RMS.replace("let row", "lett row"))
    assert "Caused by" in error.compiler and "lett row" in error.compiler, error.compiler
    assert "wgsl:" in error.compiler


def test_requires_refuses_at_load_and_per_step(tmp_path: Path) -> None:
    manifest = _edit("fold = true", 'fold = true\nrequires = ["row_width % 32 == 0"]')
    folder = _folder(tmp_path, manifest, {"rms.wgsl": FOREIGN_RMS})
    with pytest.raises(KernelRequirementError) as at_load:
        _runtime(folder).load(_rms_case().graph)
    assert (at_load.value.op, at_load.value.slot, at_load.value.requirement) == (
        "norm",
        "rms_norm",
        "row_width % 32 == 0",
    )
    assert "requires row_width % 32 == 0" in str(at_load.value)

    manifest = _edit("fold = true", 'fold = true\nrequires = ["num_rows <= 4"]')
    folder = _folder(tmp_path, manifest, {})
    case = _rms_case(rows=5)
    graph = _runtime(folder).load(case.graph)
    with pytest.raises(InputError) as per_step:
        graph.execute(case.steps[0])
    assert per_step.value.key() == ("norm", "kernel_requires")
    assert "requires num_rows <= 4" in str(per_step.value)
    x = case.steps[0]["x"]
    assert isinstance(x, np.ndarray)
    graph.execute({"x": x[:4]})  # the graph is usable after the refusal


# --- adapters ------------------------------------------------------------------------------------

# One workgroup for every row: its partial sums in a storage scratch buffer the adapter asks
# for, and 1 / row_width as a derived value the adapter adds.
ONE_WORKGROUP_RMS = """\
struct Params {
    rows: u32,
    width: u32,
    inv_width: f32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> partial_sums: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32) {
    for (var row = 0u; row < params.rows; row++) {
        let base = row * params.width;
        var acc = 0.0;
        for (var i = lane; i < params.width; i += 64u) {
            acc += x[base + i] * x[base + i];
        }
        partial_sums[lane] = acc;
        storageBarrier();
        if (lane == 0u) {
            var total = 0.0;
            for (var i = 0u; i < 64u; i++) {
                total += partial_sums[i];
            }
            partial_sums[64] = inverseSqrt(total * params.inv_width + params.eps);
        }
        storageBarrier();
        let scale = partial_sums[64];
        for (var i = lane; i < params.width; i += 64u) {
            out[base + i] = x[base + i] * scale * weight[i];
        }
        storageBarrier();
    }
}
"""

ADAPTER = """\
class OneWorkgroup:
    provides = ("inv_width",)

    def __init__(self, static):
        self.lanes = static["workgroup_size"]

    def values(self, values):
        return {"inv_width": 1.0 / values["row_width"]}

    def scratch(self):
        return {"partial_sums": 4 * (self.lanes + 1)}
"""

ADAPTER_MANIFEST = """\
format = "parity-kernels/1"

[webgpu.rms_norm]
file = "rms.wgsl"
params.rows = "num_rows"
params.width = "row_width"
dispatch = "1"
adapter = "adapters.py:OneWorkgroup"
"""


def test_an_adapter_adds_a_value_and_a_scratch_buffer(tmp_path: Path) -> None:
    files = {"rms.wgsl": ONE_WORKGROUP_RMS, "adapters.py": ADAPTER}
    folder = _folder(tmp_path, ADAPTER_MANIFEST, files)
    runtime = _runtime(folder, allow_adapters=True)
    case = _rms_case(rows=4, width=30)
    ((record,),) = _within_budget(runtime, case)
    assert record.logical_count == (1, 1, 1)
    graph = runtime.load(case.graph)
    assert isinstance(graph, WebGPUGraph)
    assert [s.name for s in graph._scratch] == ["norm.partial_sums"]
    assert graph._scratch[0].alloc_nbytes == 4 * 65


def test_an_adapter_runs_only_when_allowed(tmp_path: Path) -> None:
    files = {"rms.wgsl": ONE_WORKGROUP_RMS, "adapters.py": ADAPTER}
    folder = _folder(tmp_path, ADAPTER_MANIFEST, files)
    with pytest.raises(KernelManifestError) as refused:
        _runtime(folder)  # at construction, before any graph (as on Vulkan)
    assert refused.value.where == "webgpu.rms_norm.adapter"
    assert "allow_adapters=True" in str(refused.value) and "--allow-adapters" in str(refused.value)


def test_an_adapter_that_breaks_its_word_is_a_finding(tmp_path: Path) -> None:
    broken = ADAPTER.replace('{"inv_width": 1.0 / values["row_width"]}', '{"inverse": 1.0}')
    folder = _folder(
        tmp_path, ADAPTER_MANIFEST, {"rms.wgsl": ONE_WORKGROUP_RMS, "adapters.py": broken}
    )
    case = _rms_case()
    graph = _runtime(folder, allow_adapters=True).load(case.graph)
    with pytest.raises(KernelBuildError, match=r"values\(\) returned \['inverse'\]; its provides"):
        graph.execute(case.steps[0])

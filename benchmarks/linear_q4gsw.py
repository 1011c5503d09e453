"""GPU time of linear_q4gsw's kernels on both backends, with the memory ceiling beside them.

    python -m benchmarks.linear_q4gsw                    # preset picked from the adapters
    python -m benchmarks.linear_q4gsw --preset gpu --markdown bench.md --json bench.json

For each K×N and each M it builds one graph per backend (x `[max M, K]`, q4gsw weights
with group_size 128), resizes it to M and times the kernel that runs (the GEMV at M = 1,
the GEMM above) from GPU timestamps: the median of `--repeats` timed calls after `--warmup`
calls, all in one submit. The GEMV is reported as effective weight bandwidth (packed
weights + scales read per call, GB/s) and as a fraction of the memory ceiling measured in
the same run through the same API (a grid-stride read of `--ceiling-mib`); the GEMM as
GFLOP/s (2·M·N·K per call). WebGPU and Vulkan run side by side; their outputs are compared
too (largest difference relative to the largest output), as a sanity check.

Each timed batch starts, in the same submit, with `--burn-passes` dispatches of a
clock warm-up kernel (`benchmarks.ceiling`): an NVIDIA GPU drops to idle clocks while the
host loads graphs, and timings taken before it comes back are several times too slow. Each
GEMV row also gives the read kernel's rate over the same bytes (as many cold copies), the
bound a single timed dispatch of that size can approach.

`--back-to-back` also times each GEMV the back-to-back way (`benchmarks.timing`):
a batch of calls over independent weight copies recorded back to back (WebGPU: one compute
pass with timestamps at its start and end; Vulkan: no barrier between them, one timestamp pair
around the batch), GPU time over the batch size per call; the read ceiling and the read of
the same bytes are then measured the same way, so the fractions compare like with like. This
is the rate of a stream of independent calls without the fixed cost of one timed dispatch.
The GEMM (0.6–100 ms per call on a GPU) is timed one dispatch at a time only.

Weights are read cold: each graph is built `copies` times with its own weight buffers
(enough to cover `--cold-mib`, 256 MiB by default on a GPU, several times an H100's 50 MB
L2) and consecutive calls rotate over the copies, as a decoder reads each layer's weights
once per token. `--cold-mib 0` times one copy (warm cache).

Presets: `gpu` (K×N 4096×4096, 4096×14336, 14336×4096; M 1, 128, 512, 2048; and the GEMV
alone, M = 1, at 8192×28672 (117 MB of packed weights, Llama-3-70B's gate/up projection); a 1
GiB ceiling) and `cpu` (a reduced set for lavapipe, a CPU far too slow for the LLM shapes).
`auto` picks `cpu` when an adapter is a CPU. The GEMV's lanes per workgroup and grid cap can
be overridden to tune them on a GPU (both backends alike), and so can its source
(`--gemv-variant`, a pair in benchmarks/shaders/gemv/) and that variant's words per lane per
step (WORDS_PER_STEP; the shipped kernel's step is written out for 4 words, and asking it for
another count is an error); `benchmarks.gemv_sweep` times many such variants in one process.

Needs: numpy, wgpu, vulkan, a Vulkan driver, and glslc on PATH (the Vulkan runtime compiles
its GLSL; see docs/benchmarks.md for running it on a machine without a package index).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graph_format import BackendUnavailable, FeatureUnavailable, Graph
from harness.gen.builder import GraphBuilder
from harness.model.numerics import compare

GROUP_SIZE = 128
PRESETS: dict[str, dict[str, Any]] = {
    "gpu": {
        "shapes": [(4096, 4096), (4096, 14336), (14336, 4096)],
        "m": [1, 128, 512, 2048],
        "gemv_shapes": [(8192, 28672)],  # M = 1 only
        "ceiling_mib": 1024,
        "cold_mib": 256,
        "repeats": 20,
        "warmup": 3,
        "burn_passes": 100,
    },
    "cpu": {
        "shapes": [(512, 512), (512, 1792), (1792, 512)],
        "m": [1, 16, 64],
        "gemv_shapes": [],
        "ceiling_mib": 64,
        "cold_mib": 0,
        "repeats": 5,
        "warmup": 1,
        "burn_passes": 0,
    },
}
MAX_COPIES = 16
# --backends names: vulkan_robust is the Vulkan runtime on a device with the robust buffer
# access features wgpu enables on every WebGPU device (vulkan_ref.instance.get_context)
BACKEND_LABELS = {"webgpu": "WebGPU", "vulkan": "Vulkan", "vulkan_robust": "Vulkan robust"}
# Back-to-back mode: at least this many weight copies (so a batch holds at least this many
# independent calls), and the batch of the ceiling's reads (one 1 GiB buffer, own sinks).
MIN_B2B_COPIES = 4
CEILING_BATCH = 4
CHECK_ROWS = 8  # output rows checked against the float64 reference (rows are independent)
GEMV_KERNELS = ("q4gsw_gemv", "q4gsw_gemv_f16")


@dataclass
class Row:
    """One (K, N, M) measurement on every backend."""

    k: int
    n: int
    m: int
    dtype: str = "float32"  # x and out; float16 runs the `_f16` kernels
    kernel: str = ""
    median_us: dict[str, float] = field(default_factory=dict)
    rate: dict[str, float] = field(default_factory=dict)  # GB/s (GEMV) or GFLOP/s (GEMM)
    of_ceiling: dict[str, float] = field(default_factory=dict)  # GEMV only
    # GEMV only: a plain read of the same bytes (as many cold copies), GB/s: what the read
    # kernel reaches at this size, with the same fixed cost of a timed dispatch
    read_same: dict[str, float] = field(default_factory=dict)
    # GEMV only, back-to-back mode: per call (batch time / batch), rate, fraction of the
    # back-to-back ceiling, and the back-to-back read of the same bytes (GB/s)
    b2b_us: dict[str, float] = field(default_factory=dict)
    b2b_rate: dict[str, float] = field(default_factory=dict)
    b2b_of_ceiling: dict[str, float] = field(default_factory=dict)
    b2b_read_same: dict[str, float] = field(default_factory=dict)
    stream_bytes: int = 0
    copies: int = 0
    batch: int = 0  # calls per back-to-back batch (0: single mode only)
    backend_diff: float | None = None  # max over backends of max |b - first| / max |first|
    # max error / derived budget (harness model) over the first CHECK_ROWS rows, per backend
    utilization: dict[str, float] = field(default_factory=dict)


@dataclass
class Backend:
    """An opened runtime with what the benchmark needs of it."""

    name: str
    runtime: Any
    info: dict[str, Any]
    is_cpu: bool
    # (graphs, inputs, *, repeats, warmup, burn, burn_passes, batch)
    time_graph: Callable[..., Any]
    read_times: Callable[..., list[float]]  # (nbytes, repeats, warmup, copies, burn, batch)
    make_burn: Callable[[], Any]  # the clock warm-up kernel of this backend


def open_backends(
    names: Sequence[str], validation: bool, shader_dirs: Mapping[str, Path] | None = None
) -> list[Backend]:
    """Open the requested runtimes on timing-capable devices, each reading its API's folder
    of `shader_dirs` (default: the repo's); skip (and say) unavailable ones."""
    dirs = shader_dirs or {}
    out = []
    for name in names:
        try:
            if name == "webgpu":
                from benchmarks.ceiling import WebGPUBurn, webgpu_read_times
                from benchmarks.timing import webgpu_time_graph
                from webgpu_backend import WebGPURuntime
                from webgpu_backend.device import get_timing_device

                dev = get_timing_device()
                rt = WebGPURuntime(dev, shader_dir=dirs.get("webgpu"))
                out.append(
                    Backend(
                        name,
                        rt,
                        rt.info(),
                        rt.info().get("adapter_type") == "CPU",
                        webgpu_time_graph,
                        lambda nbytes, r, w, c, b, batch=0, dev=dev: webgpu_read_times(
                            dev, nbytes, repeats=r, warmup=w, copies=c, burn_passes=b, batch=batch
                        ),
                        lambda dev=dev: WebGPUBurn(dev),
                    )
                )
            elif name in ("vulkan", "vulkan_robust"):
                from benchmarks.ceiling import VulkanBurn, vulkan_read_times
                from benchmarks.timing import vulkan_time_graph
                from vulkan_ref import VulkanRuntime
                from vulkan_ref.instance import get_context
                from vulkan_ref.profiling import timestamp_period_ns

                ctx = get_context(validation, robust=name == "vulkan_robust")
                rt = VulkanRuntime(ctx, shader_dir=dirs.get("vulkan"))
                info = rt.info() | {"timestamp_period_ns": timestamp_period_ns(ctx)}
                out.append(
                    Backend(
                        name,
                        rt,
                        info,
                        info.get("adapter_type") == "CPU",
                        vulkan_time_graph,
                        lambda nbytes, r, w, c, b, batch=0, ctx=ctx: vulkan_read_times(
                            ctx, nbytes, repeats=r, warmup=w, copies=c, burn_passes=b, batch=batch
                        ),
                        lambda ctx=ctx: VulkanBurn(ctx),
                    )
                )
            else:
                raise ValueError(
                    f"unknown backend {name!r}; choose from {', '.join(BACKEND_LABELS)}"
                )
        except BackendUnavailable as err:
            print(f"bench: {name} unavailable, skipped: {err}", file=sys.stderr)
    return out


def tune_gemv(lanes: int | None, max_workgroups: int | None) -> None:
    """Override the GEMV's lanes per workgroup and grid cap on both backends alike.

    For tuning only: the harness's contract keeps the shipped values, so a parity run in the
    same process would report the difference.
    """
    from vulkan_ref.ops import linear_q4gsw as vk_linear
    from webgpu_backend.ops import linear_q4gsw as wg_linear

    if lanes is not None:
        if lanes & (lanes - 1) or not 1 <= lanes <= 1024:
            raise SystemExit(f"bench: --gemv-lanes must be a power of two <= 1024, got {lanes}")
        wg_linear.GEMV_LANES = lanes
        vk_linear.GEMV_WORKGROUP = lanes
    if max_workgroups is not None:
        wg_linear.GEMV_MAX_WORKGROUPS = max_workgroups
        vk_linear.GEMV_MAX_WORKGROUPS = max_workgroups


WGSL_WORDS = r"const WORDS_PER_STEP: u32 = \d+u;"
GLSL_WORDS = r"const uint WORDS_PER_STEP = \d+;"


def gemv_source_dirs(variant: str | None, words: int | None) -> dict[str, Path]:
    """Tuning: rebuild the GEMV of both backends from another source or WORDS_PER_STEP.

    `variant` names a pair `benchmarks/shaders/gemv/<variant>.{wgsl,comp}` to use instead of
    wgsl/q4gsw_gemv.wgsl and glsl/q4gsw_gemv.comp (same bindings and contract); `words`
    substitutes WORDS_PER_STEP in whichever source is used. Returns copies of wgsl/ and glsl/
    in a temporary folder with the patched GEMV (API -> folder), for the runtimes'
    `shader_dir`.
    """
    import re
    import shutil
    import tempfile

    import vulkan_ref.spirv as spirv
    from webgpu_backend.shaders import WGSL_DIR

    if words is not None and not 1 <= words <= 16:
        raise SystemExit(f"bench: --gemv-words must lie in [1, 16], got {words}")
    root = Path(tempfile.mkdtemp(prefix="bench-shaders-"))
    folder, wgsl = root / "glsl", root / "wgsl"
    shutil.copytree(spirv.GLSL_DIR, folder)  # with include/, where includes resolve
    shutil.copytree(WGSL_DIR, wgsl)
    gemv = folder / "q4gsw_gemv.comp"
    source = (wgsl / "q4gsw_gemv.wgsl").read_text()
    if variant is not None:
        variants = Path(__file__).resolve().parent / "shaders" / "gemv"
        source = (variants / f"{variant}.wgsl").read_text()
        gemv.write_text((variants / f"{variant}.comp").read_text())
    patched, text = source, gemv.read_text()
    if words is not None:
        patched, count = re.subn(WGSL_WORDS, f"const WORDS_PER_STEP: u32 = {words}u;", source)
        if count != 1:
            raise SystemExit(
                f"bench: {WGSL_WORDS!r} not found once in the GEMV's WGSL; --gemv-words "
                "needs a --gemv-variant that has it (the shipped kernel is written for 4)"
            )
        text, count = re.subn(GLSL_WORDS, f"const uint WORDS_PER_STEP = {words};", text)
        if count != 1:
            raise SystemExit(f"bench: {GLSL_WORDS!r} not found once in the GEMV's GLSL")

    (wgsl / "q4gsw_gemv.wgsl").write_text(patched)
    gemv.write_text(text)
    return {"webgpu": wgsl, "vulkan": folder}


def linear_graph(
    rng: np.random.Generator, k: int, n: int, max_m: int, group_size: int
) -> tuple[Graph, int]:
    """A one-op graph `out = linear_q4gsw(x[max_m, K])` with random q4gsw weights.

    Returns the graph and the bytes a GEMV call must stream (packed weights + scales).
    """
    packed = rng.integers(0, 256, size=(n, (k + 7) // 8 * 4), dtype=np.uint8)
    groups = -(-k // group_size)
    scales = rng.uniform(0.001, 0.01, size=(groups, -(-n // 4) * 4)).astype(np.float32)
    return linear_graph_of(packed, scales, k, max_m, group_size), packed.nbytes + scales.nbytes


def linear_graph_of(
    packed: np.ndarray,
    scales: np.ndarray,
    k: int,
    max_m: int,
    group_size: int,
    dtype: str = "float32",
) -> Graph:
    """The one-op graph of these q4gsw weights, with x and out of `dtype` (float16: the
    `_f16` kernels; the weights and float32 scales are the same bytes)."""
    n = packed.shape[0]
    b = GraphBuilder()
    x = b.input("x", dtype, [max_m, k])
    out = b.op(
        "linear_q4gsw",
        name="linear",
        out_dims=[max_m, n],
        x=x,
        weight=b.constant("weight", packed),
        scales=b.constant("scales", scales),
        group_size=b.int(group_size, "group_size"),
    )
    b.output(out)
    return b.build()


def reference_rows(graph: Graph, x_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The harness's float64 reference and derived error budget for the given rows of x
    (float16 x: the f16 kernels' budget, the f32 one plus the rounding of the f16 store)."""
    from harness.model import local_budget
    from harness.ops.linear_q4gsw import MODEL

    node = graph.ops[0]
    args = {
        "x": x_rows.astype(np.float64),
        "weight": graph.constants["weight"],
        "scales": graph.constants["scales"].astype(np.float64),
        "group_size": int(graph.scalar(node.arg("group_size"))),
        "bias": None,
    }
    ref = MODEL.reference(node, args)["out"]
    return ref, local_budget(graph, node, args, {"out": ref})["out"]


def measure_ceiling(
    backends: Sequence[Backend],
    mib: int,
    repeats: int,
    warmup: int,
    burn_passes: int = 0,
    batch: int = 0,
) -> dict[str, float]:
    """Read bandwidth (GB/s) of each backend over `mib` MiB (`batch` > 0: back to back)."""
    nbytes = mib * 2**20
    ceiling = {}
    for be in backends:
        times = be.read_times(nbytes, repeats, warmup, 1, burn_passes, batch)
        ceiling[be.name] = nbytes / float(np.median(times))  # bytes/ns = GB/s
        how = f"back to back ({batch} per batch)" if batch else "single dispatch"
        print(f"bench: {be.name} read ceiling {ceiling[be.name]:.1f} GB/s over {mib} MiB, {how}")
    return ceiling


def _config(args: argparse.Namespace, backends: list[Backend]) -> tuple[str, dict[str, Any]]:
    """(preset, configuration): the preset's values, overridden by those given on the line."""
    preset = args.preset
    if preset == "auto":
        preset = "cpu" if any(be.is_cpu for be in backends) else "gpu"
    cfg = dict(PRESETS[preset])
    keys = ("shapes", "gemv_shapes", "m", "ceiling_mib", "cold_mib", "repeats", "warmup")
    cfg["dtypes"] = args.dtypes
    for key in (*keys, "burn_passes"):
        value = getattr(args, key)
        if value is not None:
            cfg[key] = value
    if args.shapes is not None and args.gemv_shapes is None:
        cfg["gemv_shapes"] = []  # the shapes asked for, not the preset's GEMV-only extras
    return preset, cfg


@dataclass
class _Plan:
    """What every shape's timings share: the configuration and the read ceilings."""

    cfg: dict[str, Any]
    ceiling: dict[str, float]
    ceiling_b2b: dict[str, float]  # empty unless back to back
    back_to_back: bool


@dataclass
class _Stream:
    """One (K, N) shape's weights: bytes streamed per call, cold copies, calls per batch."""

    k: int
    n: int
    stream_bytes: int
    copies: int
    batch: int  # 0: single mode only


def _time_back_to_back(
    plan: _Plan,
    be: Backend,
    loaded: list[Any],
    inputs: dict[str, np.ndarray],
    row: Row,
    stream: _Stream,
    burner: Any,
) -> None:
    """Time the GEMV back to back (a batch of calls over the weight copies) into `row`."""
    cfg, nbytes = plan.cfg, stream.stream_bytes
    burn = cfg["burn_passes"]
    (timing,) = be.time_graph(
        loaded,
        inputs,
        repeats=cfg["repeats"],
        warmup=cfg["warmup"],
        burn=burner,
        burn_passes=burn,
        batch=stream.batch,
    )
    if timing.kernel not in GEMV_KERNELS:
        return
    row.batch = stream.batch
    ns = timing.median_ns
    row.b2b_us[be.name] = ns / 1e3
    row.b2b_rate[be.name] = nbytes / ns
    row.b2b_of_ceiling[be.name] = nbytes / ns / plan.ceiling_b2b[be.name]
    same = be.read_times(nbytes, cfg["repeats"], cfg["warmup"], stream.copies, burn, stream.batch)
    row.b2b_read_same[be.name] = nbytes / float(np.median(same))
    print(
        f"bench: {be.name} K={stream.k} N={stream.n} M=1 {timing.kernel} "
        "back to back: "
        f"{ns / 1e3:.1f} us per call ({stream.batch} per batch); read of the "
        f"same bytes {row.b2b_read_same[be.name]:.0f} GB/s"
    )


def _time_single(
    plan: _Plan,
    be: Backend,
    loaded: list[Any],
    inputs: dict[str, np.ndarray],
    row: Row,
    stream: _Stream,
    burner: Any,
    m: int,
) -> Any:
    """Time single timed calls into `row` (GEMV: GB/s and a read of the same bytes; GEMM:
    GFLOP/s); returns the timing."""
    cfg, nbytes = plan.cfg, stream.stream_bytes
    (timing,) = be.time_graph(
        loaded,
        inputs,
        repeats=cfg["repeats"],
        warmup=cfg["warmup"],
        burn=burner,
        burn_passes=cfg["burn_passes"],
    )
    row.kernel = timing.kernel
    median_ns = timing.median_ns
    row.median_us[be.name] = median_ns / 1e3
    if timing.kernel in GEMV_KERNELS:
        row.rate[be.name] = nbytes / median_ns  # GB/s
        row.of_ceiling[be.name] = row.rate[be.name] / plan.ceiling[be.name]
        same = be.read_times(
            nbytes, cfg["repeats"], cfg["warmup"], stream.copies, cfg["burn_passes"]
        )
        row.read_same[be.name] = nbytes / float(np.median(same))
        print(
            f"bench: {be.name} K={stream.k} N={stream.n} read of the same bytes "
            f"{row.read_same[be.name]:.0f} GB/s"
        )
    else:
        row.rate[be.name] = 2.0 * m * stream.n * stream.k / median_ns  # GFLOP/s
    return timing


def _time_backend(
    plan: _Plan,
    be: Backend,
    graph: Graph,
    x_full: np.ndarray,
    stream: _Stream,
    shape_rows: dict[int, Row],
    outputs: dict[int, dict[str, np.ndarray]],
    reference: tuple[np.ndarray, np.ndarray],
) -> None:
    """Time every M of `shape_rows` on one backend (a device without the dtype: skipped, and
    said), keeping each output and its utilization of the budget."""
    ref, budget = reference
    try:
        loaded = [be.runtime.load(graph) for _ in range(stream.copies)]
    except FeatureUnavailable as err:  # a device without f16
        print(f"bench: {be.name} {x_full.dtype} skipped: {err}", file=sys.stderr)
        return
    burner = be.make_burn() if plan.cfg["burn_passes"] else None
    try:
        for m, row in shape_rows.items():
            row.stream_bytes, row.copies = stream.stream_bytes, stream.copies
            inputs = {"x": np.ascontiguousarray(x_full[:m])}
            start = time.perf_counter()
            if plan.back_to_back and m == 1:
                _time_back_to_back(plan, be, loaded, inputs, row, stream, burner)
            timing = _time_single(plan, be, loaded, inputs, row, stream, burner, m)
            out = loaded[0].execute(inputs).outputs["linear.out"]
            outputs[m][be.name] = out
            rows_checked = min(m, CHECK_ROWS)
            row.utilization[be.name] = compare(
                out[:rows_checked], ref[:rows_checked], budget[:rows_checked]
            ).utilization
            print(
                f"bench: {be.name} K={stream.k} N={stream.n} M={m} {timing.kernel}: "
                f"{timing.median_ns / 1e3:.1f} us ({stream.copies} weight copies, "
                f"{time.perf_counter() - start:.1f} s wall)"
            )
    finally:
        for lg in loaded:
            lg.close()
        if burner is not None:
            burner.close()


def _backend_diff(row: Row, outputs: dict[str, np.ndarray]) -> None:
    """Set `row.backend_diff` where two or more backends gave an output."""
    if len(outputs) >= 2:
        first, *others = outputs.values()
        scale = float(np.abs(first).max()) or 1.0
        row.backend_diff = max(
            float(np.abs(first.astype(np.float64) - b).max()) / scale for b in others
        )


def _measure_shape(
    plan: _Plan,
    backends: list[Backend],
    args: argparse.Namespace,
    rng: np.random.Generator,
    shape: tuple[int, int, list[int]],
) -> list[Row]:
    """The rows of one (K, N) shape: fp32 at every M; each f16 dtype at M = 1, the GEMV."""
    cfg, (k, n, m_list) = plan.cfg, shape
    max_m = max(m_list)
    graph, stream_bytes = linear_graph(rng, k, n, max_m, args.group_size)
    copies = max(1, min(MAX_COPIES, math.ceil(cfg["cold_mib"] * 2**20 / stream_bytes)))
    if plan.back_to_back:
        copies = max(copies, MIN_B2B_COPIES, args.batch or 0)
    batch = (args.batch or copies) if plan.back_to_back else 0
    stream = _Stream(k, n, stream_bytes, copies, batch)
    x_f32 = rng.standard_normal((max_m, k)).astype(np.float32)
    # fp32 at every M; f16 (`--dtypes`) at M = 1, the GEMV, over the same weight bytes
    # and the same activations rounded to f16, in the same run on the same device.
    weights = (graph.constants["weight"], graph.constants["scales"])
    rows: list[Row] = []
    for dtype in cfg["dtypes"]:
        if dtype != "float32" and 1 not in m_list:
            continue
        dtype_m = m_list if dtype == "float32" else [1]
        graph = linear_graph_of(*weights, k, max_m, args.group_size, dtype)
        x_full = x_f32.astype(dtype)
        shape_rows = {m: Row(k, n, m, dtype) for m in dtype_m}
        outputs: dict[int, dict[str, np.ndarray]] = {m: {} for m in dtype_m}
        reference = reference_rows(graph, x_full[:CHECK_ROWS])
        for be in backends:
            _time_backend(plan, be, graph, x_full, stream, shape_rows, outputs, reference)
        for m, row in shape_rows.items():
            _backend_diff(row, outputs[m])
            rows.append(row)
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every shape on every backend; returns the results as plain data."""
    dirs = None
    if args.gemv_words is not None or args.gemv_variant is not None:
        dirs = gemv_source_dirs(args.gemv_variant, args.gemv_words)
    backends = open_backends(args.backends.split(","), args.validation, dirs)
    if not backends:
        raise SystemExit("bench: no backend available")
    preset, cfg = _config(args, backends)
    tune_gemv(args.gemv_lanes, args.gemv_max_workgroups)
    print(f"bench: preset {preset}: {cfg}")
    burn = cfg["burn_passes"]
    b2b = args.back_to_back
    ceiling = measure_ceiling(backends, cfg["ceiling_mib"], cfg["repeats"], cfg["warmup"], burn)
    ceiling_b2b: dict[str, float] = {}
    if b2b:
        ceiling_b2b = measure_ceiling(
            backends, cfg["ceiling_mib"], cfg["repeats"], cfg["warmup"], burn, CEILING_BATCH
        )
    plan = _Plan(cfg, ceiling, ceiling_b2b, b2b)
    rng = np.random.default_rng(0)
    shapes = [(k, n, list(cfg["m"])) for k, n in cfg["shapes"]]
    shapes += [(k, n, [1]) for k, n in cfg["gemv_shapes"]]
    rows = [row for shape in shapes for row in _measure_shape(plan, backends, args, rng, shape)]
    return {
        "preset": preset,
        "config": {
            **cfg,
            "group_size": args.group_size,
            "back_to_back": b2b,
            "ceiling_batch": CEILING_BATCH if b2b else 0,
            "gemv_tuning": {
                key: getattr(args, f"gemv_{key}")
                for key in ("variant", "words", "lanes", "max_workgroups")
                if getattr(args, f"gemv_{key}") is not None
            },
        },
        "adapters": {be.name: be.info for be in backends},
        "ceiling_gbps": ceiling,
        "ceiling_b2b_gbps": ceiling_b2b,
        "rows": [asdict(r) for r in rows],
        "backends": [be.name for be in backends],
    }


def markdown(result: dict[str, Any]) -> str:
    """The results as a Markdown table (one row per K×N and M)."""
    names = result["backends"]
    label = BACKEND_LABELS
    lines = []
    cfg = result["config"]
    for name in names:
        info = result["adapters"][name]
        lines.append(
            f"- {label[name]}: {info.get('adapter')} ({info.get('adapter_type')}), "
            f"{info.get('api')}, driver {info.get('driver')}; read ceiling "
            f"**{result['ceiling_gbps'][name]:.1f} GB/s** over {cfg['ceiling_mib']} MiB"
        )
    lines.append(
        f"- group_size {cfg['group_size']}; median of {cfg['repeats']} timed calls after "
        f"{cfg['warmup']} warm-up calls; weights cold over {cfg['cold_mib']} MiB of copies; "
        f"{cfg.get('burn_passes', 0)} clock warm-up (burn) passes before each timed batch"
    )
    tuning = cfg.get("gemv_tuning")
    if tuning:
        knobs = ", ".join(f"{k}={v}" for k, v in tuning.items())
        lines.append(f"- GEMV tuned for this run (not the shipped kernel): {knobs}")
    lines.append("")
    head = ["K×N", "M", "kernel"]
    for name in names:
        head += [f"{label[name]} µs", f"{label[name]} rate"]
    head += ["GEMV / ceiling", "err / budget", "backend diff", "read of same bytes"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for row in result["rows"]:
        unit = "GB/s" if row["kernel"] in GEMV_KERNELS else "GFLOP/s"
        cells = [f"{row['k']}×{row['n']}", str(row["m"]), row["kernel"]]
        for name in names:
            if name not in row["median_us"]:  # a device without f16 skipped it
                cells += ["", ""]
                continue
            cells += [f"{row['median_us'][name]:.1f}", f"{row['rate'][name]:.3g} {unit}"]
        frac = " / ".join(
            f"{row['of_ceiling'][n] * 100:.1f} %" for n in names if n in row["of_ceiling"]
        )
        cells.append(frac or "")
        cells.append(f"{max(row['utilization'].values(), default=0.0):.2g}")
        cells.append("" if row["backend_diff"] is None else f"{row['backend_diff']:.1e}")
        same = row.get("read_same") or {}
        cells.append(" / ".join(f"{same[n]:.3g} GB/s" for n in names if n in same))
        lines.append("| " + " | ".join(cells) + " |")
    lines += gemv_modes(result)
    return "\n".join(lines) + "\n"


def gemv_modes(result: dict[str, Any]) -> list[str]:
    """The GEMV rows timed both ways, single dispatch and back to back, as fractions.

    Empty unless the run timed back to back. Per backend (WebGPU / Vulkan): µs per call, the
    GEMV's fraction of the read ceiling of the same mode, the read of the same bytes' fraction
    of that ceiling, and the GEMV's fraction of the read of the same bytes.
    """
    names = result["backends"]
    rows = [r for r in result["rows"] if r.get("batch") and r["kernel"] in GEMV_KERNELS]
    if not rows:
        return []
    label = BACKEND_LABELS

    def rate_text(v: float) -> str:
        return f"{v:.0f}" if v >= 100 else f"{v:.3g}"

    ceil_1, ceil_b = result["ceiling_gbps"], result["ceiling_b2b_gbps"]
    order = " / ".join(label[n] for n in names)
    lines = [
        "",
        f"GEMV (M = 1), single dispatch vs back to back ({order}); read ceiling single "
        + " / ".join(rate_text(ceil_1[n]) for n in names)
        + " GB/s, back to back ("
        + str(result["config"].get("ceiling_batch"))
        + " per batch) "
        + " / ".join(rate_text(ceil_b[n]) for n in names)
        + " GB/s",
        "",
        "| K×N | MB | mode | µs per call | GEMV GB/s | GEMV / ceiling "
        "| read of same bytes / ceiling | GEMV / read of same bytes |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def joined(values: dict[str, float], fmt: str) -> str:
        return " / ".join(fmt.format(values[n]) for n in names if n in values)

    for row in rows:
        mb = f"{row['stream_bytes'] / 1e6:.1f}"
        shape = f"{row['k']}×{row['n']}" + (" f16" if row.get("dtype") == "float16" else "")
        for mode, us, rate, ceiling, same in (
            ("single", row["median_us"], row["rate"], ceil_1, row["read_same"]),
            (
                f"b2b ×{row['batch']}",
                row["b2b_us"],
                row["b2b_rate"],
                ceil_b,
                row["b2b_read_same"],
            ),
        ):
            frac = {n: rate[n] / ceiling[n] for n in rate}
            same_frac = {n: same[n] / ceiling[n] for n in same}
            of_same = {n: rate[n] / same[n] for n in rate if n in same}
            cells = [
                shape,
                mb,
                mode,
                joined(us, "{:.1f}"),
                " / ".join(rate_text(rate[n]) for n in names if n in rate),
                joined({n: 100 * v for n, v in frac.items()}, "{:.1f} %"),
                joined({n: 100 * v for n, v in same_frac.items()}, "{:.1f} %"),
                joined({n: 100 * v for n, v in of_same.items()}, "{:.0f} %"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        k, _, n = item.lower().partition("x")
        shapes.append((int(k), int(n)))
    return shapes


def _dtypes(text: str) -> list[str]:
    dtypes = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in ("float32", "float16")]
    if bad or not dtypes:
        raise argparse.ArgumentTypeError(f"expected float32 and/or float16, got {text!r}")
    return dtypes


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.linear_q4gsw",
        description="GPU time of linear_q4gsw's GEMV and GEMM on WebGPU and Vulkan, with the "
        "memory-read ceiling of each API measured in the same run.",
    )
    parser.add_argument(
        "--preset",
        choices=["auto", "gpu", "cpu"],
        default="auto",
        help="shape set: 'cpu' is reduced for lavapipe (auto: by adapter type)",
    )
    parser.add_argument(
        "--backends",
        default="webgpu,vulkan",
        help="comma-separated, from webgpu, vulkan, vulkan_robust (Vulkan with the robust "
        "buffer access wgpu enables)",
    )
    parser.add_argument(
        "--shapes",
        type=_shapes,
        default=None,
        help="override the K×N list, e.g. 4096x4096,14336x4096",
    )
    parser.add_argument(
        "--gemv-shapes",
        type=lambda t: _shapes(t) if t else [],
        default=None,
        help="override the K×N list timed at M = 1 only ('' for none; none when --shapes "
        "is given), e.g. 8192x28672",
    )
    parser.add_argument(
        "--m",
        type=lambda s: [int(v) for v in s.split(",")],
        default=None,
        help="override the M list, e.g. 1,128,2048",
    )
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE)
    parser.add_argument(
        "--dtypes",
        type=_dtypes,
        default=["float32", "float16"],
        help="activation types, comma-separated: float32 (every M) and float16 (the f16 "
        "GEMV at M = 1, same weights); default both",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per point")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first")
    parser.add_argument("--ceiling-mib", type=int, default=None, help="read-ceiling buffer size")
    parser.add_argument(
        "--cold-mib",
        type=int,
        default=None,
        help="rotate over weight copies covering this many MiB (0: one copy)",
    )
    parser.add_argument(
        "--burn-passes",
        type=int,
        default=None,
        help="clock warm-up passes before each timed batch, in the same submit (gpu: 100)",
    )
    parser.add_argument(
        "--gemv-lanes",
        type=int,
        default=None,
        help="tuning: GEMV lanes per workgroup (power of two)",
    )
    parser.add_argument(
        "--gemv-words",
        type=int,
        default=None,
        help="tuning: weight words per lane per step (WORDS_PER_STEP) of a --gemv-variant",
    )
    parser.add_argument(
        "--gemv-max-workgroups", type=int, default=None, help="tuning: GEMV grid cap"
    )
    parser.add_argument(
        "--gemv-variant",
        default=None,
        help="tuning: build the GEMV from benchmarks/shaders/gemv/<NAME>.{wgsl,comp}",
    )
    parser.add_argument(
        "--back-to-back",
        action="store_true",
        help="also time each GEMV back to back (a batch of calls over independent weight "
        "copies between two timestamps), and the ceiling and the read of the same bytes alike",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help=f"calls per back-to-back batch (default: the weight copies, at least "
        f"{MIN_B2B_COPIES})",
    )
    parser.add_argument(
        "--validation",
        action="store_true",
        help="run Vulkan with the validation layer (slower to start)",
    )
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    result = run(args)
    table = markdown(result)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

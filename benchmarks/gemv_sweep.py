"""Tuning sweep of the q4gsw GEMV (M = 1): many kernel variants in one process, both backends.

    python -m benchmarks.gemv_sweep --variants "shipped;v10:words=8;shipped:lanes=128" \\
        --json sweep.json --markdown sweep.md

A variant is `SOURCE[:key=value,...]`. SOURCE is `shipped` (the repo's wgsl/ and glsl/
q4gsw_gemv) or the stem of a pair `benchmarks/shaders/gemv/<stem>.{wgsl,comp}`. Keys:
`lanes` (lanes per workgroup), `cap` (grid cap), `words` (WORDS_PER_STEP), `nox` (1:
diagnostic, x loads replaced by a constant, so the result is wrong and only the time means
something), `nodecode` (1: diagnostic, `nibbles` reinterprets the half-word as floats
instead of decoding it, which removes the decode's 16 or and add/fma instructions per word
and row; wrong result), `warm` (1: diagnostic, one weight copy, so the
weights come from L2 after the first call), `constgroup` (1: the WGSL reads the group size as
a compile-time constant, the sweep's `--group-size`, instead of from the params uniform, as
the GLSL does through a specialization constant; results stay right). Each variant is built
from its own shader folder (a temporary copy of wgsl/ or glsl/ with the GEMV replaced), so
pipelines of different variants never mix; lanes and cap are patched into both backends' op
modules for the variant's graphs only.

Everything else is as in `benchmarks.linear_q4gsw` (same graphs, cold weights rotated over
copies, GPU timestamps after a clock warm-up in the same submit, the read ceiling of each API
measured first, outputs checked against the float64 reference and between the backends).
Per shape it also times the read kernel over the same bytes (as many cold copies) and, once,
over 64 KiB: the fixed cost of one timed dispatch. This is a tuning tool: the shipped
configuration is what `benchmarks.linear_q4gsw` measures.

`--back-to-back` also times every variant, the ceiling, the read of the same bytes and the
64 KiB read back to back (`benchmarks.timing`: a batch of calls over independent weight
copies, at least `--min-copies`, between two timestamps; per call, batch time / batch).
The 64 KiB read then gives the cost per dispatch in a stream rather than the fixed cost of a
timed one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.linear_q4gsw import (
    CHECK_ROWS,
    GROUP_SIZE,
    MAX_COPIES,
    linear_graph,
    reference_rows,
)
from graph_format import Graph
from harness.model.numerics import compare

ROOT = Path(__file__).resolve().parents[1]
VARIANT_DIR = Path(__file__).resolve().parent / "shaders" / "gemv"
DEFAULT_SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672)]
CEILING_BATCH = 4  # back to back: reads of the one ceiling buffer per batch (own sinks)
FLOOR_BATCH = 16  # back to back: 64 KiB reads per batch

# (WGSL pattern, GLSL pattern, replacement format for WGSL, for GLSL)
CONSTANTS = {
    "words": (
        r"const WORDS_PER_STEP: u32 = \d+u;",
        r"const uint WORDS_PER_STEP = \d+;",
        "const WORDS_PER_STEP: u32 = {}u;",
        "const uint WORDS_PER_STEP = {};",
    ),
}
NOX = (
    (r"x\[2u \* word\]", "vec4<f32>(0.5)"),
    (r"x\[2u \* word \+ 1u\]", "vec4<f32>(0.25)"),
    (r"t_x\[2 \* word\]", "vec4(0.5)"),
    (r"t_x\[2 \* word \+ 1\]", "vec4(0.25)"),
)

# nibbles(h) returns the half-word reinterpreted as floats instead of decoded
NODECODE = (
    (
        r"(fn nibbles\(h: u32\) -> vec4<f32> \{.*?)return [^;]*;",
        r"\1return bitcast<vec4<f32>>(vec4<u32>(h));",
    ),
    (r"(vec4 nibbles\(uint h\) \{.*?)return [^;]*;", r"\1return uintBitsToFloat(uvec4(h));"),
)


def parse_variant(spec: str) -> dict[str, Any]:
    """`SOURCE[:k=v,...]` -> {"name", "source", "lanes", "cap", "words", ...}."""
    source, _, rest = spec.partition(":")
    variant: dict[str, Any] = {"name": spec, "source": source}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in ("lanes", "cap", "words", "nox", "nodecode", "warm", "constgroup"):
            raise SystemExit(f"sweep: unknown variant key {key!r} in {spec!r}")
        variant[key] = int(value)
    return variant


def _substitute(text: str, pattern: str, new: str, what: str) -> str:
    text, count = re.subn(pattern, new, text, flags=re.S)
    if count == 0:
        raise SystemExit(f"sweep: {what}: pattern {pattern!r} not found")
    return text


def shader_folders(variant: dict[str, Any], root: Path, group_size: int) -> tuple[Path, Path]:
    """(wgsl folder, glsl folder) holding the variant's q4gsw_gemv and the repo's q4gsw_gemm."""
    wgsl_dir, glsl_dir = root / "wgsl", root / "glsl"
    wgsl_dir.mkdir(parents=True)
    shutil.copytree(ROOT / "glsl", glsl_dir)
    shutil.copy(ROOT / "wgsl" / "q4gsw_gemm.wgsl", wgsl_dir)
    if variant["source"] == "shipped":
        wgsl = (ROOT / "wgsl" / "q4gsw_gemv.wgsl").read_text()
        glsl = (ROOT / "glsl" / "q4gsw_gemv.comp").read_text()
    else:
        wgsl = (VARIANT_DIR / f"{variant['source']}.wgsl").read_text()
        glsl = (VARIANT_DIR / f"{variant['source']}.comp").read_text()
    for key, (wpat, gpat, wnew, gnew) in CONSTANTS.items():
        if key in variant:
            wgsl = _substitute(wgsl, wpat, wnew.format(variant[key]), variant["name"])
            glsl = _substitute(glsl, gpat, gnew.format(variant[key]), variant["name"])
    if variant.get("nox"):
        for pattern, new in NOX:
            target = glsl if pattern.startswith("t_") else wgsl
            target = _substitute(target, pattern, new, variant["name"])
            if pattern.startswith("t_"):
                glsl = target
            else:
                wgsl = target
    if variant.get("constgroup"):
        wgsl = _substitute(wgsl, r"params\.group_size", f"{group_size}u", variant["name"])
    if variant.get("nodecode"):
        wgsl = _substitute(wgsl, *NODECODE[0], variant["name"])
        glsl = _substitute(glsl, *NODECODE[1], variant["name"])
    (wgsl_dir / "q4gsw_gemv.wgsl").write_text(wgsl)
    (glsl_dir / "q4gsw_gemv.comp").write_text(glsl)
    return wgsl_dir, glsl_dir


def set_knobs(lanes: int, cap: int) -> None:
    """Lanes per workgroup and grid cap of the GEMV on both backends (module globals)."""
    from vulkan_ref.ops import linear_q4gsw as vk_linear
    from webgpu_backend.ops import linear_q4gsw as wg_linear

    wg_linear.GEMV_LANES = lanes
    vk_linear.GEMV_WORKGROUP = lanes
    wg_linear.GEMV_MAX_WORKGROUPS = cap
    vk_linear.GEMV_MAX_WORKGROUPS = cap


class _Backends:
    """The sweep's backends: their devices, adapters and clock burners, and the read ceiling and
    timed-dispatch floor of each API, measured when the backend opens."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vulkan_ref.instance import get_context
        from webgpu_backend.device import get_timing_device

        self.args = args
        self.names: list[str] = args.backends.split(",")
        self.dev = get_timing_device() if "webgpu" in self.names else None
        self.ctx = get_context(False) if "vulkan" in self.names else None
        self.adapters: dict[str, Any] = {}
        self.burners: dict[str, Any] = {}
        self.ceiling: dict[str, float] = {}
        self.floor_us: dict[str, float] = {}
        self.ceiling_b2b: dict[str, float] = {}
        self.floor_b2b_us: dict[str, float] = {}
        for name in self.names:
            self._open(name)

    def read_times(self, name: str, nbytes: int, copies: int, batch: int = 0) -> list[float]:
        """Times of the read kernel of backend `name` over `nbytes` (`copies` cold copies)."""
        from benchmarks.ceiling import vulkan_read_times, webgpu_read_times

        fn: Any = webgpu_read_times if name == "webgpu" else vulkan_read_times
        handle = self.dev if name == "webgpu" else self.ctx
        return fn(
            handle,
            nbytes,
            repeats=self.args.repeats,
            warmup=self.args.warmup,
            copies=copies,
            burn_passes=self.args.burn_passes,
            batch=batch,
        )

    def _open(self, name: str) -> None:
        from benchmarks.ceiling import VulkanBurn, WebGPUBurn
        from vulkan_ref import VulkanRuntime
        from webgpu_backend import WebGPURuntime

        if name == "webgpu":
            self.adapters[name] = WebGPURuntime(self.dev).info()
            self.burners[name] = WebGPUBurn(self.dev)
        else:
            self.adapters[name] = VulkanRuntime(self.ctx).info()
            self.burners[name] = VulkanBurn(self.ctx)
        nbytes = self.args.ceiling_mib * 2**20
        self.ceiling[name] = nbytes / float(np.median(self.read_times(name, nbytes, 1)))
        self.floor_us[name] = float(np.median(self.read_times(name, 1 << 16, 1))) / 1e3
        print(
            f"sweep: {name} read ceiling {self.ceiling[name]:.1f} GB/s, timed-dispatch floor "
            f"{self.floor_us[name]:.2f} us",
            flush=True,
        )
        if self.args.back_to_back:
            self.ceiling_b2b[name] = nbytes / float(
                np.median(self.read_times(name, nbytes, 1, CEILING_BATCH))
            )
            self.floor_b2b_us[name] = (
                float(np.median(self.read_times(name, 1 << 16, FLOOR_BATCH, FLOOR_BATCH))) / 1e3
            )
            print(
                f"sweep: {name} back to back: read ceiling {self.ceiling_b2b[name]:.1f} GB/s, "
                f"64 KiB read {self.floor_b2b_us[name]:.2f} us per dispatch",
                flush=True,
            )

    def runtime(self, name: str, wgsl_dir: Path, glsl_dir: Path) -> tuple[Any, Any]:
        """(runtime reading the variant's shader folder, its graph timer) of backend `name`."""
        from benchmarks.timing import vulkan_time_graph, webgpu_time_graph
        from vulkan_ref import VulkanRuntime
        from webgpu_backend import WebGPURuntime

        if name == "webgpu":
            return WebGPURuntime(self.dev, shader_dir=wgsl_dir), webgpu_time_graph
        return VulkanRuntime(self.ctx, shader_dir=glsl_dir), vulkan_time_graph

    def close(self) -> None:
        """Close the clock burners."""
        for burner in self.burners.values():
            burner.close()


def _read_row(
    backends: _Backends, k: int, n: int, copies: int, stream_bytes: int, batch: int
) -> dict[str, Any]:
    """The row of the read kernel over the shape's bytes (as many cold copies), per backend."""
    row: dict[str, Any] = {
        "variant": "read",
        "k": k,
        "n": n,
        "copies": copies,
        "stream_bytes": stream_bytes,
    }
    for name in backends.names:
        same = stream_bytes / float(np.median(backends.read_times(name, stream_bytes, copies)))
        row[name] = same
        msg = f"sweep: read of the same bytes K={k} N={n} {name}: {same:.0f} GB/s"
        if backends.args.back_to_back:
            same_b = stream_bytes / float(
                np.median(backends.read_times(name, stream_bytes, copies, batch))
            )
            row[f"{name}_b2b"] = same_b
            msg += f", back to back {same_b:.0f} GB/s"
        print(msg, flush=True)
    return row


@dataclass
class _Shape:
    """One shape of the sweep: its graph, input, float64 reference and weight copies."""

    k: int
    n: int
    graph: Graph
    stream_bytes: int
    x: np.ndarray
    ref: np.ndarray
    budget: np.ndarray
    copies: int
    batch: int


def _time_variant(
    backends: _Backends, name: str, v: dict[str, Any], shape: _Shape, folders: tuple[Path, Path]
) -> tuple[dict[str, Any], np.ndarray]:
    """(the variant's cell of backend `name` on `shape`, its output)."""
    args = backends.args
    start = time.perf_counter()
    runtime, time_graph = backends.runtime(name, *folders)
    n_copies = 1 if v.get("warm") else shape.copies
    loaded = [runtime.load(shape.graph) for _ in range(n_copies)]
    timed = {
        "repeats": args.repeats,
        "warmup": args.warmup,
        "burn": backends.burners[name],
        "burn_passes": args.burn_passes,
    }
    try:
        (timing,) = time_graph(loaded, {"x": shape.x}, **timed)
        assert timing.kernel == "q4gsw_gemv", timing.kernel
        timing_b2b = None
        if args.back_to_back and not v.get("warm"):
            (timing_b2b,) = time_graph(loaded, {"x": shape.x}, **timed, batch=shape.batch)
        out = loaded[0].execute({"x": shape.x}).outputs["linear.out"]
    finally:
        for lg in loaded:
            lg.close()
    ns = timing.median_ns
    times = sorted(timing.times_ns)
    cell: dict[str, Any] = {
        "us": ns / 1e3,
        "us_min": times[0] / 1e3,
        "us_max": times[-1] / 1e3,
        "gbps": shape.stream_bytes / ns,
        "of_ceiling": shape.stream_bytes / ns / backends.ceiling[name],
        "err_budget": compare(out[:CHECK_ROWS], shape.ref, shape.budget).utilization,
        "wall": time.time(),
    }
    b2b_text = ""
    if timing_b2b is not None:
        ns_b = timing_b2b.median_ns
        cell |= {
            "b2b_us": ns_b / 1e3,
            "b2b_gbps": shape.stream_bytes / ns_b,
            "b2b_of_ceiling": shape.stream_bytes / ns_b / backends.ceiling_b2b[name],
            "batch": shape.batch,
        }
        b2b_text = f"; back to back {ns_b / 1e3:.2f} us {cell['b2b_of_ceiling'] * 100:.1f} %"
    print(
        f"sweep: {v['name']} K={shape.k} N={shape.n} {name}: {ns / 1e3:.2f} us "
        f"{cell['of_ceiling'] * 100:.1f} % of ceiling "
        f"err/budget {cell['err_budget']:.2g}{b2b_text} "
        f"({time.perf_counter() - start:.1f} s)",
        flush=True,
    )
    return cell, out


def _shape(args: argparse.Namespace, rng: np.random.Generator, k: int, n: int) -> _Shape:
    graph, stream_bytes = linear_graph(rng, k, n, 1, args.group_size)
    copies = max(1, min(MAX_COPIES, math.ceil(args.cold_mib * 2**20 / stream_bytes)))
    if args.back_to_back:
        copies = max(copies, args.min_copies)
    x = rng.standard_normal((1, k)).astype(np.float32)
    ref, budget = reference_rows(graph, x)
    batch = copies if args.back_to_back else 0
    return _Shape(k, n, graph, stream_bytes, x, ref, budget, copies, batch)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Time every variant on every shape and backend; returns plain data."""
    from vulkan_ref.ops import linear_q4gsw as vk_linear
    from webgpu_backend.ops import linear_q4gsw as wg_linear

    shipped_lanes, shipped_cap = wg_linear.GEMV_LANES, wg_linear.GEMV_MAX_WORKGROUPS
    assert shipped_lanes == vk_linear.GEMV_WORKGROUP
    backends = _Backends(args)
    variants = [parse_variant(v) for v in args.variants.split(";") if v]
    tmp = Path(tempfile.mkdtemp(prefix="gemv-sweep-"))
    folders = {
        v["name"]: shader_folders(v, tmp / f"v{i}", args.group_size) for i, v in enumerate(variants)
    }
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for k, n in args.shapes:
        shape = _shape(args, rng, k, n)
        rows.append(_read_row(backends, k, n, shape.copies, shape.stream_bytes, shape.batch))
        for v in variants:
            set_knobs(v.get("lanes", shipped_lanes), v.get("cap", shipped_cap))
            n_copies = 1 if v.get("warm") else shape.copies
            row: dict[str, Any] = {"variant": v["name"], "k": k, "n": n, "copies": n_copies}
            outs = {}
            for name in backends.names:
                row[name], outs[name] = _time_variant(backends, name, v, shape, folders[v["name"]])
            if len(outs) == 2:
                a, b = outs.values()
                row["backend_diff"] = float(np.abs(a.astype(np.float64) - b).max()) / (
                    float(np.abs(a).max()) or 1.0
                )
            rows.append(row)
    set_knobs(shipped_lanes, shipped_cap)
    backends.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "adapters": backends.adapters,
        "ceiling_gbps": backends.ceiling,
        "floor_us": backends.floor_us,
        "ceiling_b2b_gbps": backends.ceiling_b2b,
        "floor_b2b_us": backends.floor_b2b_us,
        "config": {
            "repeats": args.repeats,
            "warmup": args.warmup,
            "cold_mib": args.cold_mib,
            "ceiling_mib": args.ceiling_mib,
            "group_size": args.group_size,
            "burn_passes": args.burn_passes,
            "back_to_back": args.back_to_back,
            "min_copies": args.min_copies,
        },
        "backends": backends.names,
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    """One line per variant and shape: µs and % of the ceiling per backend."""
    names = result["backends"]
    b2b = bool(result.get("ceiling_b2b_gbps"))
    lines = [
        "ceiling: " + ", ".join(f"{n} {result['ceiling_gbps'][n]:.0f} GB/s" for n in names),
        "timed-dispatch floor: " + ", ".join(f"{n} {result['floor_us'][n]:.2f} us" for n in names),
    ]
    if b2b:
        lines += [
            "back to back: ceiling "
            + ", ".join(f"{n} {result['ceiling_b2b_gbps'][n]:.0f} GB/s" for n in names)
            + "; 64 KiB read per dispatch "
            + ", ".join(f"{n} {result['floor_b2b_us'][n]:.2f} us" for n in names),
        ]
    per = [f"{n} µs | {n} %" + (f" | {n} b2b µs | {n} b2b %" if b2b else "") for n in names]
    lines += [
        "",
        "| variant | K×N | " + " | ".join(per) + " | err/budget | backend diff |",
        "|---|---|" + ("---|---|" * (2 if b2b else 1)) * len(names) + "---|---|",
    ]
    for row in result["rows"]:
        if row["variant"] == "read":
            same = ", ".join(f"{n} {row[n]:.0f} GB/s" for n in names)
            if b2b:
                same += "; back to back " + ", ".join(
                    f"{n} {row[n + '_b2b']:.0f} GB/s" for n in names
                )
            lines.append(f"| read of the same bytes | {row['k']}×{row['n']} | {same} |")
            continue
        cells = [row["variant"], f"{row['k']}×{row['n']}"]
        for n in names:
            cells += [f"{row[n]['us']:.2f}", f"{row[n]['of_ceiling'] * 100:.1f}"]
            if b2b:
                if "b2b_us" in row[n]:
                    cells += [f"{row[n]['b2b_us']:.2f}", f"{row[n]['b2b_of_ceiling'] * 100:.1f}"]
                else:
                    cells += ["", ""]
        cells.append(f"{max(row[n]['err_budget'] for n in names):.2g}")
        diff = row.get("backend_diff")
        cells.append("" if diff is None else f"{diff:.1e}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _shapes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        k, _, n = item.lower().partition("x")
        out.append((int(k), int(n)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gemv_sweep", description=__doc__)
    parser.add_argument(
        "--variants", required=True, help="';'-separated SOURCE[:key=value,...] variants"
    )
    parser.add_argument("--backends", default="webgpu,vulkan")
    parser.add_argument("--shapes", type=_shapes, default=DEFAULT_SHAPES)
    parser.add_argument("--group-size", type=int, default=GROUP_SIZE)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cold-mib", type=int, default=128)
    parser.add_argument("--ceiling-mib", type=int, default=1024)
    parser.add_argument("--burn-passes", type=int, default=100, help="clock warm-up passes")
    parser.add_argument(
        "--back-to-back",
        action="store_true",
        help="also time every variant and read back to back (batches over the weight copies)",
    )
    parser.add_argument(
        "--min-copies",
        type=int,
        default=4,
        help="back to back: at least this many weight copies, i.e. calls per batch",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    result = run(args)
    table = markdown(result)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

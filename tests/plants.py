"""Planting bugs in a backend for a test, and nowhere else.

A shader plant is planted through the runtimes' public seam: a copy of the shader folder
with the text changed (`planted_shader_dirs`, what `shader_dir` and `parity run --wgsl-dir`
/ `--glsl-dir` take), loaded by fresh runtimes that are closed afterwards
(`planted_runtimes`; `wgsl_substitution` and `glsl_substitution` yield a lockstep runner
over them), so no planted kernel reaches another runtime's caches. The other context
managers change one backend's behaviour for the duration of a `with` block (a wrapped
resize hook or dispatch node).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from graph_format import OpNode, Runtime
from harness.check.backends import BACKENDS, open_runtimes
from harness.check.lockstep import LockstepRunner
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.pipeline import ComputePipeline, PipelineCache, ShaderKey
from vulkan_ref.pool import DescriptorCache, descriptor_key
from vulkan_ref.spirv import GLSL_DIR
from webgpu_backend.graph import Dispatch, WebGPUGraph
from webgpu_backend.shaders import WGSL_DIR

# A shader plant: (kernel stem, text of its file, what replaces that text).
Swap = tuple[str, str, str]
_SHADER_FOLDERS = {"webgpu": (WGSL_DIR, ".wgsl"), "vulkan": (GLSL_DIR, ".comp")}


def planted_shader_dirs(
    folder: Path, wgsl: Sequence[Swap] = (), glsl: Sequence[Swap] = ()
) -> dict[str, Path]:
    """Copies of the repo's `wgsl/` (with `wgsl`'s swaps applied) and `glsl/` (with
    `glsl`'s) under `folder`, for the languages that have swaps: API -> folder, what a
    runtime's `shader_dir` and `parity run --wgsl-dir/--glsl-dir` take. Each swap's old
    text must occur in its file."""
    dirs: dict[str, Path] = {}
    for api, swaps in (("webgpu", wgsl), ("vulkan", glsl)):
        if not swaps:
            continue
        shipped, suffix = _SHADER_FOLDERS[api]
        planted = folder / shipped.name
        if not planted.exists():
            shutil.copytree(shipped, planted)
        apply_swaps(planted, suffix, swaps)
        dirs[api] = planted
    return dirs


def apply_swaps(folder: Path, suffix: str, swaps: Sequence[Swap], *, once: bool = False) -> None:
    """Apply each (stem, old, new) to `<folder>/<stem><suffix>`: `old` must occur (exactly
    once with `once`), and every occurrence is replaced."""
    for stem, old, new in swaps:
        path = folder / f"{stem}{suffix}"
        source = path.read_text()
        found = source.count(old)
        assert (found == 1) if once else (found > 0), f"{path}: the planted {old!r} does not apply"
        path.write_text(source.replace(old, new))


@contextmanager
def planted_runtimes(
    wgsl: Sequence[Swap] = (), glsl: Sequence[Swap] = (), backends: Sequence[str] = BACKENDS
) -> Iterator[list[Runtime]]:
    """Fresh runtimes of `backends` built from planted copies of the shader folders
    (`planted_shader_dirs`), closed on the way out: the plant lives in these runtimes and
    nowhere else."""
    with tempfile.TemporaryDirectory() as tmp:
        runtimes = open_runtimes(backends, planted_shader_dirs(Path(tmp), wgsl, glsl))
        try:
            yield runtimes
        finally:
            for runtime in runtimes:
                runtime.close()


@contextmanager
def shader_substitutions(
    wgsl: Sequence[Swap] = (), glsl: Sequence[Swap] = ()
) -> Iterator[LockstepRunner]:
    """A lockstep runner over both runtimes built from planted shader folders
    (`planted_runtimes`)."""
    with planted_runtimes(wgsl, glsl) as runtimes:
        yield LockstepRunner(runtimes)


def wgsl_substitution(stem: str, old: str, new: str) -> AbstractContextManager[LockstepRunner]:
    """A lockstep runner whose WebGPU runtime loads `wgsl/<stem>.wgsl` with `old` replaced
    by `new` (which must occur), from a copy of the folder (`--wgsl-dir`)."""
    return shader_substitutions(wgsl=[(stem, old, new)])


def glsl_substitution(stem: str, old: str, new: str) -> AbstractContextManager[LockstepRunner]:
    """A lockstep runner whose Vulkan runtime compiles `glsl/<stem>.comp` with `old`
    replaced by `new` (which must occur), from a copy of the folder (`--glsl-dir`)."""
    return shader_substitutions(glsl=[(stem, old, new)])


@contextmanager
def webgpu_after_hook(
    op_type: str, after: Callable[[WebGPUGraph, OpNode, list[Dispatch]], None]
) -> Iterator[None]:
    """Run `after(graph, node, its dispatches)` right after every resize hook of `op_type`."""
    original = WebGPUGraph.add_resize_hook

    def add_resize_hook(self: WebGPUGraph, node: OpNode, triggers: Any, fn: Any) -> None:
        if node.op != op_type:
            return original(self, node, triggers, fn)

        def planted() -> None:
            fn()
            after(self, node, [d for d in self.dispatches if d.op == node.name])

        return original(self, node, triggers, planted)

    WebGPUGraph.add_resize_hook = add_resize_hook  # type: ignore[method-assign]
    try:
        yield
    finally:
        WebGPUGraph.add_resize_hook = original  # type: ignore[method-assign]


@contextmanager
def webgpu_without_set_cur_dims(op_type: str) -> Iterator[None]:
    """Make the hooks of `op_type` forget to set their outputs' live dims."""
    original_hook = WebGPUGraph.add_resize_hook
    original_set = WebGPUGraph.set_cur_dims
    active: list[str] = []

    def add_resize_hook(self: WebGPUGraph, node: OpNode, triggers: Any, fn: Any) -> None:
        if node.op != op_type:
            return original_hook(self, node, triggers, fn)

        def planted() -> None:
            active.append(node.name)
            try:
                fn()
            finally:
                active.pop()

        return original_hook(self, node, triggers, planted)

    def set_cur_dims(self: WebGPUGraph, tensor: Any, dims: Any) -> None:
        if not active:
            original_set(self, tensor, dims)

    WebGPUGraph.add_resize_hook = add_resize_hook  # type: ignore[method-assign]
    WebGPUGraph.set_cur_dims = set_cur_dims  # type: ignore[method-assign]
    try:
        yield
    finally:
        WebGPUGraph.add_resize_hook = original_hook  # type: ignore[method-assign]
        WebGPUGraph.set_cur_dims = original_set  # type: ignore[method-assign]


@contextmanager
def vulkan_node_patch(
    op_type: str, patch: Callable[[ComputeGraph, DispatchNode], None], *, bound: bool = False
) -> Iterator[None]:
    """Let `patch(graph, node)` alter every dispatch node of `op_type` as it is added: before
    its kernels are bound, or (`bound`) once they are (`node.kernels`)."""
    original = ComputeGraph.add_dispatch_node

    def add_dispatch_node(self: ComputeGraph, node: DispatchNode) -> DispatchNode:
        op = next(n for n in self.graph.ops if n.name == node.op)
        if op.op == op_type and not bound:
            patch(self, node)
        added = original(self, node)
        if op.op == op_type and bound:
            patch(self, node)
        return added

    ComputeGraph.add_dispatch_node = add_dispatch_node  # type: ignore[method-assign]
    try:
        yield
    finally:
        ComputeGraph.add_dispatch_node = original  # type: ignore[method-assign]


def push_too_much(graph: ComputeGraph, node: DispatchNode) -> None:
    """Push 8 bytes where the pipelines' push-constant range is 4 (a `bound` node patch of
    rms_norm, whose eps push constant is packed at load)."""
    for kernel in node.kernels.values():
        for part in kernel.parts:
            assert part.push is not None
            part.push = dataclasses.replace(part.push, size=8)
            part.push_data = struct.pack("<ff", 1e-6, 0.0)


@contextmanager
def vulkan_pipelines_without_push_range() -> Iterator[LockstepRunner]:
    """A lockstep runner over fresh runtimes whose Vulkan pipelines are built with a layout
    that leaves out the push constants their kernels read (fresh: a runtime that built its
    pipelines before keeps them)."""
    original = PipelineCache.get

    def get(self: PipelineCache, key: ShaderKey, code: bytes) -> ComputePipeline:
        return original(self, dataclasses.replace(key, push_constant_size=0), code)

    PipelineCache.get = get  # type: ignore[method-assign]
    try:
        with planted_runtimes() as runtimes:
            yield LockstepRunner(runtimes)
    finally:
        PipelineCache.get = original  # type: ignore[method-assign]


@contextmanager
def webgpu_toggling_hook(op_type: str) -> Iterator[None]:
    """Make every `op_type` hook toggle a dim of its output after doing its work, and run
    again whenever that output changes: the resize engine never converges."""
    original = WebGPUGraph.add_resize_hook

    def add_resize_hook(self: WebGPUGraph, node: OpNode, triggers: Any, fn: Any) -> None:
        if node.op != op_type:
            return original(self, node, triggers, fn)
        out = self.output(node, "out")

        def planted() -> None:
            fn()
            dims = list(out.cur_dims)
            for d, top in enumerate(out.dims):
                if top > 1:  # a dim that can take another value
                    dims[d] = top - 1 if dims[d] == top else top
                    break
            self.set_cur_dims(out, dims)

        return original(self, node, {*triggers, out.name}, planted)

    WebGPUGraph.add_resize_hook = add_resize_hook  # type: ignore[method-assign]
    try:
        yield
    finally:
        WebGPUGraph.add_resize_hook = original  # type: ignore[method-assign]


@contextmanager
def webgpu_grid_hook(
    planted: Callable[[Callable[[int, int], tuple[int, int, int]], int, int], tuple[int, int, int]],
) -> Iterator[None]:
    """Replace WebGPU's grid computation, the documented hook `WebGPUGraph.fold_grid`, with
    `planted(the real one, count, max_per_dim)` for the duration of the block."""
    original = WebGPUGraph.__dict__["fold_grid"]
    real = WebGPUGraph.fold_grid

    def fold_grid(count: int, max_per_dim: int) -> tuple[int, int, int]:
        return planted(real, count, max_per_dim)

    WebGPUGraph.fold_grid = staticmethod(fold_grid)  # type: ignore[assignment]
    try:
        yield
    finally:
        WebGPUGraph.fold_grid = original


@contextmanager
def webgpu_fold_with_floor() -> Iterator[None]:
    """Make WebGPU's 2-D grid fold count its rows with floor instead of ceil division, so a
    folded count that is not a multiple of the row length loses its last workgroups."""

    def fold_grid(
        real: Callable[[int, int], tuple[int, int, int]], count: int, max_per_dim: int
    ) -> tuple[int, int, int]:
        x, _, z = real(count, max_per_dim)
        return (x, count // x, z)  # planted: floor

    with webgpu_grid_hook(fold_grid):
        yield


@contextmanager
def vulkan_descriptor_sets_keyed_without_offset() -> Iterator[None]:
    """Key Vulkan's descriptor-set cache (the documented hook `DescriptorCache.key`) by each
    binding's buffer and range but not its offset: a graph that binds a recycled block at
    other offsets, with the same sizes, reuses the set an earlier graph wrote, and reads and
    writes that graph's places. Whether a case fails depends on what ran before it in the
    process (the runtime's pool and its cache)."""
    original = DescriptorCache.__dict__["key"]

    def key(kinds: Any, ranges: Any) -> Any:
        layout, bound = descriptor_key(kinds, ranges)
        return (layout, tuple((address, size) for address, _offset, size in bound))

    DescriptorCache.key = staticmethod(key)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        DescriptorCache.key = original  # type: ignore[method-assign]


_SITECUSTOMIZE = """\
# Written by tests/plants.py: every interpreter started with this folder on PYTHONPATH
# imports this module first, and so runs with the plant below in place.
from tests import plants

_PLANT = plants.{name}()  # kept: a dropped context manager would undo the plant
_PLANT.__enter__()
"""


def plant_in_every_process(folder: Path, name: str) -> dict[str, str]:
    """The environment that plants `name` (a plant of this module taking no arguments) in
    every Python process started with it: a `sitecustomize` module in `folder` on
    PYTHONPATH, which interpreters import at start-up (spawned workers and the fresh
    processes of cold re-runs and `parity replay` included)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(name=name))
    repo = Path(__file__).resolve().parents[1]
    paths = [str(folder), str(repo), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@contextmanager
def webgpu_grid_one_short() -> Iterator[None]:
    """Make WebGPU's grid computation (the hook `WebGPUGraph.fold_grid`, which sizes the
    physical grid of every 1-D dispatch of every op, folded or not) give one workgroup fewer
    than the count asked for whenever it asks for more than one: a fault in a shared
    mechanism that every op with a kernel shows, under the device's own limit as under a
    lowered one."""

    def fold_grid(
        real: Callable[[int, int], tuple[int, int, int]], count: int, max_per_dim: int
    ) -> tuple[int, int, int]:
        x, y, z = real(count, max_per_dim)
        if count > 1 and y == 1:
            return (x - 1, y, z)  # planted: the last workgroup is dropped
        if count > 1:
            return (x, y - 1, z)  # planted: the last row of the fold is dropped
        return (x, y, z)

    with webgpu_grid_hook(fold_grid):
        yield

"""WebGPU compute runtime (wgpu-py, kernels in wgsl/) with a tensor-shape resize engine.

Implements `graph_format.Runtime`: `WebGPURuntime().load(graph)` builds a `WebGPUGraph`
whose `execute` resizes to the inputs' live shapes, propagates through per-op hooks and runs
every dispatch in one submit. Independent of `vulkan_ref` and of the harness by design.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graph_format import Graph, GraphBuildError
from webgpu_backend.device import WebGPUDevice, get_device
from webgpu_backend.graph import WebGPUGraph

__all__ = ["WebGPUGraph", "WebGPURuntime"]


class WebGPURuntime:
    """The WebGPU backend on the process's default adapter.

    Args:
        device: the device to use (default: the process-wide one).
        shader_dir: a folder of `<kernel>.wgsl` files to build graphs from instead of the
            repo's `wgsl/` (a repro bundle's own shader copies).
    """

    name = "webgpu"

    def __init__(
        self, device: WebGPUDevice | None = None, shader_dir: str | Path | None = None
    ) -> None:
        self.device = device or get_device()
        self.shader_dir = Path(shader_dir).resolve() if shader_dir else None

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports."""
        return self.device.info()

    def load(self, graph: Graph) -> WebGPUGraph:
        """Build `graph`; raises GraphBuildError when an op rejects it."""
        from webgpu_backend.ops import OP_BUILDERS

        for node in graph.ops:
            if node.op not in OP_BUILDERS:
                raise GraphBuildError(node.name, f"webgpu has no implementation of {node.op!r}")
        return WebGPUGraph(self.device, graph, self.shader_dir)

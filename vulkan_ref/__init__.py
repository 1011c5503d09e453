"""Reference Vulkan compute runtime (the `vulkan` package, GLSL in glsl/ compiled by glslc).

Implements `graph_format.Runtime` with ExecuTorch Vulkan's resize model: nodes whose resize
functions run in graph order on every execute, dispatch nodes that re-pick shader and
global/local sizes from live sizes and skip when the global size is zero. Independent of
`webgpu_backend` and of the harness by design.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graph_format import Graph, GraphBuildError
from vulkan_ref.graph import ComputeGraph
from vulkan_ref.instance import VulkanContext, get_context

__all__ = ["ComputeGraph", "VulkanRuntime"]


class VulkanRuntime:
    """The Vulkan backend on the preferred physical device (discrete GPU, else lavapipe).

    Args:
        context: the context to use (default: the process-wide one).
        shader_dir: a folder laid out like `glsl/` (`<kernel>.comp`, `include/`) to build
            graphs from instead of the repo's (a repro bundle's own shader copies).
    """

    name = "vulkan"

    def __init__(
        self, context: VulkanContext | None = None, shader_dir: str | Path | None = None
    ) -> None:
        self.context = context or get_context()
        self.shader_dir = str(Path(shader_dir).resolve()) if shader_dir else None

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports."""
        return self.context.info()

    def load(self, graph: Graph) -> ComputeGraph:
        """Build `graph`; raises GraphBuildError when an op rejects it."""
        from vulkan_ref.ops import OP_IMPLS

        for node in graph.ops:
            if node.op not in OP_IMPLS:
                raise GraphBuildError(node.name, f"vulkan has no implementation of {node.op!r}")
        return ComputeGraph(self.context, graph, self.shader_dir)

"""The interface both runtimes offer to the harness (docs/design.md §5): plain data, Protocols.

Nothing here computes shapes, resizes or dispatches: it only fixes what a runtime reports
after each execute, so that the harness can compare two independent implementations field
by field. The runtimes satisfy the Protocols structurally; neither imports the harness.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from graph_format.errors import BackendUnavailable
from graph_format.graph import Graph

Dims = tuple[int, ...]
Grid = tuple[int, int, int]


@dataclass(frozen=True)
class DispatchRecord:
    """One compute dispatch of one execute.

    `logical_count` is the workgroup count the op's kernel design asks for (identical on
    both backends by contract); `physical_grid` is what was handed to the API after folding
    a count that exceeds the device's per-dimension limit. A skipped dispatch (a route not
    taken, or an empty live size) has `ran` False and a zero logical count.
    """

    op: str
    kernel: str
    workgroup_size: Grid
    logical_count: Grid
    physical_grid: Grid
    ran: bool

    def logical(self) -> tuple[str, str, Grid, Grid, bool]:
        """The part that must match exactly across backends and the contract model."""
        return (self.op, self.kernel, self.workgroup_size, self.logical_count, self.ran)


@dataclass
class StepResult:
    """What one execute produced.

    Attributes:
        outputs: graph outputs, read back at their live dims.
        cur_dims: live dims of every tensor value after the step.
        symints: every SymInt value after the step.
        dispatches: the dispatch log, in submission order.
        tensors: tensors asked for with `read=`, at their live dims (intermediates included).
        raw: whole allocations asked for with `read_raw=`, as bytes (uint8 arrays).
        validation_messages: driver or API validation messages raised during the step.
        guard_writes: tensor -> 32-bit words found changed in the guard region that follows
            its allocation (a write past the allocation, whatever the live size); each
            runtime poisons its guards when a graph is built, reads them back with the
            step's other results and re-poisons damaged ones before the next step. Keys are
            tensor names, or `<op node>.<label>` for an op's private scratch buffers.
    """

    outputs: dict[str, np.ndarray]
    cur_dims: dict[str, Dims]
    symints: dict[str, int]
    dispatches: list[DispatchRecord]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    raw: dict[str, np.ndarray] = field(default_factory=dict)
    validation_messages: list[str] = field(default_factory=list)
    guard_writes: dict[str, int] = field(default_factory=dict)


class LoadedGraph(Protocol):
    """A graph built on one backend, ready to execute any number of times."""

    def execute(
        self,
        inputs: Mapping[str, np.ndarray | int],
        *,
        read: Sequence[str] = (),
        read_raw: Sequence[str] = (),
        fill: Mapping[str, tuple[int, int]] | None = None,
    ) -> StepResult:
        """Resize to the inputs' live shapes, run every dispatch in one submit, read back.

        Args:
            inputs: every graph input by name: host arrays for tensors, ints for SymInts.
            read: extra tensors to read back at their live size.
            read_raw: tensors whose whole allocation to read back as bytes.
            fill: tensor -> (byte offset, u32 word): before the dispatches, fill the tensor's
                allocation from the offset to its end with the word (slack canaries).

        Raises:
            ResizeError, InputError: invalid inputs; the graph is left as it was.
        """
        ...

    def cur_dims(self) -> dict[str, Dims]:
        """Live dims of every tensor value."""
        ...

    def close(self) -> None:
        """Release the graph's device objects (idempotent)."""
        ...


# The WebGPU implementations a WebGPU runtime can run on (webgpu_backend.gpu), the default
# first; and how a runtime is named after its API and implementation: `vulkan`, `webgpu`
# (wgpu-native: the name every record had before there were several), `webgpu-dawn`,
# `webgpu-chrome`. Records, blame, coverage and bundles carry these names.
WEBGPU_IMPLEMENTATIONS = ("wgpu", "dawn", "chrome")
APIS = ("webgpu", "vulkan")


def webgpu_runtime_name(implementation: str) -> str:
    """The runtime name of a WebGPU implementation (`wgpu` -> `webgpu`, `dawn` ->
    `webgpu-dawn`).

    Raises:
        ValueError: not one of `WEBGPU_IMPLEMENTATIONS`.
    """
    if implementation not in WEBGPU_IMPLEMENTATIONS:
        raise ValueError(
            f"unknown WebGPU implementation {implementation!r}; expected one of "
            f"{', '.join(WEBGPU_IMPLEMENTATIONS)}"
        )
    return "webgpu" if implementation == "wgpu" else f"webgpu-{implementation}"


def runtime_api(name: str) -> str:
    """The API of a runtime by name (`webgpu-dawn` -> `webgpu`): the shader language, the
    kernel manifest's section and the shader folder it reads.

    Raises:
        ValueError: not a runtime name.
    """
    api, dash, implementation = name.partition("-")
    extra = WEBGPU_IMPLEMENTATIONS[1:] if api == "webgpu" else ()
    if api not in APIS or (dash and implementation not in extra):
        raise ValueError(
            f"unknown backend {name!r}; expected vulkan, webgpu or webgpu-<implementation> "
            f"({', '.join(WEBGPU_IMPLEMENTATIONS[1:])})"
        )
    return api


def webgpu_implementation(name: str) -> str:
    """The WebGPU implementation of a runtime by name (`webgpu` -> `wgpu`); "" for vulkan."""
    if runtime_api(name) != "webgpu":
        return ""
    return name.partition("-")[2] or WEBGPU_IMPLEMENTATIONS[0]


class Runtime(Protocol):
    """A backend: one device, any number of loaded graphs. `name` is its runtime name
    (`runtime_api` splits it)."""

    name: str

    def info(self) -> dict[str, Any]:
        """Adapter/driver facts for reports: name, vendor, driver version, API, limits."""
        ...

    def load(self, graph: Graph) -> LoadedGraph:
        """Build `graph` on the device; raises GraphBuildError when an op rejects it."""
        ...

    def close(self) -> None:
        """Free what the runtime made and cached (its memory, pipelines, compiled kernels;
        idempotent), after its graphs are closed. A runtime's caches are its own: two
        runtimes in one process share only the device."""
        ...


# The environment variable that picks the adapter a runtime opens (`parity run --jobs N`
# sets it in each worker). Unset: the runtime's own default. `I`: the adapter at index I of
# the runtime's ranked list (its API's adapters, most preferred kind first: discrete GPUs,
# integrated, virtual, CPU; enumeration order within a kind). `spread:K`: adapter K modulo
# the number of adapters of the most preferred kind, so that workers 0, 1, 2, ... spread
# over every GPU of a machine (and all share the one default adapter of a machine without).
ADAPTER_VARIABLE = "VULKAN_PARITY_ADAPTER"

A = TypeVar("A")


def pick_adapter(backend: str, ranked: Sequence[A], best: int, name: Callable[[A], str]) -> A:
    """The adapter `ADAPTER_VARIABLE` asks for among `ranked` (see there).

    Args:
        backend: the runtime's name, for messages.
        ranked: the API's adapters, most preferred first.
        best: how many of them are of the most preferred kind (>= 1).
        name: an adapter's name, for messages.

    Raises:
        BackendUnavailable: no adapter, an index past the list, or a value of another form.
    """
    if not ranked:
        raise BackendUnavailable(f"{backend}: no adapter found")
    text = os.environ.get(ADAPTER_VARIABLE, "").strip()
    if not text:
        return ranked[0]
    listed = ", ".join(f"{i}: {name(a)}" for i, a in enumerate(ranked))
    try:
        if text.startswith("spread:"):
            return ranked[int(text.removeprefix("spread:")) % max(1, best)]
        index = int(text)
    except ValueError:
        raise BackendUnavailable(
            f"{backend}: {ADAPTER_VARIABLE}={text!r} is neither an adapter index nor "
            f"spread:K; the adapters here are {listed}"
        ) from None
    if not 0 <= index < len(ranked):
        raise BackendUnavailable(
            f"{backend}: {ADAPTER_VARIABLE}={text} asks for adapter {index}, but there "
            f"{'is' if len(ranked) == 1 else 'are'} {len(ranked)}: {listed}"
        )
    return ranked[index]

"""The parts of a Vulkan graph's resize engine that need no graph (docs/design.md §4.2): a
step's inputs checked before anything changes (`check_inputs`), what a refused step
restores (`Snapshot`), what a resize checks and writes once every node resized (the
physical grid of every dispatch, SymInts that fit int32, the params uniforms it packed).
`vulkan_ref.graph` walks its nodes and calls these around that walk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from graph_format import DTYPES, InputError
from vulkan_ref.nodes import SKIPPED, WG, NodeState, Sizes, Stateful, SymInt
from vulkan_ref.tensor import VTensor

INT32_RANGE = range(-(1 << 31), 1 << 31)


@dataclass
class InputCheck:
    """A check an op runs on a graph input's host data at every execute (`fn` raises
    `InputError`)."""

    op: str
    tensor: str
    fn: Callable[[np.ndarray], None]


@dataclass
class Snapshot:
    """What a refused step restores: every live size, SymInt and node state, and what was
    pending as updated."""

    sizes: dict[str, Sizes]
    symints: dict[str, int]
    nodes: list[NodeState] = field(default_factory=list)
    updated: set[str] = field(default_factory=set)

    @classmethod
    def take(
        cls,
        tensors: Mapping[str, VTensor],
        symints: Mapping[str, SymInt],
        nodes: Sequence[Stateful],
        updated: set[str],
    ) -> Snapshot:
        """The state of a graph's values and nodes now."""
        return cls(
            sizes={n: t.sizes for n, t in tensors.items()},
            symints={n: s.value for n, s in symints.items()},
            nodes=[n.state for n in nodes],
            updated=set(updated),
        )

    def restore(
        self,
        tensors: Mapping[str, VTensor],
        symints: Mapping[str, SymInt],
        nodes: Sequence[Stateful],
    ) -> set[str]:
        """Put the values and nodes back; returns what was pending as updated before the
        step (everything, before the first execute)."""
        for name, sizes in self.sizes.items():
            tensors[name].virtual_resize(sizes)
        for name, value in self.symints.items():
            symints[name].set(value)
        for node, state in zip(nodes, self.nodes, strict=True):
            node.state = state
        return set(self.updated)


def check_inputs(
    inputs: Mapping[str, np.ndarray | int],
    graph_inputs: Sequence[str],
    tensors: Mapping[str, VTensor],
    symints: Mapping[str, SymInt],
    checks: Sequence[InputCheck],
) -> tuple[list[tuple[VTensor, np.ndarray]], dict[str, int]]:
    """A step's inputs checked against the graph's (names, dtypes, sizes, then the ops'
    own checks), as host arrays by tensor and ints by SymInt.

    Raises:
        InputError: an input is missing, unknown, of the wrong kind or dtype, or refused.
    """
    for name in graph_inputs:
        if name not in inputs:
            raise InputError(name, "missing", f"vulkan: missing graph input {name!r}")
    extra = [n for n in inputs if n not in graph_inputs]
    if extra:
        raise InputError(
            extra[0],
            "unknown",
            f"vulkan: {extra[0]!r} is not an input of this graph ({list(graph_inputs)})",
        )
    arrays: list[tuple[VTensor, np.ndarray]] = []
    ints: dict[str, int] = {}
    for name in graph_inputs:
        value = inputs[name]
        if name in symints:
            if not isinstance(value, int | np.integer) or isinstance(value, bool):
                raise InputError(
                    name, "dtype", f"vulkan: SymInt {name!r} needs an int, not {value!r}"
                )
            ints[name] = int(value)
            continue
        tensor = tensors[name]
        array = _convert(tensor, value)
        tensor.validate(tuple(array.shape))
        arrays.append((tensor, array))
    host = {tensor.name: array for tensor, array in arrays}
    for check in checks:
        check.fn(host[check.tensor])
    return arrays, ints


def _convert(tensor: VTensor, value: object) -> np.ndarray:
    """Host data for `tensor` as a contiguous array of its dtype (int64 narrowed to int32)."""
    if not isinstance(value, np.ndarray):
        raise InputError(tensor.name, "dtype", f"vulkan: {tensor.name!r} needs a numpy array")
    want = DTYPES[tensor.dtype]
    if value.dtype == want:
        return np.ascontiguousarray(value)
    if want == np.int32 and value.dtype == np.int64:
        # Narrow int64 token ids to the int32 buffer, refusing values that would wrap.
        narrowed = value.astype(np.int32)
        if not np.array_equal(narrowed, value):
            raise InputError(
                tensor.name, "int_range", f"vulkan: {tensor.name!r} does not fit int32"
            )
        return narrowed
    raise InputError(
        tensor.name,
        "dtype",
        f"vulkan: {tensor.name!r} is {tensor.dtype}; host data of {value.dtype} given",
    )


def grids(nodes: Sequence[Stateful], limits: WG) -> list[list[WG | None]]:
    """Per dispatch node, the physical grid of each dispatch of its kernel (None:
    skipped) for the live sizes.

    Raises:
        InputError: a count no grid within the limits can hold, or (a kernel that does
            not fold) one past the per-dimension limit (reason "grid_limit", the op as
            subject).
    """
    lx, ly, lz = limits
    out: list[list[WG | None]] = []
    for node in nodes:
        kernel = node.state.kernel
        assert kernel is not None  # every node resized before the first execute
        node_grids: list[WG | None] = []
        for count in node.state.counts:
            if count == SKIPPED:
                node_grids.append(None)
                continue
            x, y, z = count
            if x <= lx and y <= ly and z <= lz:
                node_grids.append(count)
                continue
            if not kernel.entry.fold or (y, z) != (1, 1):
                raise InputError(
                    node.op,
                    "grid_limit",
                    f"vulkan: {node.op}: {count} workgroups of slot {kernel.slot} exceed "
                    f"the limits {limits}, and its kernel ({kernel.entry.source}) does not "
                    "fold a 1-D count (fold = false)",
                )
            try:
                node_grids.append(fold(count, limits))
            except ValueError as err:
                raise InputError(node.op, "grid_limit", f"vulkan: {node.op}: {err}") from None
        out.append(node_grids)
    return out


def fold(count: WG, limits: WG) -> WG:
    """Physical grid for a logical count: a 1-D count above the x limit wraps into y rows.

    Kernels recover the flat workgroup index as x + y * gl_NumWorkGroups.x and return past
    the logical count.

    Raises:
        ValueError: no grid within the limits holds the count.
    """
    if all(c <= lim for c, lim in zip(count, limits, strict=True)):
        return count
    x, y, z = count
    if y != 1 or z != 1:
        raise ValueError(f"{count} workgroups exceed the limits {limits}")
    rows = -(-x // limits[0])
    if rows > limits[1]:
        raise ValueError(f"{x} workgroups fit no grid of {limits[0]} x {limits[1]}")
    return (limits[0], rows, 1)


def check_symint_range(symints: Mapping[str, SymInt]) -> None:
    """Refuse a SymInt the int32 UBO cannot hold, once every op's own checks passed."""
    for name, symint in symints.items():
        if symint.value not in INT32_RANGE:
            raise InputError(
                name,
                "int_range",
                f"vulkan: SymInt {name!r} = {symint.value} does not fit the int32 that "
                "kernels read",
            )


def write_params(nodes: Sequence[Stateful]) -> None:
    """Write the params uniforms this step's resize packed (once it succeeded)."""
    for node in nodes:
        for ubo, data in node.state.params:
            if data != ubo.written:
                ubo.buffer.write(0, data)
                ubo.written = data

"""The contract model of a whole graph: what both backends must report after each step.

It replays the per-op models of `harness.ops` in graph order (no hooks, no fixpoint: a pure
function of the inputs' live shapes and the SymInt values) and yields, for a step, either the
rejection both backends must raise or every tensor's live dims, every SymInt and the exact
dispatch log. A rejected step leaves the model's state unchanged, as it must the backends'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from graph_format import (
    DTYPES,
    Dims,
    Graph,
    GraphBuildError,
    InputError,
    ParityError,
    SymIntValue,
)
from harness.model import ExpectedDispatch, LiveState, check_dims
from harness.ops import model_for

INT32_MIN, INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


@dataclass(frozen=True)
class ModelStep:
    """The contract's prediction for one successful step."""

    cur_dims: dict[str, Dims]
    symints: dict[str, int]
    dispatches: list[ExpectedDispatch]


def expected_build_error(graph: Graph) -> GraphBuildError | None:
    """The load-time rejection both backends must raise for `graph`, if any (first op first)."""
    for node in graph.ops:
        try:
            model_for(node.op).check(node, graph)
        except GraphBuildError as err:
            return err
    return None


def host_dims(graph: Graph, name: str, value: object) -> Dims:
    """Validate one host input against the rules both backends apply; return its dims."""
    tensor = graph.tensor(name)
    if not isinstance(value, np.ndarray):
        raise InputError(name, "dtype", f"{name!r} must be a numpy array")
    want = DTYPES[tensor.dtype]
    if value.dtype != want:
        if not (want == np.int32 and value.dtype == np.int64):
            raise InputError(name, "dtype", f"{name!r} must be {tensor.dtype}")
        info = np.iinfo(np.int32)
        if value.size and (int(value.min()) < info.min or int(value.max()) > info.max):
            raise InputError(name, "int_range", f"{name!r} does not fit int32")
    dims = tuple(int(d) for d in value.shape)
    check_dims(name, dims, tensor.dims)
    return dims


class ContractModel:
    """Evolves the live state of a graph step by step, as both backends must.

    Args:
        max_workgroups_per_dim: the workgroups per grid dimension both backends may
            dispatch. A logical count above it folds into a 2-D grid of at most that many
            rows (the backends' business); a count above its square fits no grid, and the
            step is refused (`InputError(op, "grid_limit")`) once every op has resized.
            None: no limit (a device's own, 65535 or more, is never reached).
    """

    def __init__(self, graph: Graph, max_workgroups_per_dim: int | None = None) -> None:
        self.graph = graph
        self.max_workgroups_per_dim = max_workgroups_per_dim
        self.state = LiveState(
            graph,
            {t.name: t.dims for t in graph.tensors()},
            {n: 0 for n, v in graph.values.items() if isinstance(v, SymIntValue)},
        )

    def step(self, inputs: Mapping[str, object]) -> ModelStep:
        """Predict one execute.

        Raises:
            ResizeError, InputError: the rejection both backends must raise (same class and
                key); the model's state is then unchanged.
        """
        graph = self.graph
        for name in graph.inputs:
            if name not in inputs:
                raise InputError(name, "missing", f"input {name!r} is missing")
        for name in inputs:
            if name not in graph.inputs:
                raise InputError(name, "unknown", f"{name!r} is not a graph input")
        live = LiveState(graph, dict(self.state.dims), dict(self.state.symints))
        for name in graph.inputs:
            value = inputs[name]
            if isinstance(graph.values[name], SymIntValue):
                if isinstance(value, bool) or not isinstance(value, int | np.integer):
                    raise InputError(name, "dtype", f"SymInt {name!r} must be an int")
                live.symints[name] = int(value)
            else:
                live.dims[name] = host_dims(graph, name, value)
                live.host[name] = np.asarray(value)
        # Host-side checks of op inputs (token ids) come before any resize, as on the backends.
        for node in graph.ops:
            check_host = getattr(model_for(node.op), "check_host", None)
            if check_host is not None:
                check_host(node, live)
        dispatches: list[ExpectedDispatch] = []
        for node in graph.ops:
            model = model_for(node.op)
            model.resize(node, live)
            dispatches += model.dispatches(node, live)
        self._check_grids(dispatches)
        # Kernels read SymInts as int32: one that passed every op's checks but does not fit
        # is refused last (so an op's own key, such as sdpa's cache_overflow, comes first).
        for name, value in live.symints.items():
            if not INT32_MIN <= value <= INT32_MAX:
                raise InputError(name, "int_range", f"SymInt {name!r} = {value} does not fit int32")
        live.host = {}  # this step's data is not state
        self.state = live
        return ModelStep(dict(live.dims), dict(live.symints), dispatches)

    def _check_grids(self, dispatches: list[ExpectedDispatch]) -> None:
        """Refuse a logical count that no grid within the limit holds (graph order)."""
        limit = self.max_workgroups_per_dim
        if limit is None:
            return
        for op, kernel, _, (x, y, z), ran in dispatches:
            # A 1-D count folds into up to `limit` rows; a 2-D or 3-D one must fit as it is.
            fits = x <= limit * limit if (y, z) == (1, 1) else max(x, y, z) <= limit
            if ran and not fits:
                raise InputError(
                    op,
                    "grid_limit",
                    f"op {op!r}: kernel {kernel} needs {(x, y, z)} workgroups, more than a "
                    f"{limit} x {limit} grid holds",
                )

    def try_step(self, inputs: Mapping[str, object]) -> ModelStep | ParityError:
        """`step`, returning the expected rejection instead of raising it."""
        try:
            return self.step(inputs)
        except ParityError as err:
            return err

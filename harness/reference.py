"""Float64 evaluation of a graph, carrying an error bound for every value it computes.

`ReferenceEvaluator` runs the ops' float64 references in graph order from the step's inputs
and keeps state tensors (KV caches) across steps. Next to each value it propagates the bound
a correct float32 implementation may be off by (`OpModel.budget`, fed the bounds of the op's
inputs), so that graph outputs can be judged end to end. `op_args` also serves the per-op
check, where the inputs are a backend's own intermediates and carry no error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from graph_format import Graph, OpNode, ScalarValue, SymIntValue, TensorValue
from harness.ops import Args, model_for


def op_args(
    graph: Graph, node: OpNode, tensors: Mapping[str, np.ndarray], symints: Mapping[str, int]
) -> Args:
    """Resolve a node's argument slots to float64 arrays, ints, floats or int tuples."""
    args: Args = {}
    for slot, arg in node.args.items():
        if arg is None:
            args[slot] = None
        elif isinstance(arg, tuple):
            args[slot] = tuple(_int_value(graph, symints, name) for name in arg)
        else:
            value = graph.values[arg]
            if isinstance(value, TensorValue):
                args[slot] = tensors[arg]
            elif isinstance(value, SymIntValue):
                args[slot] = int(symints[arg])
            else:
                assert isinstance(value, ScalarValue)
                args[slot] = value.value
    return args


def _int_value(graph: Graph, symints: Mapping[str, int], name: str) -> int:
    if name in symints:
        return int(symints[name])
    return int(graph.scalar(name))


def tensor_errors(node: OpNode, errors: Mapping[str, np.ndarray | float]) -> dict[str, Any]:
    """Per tensor slot of `node`, the error bound its input carries (0 when unknown/exact)."""
    return {slot: errors.get(arg, 0.0) for slot, arg in node.args.items() if isinstance(arg, str)}


class ReferenceEvaluator:
    """Steps a graph in float64 with error bounds; state persists across steps."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.state: dict[str, np.ndarray] = {}
        self.state_errors: dict[str, np.ndarray] = {}
        for tensor in graph.tensors():
            if tensor.state:
                data = graph.initial_data(tensor)
                assert data is not None
                self.state[tensor.name] = data.astype(np.float64)
                self.state_errors[tensor.name] = np.zeros(tensor.dims)

    def step(
        self, inputs: Mapping[str, np.ndarray | int]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, int]]:
        """Evaluate one step: (values, error bounds, SymInts) of every tensor and SymInt.

        The caller has already checked the inputs against the contract model.
        """
        graph = self.graph
        values: dict[str, np.ndarray] = {}
        errors: dict[str, Any] = {}
        symints: dict[str, int] = {}
        for tensor in graph.tensors():
            if tensor.constant is not None:
                values[tensor.name] = graph.constants[tensor.constant].astype(np.float64)
        values.update(self.state)
        errors.update(self.state_errors)
        for name in graph.inputs:
            if isinstance(graph.values[name], SymIntValue):
                symints[name] = int(inputs[name])  # type: ignore[arg-type]
            else:
                values[name] = np.asarray(inputs[name]).astype(np.float64)
        for node in graph.ops:
            model = model_for(node.op)
            args = op_args(graph, node, values, symints)
            in_errors = tensor_errors(node, errors)
            outputs = model.reference(node, args)
            budgets = model.budget(node, args, in_errors, outputs)
            for slot, out_name in node.outputs.items():
                result = outputs[slot]
                if isinstance(graph.values[out_name], SymIntValue):
                    symints[out_name] = int(result)
                else:
                    values[out_name] = result
                    errors[out_name] = budgets[slot]
            for slot, arg in node.args.items():
                # State tensors are updated in place by the reference; their bound may be too.
                if isinstance(arg, str) and arg in self.state:
                    self.state[arg] = args[slot]
                    if slot in budgets:
                        self.state_errors[arg] = budgets[slot]
                    values[arg] = self.state[arg]
                    errors[arg] = self.state_errors[arg]
        return values, errors, symints

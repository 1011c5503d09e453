"""Float64 evaluation of a graph, carrying an error bound for every value it computes.

`ReferenceEvaluator` runs the ops' float64 references in graph order from the step's inputs
and keeps state tensors (KV caches) across steps. Next to each value it carries the scale
`sigma` of the error a correct float32 implementation of the whole graph may have
accumulated there, and reports `SPREAD * sigma` as the end-to-end bound of graph outputs:

    sigma(out)^2 = local(out)^2 + mean over PROBES of (f(x + s * sigma(x)) - f(x))^2

`local` is the op's own rounding bound (`OpModel.budget`, rigorous). The second term carries
the inputs' error scales through the op: the reference is evaluated again with every input
moved by its scale under independent random signs `s`; the mean square of the change is the
first-order error variance when input errors have independent signs, which is how rounding
errors behave in practice (Higham and Mary, "A new approach to probabilistic rounding error
analysis", SIAM J. Sci. Comput. 41(5), 2019). Errors that a shared factor makes coherent
across a row (a normalizer's 1/rms, a softmax sum) are probed too, with one random sign per
row scaling the whole row, and the larger of the two mean squares counts. Local and carried
errors add in quadrature, so
a copy carries its input's scale unchanged. `SPREAD` covers the tail and the estimate's
sampling error. Worst-case first-order propagation (all signs aligned) compounds by
sqrt(K) per linear layer and is useless after two decoder layers (a bound of 1e10 on logits
of magnitude 4); this one is not, and each op is also checked on its own inputs with its
rigorous local bound (harness/check/oracles.py), so no bug hides in the slack.

`op_args` also serves the per-op check, where the inputs are a backend's own intermediates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from graph_format import Graph, OpNode, SymIntValue, TensorValue
from harness.model import Args
from harness.ops import model_for

# Random-sign probes per op, and the multiple of the error scale an end-to-end bound allows.
PROBES = 8
SPREAD = 4.0


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
                args[slot] = graph.scalar(arg)
    return args


def _int_value(graph: Graph, symints: Mapping[str, int], name: str) -> int:
    if name in symints:
        return int(symints[name])
    return int(graph.scalar(name))


class ReferenceEvaluator:
    """Steps a graph in float64 with error bounds; state persists across steps."""

    def __init__(self, graph: Graph, *, seed: int = 0) -> None:
        self.graph = graph
        self.state: dict[str, np.ndarray] = {}
        self.state_sigma: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(seed)
        for tensor in graph.tensors():
            if tensor.state:
                data = graph.initial_data(tensor)
                assert data is not None
                self.state[tensor.name] = data.astype(np.float64)
                self.state_sigma[tensor.name] = np.zeros(tensor.dims)

    def step(
        self, inputs: Mapping[str, np.ndarray | int]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, int]]:
        """Evaluate one step: (values, end-to-end error bounds, SymInts) of every tensor and
        SymInt. The caller has already checked the inputs against the contract model.
        """
        graph = self.graph
        values: dict[str, np.ndarray] = {}
        sigma: dict[str, np.ndarray] = {}
        symints: dict[str, int] = {}
        for tensor in graph.tensors():
            if tensor.constant is not None:
                values[tensor.name] = graph.constants[tensor.constant].astype(np.float64)
        values.update(self.state)
        sigma.update(self.state_sigma)
        for name in graph.inputs:
            if isinstance(graph.values[name], SymIntValue):
                symints[name] = int(inputs[name])
            else:
                values[name] = np.asarray(inputs[name]).astype(np.float64)
        for node in graph.ops:
            self._op(node, values, sigma, symints)
        return values, {name: SPREAD * s for name, s in sigma.items()}, symints

    def _op(
        self,
        node: OpNode,
        values: dict[str, np.ndarray],
        sigma: dict[str, np.ndarray],
        symints: dict[str, int],
    ) -> None:
        graph = self.graph
        model = model_for(node.op)
        args = op_args(graph, node, values, symints)
        state_slots = {
            slot: arg
            for slot, arg in node.args.items()
            if isinstance(arg, str) and arg in self.state
        }
        before = {slot: np.array(args[slot]) for slot in state_slots}  # the reference updates state
        outputs = model.reference(node, args)
        local = model.budget(node, args, outputs)
        carried = {
            slot: sigma[arg]
            for slot, arg in node.args.items()
            if isinstance(arg, str) and arg in sigma and np.any(sigma[arg])
        }
        tensor_outs = {
            slot: name
            for slot, name in node.outputs.items()
            if isinstance(graph.values[name], TensorValue)
        }
        moved = (
            self._propagate(node, args, before, outputs, carried, tensor_outs) if carried else {}
        )

        def scale(slot: str, shape: tuple[int, ...]) -> np.ndarray:
            own = np.broadcast_to(local.get(slot, 0.0), shape)
            combined: np.ndarray = np.sqrt(own * own + moved.get(slot, 0.0))
            return combined

        for slot, name in node.outputs.items():
            if slot not in tensor_outs:
                symints[name] = int(outputs[slot])
                continue
            values[name] = outputs[slot]
            sigma[name] = scale(slot, np.shape(outputs[slot]))
        for slot, name in state_slots.items():
            self.state[name] = args[slot]
            self.state_sigma[name] = scale(slot, np.shape(args[slot]))
            values[name] = self.state[name]
            sigma[name] = self.state_sigma[name]

    def _propagate(
        self,
        node: OpNode,
        args: Args,
        before: Mapping[str, np.ndarray],
        outputs: Mapping[str, Any],
        carried: Mapping[str, np.ndarray],
        tensor_outs: Mapping[str, str],
    ) -> dict[str, np.ndarray]:
        """Square change of outputs and state when inputs move by their error scales.

        Two error structures are probed, each as a mean square over PROBES random moves, and
        the larger change counts, element by element: independent signs for every element,
        and a sign per row applied in the direction of each element's value, x (1 + d_row):
        the error a shared factor (a normalizer's 1/rms, a softmax sum) gives a whole row
        at once. Different inputs always get independent signs.
        """
        model = model_for(node.op)
        rng = self._rng

        def element_signs(base: np.ndarray) -> np.ndarray:
            return rng.choice((-1.0, 1.0), size=np.shape(base))

        def row_scale_signs(base: np.ndarray) -> np.ndarray:
            shape = np.shape(base)
            rows = rng.choice((-1.0, 1.0), size=(*shape[:-1], 1) if shape else ())
            return rows * np.where(base < 0, -1.0, 1.0)

        modes: list[dict[str, np.ndarray]] = []
        for signs in (element_signs, row_scale_signs):
            squares: dict[str, np.ndarray] = {}
            for _ in range(PROBES):
                probe = dict(args)
                probe.update({slot: state.copy() for slot, state in before.items()})
                for slot, scale in carried.items():
                    base = probe[slot]
                    probe[slot] = base + signs(base) * np.broadcast_to(scale, np.shape(base))
                moved = model.reference(node, probe)
                changes = {slot: moved[slot] - outputs[slot] for slot in tensor_outs}
                changes.update({slot: probe[slot] - args[slot] for slot in before})
                for slot, delta in changes.items():
                    squares[slot] = squares.get(slot, 0.0) + delta * delta / PROBES
            modes.append(squares)
        return {slot: np.maximum(modes[0][slot], modes[1][slot]) for slot in modes[0]}

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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class OpEvaluation:
    """One op as the evaluator evaluated it in the current step, for the per-op check to
    reuse where a backend gave the op the very same arguments (harness/check/oracles.py).

    Attributes:
        args: its arguments, state tensors as they were before the op.
        outputs: its reference outputs by slot.
        state_after: the state tensors it updated in place, by slot, after the update.
        budgets: its local error budgets by slot (`OpModel.budget`).
    """

    args: Args
    outputs: Mapping[str, Any]
    state_after: Mapping[str, np.ndarray]
    budgets: Mapping[str, np.ndarray]


class ReferenceEvaluator:
    """Steps a graph in float64 with error bounds; state persists across steps.

    Attributes:
        constants: the graph's constants in float64, read-only, converted once per case
            (work derived from them is remembered per case: harness/model/constants.py).
        evaluations: every op of the last step as it was evaluated, by op name.
    """

    def __init__(self, graph: Graph, *, seed: int = 0) -> None:
        self.graph = graph
        self.state: dict[str, np.ndarray] = {}
        self.state_sigma: dict[str, np.ndarray] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.evaluations: dict[str, OpEvaluation] = {}
        self._rng = np.random.default_rng(seed)
        for tensor in graph.tensors():
            if tensor.state:
                data = graph.initial_data(tensor)
                assert data is not None
                self.state[tensor.name] = data.astype(np.float64)
                self.state_sigma[tensor.name] = np.zeros(tensor.dims)
            elif tensor.constant is not None:
                constant = graph.constants[tensor.constant].astype(np.float64)
                constant.flags.writeable = False
                self.constants[tensor.name] = constant

    def step(
        self, inputs: Mapping[str, np.ndarray | int]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, int]]:
        """Evaluate one step: (values, end-to-end error bounds, SymInts) of every tensor and
        SymInt. The caller has already checked the inputs against the contract model.
        """
        graph = self.graph
        values: dict[str, np.ndarray] = dict(self.constants)
        sigma: dict[str, np.ndarray] = {}
        symints: dict[str, int] = {}
        values.update(self.state)
        sigma.update(self.state_sigma)
        self.evaluations = {}
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
        self.evaluations[node.name] = OpEvaluation(
            {**args, **before}, outputs, {slot: args[slot] for slot in state_slots}, local
        )
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

        All 2 x PROBES moves are evaluated in one call of the op's `probe_reference` over a
        leading probe axis (element-wise moves first), or one `reference` call per move
        where the op has no such form or an input that carries error is not one of its
        probe slots (`activations` and the state it updates). The signs are drawn in the
        order one draw per move and input would draw them (moves in order, inputs in slot
        order, element-wise moves before row moves), so either way the bounds are the same.
        """
        model = model_for(node.op)
        probe_slots = {*model.activations, *before}
        base = {slot: before.get(slot, args[slot]) for slot in carried}
        # Every move of every carried input: [2 x PROBES, *shape], element-wise moves first.
        signs = self._signs(base)
        moved_inputs = {
            slot: base[slot] + signs[slot] * np.broadcast_to(scale, np.shape(base[slot]))
            for slot, scale in carried.items()
        }
        if not tensor_outs and not before:
            return {}  # nothing to carry the moves to (a sym_size): the signs are drawn
        probes = 2 * PROBES
        probe_reference = getattr(model, "probe_reference", None)
        if probe_reference is not None and set(carried) <= probe_slots:
            batch = dict(args)
            for slot in probe_slots:
                value = moved_inputs.get(slot, before.get(slot, args.get(slot)))
                if slot not in moved_inputs and isinstance(value, np.ndarray):
                    value = np.repeat(value[None], probes, axis=0)  # its own copy per probe
                batch[slot] = value
            moved_outputs = probe_reference(node, batch)
            changes = {slot: moved_outputs[slot] - outputs[slot] for slot in tensor_outs}
            changes.update({slot: batch[slot] - args[slot] for slot in before})
        else:
            per_probe: dict[str, list[np.ndarray]] = {}
            for p in range(probes):
                probe = dict(args)
                probe.update({slot: state.copy() for slot, state in before.items()})
                probe.update({slot: moves[p] for slot, moves in moved_inputs.items()})
                moved = model.reference(node, probe)
                for slot in tensor_outs:
                    per_probe.setdefault(slot, []).append(moved[slot] - outputs[slot])
                for slot in before:
                    per_probe.setdefault(slot, []).append(probe[slot] - args[slot])
            changes = {slot: np.stack(deltas) for slot, deltas in per_probe.items()}
        squares = {slot: delta * delta / PROBES for slot, delta in changes.items()}
        return {
            slot: np.maximum(_sum_probes(square[:PROBES]), _sum_probes(square[PROBES:]))
            for slot, square in squares.items()
        }

    def _signs(self, base: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Random signs of every move of every input in `base`: `[2 x PROBES, *shape]`.

        The first PROBES moves give every element an independent sign; the last PROBES give
        each row one sign, applied in the direction of each element's value. Drawn in two
        calls, as many signs as one call per move and input (in that order) would draw.
        """
        shapes = {slot: np.shape(value) for slot, value in base.items()}
        rows = {slot: (*shape[:-1], 1) if shape else () for slot, shape in shapes.items()}
        element = self._draw(shapes)
        row = self._draw(rows)
        return {
            slot: np.concatenate(
                [element[slot], row[slot] * np.where(value < 0, -1.0, 1.0)], axis=0
            )
            for slot, value in base.items()
        }

    def _draw(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        """PROBES draws of random signs per shape, `[PROBES, *shape]` each, from one call:
        move by move, and within a move slot by slot."""
        sizes = [int(np.prod(shape)) for shape in shapes.values()]
        flat = self._rng.choice((-1.0, 1.0), size=(PROBES, sum(sizes)))
        bounds = np.cumsum([0, *sizes])
        return {
            slot: flat[:, bounds[i] : bounds[i + 1]].reshape(PROBES, *shape)
            for i, (slot, shape) in enumerate(shapes.items())
        }


def _sum_probes(squares: np.ndarray) -> np.ndarray:
    """The sum over the leading probe axis, in probe order."""
    total = squares[0].copy()
    for square in squares[1:]:
        total += square
    return total

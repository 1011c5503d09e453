"""Float64 evaluation of a graph, carrying an error bound for every value it computes.

`ReferenceEvaluator` runs the ops' float64 references in graph order from the step's inputs
and keeps state tensors (KV caches) across steps. Next to each value it carries the scale
`sigma` of the error a correct float32 implementation of the whole graph may have
accumulated there, and reports `SPREAD * sigma` as the end-to-end bound of graph outputs:

    sigma(out)^2 = local(out)^2 + mean over PROBES of (f(x + s * sigma(x)) - f(x))^2

`local` is the op's own rounding bound (`harness.model.local_budget`, rigorous: the
rounding of a value stored in float16 is part of it). The second term carries
the inputs' error scales through the op: the reference is evaluated again with every input
moved by its scale times independent standard normal draws `s`; the mean square of the
change estimates the first-order error variance when input errors have independent signs,
which is how rounding errors behave in practice (Higham and Mary, "A new approach to
probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019). Normal, not
+-1, draws: for an output that sums a few inputs with comparable weights (a rope's
x[2i] c - x[2i+1] s), +-1 signs that move the terms alike in every probe cancel them, and
the estimate was zero for 1 pair in 128 at equal weights (issue 18: f16 ropes up to 40x
over their end-to-end bound, every op within its own); normal draws give any linear
combination its variance times chi^2_PROBES / PROBES, below a sixteenth of it with odds of
about 1e-4. Errors that a shared factor makes coherent across a row (a normalizer's
1/rms, a softmax sum) are probed too, with one random sign per row scaling the whole row
(which carries a copy's or any one-term op's scale exactly), and the larger of the two
mean squares counts. Local and carried errors add in quadrature, so a copy carries its
input's scale unchanged. `SPREAD` covers the tail and the estimate's
sampling error. Worst-case first-order propagation (all signs aligned) compounds by
sqrt(K) per linear layer and is useless after two decoder layers (a bound of 1e10 on logits
of magnitude 4); this one is not, and each op is also checked on its own inputs with its
rigorous local bound (harness/check/oracles/), so no bug hides in the slack.

The probes of an op run in one call of its `probe_reference` over a leading probe axis
(harness/model/__init__.py), in chunks that keep large tensors in cache; the moves are drawn
and the squares summed in the order one probe at a time would, and a probe's outputs are
the same bits either way, so the bounds do not depend on how the probes are grouped
(tests/unit/test_reference_probes.py keeps the one-call-per-probe loop as the oracle).

`op_args` also serves the per-op check, where the inputs are a backend's own intermediates;
an op whose inputs there are the evaluator's bit for bit reuses its evaluation
(`OpEvaluation`, `ReferenceEvaluator.evaluations`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from graph_format import Graph, OpNode, SymIntValue, TensorValue
from harness.model import Args, BudgetTiers, OpModel, local_budgets
from harness.model.numerics import F32, Arithmetic
from harness.ops import model_for

# Random probes per op and error structure, and the multiple of the error scale an
# end-to-end bound allows.
PROBES = 8
SPREAD = 4.0
# Probes of an op evaluated in one call: as many as keep each probed array within this many
# elements (at least one), so that large tensors stay in cache.
CHUNK_ELEMENTS = 1 << 14


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
    reuse where a backend gave the op the very same arguments (harness/check/oracles/).

    Attributes:
        args: its arguments, state tensors as they were before the op.
        outputs: its reference outputs by slot.
        state_after: the state tensors it updated in place, by slot, after the update.
        budgets: its local error budgets by slot, both tiers (`harness.model.local_budgets`).
        arithmetic: the arithmetic those budgets are derived for (a backend whose kernels
            of the op compute in another one derives its own).
    """

    args: Args
    outputs: Mapping[str, Any]
    state_after: Mapping[str, np.ndarray]
    budgets: BudgetTiers
    arithmetic: Arithmetic = F32

    def matches(self, args: Args) -> bool:
        """Whether `args` are these arguments bit for bit (so the op's reference and budget
        on them are these): the same slots, ints and floats, and arrays of the same dtype,
        shape and bits."""
        if args.keys() != self.args.keys():
            return False
        for slot, value in args.items():
            mine = self.args[slot]
            if isinstance(value, np.ndarray) or isinstance(mine, np.ndarray):
                if not _same_bits(value, mine):
                    return False
            elif value != mine:
                return False
        return True


def _same_bits(a: Any, b: Any) -> bool:
    """Two arrays of the same dtype, shape and bits (NaN payloads and signed zeros too)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.nbytes <= _BYTES_COMPARE_MAX:
        # The bytes in C order compared with memcmp: the same answer as the element-wise
        # comparison below, at a tenth of its cost on the small arrays of most ops (the
        # per-op check asks for every op and backend). Larger copies cost more than numpy.
        return a.tobytes() == b.tobytes()
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(bits), b.view(bits)))


# Arrays up to this many bytes are compared as bytes objects (measured: faster than
# np.array_equal up to ~64 KiB on the development VM, slower past it: fresh pages).
_BYTES_COMPARE_MAX = 1 << 15


class ReferenceEvaluator:
    """Steps a graph in float64 with error bounds; state persists across steps.

    Attributes:
        constants: the graph's constants in float64, read-only, converted once per case
            (work derived from them is remembered per case: harness/model/constants.py).
        evaluations: every op of the last step as it was evaluated, by op name.
    """

    def __init__(
        self,
        graph: Graph,
        *,
        seed: int = 0,
        arithmetic: Mapping[str, Arithmetic] | None = None,
    ) -> None:
        self.graph = graph
        # Per op whose kernels compute in another arithmetic than f32 on some backend, the
        # coarsest of them: its local bound in the end-to-end propagation (each backend's
        # per-op check derives its own, `oracles.check_ops`).
        self.arithmetic = dict(arithmetic or {})
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
        arithmetic = self.arithmetic.get(node.name, F32)
        tiers = local_budgets(graph, node, args, outputs, arithmetic)
        local = tiers.hard
        self.evaluations[node.name] = OpEvaluation(
            {**args, **before},
            outputs,
            {slot: args[slot] for slot in state_slots},
            tiers,
            arithmetic,
        )
        carried = {
            slot: sigma[arg]
            for slot, arg in node.args.items()
            if isinstance(arg, str) and arg in sigma and sigma[arg].any()
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
            own = local.get(slot, 0.0)
            if np.shape(own) != shape:
                own = np.broadcast_to(own, shape)
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
        the larger change counts, element by element: independent standard normal draws for
        every element (see the module docstring: +-1 signs cancel two-term sums), and a
        sign per row applied in the direction of each element's value, x (1 + d_row):
        the error a shared factor (a normalizer's 1/rms, a softmax sum) gives a whole row
        at once. Different inputs always get independent signs.

        The 2 x PROBES moves (element-wise ones first) are evaluated a chunk at a time by the
        op's `probe_reference` over a leading probe axis: all of them in one call unless the
        tensors are large (`CHUNK_ELEMENTS`). An op without that form, or whose input that
        carries error is not one of its probe slots (`activations` and the state it
        updates), gets one `reference` call per move. The draws are made as one draw per
        move and input would draw them (moves in order, inputs in slot order, element-wise
        moves before row moves), and a probe's outputs are the same bit for bit however
        the moves are grouped, so the bounds do not depend on the grouping.
        """
        model = model_for(node.op)
        base = {slot: before.get(slot, args[slot]) for slot in carried}
        shapes = {slot: np.shape(value) for slot, value in base.items()}
        element, rows = self._draw(shapes)
        if not tensor_outs and not before:
            return {}  # nothing to carry the moves to (a sym_size): the signs are drawn
        direction = {slot: np.where(value < 0, -1.0, 1.0) for slot, value in base.items()}
        scales = {
            slot: scale if np.shape(scale) == shapes[slot] else np.broadcast_to(scale, shapes[slot])
            for slot, scale in carried.items()
        }

        def moves(slot: str, start: int, stop: int) -> np.ndarray:
            """Input `slot` under moves start .. stop - 1: [stop - start, *shape]."""
            # Each element is base + sign * scale, as one expression over the concatenated
            # signs would give it, written in place: no concatenation, no temporaries.
            moved = np.empty((stop - start, *shapes[slot]))
            split = min(max(PROBES - start, 0), stop - start)  # element-wise moves first
            if split:
                np.multiply(element[slot][start : start + split], scales[slot], out=moved[:split])
            if split < stop - start:
                signs = rows[slot][max(start - PROBES, 0) : stop - PROBES] * direction[slot]
                np.multiply(signs, scales[slot], out=moved[split:])
            np.add(base[slot], moved, out=moved)  # base first, as before (NaN payloads)
            return moved

        probe_slots = {*model.activations, *before}
        batched = model.batches_probes and set(carried) <= probe_slots
        largest = max(
            [np.size(args[slot]) for slot in probe_slots if isinstance(args.get(slot), np.ndarray)]
            + [np.size(outputs[slot]) for slot in tensor_outs]
        )
        chunk = max(1, min(2 * PROBES, CHUNK_ELEMENTS // max(largest, 1))) if batched else 1
        sums: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
        probed = _Probed(node, args, before, outputs, tensor_outs)
        for start in range(0, 2 * PROBES, chunk):
            stop = min(start + chunk, 2 * PROBES)
            moved = {slot: moves(slot, start, stop) for slot in carried}
            if batched:
                changes = probed.batched(model, moved, probe_slots, stop - start)
            else:
                changes = probed.one(model, moved)
            for slot, delta in changes.items():
                _add_squares(sums, slot, delta * delta / PROBES, start)
        return {slot: np.maximum(sums[0][slot], sums[1][slot]) for slot in sums[0]}

    def _draw(
        self, shapes: Mapping[str, tuple[int, ...]]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Standard normal draws of PROBES element-wise moves of every input (`[PROBES,
        *shape]`) and random signs of PROBES row moves (`[PROBES, *shape[:-1], 1]`), from
        two calls that draw what one `standard_normal` per element-wise move and input, then
        one `choice((-1.0, 1.0))` per row move and input, in that order, would."""
        row_shapes = {slot: (*shape[:-1], 1) if shape else () for slot, shape in shapes.items()}
        element_size = sum(math.prod(shape) for shape in shapes.values())
        row_size = sum(math.prod(shape) for shape in row_shapes.values())
        element = self._rng.standard_normal(PROBES * element_size)
        rows = self._rng.integers(0, 2, size=PROBES * row_size) * 2.0
        rows -= 1.0  # in place: the same values as `* 2.0 - 1.0`, one array fewer
        drawn = (element.reshape(PROBES, element_size), rows.reshape(PROBES, row_size))
        signs: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] = ({}, {})
        for mode, mode_shapes in enumerate((shapes, row_shapes)):
            offset = 0
            for slot, shape in mode_shapes.items():
                size = math.prod(shape)
                signs[mode][slot] = drawn[mode][:, offset : offset + size].reshape(PROBES, *shape)
                offset += size
        return signs


@dataclass(frozen=True)
class _Probed:
    """What `_propagate` probes: an op node, its arguments, the state it starts from, its
    unmoved outputs and its tensor output slots. Its methods give each output's and state's
    change under a chunk of moves (`moved`: per carried slot, [moves, *shape])."""

    node: OpNode
    args: Args
    before: Mapping[str, np.ndarray]
    outputs: Mapping[str, Any]
    tensor_outs: Mapping[str, str]

    def batched(
        self, model: OpModel, moved: Mapping[str, np.ndarray], probe_slots: set[str], count: int
    ) -> dict[str, np.ndarray]:
        """The changes of `count` moves in one `probe_reference` call over a probe axis."""
        args, before, outputs = self.args, self.before, self.outputs
        batch = dict(args)
        for slot in probe_slots:
            value = moved.get(slot, before.get(slot, args.get(slot)))
            if slot not in moved and isinstance(value, np.ndarray):
                value = np.repeat(value[None], count, axis=0)  # a copy each
            batch[slot] = value
        outs = model.probe_reference(self.node, batch)
        changes = {slot: _change(outs[slot], outputs[slot]) for slot in self.tensor_outs}
        changes.update({slot: _change(batch[slot], args[slot]) for slot in before})
        return changes

    def one(self, model: OpModel, moved: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The changes of one move (a chunk of one) by a `reference` call."""
        args, before, outputs = self.args, self.before, self.outputs
        probe = dict(args)
        probe.update({slot: state.copy() for slot, state in before.items()})
        probe.update({slot: value[0] for slot, value in moved.items()})
        outs = model.reference(self.node, probe)
        changes = {slot: _change(outs[slot], outputs[slot])[None] for slot in self.tensor_outs}
        changes.update({slot: _change(probe[slot], args[slot])[None] for slot in before})
        return changes


def _change(probed: np.ndarray, base: np.ndarray) -> np.ndarray:
    """probed - base, 0 where base is not finite: such an element is compared by class and
    carries no error scale (its local budget is 0, `harness.model.local_budget`), and
    inf - inf would make the scale NaN and every probe downstream of it NaN."""
    if np.isfinite(base).all():
        change: np.ndarray = probed - base
        return change
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(base), probed - base, 0.0)


def _add_squares(
    sums: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
    slot: str,
    squares: np.ndarray,
    start: int,
) -> None:
    """Add the squares of moves start, start + 1, ... (`[moves, *shape]`) to the sums of
    their modes (moves before PROBES: element-wise; the rest: rows), move by move and in
    order, as one move at a time would add them: a last-bit difference here would be
    amplified downstream, where x + sigma is rounded."""
    stop = start + len(squares)
    for mode, lo, hi in ((0, start, min(stop, PROBES)), (1, max(start, PROBES), stop)):
        if lo >= hi:
            continue
        total = sums[mode].get(slot)
        for square in squares[lo - start : hi - start]:
            if total is None:
                total = square.copy()
            else:
                total += square  # in place for arrays; a new scalar for 0-d moves
        assert total is not None
        sums[mode][slot] = total

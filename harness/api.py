"""The harness for code outside the test suite: one op as a graph, its budget, a checked run.

    case = single_op_graph("rms_norm", {"x": x, "weight": w, "eps": 1e-6}, constants={"weight"})
    budget = op_budget(case)                  # float64 reference and error budget per output
    result = check_case(case, open_runtimes())  # both backends in lockstep; raises on divergence

`docs/api.md` walks through it with a runnable example (run by tests/diff/test_api.py).
Everything here is also importable from `harness` itself, lazily.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graph_format import DTYPES, SIGNATURES, Graph, Runtime, TensorValue
from graph_format.signatures import ArgSlot
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.check.reference import ReferenceEvaluator, op_args
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.model import local_budget
from harness.model.numerics import ARITHMETICS, compare
from harness.ops import model_for

# Host integer data arrives as int64 (numpy's default, PyTorch's token ids); the graph format
# stores int32, and both runtimes narrow int64 step inputs to it (range-checked).
_GRAPH_DTYPES = {np.dtype(np.int64): np.dtype(np.int32)}


def single_op_graph(
    op: str,
    args: Mapping[str, Any],
    *,
    constants: Collection[str] = (),
    state: Collection[str] = (),
    symints: Collection[str] = (),
    max_dims: Mapping[str, Sequence[int]] | None = None,
    out_dims: Mapping[str, Sequence[int]] | None = None,
    out_dtype: str | None = None,
    name: str | None = None,
) -> Case:
    """A graph of one op and a case of one step running it on `args`.

    Args:
        op: the op type (any key of `graph_format.SIGNATURES`).
        args: a value per argument slot of the op: arrays for tensor slots, ints and floats
            for int and float slots, a list of ints for a size list. An optional slot may be
            left out.
        constants: tensor slots that become constants (weights) instead of graph inputs.
        state: tensor slots that become state tensors (KV caches) starting from the array.
        symints: int slots that become SymInt graph inputs (such as `input_pos`) instead of
            literal ints; their value goes into the step's inputs.
        max_dims: per tensor input, the max dims the graph is built with (default: the
            array's own shape), so that later steps may run at other live sizes.
        out_dims: max dims per tensor output slot (default: the shapes the op's float64
            reference produces at the max input dims).
        out_dtype: the dtype of the op's outputs ("float32" or "float16"; default: that of
            its first float tensor argument, as `GraphBuilder.op` does).
        name: the op node's name and the case's (default: the op type).

    Every other tensor slot becomes a graph input named like its slot, and its array the
    step's input; add steps to `case.steps` to run it at other live sizes. The op's outputs
    are the graph's; an op without outputs (update_cache writes its cache in place) outputs
    the tensors of its slots named in `state`.

    Raises:
        ValueError: an unknown op or slot, a missing argument, a value of the wrong kind, or
            an op without outputs and no `state` slot to read its effect from.
    """
    _check_args(op, args, constants=constants, state=state, symints=symints)
    name = name or op
    roles = _Roles(constants, state, symints, dict(max_dims or {}))
    graph, inputs = _build_one_op(op, args, roles, name, out_dims, out_dtype)
    if out_dims is None and SIGNATURES[op].outputs:
        dims = _reference_out_dims(graph, inputs)
        graph, inputs = _build_one_op(op, args, roles, name, dims, out_dtype)
    return Case(graph, [inputs], name=name)


@dataclass(frozen=True)
class _Roles:
    """What `single_op_graph` makes of each slot: constants, state and SymInt inputs, and
    the max dims of tensor inputs built larger than their arrays."""

    constants: Collection[str]
    state: Collection[str]
    symints: Collection[str]
    max_dims: Mapping[str, Sequence[int]]


def _check_args(
    op: str,
    args: Mapping[str, Any],
    *,
    constants: Collection[str],
    state: Collection[str],
    symints: Collection[str],
) -> None:
    """Refuse (ValueError) an unknown op or slot, a role naming a slot without a value, and an
    op without outputs whose `state` names nothing to output."""
    if op not in SIGNATURES:
        raise ValueError(f"unknown op {op!r}; expected one of {sorted(SIGNATURES)}")
    signature = SIGNATURES[op]
    unknown = sorted(set(args) - {slot.name for slot in signature.args})
    if unknown:
        raise ValueError(
            f"{op}: no argument slots {unknown}; it takes {[s.name for s in signature.args]}"
        )
    roles = {"constants": constants, "state": state, "symints": symints}
    for role, slots in roles.items():
        extra = sorted(set(slots) - set(args))
        if extra:
            raise ValueError(f"{op}: {role} names slots without a value: {extra}")
    if not signature.outputs and not state:
        writes = [s.name for s in signature.args if s.kind == "tensor"]
        raise ValueError(
            f"{op} has no outputs: name the tensor it updates in `state` (one of {writes}), "
            "so that the graph outputs it"
        )


def _build_one_op(
    op: str,
    args: Mapping[str, Any],
    roles: _Roles,
    name: str,
    dims: Mapping[str, Sequence[int]] | None,
    out_dtype: str | None,
) -> tuple[Graph, StepInputs]:
    """The graph of `single_op_graph` with its outputs at `dims` (None: the builder's), and
    its step's inputs."""
    signature = SIGNATURES[op]
    b = GraphBuilder()
    node_args: dict[str, Any] = {}
    inputs: StepInputs = {}
    for slot in signature.args:
        if args.get(slot.name) is None:
            if not slot.optional:
                raise ValueError(f"{op}: argument {slot.name!r} is missing")
            continue
        node_args[slot.name] = _value(b, op, slot, args[slot.name], roles, inputs)
    outs = b.op(
        op, name=name, out_dims=dict(dims) if dims else None, out_dtype=out_dtype, **node_args
    )
    if not signature.outputs:  # it updates state in place: the state is what it gives
        outs = tuple(node_args[s] for s in sorted(roles.state) if isinstance(node_args[s], str))
    b.output(*(outs if isinstance(outs, tuple) else (outs,)))
    return b.build(), inputs


def _value(
    b: GraphBuilder,
    op: str,
    slot: ArgSlot,
    value: Any,
    roles: _Roles,
    inputs: StepInputs,
) -> str | list[str]:
    """Add one argument's value to the builder; returns what the op's slot names."""
    where = f"{op}: argument {slot.name!r}"
    if slot.kind == "tensor":
        if not isinstance(value, np.ndarray):
            raise ValueError(f"{where} takes a numpy array, got {type(value).__name__}")
        array = value.astype(_GRAPH_DTYPES.get(value.dtype, value.dtype))
        dtype = next((k for k, v in DTYPES.items() if v == array.dtype), None)
        if dtype is None:
            raise ValueError(f"{where}: dtype {value.dtype} is none of {sorted(DTYPES)}")
        if slot.name in roles.constants:
            return b.constant(slot.name, array)
        if slot.name in roles.state:
            return b.state(slot.name, dtype, array.shape, initial=array)
        inputs[slot.name] = value
        return b.input(slot.name, dtype, roles.max_dims.get(slot.name, value.shape))
    if slot.kind == "size_list":
        return [b.int(int(v), f"{slot.name}_{i}") for i, v in enumerate(value)]
    if slot.kind == "float":
        return b.float(float(value), slot.name)
    if slot.name in roles.symints:
        if slot.kind != "int_or_sym":
            raise ValueError(f"{where} is a literal int slot; it cannot be a SymInt input")
        inputs[slot.name] = int(value)
        return b.symint_input(slot.name)
    return b.int(int(value), slot.name)


def _reference_out_dims(graph: Graph, inputs: StepInputs) -> dict[str, tuple[int, ...]]:
    """Output max dims: the shapes of the op's float64 reference at the max input dims (an
    input given below its max dims counts as zeros at them)."""
    node = graph.ops[0]
    values: dict[str, np.ndarray] = {}
    symints: dict[str, int] = {}
    for tensor in graph.tensors():
        data = graph.initial_data(tensor)
        if data is not None:
            values[tensor.name] = data.astype(np.float64)
    for input_name, value in inputs.items():
        if isinstance(value, np.ndarray):
            dims = graph.tensor(input_name).dims
            full = value if value.shape == dims else np.zeros(dims)
            values[input_name] = np.asarray(full, np.float64)
        else:
            symints[input_name] = int(value)
    outputs = model_for(node.op).reference(node, op_args(graph, node, values, symints))
    return {
        slot: tuple(np.shape(outputs[slot]))
        for slot, value_name in node.outputs.items()
        if isinstance(graph.values[value_name], TensorValue)
    }


@dataclass(frozen=True)
class OpBudget:
    """An op's outputs in float64 and the error a correct float32 implementation may make.

    Attributes:
        op: the op node's name.
        reference: per output slot, the float64 reference output.
        budget: per output slot, the per-element bound of the op's own rounding error
            (`harness.ops.OpModel.budget`), for these exact inputs.
    """

    op: str
    reference: dict[str, np.ndarray]
    budget: dict[str, np.ndarray]

    def within(self, slot: str, actual: np.ndarray) -> bool:
        """Whether `actual` is within the budget of output `slot` everywhere, as the
        harness's own check judges it (`harness.model.numerics.compare`: where the reference
        is +-inf or NaN, `actual` must be of the same class)."""
        return compare(np.asarray(actual), self.reference[slot], self.budget[slot]).ok


def op_budget(
    case: Case,
    step: int = 0,
    *,
    op: str | None = None,
    outputs: Mapping[str, np.ndarray] | None = None,
    precision: str = "f32",
) -> OpBudget:
    """The float64 reference of one op of a case at one step, and its error budget.

    The reference runs the case's steps up to `step` (state carried between them). The
    budget is the op's own rounding from exact inputs (in an f16 graph with the rounding of
    its f16 outputs: `harness.model.local_budget`); in a graph of several ops, errors
    carried in from upstream ops come on top (`ReferenceEvaluator` propagates them).

    Args:
        step: the step to evaluate.
        op: the op node's name (default: the graph's first op).
        outputs: the outputs to derive the budget from (default: the reference's own; e.g.
            PyTorch's values, to judge a backend against them).
        precision: the arithmetic the op's kernel computes in, "f32" or "f16" (a manifest
            kernel's `precision`: docs/oracles.md "Kernels that compute in f16").

    Each call replays steps 0..`step`: for the budgets of every step, `op_budgets` replays
    them once.

    Non-finite values in the inputs are fine: the budget is 0 where the reference is +-inf
    or NaN (such an element is compared by class) and finite everywhere else.

    Raises:
        harness.model.BudgetError: the op's budget is not finite where its reference is (a
            gap in the op model's derivation; the message names the op and the tensor).
    """
    if not 0 <= step < len(case.steps):
        raise ValueError(f"step {step}: the case has {len(case.steps)} step(s)")
    (budget,) = _budgets(
        case, op, range(step, step + 1), {step: outputs} if outputs else {}, precision
    )
    return budget


def op_budgets(
    case: Case,
    *,
    op: str | None = None,
    outputs: Mapping[int, Mapping[str, np.ndarray]] | None = None,
    precision: str = "f32",
) -> list[OpBudget]:
    """`op_budget` of every step of the case, in one pass over its steps (state carried
    between them as `op_budget` does): index i is step i's.

    Args:
        op: the op node's name (default: the graph's first op).
        outputs: per step, the outputs to derive that step's budget from (default: the
            reference's own).
        precision: as `op_budget`'s.
    """
    return _budgets(case, op, range(len(case.steps)), outputs or {}, precision)


def _budgets(
    case: Case,
    op: str | None,
    wanted: range,
    outputs: Mapping[int, Mapping[str, np.ndarray]],
    precision: str,
) -> list[OpBudget]:
    """The budgets of the steps in `wanted`, replaying each step up to them once."""
    if precision not in ARITHMETICS:
        raise ValueError(
            f"precision {precision!r}: expected one of {', '.join(map(repr, ARITHMETICS))}"
        )
    arithmetic = ARITHMETICS[precision]
    graph = case.graph
    node = next((n for n in graph.ops if op is None or n.name == op), None)
    if node is None:
        raise ValueError(f"no op named {op!r}; the graph has {[n.name for n in graph.ops]}")
    evaluator = ReferenceEvaluator(graph)
    out: list[OpBudget] = []
    for index, inputs in enumerate(case.steps[: wanted.stop]):
        values, _, symints = evaluator.step(inputs)
        if index not in wanted:
            continue
        # After the step: state the op updated in place is what it wrote, as the op saw it.
        args = op_args(graph, node, values, symints)
        reference = {
            slot: values[name]
            for slot, name in node.outputs.items()
            if isinstance(graph.values[name], TensorValue)
        }
        budget = local_budget(graph, node, args, dict(outputs.get(index) or reference), arithmetic)
        out.append(OpBudget(node.name, reference, {slot: budget[slot] for slot in reference}))
    return out


def run_case(
    case: Case,
    runtimes: Sequence[Runtime] | None = None,
    *,
    canaries: bool = True,
    per_op: bool = True,
) -> CaseResult:
    """Run a case on the runtimes (default: WebGPU and Vulkan on the default adapter) in
    lockstep, with every oracle after every step; returns what each found.

    Raises:
        BackendUnavailable: a runtime cannot be opened (the message says what to install).
    """
    if runtimes is not None:
        return LockstepRunner(runtimes, canaries=canaries, per_op=per_op).run(case)
    from harness.check.backends import open_runtimes

    opened = open_runtimes()
    try:
        return LockstepRunner(opened, canaries=canaries, per_op=per_op).run(case)
    finally:  # the runtimes opened here, and what they cached, go with the call
        for runtime in opened:
            runtime.close()


def check_case(case: Case, runtimes: Sequence[Runtime] | None = None) -> CaseResult:
    """`run_case`, then assert parity: raises `harness.check.verdict.DivergenceFound` (an
    AssertionError listing every divergence) when anything diverged."""
    from harness.check.verdict import assert_parity  # imports Hypothesis: only when checking

    result = run_case(case, runtimes)
    assert_parity(result)
    return result

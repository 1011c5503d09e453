"""A bundle's evidence: re-running a finding's case to keep the data behind its divergences.

Numeric, NaN/Inf, bit and stale-read divergences of an op get that op's reference evaluated
on each backend's own inputs to it (as the per-op oracle judges it), graph-output ones the
end-to-end reference; each such tensor keeps each backend's values, the reference and the
budget (`arrays.npz`, for the report's maps and plots) and its worst element by the
oracle's rule (`harness.model.numerics.utilization_map`), with the values there and the
op's inputs around it (bundle.json's `evidence`, `harness.run.records.EvidenceElement`).
Canary divergences get a map of the tensor's allocation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_format import Graph, OpNode, Runtime, StepResult
from harness.check.contract import coarsest_arithmetic, expected_build_error
from harness.check.reference import ReferenceEvaluator, op_args
from harness.check.steps import StepLoop, backend_kernels, grid_limit, intermediates
from harness.gen.case import Case
from harness.model import Args, local_budgets
from harness.model.numerics import F32, Arithmetic, utilization_map
from harness.ops import model_for
from harness.run.records import DivergenceRecord, ElementInput, ElementValues, EvidenceElement

# Largest tensor (elements) whose values a bundle keeps as evidence.
MAX_EVIDENCE_ELEMENTS = 1 << 20


@dataclass
class Evidence:
    """What a bundle keeps of a re-run: arrays for `arrays.npz`, worst elements for
    bundle.json's `evidence` (see `_worst_element`)."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    elements: list[EvidenceElement] = field(default_factory=list)


def capture_evidence(
    runtimes: Sequence[Runtime], case: Case, divergences: Sequence[DivergenceRecord]
) -> Evidence:
    """Re-run a case and keep the data behind its divergences (see the module docstring).

    Numeric and NaN/Inf divergences of an op get that op's reference evaluated on each
    backend's own inputs to it (as the per-op oracle does); graph-output divergences get the
    end-to-end reference. Each such tensor also gets its worst element: the values there
    (each backend's output, reference and budget) and the op's inputs around it. Canary
    divergences get a map of the tensor's allocation.
    """
    graph = case.graph
    wanted, canary, suspect = _evidence_wanted(divergences)
    evidence = Evidence()
    if (not wanted and not canary) or expected_build_error(graph) is not None:
        return evidence
    # The arithmetic each runtime's kernels compute each op in (a manifest's `precision`),
    # as the lockstep run judged them.
    arithmetic = {
        name: kernels.arithmetics(graph) for name, kernels in backend_kernels(runtimes).items()
    }
    reference = ReferenceEvaluator(graph, arithmetic=coarsest_arithmetic(arithmetic.values()))
    with StepLoop(runtimes, case, reads=intermediates(graph), limit=grid_limit(runtimes)) as loop:
        # A runtime that did not load runs no step: the lockstep run recorded why.
        for step in loop.steps(until=max([*wanted, *canary])):
            if not step.accepted:
                continue  # the lockstep run already recorded the failure
            index, results, fill = step.index, step.results, step.fill
            values, errors, _ = reference.step(step.inputs)
            for tensor in sorted(wanted.get(index, ())):
                _numeric_evidence(
                    evidence,
                    graph,
                    index,
                    tensor,
                    step.inputs,
                    results,
                    values,
                    errors,
                    statistical=tensor in suspect.get(index, ()),
                    arithmetic=arithmetic,
                )
            for tensor in sorted(canary.get(index, ())):
                _canary_evidence(evidence, index, tensor, results, fill)
    return evidence


def _evidence_wanted(
    divergences: Sequence[DivergenceRecord],
) -> tuple[dict[int, set[str]], dict[int, set[str]], dict[int, set[str]]]:
    """By step, the tensors whose numbers a bundle keeps, those whose allocation it maps
    (canary findings), and those found between the tiers (their evidence shows the
    statistical bound they broke)."""
    wanted: dict[int, set[str]] = {}
    canary: dict[int, set[str]] = {}
    suspect: dict[int, set[str]] = {}
    for d in divergences:
        if not d.tensor or d.step < 0:
            continue
        if d.kind in ("numeric", "nan_inf", "bit_mismatch", "stale_read", "numeric_suspect"):
            wanted.setdefault(d.step, set()).add(d.tensor)
        if d.kind == "numeric_suspect":
            suspect.setdefault(d.step, set()).add(d.tensor)
        if d.kind in ("canary_write", "stale_read"):
            canary.setdefault(d.step, set()).add(d.tensor)
    return wanted, canary, suspect


def _canary_evidence(
    evidence: Evidence,
    index: int,
    tensor: str,
    results: Mapping[str, StepResult],
    fill: Mapping[str, tuple[int, int]],
) -> None:
    """A map of each backend's allocation of `tensor`: per u32 word, 0 the tensor's data,
    1 canary intact, 2 canary overwritten."""
    for name, res in results.items():
        raw = res.raw.get(tensor)
        if raw is None:
            continue
        offset, word = fill[tensor]
        words = raw[: len(raw) // 4 * 4].view(np.uint32)
        state = np.zeros(words.shape, np.uint8)
        state[offset // 4 :] = np.where(words[offset // 4 :] == word, 1, 2)
        evidence.arrays[f"canary/s{index}/{tensor}/{name}"] = state


def _numeric_evidence(
    evidence: Evidence,
    graph: Graph,
    index: int,
    tensor: str,
    inputs: Mapping[str, Any],
    results: Mapping[str, StepResult],
    values: Mapping[str, np.ndarray],
    errors: Mapping[str, Any],
    *,
    statistical: bool = False,
    arithmetic: Mapping[str, Mapping[str, Arithmetic]] | None = None,
) -> None:
    """The evidence of one tensor's numeric finding: each backend's output with the
    reference and budget it was judged by (the op's own, or end to end), and the worst
    element; `statistical`: the op's statistical tier bound instead of its rigorous budget
    (a `numeric_suspect`); `arithmetic`: per runtime, the ops its kernels compute in
    another arithmetic than f32 (their budgets are derived for it, as `check_ops` does)."""
    node = graph.producer(tensor)
    judged: dict[str, _Judged] = {}
    for name, res in results.items():
        observed = {**res.tensors, **res.outputs}
        actual = observed.get(tensor)
        if actual is None:
            continue
        ref, budget, scope = values.get(tensor), errors.get(tensor), "graph"
        args = _backend_args(graph, node, inputs, observed, res.symints) if node else None
        if (
            node is not None
            and args is not None
            and not any(t.state for _, t in node.tensor_args(graph))
        ):
            # The op's reference on this backend's own inputs and its budget in the graph's
            # precision, as the per-op oracle judges it (`check_ops`): the f32 budget of an
            # f16 graph's op put the backend the oracle passed 5e4x over it on the page.
            own = (arithmetic or {}).get(name, {}).get(node.name, F32)
            judged_by_op = _op_judgement(graph, node, args, tensor, statistical, own)
            if judged_by_op is not None:
                ref, budget = judged_by_op
                scope = "op"
        if ref is None or np.shape(ref) != actual.shape:
            continue
        budget_array = np.broadcast_to(
            np.asarray(budget if budget is not None else 0.0, np.float64), actual.shape
        )
        judged[name] = _Judged(
            np.asarray(actual), np.asarray(ref, np.float64), budget_array, scope, args
        )
        if actual.size <= MAX_EVIDENCE_ELEMENTS:
            key = f"s{index}/{tensor}/{name}"
            evidence.arrays[f"{key}/actual"] = np.asarray(actual, np.float32)
            evidence.arrays[f"{key}/reference"] = np.asarray(ref, np.float64)
            evidence.arrays[f"{key}/budget"] = budget_array.copy()
    element = _worst_element(graph, node, index, tensor, judged)
    if element is not None:
        evidence.elements.append(element)


def _backend_args(
    graph: Graph,
    node: OpNode,
    inputs: Mapping[str, Any],
    observed: Mapping[str, np.ndarray],
    symints: Mapping[str, int],
) -> Args | None:
    """The op's arguments as one backend computed them: graph inputs, constants and the
    intermediates it produced; None when they cannot be had (e.g. a state tensor it does not
    read back)."""
    local: dict[str, np.ndarray] = {
        n: np.asarray(v, np.float64) for n, v in inputs.items() if isinstance(v, np.ndarray)
    }
    for t in graph.tensors():
        if t.constant is not None and not t.state:  # state: its initial data only
            local[t.name] = graph.constants[t.constant].astype(np.float64)
    local.update({n: v.astype(np.float64) for n, v in observed.items()})
    try:
        return op_args(graph, node, local, symints)
    except Exception:
        return None


def _op_judgement(
    graph: Graph,
    node: OpNode,
    args: Args,
    tensor: str,
    statistical: bool,
    arithmetic: Arithmetic,
) -> tuple[Any, Any] | None:
    """The op's reference for `tensor` and its budget in the backend's `arithmetic` (the
    statistical tier's bound when `statistical`), or None when the op's model cannot give
    them (the end-to-end reference stands)."""
    try:
        model = model_for(node.op)
        outs = model.reference(node, args)
        tiers = local_budgets(graph, node, args, outs, arithmetic)
        budgets = tiers.statistical if statistical else tiers.hard
        slot = next(s for s, out in node.outputs.items() if out == tensor)
        return outs[slot], budgets[slot]
    except Exception:
        return None


@dataclass
class _Judged:
    """One backend's output of a tensor with the reference and budget it is judged by."""

    actual: np.ndarray
    reference: np.ndarray
    budget: np.ndarray
    scope: str  # "op": the op's reference on this backend's inputs; "graph": end to end
    args: Mapping[str, Any] | None  # the op's arguments on this backend


# Values of an input's row the failure page shows around the worst element.
INPUT_WINDOW = 16


def _worst_element(
    graph: Graph,
    node: OpNode | None,
    index: int,
    tensor: str,
    judged: Mapping[str, _Judged],
) -> EvidenceElement | None:
    """The element of `tensor` furthest over its budget on any backend (by
    `numerics.utilization_map`, the oracle's rule; an element of another class than the
    reference first), and the values there on each backend, with the op's inputs around it
    (see `_input_view`): an entry of bundle.json's `evidence`.
    """
    utils = {
        name: utilization_map(j.actual, j.reference, j.budget)
        for name, j in judged.items()
        if j.actual.size
    }
    if not utils:
        return None
    ranked = {n: np.where(np.isnan(u), np.inf, u) for n, u in utils.items()}
    worst_on = max(ranked, key=lambda n: float(np.max(ranked[n])))
    at = tuple(
        int(i) for i in np.unravel_index(int(np.argmax(ranked[worst_on])), ranked[worst_on].shape)
    )
    backends = {}
    for name, util in utils.items():
        j = judged[name]
        actual, ref = float(j.actual[at]), float(j.reference[at])
        inputs = []
        for slot, value in (j.args or {}).items():
            arg = node.args.get(slot) if node is not None else None
            if value is None:
                continue
            label = ", ".join(arg) if isinstance(arg, tuple) else str(arg)
            inputs.append(_input_view(slot, label, value, j.actual.shape, at))
        backends[name] = ElementValues(
            actual, ref, float(j.budget[at]), abs(actual - ref), float(util[at]), j.scope, inputs
        )
    return EvidenceElement(
        step=index,
        tensor=tensor,
        shape=list(judged[worst_on].actual.shape),
        index=list(at),
        worst_on=worst_on,
        backends=backends,
        op=node.name if node is not None else None,
        op_type=node.op if node is not None else None,
    )


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    return len(shape) <= len(to) and all(
        a in (1, b) for a, b in zip(reversed(shape), reversed(to), strict=False)
    )


def _input_view(
    slot: str, name: str, value: Any, out_shape: tuple[int, ...], at: tuple[int, ...]
) -> ElementInput:
    """The values of one op argument (`slot`, passed `name`) around output element `at`,
    for the failure page.

    Which input elements feed an output element depends on the op, so this shows a row
    chosen by shape, and says how (`where`): an input of the output's shape, or one that
    broadcasts to it, shows its last-dim row at the same position with that element marked
    (`highlight`, an index into `values`); one whose leading dims match the output's shows
    the row at the same leading position (a matmul's activations); one whose first dim is
    the output's last shows its row at the output's column (a matmul's weight rows);
    anything else its first values. At most INPUT_WINDOW values, around the marked one.
    Scalars and SymInts are shown as they are.
    """
    if isinstance(value, tuple):
        return ElementInput(slot, name, "value", "", list(value), None, 0, len(value))
    a = np.asarray(value)
    if a.ndim == 0:
        return ElementInput(slot, name, "value", "", [a.item()], None, 0, 1)
    n = len(out_shape)
    column: int | None = None
    if _broadcasts(a.shape, out_shape):
        offset = n - a.ndim
        position = tuple(0 if a.shape[k] == 1 else at[offset + k] for k in range(a.ndim))
        lead, column = position[:-1], position[-1]
        where = "same position" if a.shape == out_shape else "same position, broadcast"
    elif a.ndim == n and a.shape[:-1] == out_shape[:-1]:
        lead, where = at[:-1], "same row"
    elif n and a.shape[0] == out_shape[-1]:
        lead, where = at[-1:], "row of the output's column"
    else:
        lead, where = (), "first values"
    row = a[lead].ravel()
    start = 0
    if column is not None:
        start = max(0, min(column - INPUT_WINDOW // 2, row.size - INPUT_WINDOW))
    stop = min(row.size, start + INPUT_WINDOW)
    flat = " flattened" if a.ndim - len(lead) > 1 else ""
    return ElementInput(
        slot,
        name,
        where + flat,
        "[" + "".join(f"{i}, " for i in lead) + f"{start}:{stop}]",
        row[start:stop].tolist(),
        None if column is None else column - start,
        start,
        int(row.size),
    )

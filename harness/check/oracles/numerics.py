"""Numerics: each op's outputs against the float64 reference within the error model's budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graph_format import (
    Graph,
    TensorValue,
)
from harness.check.divergence import (
    MODEL,
    Divergence,
    Kind,
    NumericDetails,
    blame_of,
    blamed_backends,
)
from harness.check.oracles.metadata import _index
from harness.check.oracles.where import writer
from harness.check.reference import OpEvaluation, op_args
from harness.model import local_budgets
from harness.model.numerics import F32, Arithmetic, Comparison, compare
from harness.ops import model_for

# ---------------------------------------------------------------------------- numerics


def numeric_divergence(
    step: int, backend: str, op: str | None, tensor: str, cmp: Comparison, scope: str
) -> Divergence:
    """A numeric, non-finite or shape finding from a failed comparison."""
    if not cmp.shape_ok:
        kind, msg = Kind.NUMERIC, f"{backend}: {tensor!r} has the wrong shape"
    elif cmp.nan_mismatch:
        kind = Kind.NAN_INF
        finite = cmp.finite_where_special
        parts = [
            f"{n} {what}"
            for n, what in (
                (
                    cmp.nan_mismatch - finite,
                    "non-finite where the reference is finite or another non-finite value",
                ),
                (finite, "finite where the reference is non-finite"),
            )
            if n
        ]
        msg = f"{backend}: {tensor!r} has value(s) of the wrong class: {'; '.join(parts)}"
    else:
        kind = Kind.NUMERIC
        msg = (
            f"{backend}: {tensor!r} is {cmp.utilization:.3g}x over its error budget "
            f"(max abs error {cmp.max_abs_error:.3g} at {cmp.worst_index})"
        )
    return Divergence(
        step,
        kind,
        backend,
        msg,
        op=op,
        tensor=tensor,
        factor=cmp.utilization if np.isfinite(cmp.utilization) else None,
        details=NumericDetails(scope, _index(cmp.worst_index), cmp.max_abs_error),
    )


def suspect_divergence(
    step: int, backend: str, op: str, tensor: str, hard: Comparison, statistical: Comparison
) -> Divergence:
    """A `numeric_suspect` finding: within the rigorous budget (`hard`), over the
    statistical tier's bound (`statistical`); both utilizations go with it."""
    return Divergence(
        step,
        Kind.NUMERIC_SUSPECT,
        backend,
        f"{backend}: {tensor!r} is {statistical.utilization:.3g}x over its statistical bound "
        f"and at {hard.utilization:.3g} of its rigorous budget (max abs error "
        f"{statistical.max_abs_error:.3g} at {statistical.worst_index})",
        op=op,
        tensor=tensor,
        factor=statistical.utilization,
        details=NumericDetails(
            "op",
            _index(statistical.worst_index),
            statistical.max_abs_error,
            hard_utilization=hard.utilization,
            statistical_utilization=statistical.utilization,
        ),
    )


def statistical_key(key: str) -> str:
    """The utilization key of an `op:tensor` comparison under the statistical tier, beside
    its rigorous one (recorded only where the two tiers differ)."""
    return f"{STATISTICAL_PREFIX}{key}"


STATISTICAL_PREFIX = "stat:"


def check_ops(
    step: int,
    graph: Graph,
    backend: str,
    values: Mapping[str, np.ndarray],
    observed: Mapping[str, np.ndarray],
    symints: Mapping[str, int],
    states: Sequence[str],
    utilization: dict[str, float],
    shared: Mapping[str, OpEvaluation] | None = None,
    references: dict[str, np.ndarray] | None = None,
    arithmetic: Mapping[str, Arithmetic] | None = None,
) -> list[Divergence]:
    """Each op against its float64 reference evaluated on this backend's own inputs to it.

    Judged on its own inputs, an op's error is its own: the first op that fails is where a
    divergence starts, whatever happens downstream.

    Args:
        values: float64 values of every tensor as this backend saw it: inputs, constants,
            state before the step, and every op output it produced.
        observed: what the backend produced (outputs, intermediates, state after the step).
        shared: the reference evaluator's ops of this step (`ReferenceEvaluator.evaluations`):
            an op whose arguments here are the evaluator's, bit for bit (graph inputs,
            constants, state both hold alike), takes its reference and budget from there
            instead of computing them again.
        references: filled with each compared tensor's reference, by `op:tensor` (what
            the exact tier blames by, `check_exact`).
        arithmetic: per op whose kernels on this backend compute in another arithmetic
            than f32 (a manifest's `precision = "f16"`), that arithmetic: its budgets are
            derived for it.
    """
    out: list[Divergence] = []
    for node in graph.ops:
        model = model_for(node.op)
        args = op_args(graph, node, values, symints)
        known = shared.get(node.name) if shared is not None else None
        own = arithmetic.get(node.name, F32) if arithmetic is not None else F32
        if known is not None and known.arithmetic == own and known.matches(args):
            outs, tiers = known.outputs, known.budgets
            args.update(known.state_after)  # the state as the reference updated it
        else:
            outs = model.reference(node, args)
            tiers = local_budgets(graph, node, args, outs, own)
        checks = [
            (node.outputs[slot], outs[slot], slot)
            for slot in node.outputs
            if isinstance(graph.values[node.outputs[slot]], TensorValue)
        ]
        # State the op updates in place (KV caches): after the step vs the reference's update.
        checks += [
            (arg, args[slot], slot)
            for slot, arg in node.args.items()
            if isinstance(arg, str) and arg in states
        ]
        for tensor, ref, slot in checks:
            hard = tiers.hard.get(slot, _NO_ERROR)
            cmp = compare(observed[tensor], ref, hard)
            key = f"{node.name}:{tensor}"
            utilization[key] = cmp.utilization
            if references is not None:
                references[key] = ref
            if not cmp.ok:
                out.append(numeric_divergence(step, backend, node.name, tensor, cmp, "op"))
                continue
            statistical = tiers.statistical.get(slot, _NO_ERROR)
            if statistical is hard:
                continue
            tight = compare(observed[tensor], ref, statistical)
            utilization[statistical_key(key)] = tight.utilization
            if not tight.ok:
                out.append(suspect_divergence(step, backend, node.name, tensor, cmp, tight))
    return out


# The budget of a state tensor an op's model gives none for: it must come back exact.
_NO_ERROR = np.zeros(1)


def check_outputs(
    step: int,
    graph: Graph,
    backend: str,
    outputs: Mapping[str, np.ndarray],
    ref_values: Mapping[str, np.ndarray],
    ref_errors: Mapping[str, Any],
    utilization: dict[str, float],
) -> list[Divergence]:
    """Graph outputs against the pure float64 reference, with bounds propagated end to end;
    a divergence names the op that wrote the output (`writer`: a state tensor, a KV cache,
    is written in place by an op that has no output)."""
    out = []
    for tensor in graph.outputs:
        cmp = compare(outputs[tensor], ref_values[tensor], ref_errors[tensor])
        utilization[f"out:{tensor}"] = cmp.utilization
        if not cmp.ok:
            out.append(
                numeric_divergence(step, backend, writer(graph, tensor), tensor, cmp, "graph")
            )
    return out


def check_degenerate(
    step: int,
    graph: Graph,
    inputs: Mapping[str, Any],
    ref_values: Mapping[str, np.ndarray],
    ref_errors: Mapping[str, Any],
) -> list[Divergence]:
    """A case that cannot fail proves nothing: a step where nothing carries varying data
    (every float input constant, all zeros say, and no weights or token ids to vary instead),
    or a graph output that lies entirely within its own error budget.

    A constant input beside varying data is allowed: some real inputs are constant (a rope
    table's row at position 0 is cos 1, sin 0), and the outputs' check still decides.
    """
    out = []
    floats = [
        (name, value.ravel())
        for name, value in inputs.items()
        if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.size
    ]
    other_data = any(t.constant is not None for t in graph.tensors()) or any(
        isinstance(value, np.ndarray) and value.dtype != np.float32 for value in inputs.values()
    )

    # One element cannot vary: it is data unless it is zero.
    def constant(flat: np.ndarray) -> bool:
        return bool(np.all(flat == flat[0])) and (flat.size > 1 or flat[0] == 0)

    if floats and not other_data and all(constant(flat) for _, flat in floats):
        values = ", ".join(f"{name} = {float(flat[0])!r}" for name, flat in floats)
        out.append(
            Divergence(
                step,
                Kind.DEGENERATE,
                "case",
                f"every float input is constant ({values}): outputs cannot tell bugs apart",
            )
        )
    for tensor in graph.outputs:
        ref = np.abs(ref_values[tensor])
        floor = np.broadcast_to(np.asarray(ref_errors[tensor]), ref.shape)
        if ref.size and not np.any(ref > floor):
            out.append(
                Divergence(
                    step,
                    Kind.DEGENERATE,
                    "case",
                    f"output {tensor!r} is below its error budget everywhere (max |value| "
                    f"{float(ref.max()):.3g}): any result would pass",
                    tensor=tensor,
                )
            )
    return out


def merge_blame(divergences: list[Divergence], backends: Sequence[str]) -> list[Divergence]:
    """Fold the same numeric finding on several of `backends` into one, blamed on them all
    (`blame_of`: "both" when every backend shows it)."""
    merged: dict[tuple[Any, ...], Divergence] = {}
    rest: list[Divergence] = []
    for d in divergences:
        if d.kind not in (Kind.NUMERIC, Kind.NAN_INF, Kind.NUMERIC_SUSPECT):
            rest.append(d)
            continue
        scope = d.details.scope if isinstance(d.details, NumericDetails) else None
        key = (d.kind, d.op, d.tensor, scope)
        if key in merged and merged[key].blame != d.blame:
            first = merged[key]
            if first.blame != MODEL:
                named = [
                    *blamed_backends(first.blame, backends),
                    *blamed_backends(d.blame, backends),
                ]
                first.blame = blame_of(named, backends)
            first.message += f"; {d.message}"
            # None stands for an infinite factor, which dominates any finite one.
            first.factor = (
                None if first.factor is None or d.factor is None else max(first.factor, d.factor)
            )
        else:
            merged[key] = d
    return rest + list(merged.values())

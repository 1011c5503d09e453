"""The exact tier: bit-for-bit comparison of the backends' outputs where their arithmetic agrees."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from graph_format import (
    DispatchRecord,
    Graph,
    SymIntValue,
    TensorValue,
)
from harness.check.divergence import (
    BitDetails,
    BitPair,
    Divergence,
    Kind,
    blame_of,
    blamed_backends,
)
from harness.check.oracles.where import writer
from harness.model import arg_values
from harness.ops import model_for

# ---------------------------------------------------------------------------- exact tier


@dataclass(frozen=True)
class BitComparison:
    """One op's output on two backends whose inputs to that op were bit-identical.

    Attributes:
        op: the op's name; `op_type` its type.
        tensor: the output (or the state the op updates in place) compared.
        pair: the two backends, in the run's order.
        kernels: the kernel slots the op dispatched (ran) on both.
        ulps: the largest distance between the two in units in the last place of the
            tensor's precision (0: equal, counting +0 and -0 alike and any NaN as any NaN;
            `NOT_CLOSE` where one is NaN and the other is not, or an integer differs).
        differing: how many elements are more than 0 ULPs apart.
        first: the flat index of the first of them (-1 when none).
    """

    op: str
    op_type: str
    tensor: str
    pair: tuple[str, str]
    kernels: tuple[str, ...]
    ulps: int
    differing: int
    first: int


# A distance for elements that are not two floats of one sign of NaN-ness: any tolerance
# rejects it.
NOT_CLOSE = 1 << 40


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance of two arrays of one float (or integer) dtype in units in the
    last place: the difference of their bit patterns mapped onto a line where consecutive
    floats are consecutive integers (+0 and -0 both at 0); two NaNs are 0 apart, a NaN and a
    number `NOT_CLOSE`; integers are 0 or `NOT_CLOSE` apart."""
    x, y = np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel()
    if x.dtype.kind != "f":
        return np.where(x == y, 0, NOT_CLOSE).astype(np.int64)
    bits = x.dtype.itemsize * 8
    unsigned = {16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]

    def line(v: np.ndarray) -> np.ndarray:
        raw = v.view(unsigned).astype(np.int64 if bits < 64 else np.uint64)
        sign = (raw >> (bits - 1)) & 1
        magnitude = (raw & ((1 << (bits - 1)) - 1)).astype(np.int64)
        return np.where(sign == 1, -magnitude, magnitude)

    distance: np.ndarray = np.abs(line(x) - line(y))
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    distance[nan_x & nan_y] = 0
    distance[nan_x ^ nan_y] = NOT_CLOSE
    return distance


def compare_bits(
    graph: Graph,
    backends: Sequence[str],
    observed: Mapping[str, Mapping[str, np.ndarray]],
    values: Mapping[str, Mapping[str, np.ndarray]],
    symints: Mapping[str, Mapping[str, int]],
    dispatches: Mapping[str, Sequence[DispatchRecord]],
    states: Sequence[str],
) -> list[BitComparison]:
    """Every op's outputs on every pair of `backends`, where both ran the op with the same
    kernels on bit-identical inputs (else a difference comes from upstream, or is the
    dispatch oracle's).

    Args:
        observed: per backend, what it produced (outputs, intermediates, state after).
        values: per backend, float64 values of every tensor as it saw it in this step,
            state as before the step (`check_ops`'s `values`).
        symints: per backend, its SymInts' values.
        dispatches: per backend, its dispatch log of the step.
        states: the graph's state tensors. An op sees a state as it was before the step
            until an op that binds it read-write has run; after that the state after the
            step stands for it, and the last such op (`writer`) answers for it.
    """
    out: list[BitComparison] = []
    ran = {name: {(d.op, d.kernel) for d in log if d.ran} for name, log in dispatches.items()}
    written: set[str] = set()
    for node in graph.ops:
        model = model_for(node.op)
        writes = {
            str(node.args[b.name])
            for spec in model.kernels.values()
            for b in spec.tensors
            if b.access == "read_write" and isinstance(node.args.get(b.name), str)
        } & set(states)
        kernels = {
            name: tuple(sorted(k for op, k in ran[name] if op == node.name)) for name in backends
        }
        outputs = [
            node.outputs[slot]
            for slot in node.outputs
            if isinstance(graph.values[node.outputs[slot]], TensorValue)
        ] + [s for s in sorted(writes) if writer(graph, s) == node.name]
        for i, a in enumerate(backends):
            for b in backends[i + 1 :]:
                if not kernels[a] or kernels[a] != kernels[b]:
                    continue
                if not _same_inputs(graph, node, (a, b), observed, values, symints, written):
                    continue
                for tensor in outputs:
                    first, second = observed[a].get(tensor), observed[b].get(tensor)
                    if first is None or second is None or first.shape != second.shape:
                        continue
                    distance = ulp_distance(first, second)
                    differ = np.flatnonzero(distance)
                    out.append(
                        BitComparison(
                            node.name,
                            node.op,
                            tensor,
                            (a, b),
                            kernels[a],
                            int(distance.max(initial=0)),
                            int(differ.size),
                            int(differ[0]) if differ.size else -1,
                        )
                    )
        written |= writes
    return out


def _same_inputs(
    graph: Graph,
    node: Any,
    pair: tuple[str, str],
    observed: Mapping[str, Mapping[str, np.ndarray]],
    values: Mapping[str, Mapping[str, np.ndarray]],
    symints: Mapping[str, Mapping[str, int]],
    written: set[str],
) -> bool:
    """Whether both backends of `pair` gave `node` bit-identical inputs."""
    a, b = pair
    for name in arg_values(node):
        kind = graph.values.get(name)
        if isinstance(kind, SymIntValue):
            if symints[a].get(name) != symints[b].get(name):
                return False
            continue
        if not isinstance(kind, TensorValue):
            continue
        if name in written:
            first, second = observed[a].get(name), observed[b].get(name)
        else:
            first, second = values[a].get(name), values[b].get(name)
        if first is None or second is None:
            continue  # a constant or input both hold alike
        if first.shape != second.shape or first.tobytes() != second.tobytes():
            return False
    return True


def same_device(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether two runtimes' adapters (`Runtime.info()`) are one device: their adapter names
    alike but for case and punctuation (wgpu's `llvmpipe (LLVM 15.0.6, 256 bits)` is Dawn's
    `llvmpipe-llvm-15-0-6-256-bits-`)."""

    def norm(info: Mapping[str, Any]) -> str:
        return re.sub(r"[^a-z0-9]", "", str(info.get("adapter", "")).lower())

    return bool(norm(first)) and norm(first) == norm(second)


def exact_tolerance(
    op_type: str,
    kernels: Sequence[str],
    pair: tuple[str, str],
    adapters: Mapping[str, Mapping[str, Any]],
    replaced: Mapping[str, Mapping[str, bool]],
) -> int | None:
    """How many ULPs apart two backends' outputs of an op may be, given bit-identical inputs,
    by the declarations of the kernels it ran (`KernelSpec.exact`, `KernelSpec.webgpu_ulps`):
    0 on one device where every kernel is declared exact; between two WebGPU implementations
    on different devices (the same WGSL), the largest of the kernels' `webgpu_ulps`; None
    (not compared) where a kernel declares nothing for the pair.

    Args:
        replaced: per backend running a manifest, each slot it replaces -> whether its
            entry declares `exact` (a foreign kernel promises nothing unless it does; it
            declares no `webgpu_ulps`).
    """
    a, b = pair
    foreign = {k for side in (a, b) for k in replaced.get(side, {})}
    if any(
        not flag for side in (a, b) for k, flag in replaced.get(side, {}).items() if k in kernels
    ):
        return None
    specs = model_for(op_type).kernels
    declared = [specs[k] for k in kernels if k in specs]
    if len(declared) != len(kernels) or not all(spec.exact for spec in declared):
        return None
    if same_device(adapters.get(a, {}), adapters.get(b, {})):
        return 0
    if any(k in foreign for k in kernels):
        return None
    ulps = [spec.webgpu_ulps for spec in declared]
    if not (a.startswith("webgpu") and b.startswith("webgpu")) or None in ulps:
        return None
    return max(cast(list[int], ulps))


def check_exact(
    step: int,
    comparisons: Sequence[BitComparison],
    observed: Mapping[str, Mapping[str, np.ndarray]],
    references: Mapping[str, Mapping[str, np.ndarray]],
    utilization: Mapping[str, Mapping[str, float]],
    backends: Sequence[str],
    adapters: Mapping[str, Mapping[str, Any]],
    replaced: Mapping[str, Mapping[str, bool]],
) -> list[Divergence]:
    """The exact tier: an op whose kernels are declared to round alike on a pair of backends
    (`exact_tolerance`), given bit-identical inputs there, must give outputs that far apart
    at most; farther is a `bit_mismatch` however far under budget both are.

    Blame, as the numeric tier's, goes by the float64 reference: at the elements that
    differ, the backend whose values are farther from it (summed absolute error) is wrong;
    on a tie, the one with the larger utilization of the op's budget; on a tie there too,
    both. One finding per op and tensor, blamed on every backend some pair blamed.
    """
    found: dict[tuple[str, str], Divergence] = {}
    for c in comparisons:
        allowed = exact_tolerance(c.op_type, c.kernels, c.pair, adapters, replaced)
        if allowed is None or c.ulps <= allowed:
            continue
        a, b = c.pair
        key = f"{c.op}:{c.tensor}"
        far = _farther(observed[a][c.tensor], observed[b][c.tensor], references, key, c.pair)
        if far is None:
            ua, ub = utilization[a].get(key, 0.0), utilization[b].get(key, 0.0)
            far = [a] if ua > ub else [b] if ub > ua else [a, b]
        previous = found.get((c.op, c.tensor))
        named = [*(blamed_backends(previous.blame, backends) if previous else []), *far]
        blame = blame_of(named, backends)
        ulps = "bit-identical" if allowed == 0 else f"within {allowed} ULP"
        message = (
            f"{a} and {b}: {c.tensor!r} differs in {c.differing} element(s) (up to "
            f"{c.ulps} ULP, first at flat index {c.first}) on bit-identical inputs where "
            f"its kernels ({', '.join(c.kernels)}) are declared {ulps}"
        )
        if previous is not None:
            previous.blame = blame
            previous.message += f"; {message}"
            cast(BitDetails, previous.details).pairs.append(_pair_details(c, allowed))
            continue
        found[(c.op, c.tensor)] = Divergence(
            step,
            Kind.BIT_MISMATCH,
            blame,
            message,
            op=c.op,
            tensor=c.tensor,
            details=BitDetails(worst_index=c.first, pairs=[_pair_details(c, allowed)]),
        )
    return list(found.values())


def _pair_details(c: BitComparison, allowed: int) -> BitPair:
    return BitPair(list(c.pair), c.ulps, allowed, c.differing, c.first, list(c.kernels))


def _farther(
    first: np.ndarray,
    second: np.ndarray,
    references: Mapping[str, Mapping[str, np.ndarray]],
    key: str,
    pair: tuple[str, str],
) -> list[str] | None:
    """The backend of `pair` whose values are farther from the float64 reference where the
    two differ (None: no reference, or a tie)."""
    ref = references.get(pair[0], {}).get(key)
    if ref is None:
        ref = references.get(pair[1], {}).get(key)
    if ref is None or ref.size != first.size:
        return None
    differ = ulp_distance(first, second) > 0
    flat = np.asarray(ref, np.float64).ravel()[differ]
    with np.errstate(invalid="ignore", over="ignore"):
        errors = [
            float(np.nansum(np.abs(np.asarray(v, np.float64).ravel()[differ] - flat)))
            for v in (first, second)
        ]
    if errors[0] == errors[1]:
        return None
    return [pair[0]] if errors[0] > errors[1] else [pair[1]]

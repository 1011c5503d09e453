"""Which shape regimes and kernel variants a run exercised, per op type and backend.

A regime is a property of an op's "regime size" (the live size its resize bugs hinge on:
rows for rms_norm, M for a linear, S for attention; by default the product of its first
tensor argument's leading dims) in one step: 1, the max, just below / on / just above a
multiple of a workgroup or tile size, the transition from the step before (grow,
shrink, same), and the precision the op ran in (`dtype=float32`, `dtype=float16`); per kernel
variant that ran, whether its dispatch spanned 2 or 4 workgroups of the kernel's own size
(`add_flat:workgroups>=4`, from the backend's own dispatch: a foreign kernel's size). An op
model can name extra regimes (such as a context near the cache end)
with `regimes(node, live)` and choose its size with `regime_size(node, live)`.
A profile can require cells; `missing_cells` lists those a run left empty. Half-precision
cells (`dtype=float16` and the `_f16` kernel variants) are required only where every
backend's device offers f16 (`available_cells`): a device without it reports f16 cases as
unavailable, never as a failed run.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graph_format import F16_SUFFIX, Graph, OpNode
from harness.check.contract import ContractModel, ModelStep
from harness.gen.case import Case
from harness.model import LiveState, op_dtype, workgroups_regime
from harness.ops import MODELS, model_for

# Workgroup and tile sizes of the kernels (4: vec4 / GEMM tiles, 8: q4 words, 64: workgroups).
MULTIPLES = (4, 8, 64)
# Workgroup counts a kernel variant's dispatch reached (`<variant>:workgroups>=N`): bugs past
# the first workgroup of a kernel's own size (its index arithmetic, a stride, a guard).
WORKGROUP_STEPS = (2, 4)


# Coverage as records hold it (`Coverage.to_json`): op type -> backend -> "regimes",
# "variants" (and "foreign", "unfolding" where some ran) -> sorted names.
CoverageCells = dict[str, dict[str, dict[str, list[str]]]]


def size_regimes(value: int, max_value: int) -> set[str]:
    """Regime tags of a live size against its max."""
    tags = {"size=1"} if value == 1 else set()
    if value == max_value:
        tags.add("size=max")
    elif value > 1:
        tags.add("size=mid")
    for m in MULTIPLES:
        if value < m - 1:
            continue
        rest = value % m
        if rest == 0:
            tags.add(f"size%{m}=0")
        elif rest == m - 1:
            tags.add(f"size%{m}=-1")
        elif rest == 1:
            tags.add(f"size%{m}=+1")
    return tags


def transition(previous: int | None, value: int) -> str:
    """How a regime size moved from the step before."""
    if previous is None:
        return "step=first"
    if value > previous:
        return "step=grow"
    return "step=shrink" if value < previous else "step=same"


def regime_size(node: OpNode, live: LiveState) -> int:
    """The op's regime size (its model's `regime_size`: by default its first tensor's
    leading-dims product)."""
    return int(model_for(node.op).regime_size(node, live))


def op_regimes(
    node: OpNode, live: LiveState, max_live: LiveState, previous: int | None
) -> tuple[int, set[str]]:
    """(regime size, regime tags) of one op in one step."""
    size = regime_size(node, live)
    tags = size_regimes(size, regime_size(node, max_live)) | {transition(previous, size)}
    tags.add(dtype_regime(op_dtype(live.graph, node)))
    tags |= set(model_for(node.op).regimes(node, live))
    return size, tags


def workgroups_regimes(kernel: str, workgroups: int) -> set[str]:
    """The workgroup-count tags of one dispatch of `kernel` over `workgroups` workgroups (its
    logical count, all dims, as the backend dispatched it: a foreign kernel's own size)."""
    return {workgroups_regime(kernel, n) for n in WORKGROUP_STEPS if workgroups >= n}


def dtype_regime(dtype: str) -> str:
    """The coverage tag of an op that ran in precision `dtype`."""
    return f"dtype={dtype}"


def is_half_precision_cell(cell: str) -> bool:
    """Whether a coverage cell can only be filled by an f16 case: the `dtype=float16` tag
    or a kernel variant of an `_f16` slot, or of a slot whose tensors are f16 without the
    suffix (`q4gsw_gemm_f16acc`), or a tag of one (`<variant>:workgroups>=N`)."""
    variant = cell.split(":")[0]
    return (
        cell == dtype_regime("float16")
        or variant.endswith(F16_SUFFIX)
        or variant in _half_precision_variants()
    )


@functools.cache  # a pure function of the op models, registered at import
def _half_precision_variants() -> frozenset[str]:
    """Every kernel variant that binds an f16 tensor (its kernels run only in f16 graphs)."""
    return frozenset(
        spec.name
        for model in MODELS.values()
        for spec in model.kernels.values()
        if any("f16" in binding.element for binding in spec.tensors)
    )


def available_cells(
    required: Mapping[str, Sequence[str]], adapters: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[str, ...]]:
    """The `required` cells the run's devices can fill: all of them where every backend's
    adapter reports `shader_f16`, else all but the half-precision ones (a record written
    before f16 existed reports none, and required none)."""
    if adapters and all(info.get("shader_f16", False) for info in adapters.values()):
        return {op: tuple(cells) for op, cells in required.items()}
    return {
        op: kept
        for op, cells in required.items()
        if (kept := tuple(c for c in cells if not is_half_precision_cell(c)))
    }


@dataclass
class Coverage:
    """op type -> backend -> {"regimes": tags, "variants": kernels that ran, "foreign": the
    variants among them that ran a manifest's kernel (docs/design.md §9), when any,
    "unfolding": the foreign variants whose kernel declares no fold, when any}."""

    cells: dict[str, dict[str, dict[str, set[str]]]] = field(default_factory=dict)

    def add(
        self,
        op_type: str,
        backend: str,
        regimes: Iterable[str],
        variants: Iterable[str],
        foreign: Iterable[str] = (),
        unfolding: Iterable[str] = (),
    ) -> None:
        """Record regimes and variants exercised by one op on one backend (`foreign`: the
        variants that ran a manifest's kernel; `unfolding`: those of them whose kernel
        declares no fold, so that a grid over the limit is refused instead)."""
        cell = self.cells.setdefault(op_type, {}).setdefault(
            backend, {"regimes": set(), "variants": set()}
        )
        cell["regimes"].update(regimes)
        cell["variants"].update(variants)
        foreign = set(foreign)
        if foreign:
            cell.setdefault("foreign", set()).update(foreign)
        unfolding = set(unfolding)
        if unfolding:
            cell.setdefault("unfolding", set()).update(unfolding)

    def merge(self, other: Coverage | Mapping[str, Any]) -> None:
        """Add another coverage (or its JSON form) into this one."""
        cells = other.cells if isinstance(other, Coverage) else other
        for op_type, backends in cells.items():
            for backend, cell in backends.items():
                self.add(
                    op_type,
                    backend,
                    cell["regimes"],
                    cell["variants"],
                    cell.get("foreign", ()),
                    cell.get("unfolding", ()),
                )

    def to_json(self) -> CoverageCells:
        """Plain data with sorted lists."""
        return {
            op: {b: {k: sorted(v) for k, v in cell.items()} for b, cell in backends.items()}
            for op, backends in sorted(self.cells.items())
        }


def missing_cells(
    coverage: Coverage | Mapping[str, Any],
    required: Mapping[str, Sequence[str]],
    backends: Sequence[str],
) -> list[tuple[str, str, str]]:
    """Required (op type, regime-or-variant) cells that some backend never exercised.

    `fold` is not required of an op on a backend whose every variant that ran is a foreign
    kernel declaring no fold: it has no folded path to exercise (a grid over the limit is a
    refusal the dispatch oracle checks instead)."""
    cells = coverage.cells if isinstance(coverage, Coverage) else coverage
    missing = []
    for op_type, wanted in required.items():
        for backend in backends:
            cell = cells.get(op_type, {}).get(backend, {"regimes": (), "variants": ()})
            seen = set(cell["regimes"]) | set(cell["variants"])
            variants = set(cell["variants"])
            if variants and variants <= set(cell.get("unfolding", ())):
                seen.add("fold")
            missing += [(op_type, backend, w) for w in wanted if w not in seen]
    return missing


def folds_under(case: Case, limit: int, ops: Collection[str]) -> bool:
    """Whether the contract predicts that a step of `case` folds a grid of an op of type in
    `ops` under `limit` workgroups per grid dimension: a dispatch that runs with a count
    above the limit (and so within its square: a larger one refuses the step)."""
    model = ContractModel(case.graph, max_workgroups_per_dim=limit)
    types = {node.name: node.op for node in case.graph.ops}
    for inputs in case.steps:
        step = model.try_step(inputs)
        if isinstance(step, ModelStep) and any(
            ran and types.get(op) in ops and max(count) > limit
            for op, _, _, count, ran in step.dispatches
        ):
            return True
    return False


def max_state(graph: Graph) -> LiveState:
    """The live state with every tensor at its max dims."""
    return LiveState(graph, {t.name: t.dims for t in graph.tensors()}, {})

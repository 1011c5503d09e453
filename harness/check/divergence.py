"""What the oracle stack reports: divergences, their classes and which side is blamed."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """Failure classes, from DESIGN.md §4 and issue "Harness depth" item 3."""

    BUILD_ERROR = "build_error"  # a backend refused (or accepted) a graph unlike the contract
    ERROR_ASYMMETRY = "error_asymmetry"  # one side raised where the contract says otherwise
    STATE_AFTER_REJECT = "state_after_reject"  # a rejected step changed the graph
    CUR_DIMS = "cur_dims"  # live dims (or a SymInt's value) differ from the contract
    DISPATCH = "dispatch"  # dispatch log (kernel, workgroup size, count, ran) differs
    PHYSICAL_GRID = "physical_grid"  # a physical grid breaks device limits or misses work
    CANARY_WRITE = "canary_write"  # a write into the slack past a tensor's live bytes
    STALE_READ = "stale_read"  # poison from the slack showed up in a live value
    NUMERIC = "numeric"  # error above the derived budget
    NAN_INF = "nan_inf"  # non-finite where the reference is finite
    VALIDATION = "validation"  # a validation-layer or API validation message
    CRASH = "crash"  # an unexpected exception or a lost device
    DEGENERATE = "degenerate"  # the case itself proves nothing (constant inputs, zero outputs)


# Bands of error / budget for numeric findings: marginal (a missing term in a derivation,
# or a subtly different accumulation), clear, and gross (a wrong element, a dropped factor).
# Bands rather than decades: one bug's factor can span many decades across cases (it
# depends on the data), and decades would split it into as many "different" bugs.
NUMERIC_BANDS = (("x1", 1.0), ("x10", 10.0), ("x1000", 1000.0))

METADATA_KINDS = frozenset({Kind.CUR_DIMS, Kind.DISPATCH, Kind.PHYSICAL_GRID})

# Within one step, the more fundamental finding comes first: a crash or a wrong dispatch
# explains the numeric errors that follow from it, not the other way round.
PRIORITY = {
    kind: rank
    for rank, kind in enumerate(
        [
            Kind.DEGENERATE,
            Kind.CRASH,
            Kind.BUILD_ERROR,
            Kind.VALIDATION,
            Kind.ERROR_ASYMMETRY,
            Kind.STATE_AFTER_REJECT,
            Kind.CUR_DIMS,
            Kind.DISPATCH,
            Kind.PHYSICAL_GRID,
            Kind.CANARY_WRITE,
            Kind.STALE_READ,
            Kind.NAN_INF,
            Kind.NUMERIC,
        ]
    )
}

# Blame values: which side is wrong.
WEBGPU, VULKAN, BOTH, MODEL = "webgpu", "vulkan", "both", "model"


@dataclass
class Divergence:
    """One finding of one step.

    Attributes:
        step: step index (-1 for load time).
        kind: failure class.
        blame: "webgpu", "vulkan", "both" (wrong alike or each wrong) or "model" (the
            contract model disagrees with two backends that agree with each other).
        op: the op concerned (its name in the graph), when known.
        op_type: that op's type (`rms_norm`...), which survives shrinking unlike the name.
        tensor: the tensor concerned, when known.
        message: one line for humans.
        factor: error / budget for numeric divergences.
        details: structured evidence (indices, values, expected vs actual).
    """

    step: int
    kind: Kind
    blame: str
    message: str
    op: str | None = None
    tensor: str | None = None
    factor: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    op_type: str | None = None

    def signature(self) -> tuple[str, str, str, str]:
        """What identifies "the same bug": class, op type, blame, and for numeric failures
        the band of error / budget (`NUMERIC_BANDS`), so that shrinking cannot trade a gross
        error for a barely failing one, or the other way round."""
        bucket = ""
        if self.kind == Kind.NUMERIC:
            factor = math.inf if self.factor is None else self.factor
            bucket = next(name for name, low in reversed(NUMERIC_BANDS) if factor >= low)
        return (str(self.kind), self.op_type or "-", self.blame, bucket)

    def to_json(self) -> dict[str, Any]:
        """Plain-data form for JSONL records."""
        data = asdict(self)
        data["kind"] = str(self.kind)
        return data


def blame_from(wrong: dict[str, bool], agree_with_each_other: bool = False) -> str:
    """Blame from which backends disagree with the contract.

    Args:
        wrong: backend name -> whether it disagrees with the contract model.
        agree_with_each_other: whether the disagreeing backends report the same thing.
    """
    bad = [name for name, is_wrong in wrong.items() if is_wrong]
    if len(bad) == 1:
        return bad[0]
    if len(bad) > 1 and len(bad) == len(wrong) and agree_with_each_other:
        return MODEL
    return BOTH


def primary(divergences: list[Divergence], op_order: dict[str, int] | None = None) -> Divergence:
    """The divergence that stands for a case: earliest step, most fundamental class, first op."""
    order = op_order or {}
    return min(
        divergences,
        key=lambda d: (d.step, PRIORITY[d.kind], order.get(d.op or "", len(order))),
    )

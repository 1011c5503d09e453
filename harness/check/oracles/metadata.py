"""Metadata and grids: the dispatches each backend logged against the contract model's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graph_format import (
    DispatchRecord,
    Graph,
    ParityError,
    StepResult,
)
from harness.check.contract import KERNELS_OWN_WORKGROUP, ModelStep
from harness.check.divergence import (
    CurDimsDetails,
    DispatchDetails,
    Divergence,
    GridDetails,
    Kind,
    LoggedDispatch,
    ValidationDetails,
    blame_from,
)
from harness.check.oracles.where import producer, writer
from harness.model import ExpectedDispatch

# ---------------------------------------------------------------------------- metadata


def _logged(entry: ExpectedDispatch) -> LoggedDispatch:
    """A dispatch log entry as a divergence's details hold it."""
    return LoggedDispatch(**dispatch_json(entry))


def _index(index: tuple[int, ...] | None) -> list[int] | None:
    """An element's index as its details hold it (a list, as JSON reads it back)."""
    return list(index) if index is not None else None


def dispatch_json(entry: ExpectedDispatch) -> dict[str, Any]:
    """A dispatch log entry as plain data."""
    op, kernel, wg, count, ran = entry
    return {"op": op, "kernel": kernel, "wg": list(wg), "count": list(count), "ran": ran}


def _by_op(log: Sequence[ExpectedDispatch]) -> dict[str, list[ExpectedDispatch]]:
    grouped: dict[str, list[ExpectedDispatch]] = {}
    for entry in log:
        grouped.setdefault(entry[0], []).append(entry)
    return grouped


def _brief(entries: Sequence[ExpectedDispatch]) -> str:
    parts = [
        f"{kernel} x{tuple(count)}" + ("" if ran else " skipped")
        for _, kernel, _, count, ran in entries
    ]
    return "[" + ", ".join(parts) + "]"


def check_metadata(
    step: int,
    graph: Graph,
    expected: ModelStep,
    results: Mapping[str, StepResult],
    expected_by: Mapping[str, ModelStep | ParityError] | None = None,
) -> list[Divergence]:
    """Every tensor's cur_dims, every SymInt and every op's dispatch slots, exactly as the
    contract says; a backend that runs a manifest's kernels is held to its own dispatches
    (`expected_by`: the manifest's counts for its replaced slots, whose workgroup size is
    the kernel's own and not compared)."""
    return [
        *_live_metadata(step, graph, expected, results),
        *_dispatch_slots(step, expected, results, expected_by),
    ]


def _live_metadata(
    step: int, graph: Graph, expected: ModelStep, results: Mapping[str, StepResult]
) -> list[Divergence]:
    """`check_metadata`'s cur_dims of every tensor and value of every SymInt."""
    out: list[Divergence] = []
    for tensor, want in expected.cur_dims.items():
        got = {name: tuple(res.cur_dims.get(tensor, ())) for name, res in results.items()}
        wrong = {name: dims != want for name, dims in got.items()}
        if any(wrong.values()):
            out.append(
                Divergence(
                    step,
                    Kind.CUR_DIMS,
                    blame_from(wrong, len(set(got.values())) == 1),
                    f"cur_dims of {tensor!r}: contract {list(want)}, "
                    + ", ".join(f"{n} {list(d)}" for n, d in got.items()),
                    op=writer(graph, tensor),
                    tensor=tensor,
                    details=CurDimsDetails(list(want), {n: list(d) for n, d in got.items()}),
                )
            )
    # SymInts are live metadata too (input_pos, a sym_size of a live dim).
    for symint, value in expected.symints.items():
        got_int = {name: res.symints.get(symint) for name, res in results.items()}
        wrong = {name: v != value for name, v in got_int.items()}
        if any(wrong.values()):
            out.append(
                Divergence(
                    step,
                    Kind.CUR_DIMS,
                    blame_from(wrong, len(set(got_int.values())) == 1),
                    f"SymInt {symint!r}: contract {value}, "
                    + ", ".join(f"{n} {v}" for n, v in got_int.items()),
                    op=producer(graph, symint),
                    tensor=symint,
                    details=CurDimsDetails(value, dict(got_int)),
                )
            )
    return out


def _dispatch_slots(
    step: int,
    expected: ModelStep,
    results: Mapping[str, StepResult],
    expected_by: Mapping[str, ModelStep | ParityError] | None,
) -> list[Divergence]:
    """`check_metadata`'s dispatch slots of every op, each backend held to its own
    prediction where it has one."""
    out: list[Divergence] = []
    own = {name: want for name, want in (expected_by or {}).items() if isinstance(want, ModelStep)}
    want_by_op = _by_op(expected.dispatches)
    wants_by_op = {
        name: _by_op(own[name].dispatches) if name in own else want_by_op for name in results
    }
    got_by_op = {
        name: _by_op([_as_predicted(d, own.get(name)) for d in res.dispatches])
        for name, res in results.items()
    }
    for op in dict.fromkeys(
        [*want_by_op, *(op for g in [*got_by_op.values(), *wants_by_op.values()] for op in g)]
    ):
        want_slots = want_by_op.get(op, [])
        got_slots = {name: by_op.get(op, []) for name, by_op in got_by_op.items()}
        wrong = {
            name: entries != wants_by_op[name].get(op, []) for name, entries in got_slots.items()
        }
        if not any(wrong.values()):
            continue
        foreign = {
            name: [_logged(d) for d in wants_by_op[name].get(op, [])]
            for name in own
            if name in results
        }
        out.append(
            Divergence(
                step,
                Kind.DISPATCH,
                blame_from(wrong, len({tuple(v) for v in got_slots.values()}) == 1),
                f"dispatches of {op!r}: contract {_brief(want_slots)}, "
                + ", ".join(f"{n} {_brief(e)}" for n, e in got_slots.items()),
                op=op,
                details=DispatchDetails(
                    [_logged(d) for d in want_slots],
                    {n: [_logged(d) for d in e] for n, e in got_slots.items()},
                    foreign or None,
                ),
            )
        )
    return out


def _as_predicted(record: DispatchRecord, own: ModelStep | None) -> ExpectedDispatch:
    """A backend's dispatch record as the contract predicts it: a manifest kernel's
    workgroup size is its own (not predicted)."""
    op, kernel, wg, count, ran = record.logical()
    if own is not None and kernel in own.foreign_slots:
        wg = KERNELS_OWN_WORKGROUP
    return (op, kernel, wg, count, ran)


def check_grids(
    step: int, results: Mapping[str, StepResult], limits: Mapping[str, int]
) -> list[Divergence]:
    """Physical grids within the device's per-dimension limit, covering the logical count
    with less than one row of waste."""
    out: list[Divergence] = []
    for name, res in results.items():
        limit = limits[name]
        for d in res.dispatches:
            if not d.ran:
                continue
            need = int(np.prod(d.logical_count))
            have = int(np.prod(d.physical_grid))
            if (
                any(g > limit or g < 1 for g in d.physical_grid)
                or have < need
                or have - need >= max(d.physical_grid[0], 1)
            ):
                out.append(
                    Divergence(
                        step,
                        Kind.PHYSICAL_GRID,
                        name,
                        f"{name}: {d.op}/{d.kernel} grid {d.physical_grid} for logical "
                        f"{d.logical_count} (limit {limit}/dim)",
                        op=d.op,
                        details=GridDetails(list(d.physical_grid), list(d.logical_count)),
                    )
                )
    return out


def check_validation(step: int, results: Mapping[str, StepResult]) -> list[Divergence]:
    """Any validation message is a finding."""
    return [
        Divergence(step, Kind.VALIDATION, name, f"{name}: {msg}", details=ValidationDetails(msg))
        for name, res in results.items()
        for msg in res.validation_messages
    ]

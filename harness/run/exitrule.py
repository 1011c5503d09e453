"""The exit rule of a run: the coverage cells it must fill, those it left empty, its exit
status and the words that say so, in one place.

`judge` is the only place a run's verdict is made. `parity run` calls it with its own tallies
(its exit status and the console's last lines), `summarize` with the records (summary.json,
the report's title and banner, and so the verdict of `parity report` and `parity merge`),
so that the process, the summary, the console and the report cannot disagree.

Required coverage cells are those the run can reach on purpose:

- Only the ops a family of the run answers for (`harness.families.covered_ops`: the ops it
  is the own family of) have required cells. A family combining ops (dag, attention,
  decoder, random) reaches an op's variants, regimes and folds only by chance, so the cells
  of an op whose own family did not run are never required (though a case of any family may
  fill them).
- An op's cells are the profile's (`Profile.required_coverage`), less the half-precision
  ones where a device lacks f16 (`harness.check.coverage.available_cells`), and less `fold`
  unless the plan ran a chunk of the op's own family under a lowered workgroup limit (such
  a chunk draws its cases to fold that op's grid: `harness.run.chunks.chunk_cases`).
- A profile's `full_budget_cells` (pr: the long paths of `pr_regimes`, such as the q4 GEMV's
  main loop) are required only of a family that ran the profile's whole per-family example
  budget: a share of its cases reaches them, which a run of a few examples may not.
- The cells are judged only on a complete run of every shard: a run stopped early, or one
  shard of several, has not had the chance to fill them.

The exit status (harness.run.exitcodes): 130 interrupted, 3 an internal error, 1 an
unexpected divergence, 4 a complete run that left a required cell empty ("coverage short":
no divergence was found, but the search did not reach what the profile promises, so a clean
verdict would be unearned), else 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.check.coverage import Coverage, available_cells, missing_cells
from harness.families import FAMILIES, covered_ops, family_for_op
from harness.run.exitcodes import LABELS, ExitStatus
from harness.run.plan import Chunk
from harness.run.profiles import PROFILES
from harness.run.records import Summary

# `parity run --help`'s paragraph on the rule (docs/parity-cli.md says the same at length).
REQUIRED_COVERAGE_HELP = (
    "required coverage: a complete run of every shard must fill, on both backends, the "
    "profile's coverage cells of the ops its families are the own family of (`parity list` "
    "names each op's; dag, attention, decoder and random answer for none, since they reach "
    "an op's variants only by chance): pr a folded grid of each op whose family ran a chunk "
    "under the lowered limit and, of a family that ran its whole budget, the long paths its "
    "model names (the q4 GEMV's main loop), nightly every regime and kernel variant the "
    "op's model names (f16 ones only where both devices offer f16). A run with no "
    "unexpected divergence that leaves one empty exits 4 (coverage short), and its last "
    "lines, summary.json and the report's title name the cells and the examples that would "
    "fill them."
)
CLEAN_TITLE = "no unexpected divergence"
DIVERGENT_TITLE = "unexpected divergences found"
SHORT_TITLE = "required coverage short"
# Cells a title names before it says "and N more".
TITLE_CELLS = 4


@dataclass(frozen=True)
class Verdict:
    """What `judge` decided.

    Attributes:
        exit_status: the status the command returns.
        title: one line for the report's title and banner: DIVERGENT_TITLE, CLEAN_TITLE, or
            SHORT_TITLE and the cells left empty.
        required: op type -> the cells the run must fill (on every backend).
        checked: whether the cells were judged (a complete run of every shard).
        missing: (op type, backend, cell) left empty, when checked.
        fill: one line per family whose op has an empty cell: which cells, and what would
            fill them.
    """

    exit_status: ExitStatus
    title: str
    required: dict[str, tuple[str, ...]] = field(default_factory=dict)
    checked: bool = False
    missing: list[tuple[str, str, str]] = field(default_factory=list)
    fill: list[str] = field(default_factory=list)

    def console_lines(self) -> list[str]:
        """The lines a command prints last (before the report's path), saying why the status
        is what it is when the run was neither clean nor divergent."""
        return reason_lines(self.missing, self.fill, bool(self.required), self.checked)


def reason_lines(
    missing: Sequence[Sequence[str]], fill: Sequence[str], required: bool, checked: bool
) -> list[str]:
    """The console's lines for a verdict (`Verdict.console_lines`), also from summary.json's
    `coverage_missing`, `coverage_fill`, `coverage_required` and `coverage_checked` (for
    `parity report` and `parity merge`)."""
    if missing:
        lines = [f"{SHORT_TITLE}: {len(missing)} required cells left empty"]
        return lines + [f"  {line}" for line in fill]
    if required and not checked:
        return ["required coverage not checked: the run did not complete every shard"]
    return []


def summary_lines(summary: Summary) -> list[str]:
    """`reason_lines` of a summary, then its exit status in words: what `parity report` and
    `parity merge` print last."""
    status = ExitStatus(summary.exit_status)
    return [
        *reason_lines(
            summary.coverage_missing,
            summary.coverage_fill,
            bool(summary.coverage_required),
            summary.coverage_checked,
        ),
        f"exit status {int(status)}: {LABELS[status]}",
    ]


def required_cells(
    profile: str | None, plan: Sequence[Chunk], adapters: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[str, ...]]:
    """op type -> the coverage cells a run of `plan` under `profile` must fill (see the
    module docstring); the plan is the whole run's, every shard's chunks.

    Args:
        adapters: per backend, the runtime's `info()` (its `shader_f16` decides the f16
            cells).
    """
    chosen = PROFILES.get(profile) if profile is not None else None
    wanted = chosen.required_coverage if chosen is not None else {}
    folding = {c.family for c in plan if c.max_workgroups_per_dim}
    examples: dict[str, int] = {}
    for chunk in plan:
        examples[chunk.family] = examples.get(chunk.family, 0) + chunk.max_examples
    required: dict[str, tuple[str, ...]] = {}
    for family, ran in examples.items():
        if family not in FAMILIES:  # a record of a family since renamed: nothing to require
            continue
        # Cells the family's examples may not reach: a fold without a fold chunk, a long path
        # short of the profile's whole budget.
        skip = set() if family in folding else {"fold"}
        if chosen is not None and ran < chosen.max_examples:
            skip |= chosen.full_budget_cells
        for op in sorted(covered_ops(family)):
            cells = tuple(c for c in wanted.get(op, ()) if c not in skip)
            if cells:
                required[op] = cells
    return available_cells(required, adapters)


def judge(
    *,
    profile: str | None,
    plan: Sequence[Chunk],
    adapters: Mapping[str, Mapping[str, Any]],
    coverage: Coverage | Mapping[str, Any],
    unexpected_cases: int,
    checked: bool,
    status: str | None = None,
) -> Verdict:
    """The verdict of a run (see the module docstring).

    Args:
        plan: every chunk of the run's plan (all shards').
        coverage: what the run's cases exercised (`Coverage`, or summary.json's form).
        unexpected_cases: distinct cases with an unexpected divergence.
        checked: the run is complete and every shard of it is here.
        status: the run's own status when the caller is the run itself ("interrupted" and
            "error" decide its exit status first); None for a verdict from the records.
    """
    required = required_cells(profile, plan, adapters)
    missing = missing_cells(coverage, required, sorted(adapters)) if checked else []
    if status == "interrupted":
        exit_status = ExitStatus.INTERRUPTED
    elif status == "error":
        exit_status = ExitStatus.INTERNAL_ERROR
    elif unexpected_cases:
        exit_status = ExitStatus.DIVERGENT
    elif missing:
        exit_status = ExitStatus.COVERAGE_SHORT
    else:
        exit_status = ExitStatus.CLEAN
    if unexpected_cases:
        title = DIVERGENT_TITLE
    elif missing:
        title = f"{SHORT_TITLE}: {_cells_text(missing)}"
    else:
        title = CLEAN_TITLE
    return Verdict(
        exit_status=exit_status,
        title=title,
        required=required,
        checked=checked,
        missing=missing,
        fill=fill_lines(missing, plan),
    )


def _cells_text(missing: Sequence[tuple[str, str, str]], most: int = TITLE_CELLS) -> str:
    """`embedding_q4gsw fold; mul mul_flat_f16 (webgpu), size=1`: the empty cells by op,
    each with the backends it is empty on when not all of them; after `most` cells, how many
    more."""
    backends = {b for _, b, _ in missing}
    by_op: dict[str, dict[str, list[str]]] = {}
    for op, backend, cell in missing:
        by_op.setdefault(op, {}).setdefault(cell, []).append(backend)
    parts, named, total = [], 0, sum(len(cells) for cells in by_op.values())
    for op, cells in by_op.items():
        names = [
            cell + ("" if set(on) == backends else f" ({', '.join(sorted(on))})")
            for cell, on in cells.items()
        ][: max(0, most - named)]
        if names:
            parts.append(f"{op} {', '.join(names)}")
        named += len(names)
    more = total - named
    return "; ".join(parts) + (f" and {more} more" if more > 0 else "")


def fill_lines(missing: Sequence[tuple[str, str, str]], plan: Sequence[Chunk]) -> list[str]:
    """Per family whose op has an empty cell: the cells, and what would fill them (more
    examples of that family; for `fold`, more of its chunks under the lowered limit)."""
    by_family: dict[str, list[tuple[str, str, str]]] = {}
    for cell in missing:
        family = family_for_op(cell[0]) or "?"
        by_family.setdefault(family, []).append(cell)
    lines = []
    for family, cells in by_family.items():
        chunks = [c for c in plan if c.family == family]
        examples = sum(c.max_examples for c in chunks)
        limits = sorted({c.max_workgroups_per_dim for c in chunks if c.max_workgroups_per_dim})
        folded = sum(c.max_examples for c in chunks if c.max_workgroups_per_dim)
        why = f"family {family} ran {examples} examples"
        if any(cell == "fold" for _, _, cell in cells) and limits:
            limit = "/".join(str(n) for n in limits)
            why += f" ({folded} of them under {limit} workgroups per grid dimension)"
        lines.append(
            f"{_cells_text(cells, most=len(cells))}: {why}; more examples of it would fill "
            f"them (e.g. --families {family} --max-examples {2 * max(examples, 1)})"
        )
    return lines


__all__ = [
    "REQUIRED_COVERAGE_HELP",
    "Verdict",
    "fill_lines",
    "judge",
    "reason_lines",
    "required_cells",
    "summary_lines",
]

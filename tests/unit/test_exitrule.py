"""The one exit rule (harness.run.exitrule), without a device: which coverage cells a run must
fill, its exit status, its title and what it says would fill an empty cell."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from hypothesis import given, seed, settings

from harness.check.coverage import Coverage, folds_under
from harness.families import FAMILIES, covered_ops, family_for_op
from harness.gen.case import Case
from harness.ops import MODELS
from harness.run.chunks import chunk_cases
from harness.run.exitcodes import ExitStatus
from harness.run.exitrule import Verdict, judge, reason_lines, required_cells
from harness.run.plan import Chunk, make_plan
from harness.run.profiles import PROFILES, hypothesis_settings
from harness.run.report import render_report
from harness.run.summary import junit_xml
from tests.unit.test_report import _case, _run_meta, _summarize, _write_run

F16 = {"webgpu": {"shader_f16": True}, "vulkan": {"shader_f16": True}}
NO_F16 = {"webgpu": {}, "vulkan": {}}


def _pr_plan(families: list[str], examples: int = 30) -> list[Chunk]:
    pr = PROFILES["pr"]
    return make_plan(
        families, 0, examples, pr.chunk_examples, fold_every=pr.fold_every, fold_limit=pr.fold_limit
    )


def _nightly_plan(families: list[str]) -> list[Chunk]:
    return make_plan(families, 7, 400, 50)


def test_every_op_is_answered_for_by_exactly_one_family() -> None:
    owners = {op: [f for f in FAMILIES if op in covered_ops(f)] for op in MODELS}
    assert owners == {op: [family_for_op(op)] for op in MODELS}
    for family in ("dag", "attention", "decoder", "random"):
        assert covered_ops(family) == frozenset(), family


def test_fold_is_required_only_of_a_family_that_ran_a_chunk_under_a_lowered_limit() -> None:
    # One chunk of 15 examples: none under the limit (the run the process used to fail).
    assert required_cells("pr", _pr_plan(["mul"], 15), F16) == {}
    assert required_cells("pr", _pr_plan(["mul"]), F16) == {
        "mul": ("fold", "mul_flat:workgroups>=4")
    }
    # An explicit limit on every chunk: under a profile that requires no fold, none.
    plan = make_plan(["mul"], 0, 10, 10, max_workgroups_per_dim=4)
    assert required_cells("quick", plan, F16) == {}
    assert required_cells("pr", plan, F16) == {"mul": ("fold",)}


def test_long_paths_are_required_only_of_a_family_that_ran_the_whole_pr_budget() -> None:
    # Issue 20: a share of linear_q4gsw's cases runs the GEMV's main loop (K > 1536); pr's 30
    # examples reach it, a run of 15 may not (and runs no fold chunk either).
    assert required_cells("pr", _pr_plan(["linear_q4gsw"]), F16) == {
        "linear_q4gsw": ("fold", "gemv_main_loop")
    }
    assert required_cells("pr", _pr_plan(["linear_q4gsw"], 15), F16) == {}
    plan = make_plan(["linear_q4gsw"], 0, 10, 10, max_workgroups_per_dim=4)
    assert required_cells("pr", plan, F16) == {"linear_q4gsw": ("fold",)}
    assert (
        "gemv_main_loop"
        in required_cells("nightly", _nightly_plan(["linear_q4gsw"]), F16)["linear_q4gsw"]
    )
    # And sdpa's decode at a long context (the split-K route over 32 splits or more),
    # rms_norm's long rows, the flat elementwise kernels past 4 workgroups of their size,
    # fused_sdpa's long softmax rows.
    assert required_cells("pr", _pr_plan(["sdpa", "rms_norm", "mul", "fused_sdpa"]), F16) == {
        "sdpa_with_kv_cache": ("fold", "context>=2048"),
        "rms_norm": ("fold", "width>=4096"),
        "mul": ("fold", "mul_flat:workgroups>=4"),
        "fused_sdpa": ("fold", "kv_len>=2048"),
    }


def test_cells_only_another_family_reaches_by_chance_are_not_required() -> None:
    # The nightly command of issue 18: random reaches fused_sdpa and mul only by chance.
    plan = _nightly_plan(["linear_q4gsw", "decoder", "random"])
    required = required_cells("nightly", plan, F16)
    assert required == {"linear_q4gsw": PROFILES["nightly"].required_coverage["linear_q4gsw"]}
    for family in ("decoder", "random", "dag", "attention"):
        assert required_cells("nightly", _nightly_plan([family]), F16) == {}
        assert required_cells("pr", _pr_plan([family]), F16) == {}
    # view answers for view_copy and sym_size, not for the rms_norm its cases also hold.
    view = required_cells("nightly", _nightly_plan(["view"]), F16)
    assert sorted(view) == ["sym_size", "view_copy"]


def test_half_precision_cells_are_required_only_where_every_device_offers_f16() -> None:
    plan = _nightly_plan(["mul"])
    assert "mul_flat_f16" in required_cells("nightly", plan, F16)["mul"]
    without = required_cells("nightly", plan, NO_F16)["mul"]
    assert "mul_flat_f16" not in without and "dtype=float16" not in without


def _coverage(op: str, cells: list[str]) -> Coverage:
    coverage = Coverage()
    for backend in ("webgpu", "vulkan"):
        coverage.add(op, backend, cells, [])
    return coverage


def _judge(
    coverage: Coverage,
    *,
    unexpected_cases: int = 0,
    checked: bool = True,
    status: str | None = None,
) -> Verdict:
    """The verdict of a pr run of mul (two chunks, the second under the lowered limit)."""
    return judge(
        profile="pr",
        plan=_pr_plan(["mul"]),
        adapters=F16,
        coverage=coverage,
        unexpected_cases=unexpected_cases,
        checked=checked,
        status=status,
    )


def test_the_exit_status_and_title_follow_one_rule() -> None:
    wide = "mul_flat:workgroups>=4"  # pr's other cell of mul, filled in both
    folded, unfolded = _coverage("mul", ["fold", wide]), _coverage("mul", ["size=1", wide])
    clean = _judge(folded)
    assert (clean.exit_status, clean.title, clean.missing) == (
        ExitStatus.CLEAN,
        "no unexpected divergence",
        [],
    )
    short = _judge(unfolded)
    assert short.exit_status == ExitStatus.COVERAGE_SHORT
    assert short.title == "required coverage short: mul fold"
    assert short.missing == [("mul", "vulkan", "fold"), ("mul", "webgpu", "fold")]
    (fill,) = short.fill
    assert fill.startswith("mul fold: family mul ran 30 examples (15 of them under 4 workgroups")
    assert fill.endswith("(e.g. --families mul --max-examples 60)")
    assert short.console_lines() == [
        "required coverage short: 2 required cells left empty",
        f"  {fill}",
    ]
    # An unexpected divergence comes first, and is the title; never the other way round.
    divergent = _judge(unfolded, unexpected_cases=2)
    assert divergent.exit_status == ExitStatus.DIVERGENT
    assert divergent.title == "unexpected divergences found"
    # A run's own stop decides its status first; the title still says what it found.
    for status, code in (("interrupted", ExitStatus.INTERRUPTED), ("error", 3)):
        stopped = _judge(folded, status=status, checked=False)
        assert stopped.exit_status == code
        assert stopped.title == "no unexpected divergence"


def test_an_unfinished_run_is_not_judged_short() -> None:
    unfinished = _judge(_coverage("mul", []), checked=False)
    assert unfinished.exit_status == ExitStatus.CLEAN
    assert unfinished.missing == []
    assert unfinished.console_lines() == [
        "required coverage not checked: the run did not complete every shard"
    ]
    assert reason_lines([], [], required=False, checked=False) == []


def test_a_title_names_a_few_cells_and_counts_the_rest() -> None:
    def title(coverage: Coverage) -> str:
        plan = _nightly_plan(["sigmoid"])
        return judge(
            profile="nightly",
            plan=plan,
            adapters=F16,
            coverage=coverage,
            unexpected_cases=0,
            checked=True,
        ).title

    # None of sigmoid's five cells: four named, then "and 1 more".
    assert title(Coverage()) == (
        "required coverage short: sigmoid size=1, size=max, sigmoid, sigmoid_f16 and 1 more"
    )
    nearly = _coverage("sigmoid", ["size=1", "size=max", "sigmoid", "sigmoid_f16"])
    assert title(nearly) == "required coverage short: sigmoid dtype=float16"


def _folded_ops(family: str, run_seed: int, *, drawn_to_fold: bool) -> set[str]:
    """The ops of `family` whose grid the contract folds in the pr fold chunks of a run
    seeded `run_seed`, searched as `parity run` searches them (same seeds and settings)."""
    pr = PROFILES["pr"]
    plan = make_plan(
        [family], run_seed, pr.max_examples, pr.chunk_examples,
        fold_every=pr.fold_every, fold_limit=pr.fold_limit,
    )  # fmt: skip
    folded: set[str] = set()
    limit = pr.fold_limit
    assert limit is not None

    def run_case(case: Case) -> None:
        folded.update(op for op in covered_ops(family) if folds_under(case, limit, {op}))

    for chunk in plan:
        if chunk.max_workgroups_per_dim != limit:
            continue
        run_case.__name__ = f"parity_{chunk.family}_{chunk.index}"
        cases = chunk_cases(family, limit) if drawn_to_fold else FAMILIES[family]()
        chunk_settings = settings(
            hypothesis_settings("pr", max_examples=chunk.max_examples), database=None
        )
        seed(chunk.seed)(chunk_settings(given(case=cases)(run_case)))()
    return folded


def test_a_fold_chunk_draws_cases_that_fold_its_familys_op() -> None:
    # Run seed 0: drawn once, the embedding family's fold chunk never folded a grid, and
    # `parity run --families embedding --profile pr` was short of its fold.
    assert _folded_ops("embedding", 0, drawn_to_fold=False) == set()
    assert _folded_ops("embedding", 0, drawn_to_fold=True) == {"embedding_q4gsw"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_familys_fold_chunk_finds_cases_that_fold(family: str) -> None:
    # A family whose cases could never fold would leave its fold chunks with no valid case
    # (Hypothesis: Unsatisfiable) and the fold cell unreachable.
    limit = PROFILES["pr"].fold_limit
    assert limit is not None
    ops = {op for op in covered_ops(family) if MODELS[op].kernels}
    if not ops:
        assert family in ("attention", "dag", "decoder", "random"), family
        return
    drawn: list[Case] = []

    @settings(max_examples=3, database=None, derandomize=True, deadline=None)
    @given(case=chunk_cases(family, limit))
    def draw(case: Case) -> None:
        drawn.append(case)

    draw()
    assert drawn and all(folds_under(case, limit, ops) for case in drawn)


@pytest.mark.parametrize("status", [0, 3, 130])
def test_a_report_without_unexpected_divergences_never_says_it_found_some(
    tmp_path: Path, status: int
) -> None:
    # The index was titled "divergences found" whenever the exit status was not 0: an
    # interrupted or failed run without a single divergence said it had found some.
    records = [
        _case("rms_norm/0", "a", []),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1,
         "findings": []},
    ]  # fmt: skip
    run = _write_run(tmp_path / "run", _run_meta(["rms_norm/0"]), records)
    summary = render_report(run, exit_status=status)
    html = (run / "index.html").read_text()
    assert summary.verdict == "no unexpected divergence"
    assert "<title>Parity run: no unexpected divergence</title>" in html
    assert "divergences found" not in html


def test_junit_fails_a_coverage_test_case_naming_the_empty_cells() -> None:
    unfolded = {"mul": {b: {"regimes": ["size=1"], "variants": []} for b in ("webgpu", "vulkan")}}
    records = [
        _case("mul/0", "a", [], coverage=unfolded),
        _case("mul/1", "b", [], coverage=unfolded, max_workgroups_per_dim=4),
        *(
            {"record": "chunk", "chunk": c, "status": "complete", "duration_s": 1, "findings": []}
            for c in ("mul/0", "mul/1")
        ),
    ]
    meta = _run_meta(["mul/0", "mul/1"])
    meta["plan"][1]["max_workgroups_per_dim"] = 4
    _, summary, typed = _summarize([meta], [records])
    suite = ET.fromstring(junit_xml(summary, typed)).find("testsuite[@name='parity.coverage']")
    assert suite is not None and suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.get("message") == "required coverage short: mul fold"
    assert failure.text == summary.coverage_fill[0]
    # A run that filled every required cell passes it; one that requires none has no such test.
    folded = {"mul": {b: {"regimes": ["fold"], "variants": []} for b in ("webgpu", "vulkan")}}
    records[1] = _case("mul/1", "b", [], coverage=folded, max_workgroups_per_dim=4)
    _, summary, typed = _summarize([meta], [records])
    suite = ET.fromstring(junit_xml(summary, typed)).find("testsuite[@name='parity.coverage']")
    assert suite is not None and suite.get("failures") == "0" and suite.get("tests") == "1"
    _, summary, typed = _summarize([_run_meta(["mul/0"])], [records[:1] + records[2:3]])
    assert (
        ET.fromstring(junit_xml(summary, typed)).find("testsuite[@name='parity.coverage']") is None
    )

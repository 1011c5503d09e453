"""One step loop (harness/check/steps.py) serves the lockstep run, bundle evidence and
repeatability.

The three consumers go through `StepLoop`, and what they compute on top of it is what their
own loops computed before the loop was shared: `_old_run_hash` and `_old_evidence_loop` below
are those loops as they were (harness/repeatability.py and harness/bundle.py before issue 11,
now harness/check/repeatability.py and harness/run/bundle.py), kept here as the reference the
shared loop must agree with, bit for bit, on fixed cases: a clean one, one with state (a
decoder session), one with a step every backend refuses, and planted bugs that leave numeric
and canary evidence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import harness.check.steps
from graph_format import LoadedGraph, Runtime, StepResult, TensorValue
from harness.check.contract import ContractModel, ModelStep, expected_build_error
from harness.check.oracles import canary_fill
from harness.check.reference import ReferenceEvaluator
from harness.check.repeatability import run_hash
from harness.check.steps import StepLoop, StepRun
from harness.gen.case import Case
from harness.run.evidence import Evidence, _numeric_evidence, capture_evidence
from harness.run.records import DivergenceRecord, divergence_record, plain
from tests.diff.test_decoder import session_case
from tests.diff.test_planted_bugs import READ_PAST_END, add_case, rms_norm_case
from tests.plants import glsl_substitution, wgsl_substitution

pytestmark = pytest.mark.gpu


def _old_run_hash(case: Case, runtime: Runtime) -> str:
    """harness.check.repeatability.run_hash before the loop was shared (verbatim)."""
    graph = case.graph
    reads = [
        n
        for node in graph.ops
        for n in node.outputs.values()
        if isinstance(graph.values[n], TensorValue) and n not in graph.outputs
    ]
    reads += [t.name for t in graph.tensors() if t.state]
    h = hashlib.sha256()
    try:
        loaded = runtime.load(graph)
    except Exception as err:
        h.update(f"load: {type(err).__name__}: {err}".encode())
        return h.hexdigest()[:16]
    try:
        for inputs in case.steps:
            try:
                result = loaded.execute(inputs, read=reads)
            except Exception as err:
                h.update(f"{type(err).__name__}: {err}".encode())
                continue
            for name in sorted({**result.outputs, **result.tensors}):
                array = {**result.outputs, **result.tensors}[name]
                h.update(name.encode())
                h.update(np.ascontiguousarray(array).tobytes())
    finally:
        loaded.close()
    return h.hexdigest()[:16]


def _old_evidence_loop(
    runtimes: Sequence[Runtime], case: Case, records: Sequence[DivergenceRecord]
) -> Evidence:
    """harness.run.bundle.capture_evidence before the loop was shared (verbatim, but for the
    divergences, which were dicts then, and three parts moved into the `_old_` helpers below
    as they were)."""
    divergences: list[Mapping[str, Any]] = [plain(r) for r in records]
    graph = case.graph
    wanted, canary = _old_wanted(divergences)
    evidence = Evidence()
    arrays = evidence.arrays
    if (not wanted and not canary) or expected_build_error(graph) is not None:
        return evidence
    loaded = {}
    try:
        for rt in runtimes:
            loaded[rt.name] = rt.load(graph)
        model = ContractModel(graph)
        reference = ReferenceEvaluator(graph)
        written = [n for node in graph.ops for n in node.outputs.values()]
        intermediates = [
            n
            for n in written
            if isinstance(graph.values[n], TensorValue) and n not in graph.outputs
        ]
        canaried = [t.name for t in graph.tensors() if t.constant is None and not t.state]
        for index, inputs in enumerate(case.steps):
            if index > max([*wanted, *canary]):
                break
            expected = model.try_step(inputs)
            fill: dict[str, tuple[int, int]] = {}
            if isinstance(expected, ModelStep):
                fill = canary_fill(index, graph, expected, canaried)
            results = _old_execute(loaded, inputs, intermediates, fill)
            if not isinstance(expected, ModelStep):
                continue
            values, errors, _ = reference.step(inputs)
            for tensor in sorted(wanted.get(index, ())):
                _numeric_evidence(evidence, graph, index, tensor, inputs, results, values, errors)
            for tensor in sorted(canary.get(index, ())):
                _old_canary_state(arrays, index, tensor, results, fill)
    finally:
        for lg in loaded.values():
            lg.close()
    return evidence


def _old_wanted(
    divergences: Sequence[Mapping[str, Any]],
) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """(tensors wanting numeric evidence, tensors wanting canary evidence) by step."""
    wanted: dict[int, set[str]] = {}
    canary: dict[int, set[str]] = {}
    for d in divergences:
        tensor, step = d.get("tensor"), int(d.get("step", -1))
        if not tensor or step < 0:
            continue
        if d.get("kind") in ("numeric", "nan_inf", "stale_read"):
            wanted.setdefault(step, set()).add(str(tensor))
        if d.get("kind") in ("canary_write", "stale_read"):
            canary.setdefault(step, set()).add(str(tensor))
    return wanted, canary


def _old_execute(
    loaded: Mapping[str, LoadedGraph],
    inputs: Mapping[str, np.ndarray],
    intermediates: list[str],
    fill: dict[str, tuple[int, int]],
) -> dict[str, StepResult]:
    """Each loaded graph's step (a backend that raises: left out)."""
    results: dict[str, StepResult] = {}
    for name, lg in loaded.items():
        try:
            results[name] = lg.execute(inputs, read=intermediates, read_raw=list(fill), fill=fill)
        except Exception:
            continue
    return results


def _old_canary_state(
    arrays: dict[str, np.ndarray],
    index: int,
    tensor: str,
    results: Mapping[str, StepResult],
    fill: dict[str, tuple[int, int]],
) -> None:
    """Each backend's canary state of `tensor` at step `index` (1 intact, 2 overwritten)."""
    for name, res in results.items():
        raw = res.raw.get(tensor)
        if raw is None:
            continue
        offset, word = fill[tensor]
        words = raw[: len(raw) // 4 * 4].view(np.uint32)
        state = np.zeros(words.shape, np.uint8)
        state[offset // 4 :] = np.where(words[offset // 4 :] == word, 1, 2)
        arrays[f"canary/s{index}/{tensor}/{name}"] = state


def _refused_case() -> Case:
    """The rms_norm case with a last step every backend refuses (its width must stay 64)."""
    case = rms_norm_case()
    case.steps.append({"x": np.ones((1, 2, 32), np.float32)})
    return case


@pytest.mark.parametrize(
    "make", [rms_norm_case, add_case, _refused_case, session_case], ids=lambda f: f.__name__
)
def test_run_hash_is_what_the_old_loop_gave(runtimes: list[Runtime], make: Any) -> None:
    case = make()
    for rt in runtimes:
        assert run_hash(case, rt) == _old_run_hash(case, rt), rt.name


def _assert_same_evidence(new: Evidence, old: Evidence) -> None:
    assert sorted(new.arrays) == sorted(old.arrays)
    for key, array in old.arrays.items():
        np.testing.assert_array_equal(new.arrays[key], array, err_msg=key)
    assert plain(new.elements) == plain(old.elements)  # as written: NaN as "nan"


def test_numeric_evidence_is_what_the_old_loop_gave() -> None:
    case = rms_norm_case()
    with glsl_substitution("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd") as runner:
        result = runner.run(case)
        records = [divergence_record(d, case) for d in result.divergences]
        assert {r.kind for r in records} >= {"numeric"}
        new = capture_evidence(runner.runtimes, case, records)
        old = _old_evidence_loop(runner.runtimes, case, records)
    assert new.elements and any(k.endswith("/actual") for k in new.arrays)
    _assert_same_evidence(new, old)


@pytest.mark.parametrize(
    "plant",
    [
        ("binary_flat", "if (i >= params.numel)", "if (i > params.numel)"),  # canary write
        ("binary_flat", "a[i] + b[i]", READ_PAST_END),  # stale read
    ],
    ids=["canary_write", "stale_read"],
)
def test_canary_evidence_is_what_the_old_loop_gave(plant: tuple[str, str, str]) -> None:
    case = add_case()
    with wgsl_substitution(*plant) as runner:
        result = runner.run(case)
        records = [divergence_record(d, case) for d in result.divergences]
        new = capture_evidence(runner.runtimes, case, records)
        old = _old_evidence_loop(runner.runtimes, case, records)
    assert any(k.startswith("canary/") for k in new.arrays)
    _assert_same_evidence(new, old)


def test_the_three_consumers_share_one_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each consumer's steps come from StepLoop.steps, and every graph it loads is closed."""
    calls: list[tuple[tuple[str, ...], tuple[str, ...], bool]] = []
    opened: list[StepLoop] = []
    original_steps = StepLoop.steps
    original_enter = StepLoop.__enter__

    def steps(self: StepLoop, until: int | None = None) -> Iterator[StepRun]:
        calls.append((tuple(rt.name for rt in self.runtimes), tuple(self.reads), self.canaries))
        return original_steps(self, until)

    def enter(self: StepLoop) -> StepLoop:
        opened.append(self)
        return original_enter(self)

    monkeypatch.setattr(harness.check.steps.StepLoop, "steps", steps)
    monkeypatch.setattr(harness.check.steps.StepLoop, "__enter__", enter)
    case = rms_norm_case()
    with glsl_substitution("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd") as runner:
        result = runner.run(case)
        records = [divergence_record(d, case) for d in result.divergences]
        assert len(calls) == 1 and calls[0][2], "the lockstep run fills canaries"
        capture_evidence(runner.runtimes, case, records)
        assert len(calls) == 2 and calls[1][2]
        run_hash(case, runner.runtimes[0])
    assert calls[2] == ((runner.runtimes[0].name,), calls[2][1], False)  # no canaries
    assert "norm.out" not in calls[2][1]  # graph outputs come back anyway
    assert all(not loop.loaded for loop in opened)  # every graph closed

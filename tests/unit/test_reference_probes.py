"""The reference evaluator's error propagation, vectorized, against the loop it replaced.

`ReferenceEvaluator` evaluates an op's random-sign probes over a leading probe axis
(`probe_reference`) in cache-sized chunks; it used to call the op's reference once per probe.
The bounds are a derived oracle, so the refactor must not change them: `LoopEvaluator` below
keeps the old loop (here only, as the refactor's oracle) and both must give the same values
and bounds, on cases of every op and the decoder, whichever way the probes are grouped. The
per-op check's reuse of the evaluator's work and the per-case memo of constants are here too.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from graph_format import OpNode
from harness.check import oracles, reference
from harness.check.contract import ContractModel, ModelStep, expected_build_error
from harness.check.reference import PROBES, ReferenceEvaluator, op_args
from harness.families import FAMILIES
from harness.families.decoder import DecoderConfig, DecoderWeights, build_decoder, decoder_step
from harness.families.random import random_graph_cases
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.gen.graphgen import GENERATORS
from harness.model import Args
from harness.model.constants import remember, remembered_count
from harness.ops import MODELS, model_for


class LoopEvaluator(ReferenceEvaluator):
    """The evaluator with the propagation it had before it was vectorized: one reference
    call per probe, moves drawn one probe and input at a time (kept verbatim, but for the
    element-wise moves' distribution)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.probed: set[str] = set()  # op types whose outputs a probe moved

    def _propagate(
        self,
        node: OpNode,
        args: Args,
        before: Mapping[str, np.ndarray],
        outputs: Mapping[str, Any],
        carried: Mapping[str, np.ndarray],
        tensor_outs: Mapping[str, str],
    ) -> dict[str, np.ndarray]:
        if tensor_outs:
            self.probed.add(node.op)
        model = model_for(node.op)
        rng = self._rng

        def element_signs(base: np.ndarray) -> np.ndarray:
            # Normal draws since issue 18 (+-1 signs cancel two-term sums): the one change.
            return rng.standard_normal(size=np.shape(base))

        def row_scale_signs(base: np.ndarray) -> np.ndarray:
            shape = np.shape(base)
            rows = rng.choice((-1.0, 1.0), size=(*shape[:-1], 1) if shape else ())
            return rows * np.where(base < 0, -1.0, 1.0)

        modes: list[dict[str, np.ndarray]] = []
        for signs in (element_signs, row_scale_signs):
            squares: dict[str, np.ndarray] = {}
            for _ in range(PROBES):
                probe = dict(args)
                probe.update({slot: state.copy() for slot, state in before.items()})
                for slot, scale in carried.items():
                    base = probe[slot]
                    probe[slot] = base + signs(base) * np.broadcast_to(scale, np.shape(base))
                moved = model.reference(node, probe)
                changes = {slot: moved[slot] - outputs[slot] for slot in tensor_outs}
                changes.update({slot: probe[slot] - args[slot] for slot in before})
                for slot, delta in changes.items():
                    squares[slot] = squares.get(slot, 0.0) + delta * delta / PROBES
            modes.append(squares)
        return {slot: np.maximum(modes[0][slot], modes[1][slot]) for slot in modes[0]}


def generated(strategy: st.SearchStrategy[Case], count: int) -> list[Case]:
    """`count` cases of `strategy`, the same ones every run (fixed seed, no database)."""
    cases: list[Case] = []

    @hypothesis_seed(1)
    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(case: Case) -> None:
        cases.append(case)

    collect()
    return [c for c in cases[:count] if expected_build_error(c.graph) is None]


def tiny_decoder() -> Case:
    """The default tiny decoder over a prefill, two decode steps, a chunk and a reset."""
    config = DecoderConfig()
    weights = DecoderWeights.random(config, np.random.default_rng(5))
    rng = np.random.default_rng(6)
    steps = [
        decoder_step(config, weights, pos, rng.integers(0, config.vocab, (1, seq)))
        for pos, seq in ((0, 7), (7, 1), (8, 1), (9, 5), (0, 3))
    ]
    return Case(build_decoder(config, weights), steps, name="decoder")


# Ops whose inputs never carry an error (token ids) or that write no tensor output.
NEVER_PROBED = ("embedding_q4gsw", "sym_size", "update_cache")
# Ops that write state only: never "probed" as the loop counts it (no tensor output), their
# random graphs are fixed cases all the same, so that the state's bounds are compared.
STATE_ONLY = ("update_cache",)


def fixed_cases() -> list[Case]:
    """The decoder, DAGs, attention blocks, and per op random graphs of it and rms_norm
    (whose outputs carry errors into it): every op of MODELS but NEVER_PROBED with errors
    carried into it (test_every_op_is_probed checks that)."""
    cases = [tiny_decoder(), *generated(FAMILIES["dag"](), 4)]
    cases += generated(FAMILIES["attention"](), 4)
    for op in sorted(set(GENERATORS) - set(NEVER_PROBED) | set(STATE_ONLY)):
        cases += generated(random_graph_cases([op, "rms_norm"]), 8)
    return cases


CASES = fixed_cases()


def accepted_steps(case: Case) -> Iterator[Any]:
    """The steps of `case` that the contract model accepts (the only ones a run evaluates)."""
    model = ContractModel(case.graph, 65535)
    for inputs in case.steps:
        if isinstance(model.try_step(inputs), ModelStep):
            yield inputs


def assert_same_bounds(case: Case) -> LoopEvaluator:
    """Both evaluators step `case`: the same values, the same bounds within 1e-12."""
    old, new = LoopEvaluator(case.graph), ReferenceEvaluator(case.graph)
    for index, inputs in enumerate(accepted_steps(case)):
        old_values, old_bounds, _ = old.step(inputs)
        new_values, new_bounds, _ = new.step(inputs)
        assert old_bounds.keys() == new_bounds.keys()
        for name, bound in old_bounds.items():
            np.testing.assert_allclose(
                new_bounds[name], bound, rtol=1e-12, atol=0, err_msg=f"step {index}: {name}"
            )
            np.testing.assert_array_equal(new_values[name], old_values[name])
    return old


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c.name}" for i, c in enumerate(CASES)])
def test_bounds_equal_the_loop(case: Case) -> None:
    assert_same_bounds(case)


def test_every_op_is_probed() -> None:
    """The fixed cases move the inputs of every op type that writes a tensor (a run of the
    loop's evaluator records which)."""
    probed: set[str] = set()
    for case in CASES:
        evaluator = LoopEvaluator(case.graph)
        for inputs in accepted_steps(case):
            evaluator.step(inputs)
        probed |= evaluator.probed
    wanted = set(MODELS) - set(NEVER_PROBED)
    assert wanted <= probed, f"never probed: {sorted(wanted - probed)}"


@pytest.mark.parametrize("chunk", [1, 3, 40])
def test_bounds_equal_the_loop_whatever_the_chunks(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of one probe, chunks that straddle the element-wise and row moves, and
    chunks that hold several probes give the same bounds."""
    monkeypatch.setattr(reference, "CHUNK_ELEMENTS", chunk * 64)
    for case in CASES[:12]:
        assert_same_bounds(case)


def test_bounds_equal_the_loop_without_probe_references(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op without a vectorized reference is probed one call per move, to the same bounds."""
    for model in {type(m) for m in MODELS.values()}:
        if "probe_reference" in vars(model):  # back to OpModel's, which batches nothing
            monkeypatch.delattr(model, "probe_reference")
    assert not any(m.batches_probes for m in MODELS.values())
    for case in CASES[:12]:
        assert_same_bounds(case)


def test_probe_references_equal_the_reference_bit_for_bit() -> None:
    """Each probe of a `probe_reference` call is what `reference` gives for it alone, in
    its outputs and in the state it updates."""
    checked: set[str] = set()
    rng = np.random.default_rng(0)
    for case in CASES:
        graph = case.graph
        evaluator = ReferenceEvaluator(graph)
        for inputs in accepted_steps(case):
            evaluator.step(inputs)
            for node in graph.ops:
                model = model_for(node.op)
                if not model.batches_probes:
                    continue
                args = evaluator.evaluations[node.name].args  # state as before the op
                states = [
                    s for s, a in node.args.items() if isinstance(a, str) and a in evaluator.state
                ]
                probes = {
                    slot: args[slot] * (1 + 1e-3 * rng.standard_normal((3, *np.shape(args[slot]))))
                    for slot in (*model.activations, *states)
                    if isinstance(args.get(slot), np.ndarray)
                }
                batch = {**args, **{slot: value.copy() for slot, value in probes.items()}}
                together = model.probe_reference(node, batch)
                for p in range(3):
                    alone_args = {
                        **args,
                        **{slot: value[p].copy() for slot, value in probes.items()},
                    }
                    alone = model.reference(node, alone_args)
                    for slot, value in alone.items():
                        np.testing.assert_array_equal(together[slot][p], value, err_msg=node.op)
                    for slot in states:
                        np.testing.assert_array_equal(batch[slot][p], alone_args[slot])
                checked.add(node.op)
    assert checked >= set(MODELS) - set(NEVER_PROBED)


# ---------------------------------------------------------------------------- sharing


def test_evaluation_matches_only_the_same_bits() -> None:
    case = tiny_decoder()
    evaluator = ReferenceEvaluator(case.graph)
    evaluator.step(case.steps[0])
    known = evaluator.evaluations[case.graph.ops[1].name]  # the first rms_norm
    args = dict(known.args)
    assert known.matches(args)
    x = args["x"].copy()
    x.flat[0] = np.nextafter(x.flat[0], np.inf)
    assert not known.matches({**args, "x": x})  # one ulp off
    assert not known.matches({**args, "x": args["x"].astype(np.float32)})
    assert not known.matches({**args, "eps": args["eps"] * 2})
    zero = args["x"].copy()
    zero.flat[0] = 0.0
    negative_zero, nan = zero.copy(), zero.copy()
    negative_zero.flat[0], nan.flat[0] = -0.0, np.nan
    with_zero = reference.OpEvaluation({**args, "x": zero}, {}, {}, {})
    assert with_zero.matches({**args, "x": zero.copy()})
    assert not with_zero.matches({**args, "x": negative_zero})
    with_nan = reference.OpEvaluation({**args, "x": nan}, {}, {}, {})
    assert with_nan.matches({**args, "x": nan.copy()})
    other_payload = nan.copy()
    other_payload.view(np.uint64).flat[0] ^= 1  # still a NaN, another payload
    assert np.isnan(other_payload.flat[0])
    assert not with_nan.matches({**args, "x": other_payload})
    # element by element, whatever the memory order
    assert with_nan.matches({**args, "x": np.asfortranarray(nan)})
    assert not with_nan.matches({**args, "x": np.asfortranarray(negative_zero)})
    # arrays past the size compared as bytes: the same answers the element-wise way
    large = np.tile(nan, (64, 1, 1))
    assert large.nbytes > reference._BYTES_COMPARE_MAX
    with_large = reference.OpEvaluation({**args, "x": large}, {}, {}, {})
    assert with_large.matches({**args, "x": np.asfortranarray(large)})
    large_zero, large_negative_zero = np.tile(zero, (64, 1, 1)), np.tile(negative_zero, (64, 1, 1))
    assert not reference.OpEvaluation({**args, "x": large_zero}, {}, {}, {}).matches(
        {**args, "x": large_negative_zero}
    )


def test_per_op_check_reuses_the_evaluators_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a backend's arguments to an op are the evaluator's, the per-op check takes the
    evaluator's reference and budget (and judges the same); elsewhere it computes its own."""
    case = tiny_decoder()
    graph = case.graph
    evaluator = ReferenceEvaluator(graph)
    values, _, symints = evaluator.step(case.steps[0])
    # A backend whose outputs are the reference's rounded to float32: its first op (the
    # embedding) reads only graph inputs and constants, the others its own rounded outputs.
    observed = {
        name: np.asarray(values[name], np.float32)
        for node in graph.ops
        for name in node.outputs.values()
        if name in values
    }
    states = [t.name for t in graph.tensors() if t.state]
    for name in states:
        observed[name] = np.asarray(evaluator.state[name], np.float32)
    backend_values = {n: np.asarray(v, np.float64) for n, v in case.steps[0].items() if np.ndim(v)}
    backend_values.update(evaluator.constants)
    backend_values.update(
        {t.name: np.asarray(graph.initial_data(t), np.float64) for t in graph.tensors() if t.state}
    )
    backend_values.update({n: v.astype(np.float64) for n, v in observed.items() if n not in states})
    calls: list[str] = []
    for op in {node.op for node in graph.ops}:
        model = model_for(op)
        original = model.reference

        def counted(node: OpNode, args: Args, original: Any = original) -> Any:
            calls.append(node.name)
            return original(node, args)

        monkeypatch.setattr(model, "reference", counted)

    def check(shared: Any) -> tuple[list[Any], dict[str, float]]:
        utilization: dict[str, float] = {}
        local = {k: (v.copy() if k in states else v) for k, v in backend_values.items()}
        divergences = oracles.check_ops(
            0, graph, "b", local, observed, symints, states, utilization, shared=shared
        )
        return divergences, utilization

    alone = check(None)
    computed = list(calls)
    calls.clear()
    assert check(evaluator.evaluations) == alone
    assert graph.ops[0].name in computed and graph.ops[0].name not in calls
    assert set(computed) - set(calls) == {graph.ops[0].name}


# ---------------------------------------------------------------------------- constants


def test_constants_are_converted_once_and_read_only() -> None:
    case = tiny_decoder()
    evaluator = ReferenceEvaluator(case.graph)
    first, _, _ = evaluator.step(case.steps[0])
    second, _, _ = evaluator.step(case.steps[1])
    for name, constant in evaluator.constants.items():
        assert first[name] is constant and second[name] is constant
        assert not constant.flags.writeable


def test_remember_computes_once_per_read_only_array() -> None:
    calls: list[int] = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(3.0)

    writable = np.ones(4)
    remember("test", (writable,), compute)
    remember("test", (writable,), compute)
    assert len(calls) == 2  # a writable array may change: never remembered
    fixed = np.ones(4)
    fixed.flags.writeable = False
    count = remembered_count()
    value = remember("test", (fixed,), compute)
    assert remember("test", (fixed,), compute) is value and len(calls) == 3
    assert not value.flags.writeable
    assert remember("other", (fixed,), compute) is not value and len(calls) == 4
    assert remembered_count() == count + 2
    del fixed
    gc.collect()
    assert remembered_count() == count  # forgotten with the array


def test_q4_weights_are_dequantized_once_per_case(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.model import q4

    calls: list[int] = []
    original = q4.dequantize

    def counted(*args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(q4, "dequantize", counted)
    case = tiny_decoder()
    linears = [node for node in case.graph.ops if node.op == "linear_q4gsw"]
    evaluator = ReferenceEvaluator(case.graph)
    for inputs in case.steps:
        evaluator.step(inputs)
    # Once for the weights and once for their magnitudes (the budget's), per linear.
    assert len(calls) == 2 * len(linears)
    node = linears[0]
    values, _, symints = evaluator.step(case.steps[0])
    args = op_args(case.graph, node, values, symints)
    args["weight"] = args["weight"].copy()  # writable: not the case's constant
    model_for(node.op).reference(node, args)
    assert len(calls) == 2 * len(linears) + 1


# ---------------------------------------------------------------------------- two-term sums


def test_a_two_term_rotation_never_loses_its_carried_error() -> None:
    """An output that sums two elements of one input with equal weights (a rope at an
    angle of pi/4 on pairs x[2i] = x[2i+1]: x[2i] c - x[2i+1] s = 0) carries both elements'
    error scales: the first-order scale sqrt(c^2 sigma_a^2 + s^2 sigma_b^2) of independent
    input errors. Rademacher signs gave it zero wherever all 8 probes moved the two alike
    (1 pair in 128), leaving only the rope's own rounding of an output near 0 (issue 18:
    `apply_rotary_emb@float16` 1.2-40x over its end-to-end bound on both backends, each op
    within its budget); Gaussian moves give that scale times sqrt(chi^2_8 / 8), below an
    eighth of it with odds of about 1e-6 per element."""
    seq, heads, dim = 64, 4, 16
    b = GraphBuilder()
    x = b.input("x", "float16", [1, seq, heads, dim])
    w = b.constant("w", np.ones(dim, np.float16))
    norm = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    cos = b.input("freqs_cos", "float16", [seq, dim // 2])
    sin = b.input("freqs_sin", "float16", [seq, dim // 2])
    q_out, k_out = b.op(
        "apply_rotary_emb",
        name="rope",
        xq=norm,
        xk=norm,
        freqs_cos=cos,
        freqs_sin=sin,
        out_dims={"xq_out": [1, seq, heads, dim], "xk_out": [1, seq, heads, dim]},
    )
    b.output(q_out, k_out)
    graph = b.build()
    rng = np.random.default_rng(0)
    half = rng.uniform(0.5, 2.0, (1, seq, heads, dim // 2)).astype(np.float16)
    table = np.full((seq, dim // 2), np.sqrt(0.5), np.float16)
    inputs = {"x": np.repeat(half, 2, axis=-1), "freqs_cos": table, "freqs_sin": table}
    values, bounds, _ = ReferenceEvaluator(graph).step(inputs)
    sigma = bounds[norm] / reference.SPREAD  # the rope's input's error scale
    c = np.float64(table[0, 0])
    first_order = np.sqrt(c * c * sigma[..., 0::2] ** 2 + c * c * sigma[..., 1::2] ** 2)
    assert np.all(np.abs(values[q_out][..., 0::2]) < 1e-12)  # the sums that cancel
    carried = bounds[q_out][..., 0::2] / reference.SPREAD
    worst = float((carried / first_order).min())
    assert worst > 1 / 8, f"an output's carried error scale fell to {worst:.3g} of its own"

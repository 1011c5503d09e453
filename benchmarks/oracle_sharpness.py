"""How sharp each oracle tier is: `python -m benchmarks.oracle_sharpness` (measured, never
asserted).

Plants numeric bugs of known size into one backend's output of an op at several sizes and
reports, per bug kind and size, the smallest bug each tier of the per-op check catches
(docs/oracles.md, "How sharp each tier is"):
- `numeric`: over the rigorous budget (`harness.model.local_budgets(...).hard`);
- `statistical`: over the statistical tier's bound (`local_budgets(...).statistical`: a
  `numeric_suspect` finding where the rigorous budget holds, a `numeric` one where it does
  not);
- `exact`: farther from the other backend's output than the kernels' declared tolerance
  (`harness.check.oracles.compare_bits` and `exact_tolerance`: 0 ULP on one device).

Method. Each op runs once per size (and dtype) on the WebGPU and the Vulkan runtime
(lavapipe here), from standard normal data drawn with `--seed`: `linear_q4gsw` at M = 1
(the GEMV route) with N = 64 and groups of 128, weights quantized from standard normal
values; `sdpa_with_kv_cache` as a decode step (S = 1, the split-K route) at the last row of
a cache of `context` rows, 8 query heads over 2 KV heads of 64; `rms_norm` over 4 rows,
eps = 1e-6. The harness's reference evaluator gives the float64 reference and both tiers'
budgets on the same inputs (`ReferenceEvaluator.evaluations`, what the per-op check reuses).
A bug is modelled by the op's own float64 reference (`model.reference`) evaluated with the
bug applied, and planted into WebGPU's real output as the bug would move it
(`rounded_shift`): the value the kernel rounded, moved by the bug's change, rounded to the
output's dtype; where the kernel rounded as the reference rounds, the reference stands for
that value, so a change below half an ULP moves the elements whose value lies that close to
a rounding boundary. The planted output is judged by the harness's
own functions against the clean reference (`harness.model.numerics.compare`, each tier's
budget) and against Vulkan's clean real output (`compare_bits`, `exact_tolerance`). The
kinds (`--kinds`):
- `code`: one q4 weight code off by d (d = 1..8; +d, or -d where +d leaves [-8, 7]) in
  output column N/2, at the activation whose magnitude is nearest 1 (a typical term);
- `key`: one cache row left out of the decode's softmax-weighted sum and its normalizer,
  in every head; swept over which row: the one at quantile 0 (the lightest), 0.1, ..., 1
  (the heaviest) of the rows' softmax weights (each row's largest over the heads);
- `count+`, `count-`: rms_norm's mean of squares over n + j or n - j instead of n (via
  1/sqrt(m n/(n+j) + eps) = sqrt((n+j)/n) / sqrt(m + eps (n+j)/n): the reference at another
  eps, scaled);
- `eps`: rms_norm without its eps; the bug's size is eps / mean(x^2), swept from 6e-14 to
  4e-3 by running x scaled by 2^e (one step each) under the graph's eps = 1e-6;
- `weight-ulp` (f16 rms_norm), `x-ulp` (f16 linear_q4gsw): one f16 element of the weight
  (of |w| nearest 1) or of the activation (of |x| nearest 1) read k ULPs away from zero;
- `out-ulp`: one f16 output element (of the median magnitude) stored k ULPs away from
  zero, straight on the real output;
- `scale`: the whole output times (1 + delta), delta = 2^-48 ... 2^-4: the reference row,
  at the largest size of each op and dtype.
A level is caught by a tier when its verdict is a finding; the sweeps are not assumed
monotone (the smallest caught level is reported). The exact tier's cell gives the largest
distance in ULPs and how many elements differ. `--json PATH` writes every level's
utilizations, ULP distance and differing elements.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graph_format import OpNode, Runtime, StepResult
from harness.api import single_op_graph
from harness.check.oracles import compare_bits, exact_tolerance
from harness.check.reference import OpEvaluation, ReferenceEvaluator
from harness.gen.case import Case
from harness.model import Args, q4
from harness.model.numerics import compare
from harness.ops import model_for

# The backend whose output carries the planted bug, and the one it is held to bit for bit.
PLANTED = "webgpu"
OTHER = "vulkan"

OPS = ("linear_q4gsw", "sdpa_with_kv_cache", "rms_norm")
SIZES = {
    "linear_q4gsw": (2048, 4096, 8192),
    "sdpa_with_kv_cache": (1024, 2048, 4096),
    "rms_norm": (2048, 4096, 8192),
}
SIZE_NAMES = {"linear_q4gsw": "K", "sdpa_with_kv_cache": "context", "rms_norm": "width"}
DTYPES = ("float32", "float16")

LINEAR_N, LINEAR_GROUP = 64, 128
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64
RMS_ROWS, RMS_EPS = 4, 1e-6
# rms_norm's steps after the first: x scaled by 2^e, so that eps / mean(x^2) spans
# 6e-14 (e = 12) to 4e-3 (e = -6) by factors of 4 (the `eps` sweep).
RMS_EXPONENTS = tuple(e for e in range(12, -7, -1) if e != 0)

CODE_OFFSETS = (1, 2, 4, 8)
# The dropped key's place among the cache rows' softmax weights: 0 the lightest, 1 the heaviest.
KEY_QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
COUNT_OFFSETS = (1, 2, 4, 8, 16, 32, 64)
ULPS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DELTAS = tuple(2.0**-e for e in range(48, 3, -2))

TIERS = ("numeric", "statistical", "exact")


# ----------------------------------------------------------------------------- bug models


def copied(args: Args) -> Args:
    """`args` with every array copied (a reference may update state in place)."""
    return {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}


def reference_out(node: OpNode, args: Args) -> np.ndarray:
    """The op's float64 reference output `out` on (a copy of) `args`."""
    out: np.ndarray = model_for(node.op).reference(node, copied(args))["out"]
    return out


def nearest_one(values: np.ndarray) -> int:
    """The flat index of the element whose magnitude is nearest 1 (a typical term of
    standard normal data)."""
    return int(np.argmin(np.abs(np.abs(values.ravel()) - 1.0)))


def ulps_away(values: np.ndarray, index: int, count: int, dtype: str) -> np.ndarray:
    """`values` (any float array holding `dtype` values) with flat element `index` moved
    `count` ULPs of `dtype` away from zero, in the array's own dtype."""
    narrow = np.array(values, dtype=dtype).ravel()
    bits = narrow.view(f"u{narrow.itemsize}")
    bits[index] += int(count)  # sign and magnitude: a larger magnitude, the same sign
    return narrow.reshape(np.shape(values)).astype(np.asarray(values).dtype)


def wrong_code(node: OpNode, args: Args, offset: int) -> np.ndarray:
    """linear_q4gsw's reference with one weight code off by `offset`: column N/2, at the
    activation of magnitude nearest 1; +offset, or -offset where +offset leaves [-8, 7]."""
    k = args["x"].shape[-1]
    codes = q4.unpack(np.asarray(args["weight"]).astype(np.uint8), k).astype(np.int16)
    row, col = codes.shape[0] // 2, nearest_one(args["x"][..., -1, :])
    step = int(offset) if codes[row, col] + offset <= q4.QMAX else -int(offset)
    codes[row, col] += step
    return reference_out(node, {**args, "weight": q4.pack(codes).astype(np.float64)})


def dropped_key(node: OpNode, args: Args, row: int) -> np.ndarray:
    """sdpa_with_kv_cache's reference without cache row `row` (one before input_pos) in the
    softmax-weighted sum and its normalizer, in every head: the row deleted from both caches
    and input_pos lowered by one, so that the step attends to the other rows alone."""
    if not 0 <= row < int(args["input_pos"]):
        raise ValueError(f"row {row}: a cache row before input_pos {args['input_pos']} expected")
    return reference_out(
        node,
        {
            **args,
            "k_cache": np.delete(args["k_cache"], row, axis=1),
            "v_cache": np.delete(args["v_cache"], row, axis=1),
            "input_pos": int(args["input_pos"]) - 1,
        },
    )


def key_at_quantile(args: Args, quantile: float) -> int:
    """The cache row before input_pos whose softmax weight (its largest over the query heads:
    where leaving it out moves the output most) is at `quantile` of those rows' weights: 0
    the lightest, 1 the heaviest."""
    pos, q, keys = (
        int(args["input_pos"]),
        args["q"][0, 0],
        args["k_cache"][0, : int(args["input_pos"])],
    )
    group = q.shape[0] // keys.shape[1]
    scores = np.einsum("hd,chd->hc", q, np.repeat(keys, group, axis=1)) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = (weights / weights.sum(axis=-1, keepdims=True)).max(axis=0)
    return int(np.argsort(weights, kind="stable")[round(quantile * (pos - 1))])


def dropped_key_at(node: OpNode, args: Args, quantile: float) -> np.ndarray:
    """`dropped_key` of the row at `quantile` of the weights (`key_at_quantile`)."""
    return dropped_key(node, args, key_at_quantile(args, quantile))


def wrong_count(node: OpNode, args: Args, offset: int) -> np.ndarray:
    """rms_norm's reference with the mean of squares over n + `offset` terms instead of n:
    1/sqrt(m n/(n+j) + eps) = sqrt((n+j)/n) / sqrt(m + eps (n+j)/n), so the reference at
    eps (n+j)/n, times sqrt((n+j)/n)."""
    n = args["x"].shape[-1]
    ratio = (n + offset) / n
    out: np.ndarray = np.sqrt(ratio) * reference_out(
        node, {**args, "eps": float(args["eps"]) * ratio}
    )
    return out


def no_eps(node: OpNode, args: Args, _level: float) -> np.ndarray:
    """rms_norm's reference without eps."""
    return reference_out(node, {**args, "eps": 0.0})


def weight_ulps(node: OpNode, args: Args, count: int) -> np.ndarray:
    """rms_norm's reference with the weight element of magnitude nearest 1 read `count`
    f16 ULPs away from zero."""
    w = args["weight"]
    return reference_out(node, {**args, "weight": ulps_away(w, nearest_one(w), count, "float16")})


def x_ulps(node: OpNode, args: Args, count: int) -> np.ndarray:
    """linear_q4gsw's reference with the activation of magnitude nearest 1 (last row) read
    `count` f16 ULPs away from zero."""
    x = args["x"]
    index = x.size - x.shape[-1] + nearest_one(x[..., -1, :])
    return reference_out(node, {**args, "x": ulps_away(x, index, count, "float16")})


# ----------------------------------------------------------------------------- subjects


@dataclass
class Clean:
    """One step of an op as both backends ran it, and the harness's evaluation of it.

    Attributes:
        evaluation: the reference evaluator's op (arguments, float64 outputs, both tiers'
            budgets), exactly what the per-op check reuses for inputs both backends share.
        results: each backend's step result.
    """

    case: Case
    step: int
    evaluation: OpEvaluation
    results: dict[str, StepResult]

    @property
    def node(self) -> OpNode:
        """The op."""
        return self.case.graph.ops[0]

    @property
    def out_name(self) -> str:
        """The op's output tensor."""
        return self.node.outputs["out"]

    @property
    def reference(self) -> np.ndarray:
        """The float64 reference of `out`."""
        out: np.ndarray = self.evaluation.outputs["out"]
        return out

    def real(self, backend: str) -> np.ndarray:
        """A backend's `out`, as it came back."""
        return self.results[backend].outputs[self.out_name]


@dataclass
class Subject:
    """An op at one size and dtype, run once (one step per clean)."""

    op: str
    dtype: str
    size: int
    cleans: list[Clean] = field(default_factory=list)


def _normal(rng: np.random.Generator, dtype: str, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def build_case(op: str, dtype: str, size: int, seed: int) -> Case:
    """The op's case at `size` (K, context or width) in `dtype` (module docstring)."""
    rng = np.random.default_rng([seed, size, DTYPES.index(dtype)])
    if op == "linear_q4gsw":
        packed, scales = q4.quantize(rng.standard_normal((LINEAR_N, size)), LINEAR_GROUP)
        return single_op_graph(
            op,
            {
                "x": _normal(rng, dtype, 1, size),
                "weight": packed,
                "scales": scales,
                "group_size": LINEAR_GROUP,
            },
            constants={"weight", "scales"},
        )
    if op == "sdpa_with_kv_cache":
        cache = (1, size, KV_HEADS, HEAD_DIM)
        return single_op_graph(
            op,
            {
                "q": _normal(rng, dtype, 1, 1, HEADS, HEAD_DIM),
                "k": _normal(rng, dtype, 1, 1, KV_HEADS, HEAD_DIM),
                "v": _normal(rng, dtype, 1, 1, KV_HEADS, HEAD_DIM),
                "k_cache": _normal(rng, dtype, *cache),
                "v_cache": _normal(rng, dtype, *cache),
                "input_pos": size - 1,
            },
            state={"k_cache", "v_cache"},
            symints={"input_pos"},
        )
    if op == "rms_norm":
        x = _normal(rng, dtype, RMS_ROWS, size)
        case = single_op_graph(
            op,
            {"x": x, "weight": _normal(rng, dtype, size), "eps": RMS_EPS},
            constants={"weight"},
        )
        case.steps += [{"x": (x * 2.0**e).astype(dtype)} for e in RMS_EXPONENTS]
        return case
    raise ValueError(f"no case for op {op!r}; expected one of {', '.join(OPS)}")


def run_subject(subject: Subject, case: Case, runtimes: Sequence[Runtime]) -> None:
    """Run `case` on every runtime, step by step beside the reference evaluator."""
    evaluator = ReferenceEvaluator(case.graph)
    loaded = {runtime.name: runtime.load(case.graph) for runtime in runtimes}
    try:
        for index, inputs in enumerate(case.steps):
            evaluator.step(inputs)
            evaluation = evaluator.evaluations[case.graph.ops[0].name]
            results = {name: graph.execute(inputs) for name, graph in loaded.items()}
            subject.cleans.append(Clean(case, index, evaluation, results))
    finally:
        for graph in loaded.values():
            graph.close()


# ----------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """How the tiers judge one planted output.

    Attributes:
        level: the bug's size, in its kind's unit.
        hard: utilization of the rigorous budget.
        statistical: utilization of the statistical bound.
        ulps: the largest distance from the other backend's clean output, in ULPs.
        differing: how many elements differ from it.
        allowed: the exact tier's tolerance for the op's kernels (None: not compared).
    """

    level: float
    hard: float
    statistical: float
    ulps: int
    differing: int
    allowed: int | None

    def caught(self, tier: str) -> bool:
        """Whether `tier` reports it."""
        if tier == "numeric":
            return self.hard > 1.0
        if tier == "statistical":
            return self.statistical > 1.0
        return self.allowed is not None and self.ulps > self.allowed


def rounded_shift(real: np.ndarray, reference: np.ndarray, buggy: np.ndarray) -> np.ndarray:
    """`real` as a bug that moves the exact value from `reference` to `buggy` (float64)
    before the output's final rounding would leave it: that value plus the bug's change,
    rounded to `real`'s dtype (unchanged where the bug changes nothing).

    The value a kernel rounded is unknown. Where it rounded to the reference's rounding,
    the reference stands for it: a change below half an ULP then moves the elements whose
    value lies that close to a rounding boundary, as a bug before a kernel's last rounding
    does (added to the already rounded output it would move none). Where the kernel rounded
    elsewhere (its own error took it there), its output stands for it, so that a change
    below half an ULP moves none of those: sub-ULP sensitivity is, if anything,
    underestimated.
    """
    dtype = real.dtype
    wide = real.astype(np.float64)
    before = np.where(reference.astype(dtype) == real, reference, wide)
    moved: np.ndarray = np.where(
        buggy == reference, real, (before + (buggy - reference)).astype(dtype)
    )
    return moved


def planted_output(clean: Clean, buggy: np.ndarray) -> np.ndarray:
    """The planted backend's real output with the bug that turns the reference into
    `buggy` (`rounded_shift`)."""
    return rounded_shift(clean.real(PLANTED), clean.reference, buggy)


def judge(clean: Clean, level: float, planted: np.ndarray, adapters: dict[str, Any]) -> Verdict:
    """The three tiers' verdicts on `planted` as the planted backend's output of the op."""
    tiers = clean.evaluation.budgets
    hard = compare(planted, clean.reference, tiers.hard["out"])
    statistical = compare(planted, clean.reference, tiers.statistical["out"])
    graph = clean.case.graph
    backends = (PLANTED, OTHER)
    observed = {PLANTED: {clean.out_name: planted}, OTHER: {clean.out_name: clean.real(OTHER)}}
    results = clean.results
    found = [
        c
        for c in compare_bits(
            graph,
            backends,
            observed,
            {b: {} for b in backends},  # inputs and constants: both held the same
            {b: results[b].symints for b in backends},
            {b: results[b].dispatches for b in backends},
            [t.name for t in graph.tensors() if t.state],
        )
        if c.tensor == clean.out_name
    ]
    ulps, differing, allowed = 0, 0, None
    if found:
        ulps, differing = found[0].ulps, found[0].differing
        allowed = exact_tolerance(clean.node.op, found[0].kernels, backends, adapters, {})
    return Verdict(level, hard.utilization, statistical.utilization, ulps, differing, allowed)


# ----------------------------------------------------------------------------- bug kinds

# A plant: the planted backend's output for a level of the bug.
Plant = Callable[[Clean, float], np.ndarray]


def through_reference(bug: Callable[[OpNode, Args, Any], np.ndarray]) -> Plant:
    """A plant from a bug of the reference (`planted_output`)."""

    def plant(clean: Clean, level: float) -> np.ndarray:
        return planted_output(clean, bug(clean.node, clean.evaluation.args, level))

    return plant


def plant_no_eps(clean: Clean, _level: float) -> np.ndarray:
    """rms_norm without eps."""
    return planted_output(clean, no_eps(clean.node, clean.evaluation.args, 0))


def plant_scale(clean: Clean, delta: float) -> np.ndarray:
    """The whole output times (1 + delta)."""
    return planted_output(clean, clean.reference * (1.0 + delta))


def plant_out_ulps(clean: Clean, count: float) -> np.ndarray:
    """One output element, of the median magnitude, stored `count` ULPs from zero."""
    real = clean.real(PLANTED)
    magnitude = np.abs(real.astype(np.float64)).ravel()
    index = int(np.argsort(magnitude)[magnitude.size // 2])
    return ulps_away(real, index, int(count), str(real.dtype))


@dataclass(frozen=True)
class Kind:
    """A bug kind: what it does, to which op, in which dtypes, swept over which levels.

    Attributes:
        key: its name for `--kinds`.
        label, unit: what the table calls it and its levels.
        plant: the planted output of a clean step at a level.
        levels: the sweep, planted into the subject's first step.
        largest_only: planted at the largest size of the sweep only (the reference row).
        per_step: one level per step of the subject instead (rms_norm's scaled x: the
            level is eps / mean(x^2) of that step).
    """

    key: str
    op: str
    label: str
    unit: str
    dtypes: tuple[str, ...]
    plant: Plant
    levels: tuple[float, ...] = ()
    largest_only: bool = False
    per_step: bool = False

    def points(self, subject: Subject) -> list[tuple[float, Clean]]:
        """(level, clean step) pairs to plant, in increasing level."""
        if self.per_step:
            points = [
                (RMS_EPS / float(np.mean(c.evaluation.args["x"] ** 2)), c) for c in subject.cleans
            ]
            return sorted(points, key=lambda p: p[0])
        return [(level, subject.cleans[0]) for level in self.levels]


KINDS = (
    Kind(
        "code",
        "linear_q4gsw",
        "q4 weight code off by d",
        "d",
        DTYPES,
        through_reference(wrong_code),
        CODE_OFFSETS,
    ),
    Kind(
        "x-ulp",
        "linear_q4gsw",
        "f16 x element off",
        "ULPs",
        ("float16",),
        through_reference(x_ulps),
        ULPS,
    ),
    Kind(
        "out-ulp", "linear_q4gsw", "f16 out element off", "ULPs", ("float16",), plant_out_ulps, ULPS
    ),
    Kind("scale", "linear_q4gsw", "out x (1 + delta)", "delta", DTYPES, plant_scale, DELTAS, True),
    Kind(
        "key",
        "sdpa_with_kv_cache",
        "one key dropped",
        "weight quantile",
        DTYPES,
        through_reference(dropped_key_at),
        KEY_QUANTILES,
    ),
    Kind(
        "scale",
        "sdpa_with_kv_cache",
        "out x (1 + delta)",
        "delta",
        DTYPES,
        plant_scale,
        DELTAS,
        True,
    ),
    Kind(
        "count+",
        "rms_norm",
        "mean over n + j",
        "j",
        DTYPES,
        through_reference(wrong_count),
        COUNT_OFFSETS,
    ),
    Kind(
        "count-",
        "rms_norm",
        "mean over n - j",
        "j",
        DTYPES,
        through_reference(lambda node, args, j: wrong_count(node, args, -j)),
        COUNT_OFFSETS,
    ),
    Kind("eps", "rms_norm", "eps dropped", "eps/ms", DTYPES, plant_no_eps, per_step=True),
    Kind(
        "weight-ulp",
        "rms_norm",
        "f16 weight element off",
        "ULPs",
        ("float16",),
        through_reference(weight_ulps),
        ULPS,
    ),
    Kind("out-ulp", "rms_norm", "f16 out element off", "ULPs", ("float16",), plant_out_ulps, ULPS),
    Kind("scale", "rms_norm", "out x (1 + delta)", "delta", DTYPES, plant_scale, DELTAS, True),
)


# ----------------------------------------------------------------------------- the table


@dataclass
class Row:
    """One bug kind at one size and dtype, every level judged."""

    kind: Kind
    subject: Subject
    clean: Verdict
    verdicts: list[Verdict]

    def smallest(self, tier: str) -> Verdict | None:
        """The smallest level `tier` catches."""
        return next((v for v in self.verdicts if v.caught(tier)), None)

    def as_json(self) -> dict[str, Any]:
        """The row for `--json`."""
        return {
            "kind": self.kind.key,
            "bug": self.kind.label,
            "op": self.subject.op,
            "dtype": self.subject.dtype,
            "size_name": SIZE_NAMES[self.subject.op],
            "size": self.subject.size,
            "unit": self.kind.unit,
            "clean": _verdict_json(self.clean),
            "smallest": {t: getattr(self.smallest(t), "level", None) for t in TIERS},
            "levels": [_verdict_json(v) for v in self.verdicts],
        }


def _verdict_json(v: Verdict) -> dict[str, Any]:
    return {
        "level": v.level,
        "hard": v.hard,
        "statistical": v.statistical,
        "ulps": v.ulps,
        "differing": v.differing,
        "allowed_ulps": v.allowed,
        "caught": {t: v.caught(t) for t in TIERS},
    }


def _level(kind: Kind, level: float) -> str:
    if kind.unit == "delta":
        return f"2^{round(float(np.log2(level)))}"
    return f"{level:.1e}" if kind.unit == "eps/ms" else f"{level:g}"


def _cell(row: Row, tier: str) -> str:
    hit = row.smallest(tier)
    if hit is None:
        return "none in sweep"
    measure = {
        "numeric": f"{hit.hard:.2f}x",
        "statistical": f"{hit.statistical:.2f}x",
        "exact": f"{hit.ulps:.2g} ULP, {hit.differing} el.",
    }[tier]
    return f"{_level(row.kind, hit.level)} ({measure})"


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The largest utilizations and distance of several verdicts (of the clean steps a row
    plants into), as one."""
    return Verdict(
        0.0,
        max(v.hard for v in verdicts),
        max(v.statistical for v in verdicts),
        max(v.ulps for v in verdicts),
        max(v.differing for v in verdicts),
        verdicts[0].allowed,
    )


def table(rows: Sequence[Row]) -> str:
    """The markdown table: per row, each tier's smallest catch and what the smallest planted
    bug did."""
    head = (
        "| bug | op, dtype | size | clean: hard / stat / ULP | numeric | statistical | exact "
        "| smallest planted: hard / stat / ULP |"
    )
    lines = [head, "|" + "---|" * 8]
    for row in rows:
        first, s = row.verdicts[0], row.subject
        lines.append(
            f"| {row.kind.label} ({row.kind.unit}) | {s.op} {s.dtype.replace('float', 'f')} "
            f"| {SIZE_NAMES[s.op]} = {s.size} "
            f"| {row.clean.hard:.2g} / {row.clean.statistical:.2g} / {row.clean.ulps} "
            f"| {_cell(row, 'numeric')} | {_cell(row, 'statistical')} | {_cell(row, 'exact')} "
            f"| {_level(row.kind, first.level)}: {first.hard:.2g} / {first.statistical:.2g} "
            f"/ {first.ulps} |"
        )
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> str:
    """The compact table: per op, bug kind and dtype, per size, the smallest level each tier
    catches (numeric / statistical / exact; `-`: none in the sweep)."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.subject.op, row.kind.label, row.subject.dtype), []).append(row)
    width = max(len(g) for g in groups.values())
    lines = [
        "| op | bug (unit) | dtype | "
        + " | ".join("size: numeric / statistical / exact" for _ in range(width))
        + " |",
        "|---|---|---|" + "---|" * width,
    ]
    for (op, label, dtype), group in groups.items():
        cells = []
        for row in group:
            found = [row.smallest(t) for t in TIERS]
            levels = " / ".join("-" if v is None else _level(row.kind, v.level) for v in found)
            cells.append(f"{SIZE_NAMES[op]} {row.subject.size}: {levels}")
        cells += [""] * (width - len(cells))
        unit = group[0].kind.unit
        lines.append(
            f"| {op} | {label} ({unit}) | {dtype.replace('float', 'f')} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def measure(
    runtimes: Sequence[Runtime],
    seed: int,
    sizes: Sequence[int] | None,
    kinds: Sequence[str] | None,
    dtypes: Sequence[str],
) -> list[Row]:
    """Run every subject the chosen kinds need and judge every level of every kind."""
    adapters = {runtime.name: runtime.info() for runtime in runtimes}
    chosen = [k for k in KINDS if kinds is None or k.key in kinds]
    rows: list[Row] = []
    for op in OPS:
        for dtype in dtypes:
            mine = [k for k in chosen if k.op == op and dtype in k.dtypes]
            picked = [s for s in SIZES[op] if sizes is None or s in sizes]
            if not mine or not picked:
                continue
            for size in picked:
                subject = Subject(op, dtype, size)
                started = time.perf_counter()
                run_subject(subject, build_case(op, dtype, size, seed), runtimes)
                # Each step unplanted: how the tiers judge the kernels themselves.
                at_rest = {c.step: judge(c, 0.0, c.real(PLANTED), adapters) for c in subject.cleans}
                for kind in mine:
                    if kind.largest_only and size != picked[-1]:
                        continue
                    points = kind.points(subject)
                    verdicts = [
                        judge(c, level, kind.plant(c, level), adapters) for level, c in points
                    ]
                    rows.append(
                        Row(kind, subject, worst([at_rest[c.step] for _, c in points]), verdicts)
                    )
                print(
                    f"  {op} {dtype} {SIZE_NAMES[op]}={size}: "
                    f"{time.perf_counter() - started:.1f} s",
                    file=sys.stderr,
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.oracle_sharpness")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    parser.add_argument(
        "--sizes", help="a subset of the sizes (K, context, width), comma-separated: 2048,4096"
    )
    parser.add_argument(
        "--kinds", help=f"a subset of the bug kinds: {','.join(sorted({k.key for k in KINDS}))}"
    )
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="float32,float16 (default)")
    parser.add_argument("--json", type=Path, help="write every level's verdicts here")
    args = parser.parse_args(argv)
    known_sizes = {size for sizes in SIZES.values() for size in sizes}
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    except ValueError:
        parser.error(f"--sizes takes integers separated by commas, got {args.sizes!r}")
    kinds = args.kinds.split(",") if args.kinds else None
    dtypes = args.dtypes.split(",")
    unknown = sorted(set(kinds or ()) - {k.key for k in KINDS}) + sorted(set(dtypes) - set(DTYPES))
    unknown += [str(s) for s in sorted(set(sizes or ()) - known_sizes)]
    if unknown:
        parser.error(
            f"unknown kinds, dtypes or sizes: {', '.join(unknown)} (sizes: "
            f"{', '.join(map(str, sorted(known_sizes)))})"
        )
    if not any(
        (kinds is None or k.key in kinds)
        and set(k.dtypes) & set(dtypes)
        and (sizes is None or set(SIZES[k.op]) & set(sizes))
        for k in KINDS
    ):
        parser.error("no bug kind has that dtype at those sizes")

    from harness.check.backends import open_runtimes

    runtimes = open_runtimes((PLANTED, OTHER))
    started = time.perf_counter()
    rows = measure(runtimes, args.seed, sizes, kinds, dtypes)
    adapter = runtimes[0].info().get("adapter", "?")
    print(f"adapter: {adapter}; seed {args.seed}; {time.perf_counter() - started:.0f} s")
    print(table(rows))
    print()
    print(summary(rows))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"adapter": adapter, "seed": args.seed, "rows": [r.as_json() for r in rows]},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

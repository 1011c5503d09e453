"""Floating-point facts behind the error budgets, and the comparison that uses them.

Budgets are bounds, not tolerances: each op's model derives, per output element, how far a
correct float32 implementation may be from the float64 reference (reduction length,
magnitudes of the terms, the unit roundoff, and the accuracy WGSL and GLSL promise for
builtins), times `SAFETY`. A result is within budget when |actual - reference| <= budget
for every element; `utilization` is the largest ratio, so 1.0 is the edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

# Unit roundoff of float32 (round to nearest) and the spacing of floats at 1.0.
U32 = 2.0**-24
EPS32 = 2.0**-23
# How much slack a derived worst-case bound gets: it covers second-order terms the first-order
# derivations drop, never a systematic error (one of those is O(1) larger than any budget).
SAFETY = 2.0
# Accuracy of builtins in ULPs, from the WGSL spec (§ floating-point accuracy) and the
# Vulkan/GLSL precision tables, which agree on these: inverseSqrt 2 ULP, division 2.5 ULP,
# exp(x) 3 + 2|x| ULP, sin/cos absolute 2^-11 in [-pi, pi].
ULP_INVERSE_SQRT = 2.0
ULP_DIVIDE = 2.5
# Both WGSL and Vulkan allow denormals to be flushed to zero, in inputs and results: any
# result below the smallest normal may come back as 0 (an absolute error of up to TINY32).
TINY32 = 2.0**-126
# The division accuracy above holds for divisors in [2^-126, 2^126]; past 2^126 it is not
# specified (a GPU may compute x * (1/y) with 1/y flushed to zero).
DIVISOR_LIMIT = 2.0**126


# Half precision (IEEE binary16), for kernels that store (or compute) in f16: the unit
# roundoff, the largest finite value (a result above it rounds to inf, so generated data
# keeps every intermediate below it), and half the spacing of the f16 subnormals, 2^-24 / 2:
# the absolute error of rounding a result below the smallest normal 2^-14 to the nearest
# subnormal, which relative error cannot describe. (Subnormal f16 results are kept by the
# f32 -> f16 conversions the kernels store with, on both APIs.)
U16 = 2.0**-11
F16_MAX = 65504.0
SUBNORMAL_HALF_SPACING16 = 2.0**-25


def f16_store(compute: np.ndarray | float, reference: np.ndarray | float) -> np.ndarray | float:
    """The budget of a value computed within `compute` of the float64 `reference` and then
    stored as float16.

    Derivation: the computed y' satisfies |y' - y| <= compute / SAFETY (the op's bound before
    its safety factor); rounding to f16 gives fl16(y') = y' (1 + d) + e with |d| <= u16 and
    |e| <= 2^-25 (the subnormal half-spacing, only below 2^-14), so
    |fl16(y') - y| <= |y' - y| + u16 |y| + u16 |y' - y| + 2^-25. The product u16 |y' - y| is
    second order and dropped as every fp32 derivation drops its own; the new first-order
    terms get the same safety factor as the rest: budget = compute + SAFETY (u16 |y| + 2^-25).
    Round to nearest, as the fp32 budgets assume (U32); WGSL lets a conversion pick either
    neighbour, an error up to 2 u16 |y|, which SAFETY = 2 covers with no margin left, and
    the 2^-25 term assumes f16 subnormals are kept, not flushed (both hold on lavapipe).
    """
    return compute + SAFETY * (U16 * np.abs(reference) + SUBNORMAL_HALF_SPACING16)


def ulp_exp(x: np.ndarray | float) -> np.ndarray | float:
    """exp's accuracy in ULPs of its result: 3 + 2|x| (WGSL and Vulkan alike)."""
    return 3.0 + 2.0 * np.abs(x)


def gamma(n: int | np.ndarray) -> float | np.ndarray:
    """The relative error bound of an n-term float32 sum (or product chain) under the error
    model in force (`error_model`): Higham's worst case gamma_n = n u / (1 - n u) for the
    rigorous budgets, the probabilistic `gamma_tilde` for the statistical tier.

    Every op derivation bounds its sums with this one function, so that one derivation gives
    both tiers (docs/oracles.md, "The statistical tier")."""
    model = _MODEL.get()
    seen = _LONGEST.get()
    if seen is not None:
        seen[0] = max(seen[0], int(np.max(n)))
    return model.gamma(n)


def gamma_worst(n: int | np.ndarray) -> float | np.ndarray:
    """Higham's gamma_n = n u / (1 - n u), which bounds |theta_n| in prod (1 + d_i) = 1 + theta_n
    for any n roundings |d_i| <= u: the worst case."""
    return n * U32 / (1.0 - n * U32)


# The statistical tier's lambda (Higham and Mary 2019, Theorem 2.4): for n independent
# mean-zero roundings |d_i| <= u, |theta_n| <= gamma_tilde_n(lambda) with probability at
# least 1 - 2 exp(-lambda^2 (1 - u)^2 / 2) per product chain, so an n-term inner product's
# bound (their Theorem 3.1: n chains) fails with probability at most
# 2 n exp(-lambda^2 (1 - u)^2 / 2). At lambda = 9 that is 5.2e-18 n: 4.3e-14 per element of a
# K = 8192 reduction, below 1e-4 over the 1e9 such elements a nightly run could compare.
LAMBDA = 9.0


def gamma_tilde(n: int | np.ndarray, lam: float = LAMBDA) -> float | np.ndarray:
    """Higham and Mary's probabilistic gamma_tilde_n(lambda) = exp(lambda sqrt(n) u + n u^2 /
    (1 - u)) - 1 (about lambda sqrt(n) u), never above the worst case `gamma_worst`
    (which holds with certainty, so the smaller of the two fails no more often)."""
    tilde = np.expm1(lam * np.sqrt(n) * U32 + n * U32 * U32 / (1.0 - U32))
    return np.minimum(tilde, gamma_worst(n))


@dataclass(frozen=True)
class ErrorModel:
    """How a budget derivation bounds the rounding of an n-term sum (`gamma`).

    Attributes:
        name: `rigorous` (the hard budgets: a worst case, always true) or `statistical`
            (the tier beside them: true with a stated probability, docs/oracles.md).
        gamma: the bound on |theta_n| it uses.
    """

    name: str
    gamma: Callable[[int | np.ndarray], float | np.ndarray]


RIGOROUS = ErrorModel("rigorous", gamma_worst)
STATISTICAL = ErrorModel("statistical", gamma_tilde)
# The model `gamma` follows, and (while `longest_sum` watches) the longest sum seen. Context
# variables, not module state: each thread and task evaluates under its own.
_MODEL: ContextVar[ErrorModel] = ContextVar("error_model", default=RIGOROUS)
_LONGEST: ContextVar[list[int] | None] = ContextVar("longest_sum", default=None)
# Below this many terms the probabilistic bound is no tighter than the worst case
# (lambda sqrt(n) >= n for n <= lambda^2): budgets whose sums are all this short are the
# same in both tiers.
SHORTEST_TIGHTER_SUM = int(LAMBDA * LAMBDA) + 1


@contextmanager
def error_model(model: ErrorModel) -> Iterator[None]:
    """Evaluate budget derivations (their `gamma`) under `model` inside the block."""
    token = _MODEL.set(model)
    try:
        yield
    finally:
        _MODEL.reset(token)


@contextmanager
def longest_sum() -> Iterator[list[int]]:
    """Watch the budget derivations inside the block: the yielded list's one element is the
    longest sum any of them bounded with `gamma` (0 if none)."""
    seen = [0]
    token = _LONGEST.set(seen)
    try:
        yield seen
    finally:
        _LONGEST.reset(token)


def class_mismatch(actual: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Where `actual` and `reference` (float64) differ in class: the one rule for
    non-finite values (docs/oracles.md, "Non-finite values"). Each element is finite, +inf,
    -inf or NaN (any payload, either sign); an element where either side is not finite
    must have the same class on the other, and any other pairing is a mismatch: non-finite
    where the reference is finite, finite where it is not, +inf for -inf, inf for NaN."""
    special = ~np.isfinite(actual) | ~np.isfinite(reference)
    same = (actual == reference) | (np.isnan(actual) & np.isnan(reference))
    mismatch: np.ndarray = special & ~same
    return mismatch


@dataclass(frozen=True)
class Comparison:
    """How one actual array compares with its reference under a budget."""

    utilization: float  # max |actual - reference| / budget; inf for an unbudgeted mismatch
    max_abs_error: float
    worst_index: tuple[int, ...] | None
    nan_mismatch: int  # elements whose class differs from the reference's (`class_mismatch`)
    shape_ok: bool
    # Of those, the elements finite in actual where the reference is not.
    finite_where_special: int = 0

    @property
    def ok(self) -> bool:
        """Within budget, finite where the reference is, and of the right shape."""
        return self.shape_ok and self.nan_mismatch == 0 and self.utilization <= 1.0


def compare(actual: np.ndarray, reference: np.ndarray, budget: np.ndarray) -> Comparison:
    """Compare `actual` with `reference` element by element under `budget`.

    NaN/Inf policy (`class_mismatch`): where either side is not finite the other must be
    of the same class (+inf, -inf or NaN); the budget is not used there. Never a wildcard.
    """
    if actual.shape != reference.shape:
        return Comparison(float("inf"), float("inf"), None, 0, False)
    # Fast path (the per-op checks compare ~30 mostly tiny arrays a step, so numpy's per-call
    # overhead is the cost): when every difference is finite, no element of either side is
    # NaN or Inf (either would make its difference non-finite), so only the budgets' rules
    # remain (a zero budget takes no error; a negative or NaN one goes the masked way). Both
    # give exactly what `_compare_masked` gives; anything else goes there.
    ref = np.asarray(reference, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf - Inf, overflow: masked path
        err = np.abs(np.subtract(actual, ref, dtype=np.float64))
    if err.size:
        max_abs_error = float(err.max())
        bud = np.asarray(budget, np.float64)
        least = float(bud.min()) if bud.size else math.nan
        if (
            math.isfinite(max_abs_error)
            and (bud.ndim == 0 or bud.shape == ref.shape)
            and least >= 0.0
        ):
            if least > 0.0:
                ratio = err / bud
            else:  # exact ops budget 0: an exact element is within it, any error is not
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(err == 0, 0.0, err / np.where(bud > 0, bud, 0.0))
            flat = int(ratio.argmax())
            worst = np.unravel_index(flat, ratio.shape)
            return Comparison(
                utilization=float(ratio.flat[flat]),
                max_abs_error=max_abs_error,
                worst_index=tuple(int(i) for i in worst),
                nan_mismatch=0,
                shape_ok=True,
            )
    return _compare_masked(actual, reference, budget)


def _compare_masked(actual: np.ndarray, reference: np.ndarray, budget: np.ndarray) -> Comparison:
    """`compare` for any values: non-finite elements, zero or negative budgets."""
    act = actual.astype(np.float64)
    ref = np.asarray(reference, np.float64)
    bud = np.broadcast_to(np.asarray(budget, np.float64), ref.shape)
    act_bad = ~np.isfinite(act)
    mismatch = class_mismatch(act, ref)
    nan_mismatch = int(np.count_nonzero(mismatch))
    finite_where_special = int(np.count_nonzero(mismatch & ~act_bad))
    if not (~act_bad & np.isfinite(ref)).any():  # nothing compared by value
        return Comparison(0.0, 0.0, None, nan_mismatch, True, finite_where_special)
    err, ratio = _by_value(act, ref, bud)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return Comparison(
        utilization=float(ratio[worst]),
        max_abs_error=float(err.max()),
        worst_index=tuple(int(i) for i in worst),
        nan_mismatch=nan_mismatch,
        shape_ok=True,
        finite_where_special=finite_where_special,
    )


def _by_value(act: np.ndarray, ref: np.ndarray, bud: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|error| and |error| / budget of the elements compared by value (both finite; 0 at
    the others): no error is within any budget, an error within none where the budget is
    0, negative or NaN (inf)."""
    finite = np.isfinite(act) & np.isfinite(ref)
    with np.errstate(invalid="ignore"):  # inf - inf at elements compared by class
        err = np.where(finite, np.abs(act - ref), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / np.where(bud > 0, bud, 0.0))
    return err, np.where(np.isnan(ratio), np.inf, ratio)


def utilization_map(actual: np.ndarray, reference: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """`compare`'s rule per element, for the evidence and the report's pictures: |error| /
    budget where the element is compared by value (its largest value is `compare`'s
    utilization), inf where the two differ in class (`class_mismatch`, which `compare`
    counts apart), 0 where both are the same non-finite class."""
    act = np.asarray(actual, np.float64)
    ref = np.asarray(reference, np.float64)
    _, ratio = _by_value(act, ref, np.broadcast_to(np.asarray(budget, np.float64), ref.shape))
    out: np.ndarray = np.where(class_mismatch(act, ref), np.inf, ratio)
    return out

"""Floating-point facts behind the error budgets, and the comparison that uses them.

Budgets are bounds, not tolerances: each op's model derives, per output element, how far a
correct implementation may be from the float64 reference (reduction length, magnitudes of
the terms, the unit roundoff, and the accuracy WGSL and GLSL promise for builtins), times
`SAFETY`, in the kernel's arithmetic: float32, or f16 for a manifest kernel declaring
`precision = "f16"` (`Arithmetic`; the error model in force carries it, `arithmetic()`).
A result is within budget when |actual - reference| <= budget for every element;
`utilization` is the largest ratio, so 1.0 is the edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

import numpy as np

# How much slack a derived worst-case bound gets: it covers second-order terms the first-order
# derivations drop, never a systematic error (one of those is O(1) larger than any budget).
SAFETY = 2.0
# Accuracy of builtins in ULPs of their result, from the WGSL spec (§ floating-point accuracy)
# and the Vulkan/GLSL precision tables, which agree on these for f32 and f16 alike:
# inverseSqrt 2 ULP, division 2.5 ULP (within the divisor range of `Arithmetic`). exp's and
# sin/cos's accuracy depend on the width (`Arithmetic.exp_ulp_base`, `sin_cos_absolute`).
ULP_INVERSE_SQRT = 2.0
ULP_DIVIDE = 2.5


@dataclass(frozen=True)
class Arithmetic:
    """The floating-point arithmetic a kernel computes in: what every budget derivation
    reads for the kernel's own roundings (`arithmetic()`, the one of the error model in
    force). The float64 reference and the rounding of a stored f16 value (`f16_store`) are
    not the kernel's arithmetic and do not change with it.

    Attributes:
        name: "f32" or "f16" (a manifest's `precision`).
        u: the unit roundoff (round to nearest): 2^-24 (f32), 2^-11 (f16).
        eps: the spacing of floats at 1.0, 2u: one ULP of a normal value v is at most eps |v|.
        tiny: the smallest normal value, 2^-126 (f32), 2^-14 (f16). Both WGSL and Vulkan let
            an implementation flush subnormal inputs and results of arithmetic to zero: any
            result below it may come back as 0 (an absolute error of up to `tiny`).
        largest: the largest finite value, about 3.4e38 (f32), 65504 (f16); a result past it
            overflows (to inf; WGSL: an indeterminate value), which generated data keep
            every intermediate of the project's kernels below.
        divisor_limit: x / y is accurate to 2.5 ULP for |y| in [1 / limit, limit]: 2^126
            (f32), 2^14 (f16); past it nothing is specified (a GPU may compute x * (1/y)
            with 1/y flushed to zero).
        exp_ulp_base: exp(x) and exp2(x) are accurate to exp_ulp_base + 2|x| ULP: 3 (f32),
            1 (f16).
        sin_cos_absolute: sin and cos are off by at most this inside [-pi, pi]: 2^-11
            (f32), 2^-7 (f16).
        log2_absolute: log2(x) inside [0.5, 2]: 2^-21 (f32), 2^-7 (f16); 3 ULP outside.
        exact_int: every integer up to this magnitude converts exactly: 2^24 (f32), 2^11
            (f16).
    """

    name: str
    u: float
    tiny: float
    largest: float
    divisor_limit: float
    exp_ulp_base: float
    sin_cos_absolute: float
    log2_absolute: float
    exact_int: int

    @property
    def eps(self) -> float:
        """The spacing of floats at 1.0 (2u): one ULP of a normal value v is <= eps |v|."""
        return 2.0 * self.u

    def ulp_exp(self, x: np.ndarray | float) -> np.ndarray | float:
        """exp's (and exp2's) accuracy in ULPs of its result at x: exp_ulp_base + 2|x|."""
        return self.exp_ulp_base + 2.0 * np.abs(x)


F32 = Arithmetic(
    "f32",
    u=2.0**-24,
    tiny=2.0**-126,
    largest=float(np.finfo(np.float32).max),
    divisor_limit=2.0**126,
    exp_ulp_base=3.0,
    sin_cos_absolute=2.0**-11,
    log2_absolute=2.0**-21,
    exact_int=2**24,
)
F16 = Arithmetic(
    "f16",
    u=2.0**-11,
    tiny=2.0**-14,
    largest=65504.0,
    divisor_limit=2.0**14,
    exp_ulp_base=1.0,
    sin_cos_absolute=2.0**-7,
    log2_absolute=2.0**-7,
    exact_int=2**11,
)
# The arithmetics a manifest's `precision` names.
ARITHMETICS = {a.name: a for a in (F32, F16)}

# float32's constants by name, for the float32-only parts (f16 stores' conversions, the
# tests): a derivation of the kernel's arithmetic reads `arithmetic()` instead.
U32 = F32.u
EPS32 = F32.eps
TINY32 = F32.tiny
DIVISOR_LIMIT = F32.divisor_limit


# Half precision (IEEE binary16), for kernels that store (or compute) in f16: the unit
# roundoff, and half the spacing of the f16 subnormals, 2^-24 / 2: the absolute error of
# rounding a result below the smallest normal 2^-14 to the nearest subnormal, which relative
# error cannot describe. (Subnormal f16 results are kept by the f32 -> f16 conversions the
# kernels store with, on both APIs; the largest finite value is `F16.largest`.)
U16 = F16.u
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


def gamma(n: int | np.ndarray) -> float | np.ndarray:
    """The relative error bound of an n-term sum (or product chain) in the kernel's
    arithmetic, under the error model in force (`error_model`): Higham's worst case
    gamma_n = n u / (1 - n u) for the rigorous budgets, the probabilistic `gamma_tilde` for
    the statistical tier, each with the unit roundoff u of the model's `Arithmetic`.

    Every op derivation bounds its sums with this one function, so that one derivation gives
    both tiers and both arithmetics (docs/oracles.md, "The statistical tier", "Kernels
    that compute in f16")."""
    model = _MODEL.get()
    seen = _LONGEST.get()
    if seen is not None:
        seen[0] = max(seen[0], int(np.max(n)))
    return model.gamma(n, model.arithmetic.u)


def gamma_worst(n: int | np.ndarray, u: float | None = None) -> float | np.ndarray:
    """Higham's gamma_n = n u / (1 - n u), which bounds |theta_n| in prod (1 + d_i) = 1 + theta_n
    for any n roundings |d_i| <= u: the worst case. u: the unit roundoff (default: that of
    the arithmetic in force). Infinite where n u >= 1 (no bound: an f16 sum of 2048 terms)."""
    u = arithmetic().u if u is None else u
    with np.errstate(divide="ignore"):
        return np.where(n * u < 1.0, n * u / np.maximum(1.0 - n * u, 0.0), np.inf) + 0.0


# The statistical tier's lambda (Higham and Mary 2019, Theorem 2.4): for n independent
# mean-zero roundings |d_i| <= u, |theta_n| <= gamma_tilde_n(lambda) with probability at
# least 1 - 2 exp(-lambda^2 (1 - u)^2 / 2) per product chain, so an n-term inner product's
# bound (their Theorem 3.1: n chains) fails with probability at most
# 2 n exp(-lambda^2 (1 - u)^2 / 2). At lambda = 9 that is 5.2e-18 n: 4.3e-14 per element of a
# K = 8192 reduction, below 1e-4 over the 1e9 such elements a nightly run could compare.
LAMBDA = 9.0


def gamma_tilde(
    n: int | np.ndarray, u: float | None = None, lam: float = LAMBDA
) -> float | np.ndarray:
    """Higham and Mary's probabilistic gamma_tilde_n(lambda) = exp(lambda sqrt(n) u + n u^2 /
    (1 - u)) - 1 (about lambda sqrt(n) u), never above the worst case `gamma_worst`
    (which holds with certainty, so the smaller of the two fails no more often). u: the
    unit roundoff (default: that of the arithmetic in force)."""
    u = arithmetic().u if u is None else u
    tilde = np.expm1(lam * np.sqrt(n) * u + n * u * u / (1.0 - u))
    return np.minimum(tilde, gamma_worst(n, u))


@dataclass(frozen=True)
class ErrorModel:
    """How a budget derivation bounds the kernel's roundings: the tier (how `gamma` bounds
    an n-term sum) and the arithmetic the kernel computes in (`arithmetic`).

    Attributes:
        name: `rigorous` (the hard budgets: a worst case, always true) or `statistical`
            (the tier beside them: true with a stated probability, docs/oracles.md).
        gamma: the bound on |theta_n| it uses, given n and the unit roundoff.
        arithmetic: the kernel's arithmetic (f32 unless its manifest entry says `precision
            = "f16"`): its unit roundoff, flush threshold and builtin accuracies.
    """

    name: str
    gamma: Callable[[int | np.ndarray, float], float | np.ndarray]
    arithmetic: Arithmetic = F32

    def computing_in(self, arithmetic: Arithmetic) -> ErrorModel:
        """This tier for a kernel that computes in `arithmetic`."""
        return replace(self, arithmetic=arithmetic)


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


def arithmetic() -> Arithmetic:
    """The arithmetic of the error model in force (`error_model`): what a derivation reads
    for the kernel's unit roundoff, flush threshold and builtin accuracies."""
    return _MODEL.get().arithmetic


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

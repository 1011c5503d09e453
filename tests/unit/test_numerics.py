"""`harness.model.numerics.compare`: its fast path for finite values and positive budgets
gives exactly what the masked path gives for every input, special values included."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from harness.model.numerics import Comparison, _compare_masked, compare

SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 3e38])
HUGE = st.sampled_from([1e-300, 1e300, -1e300])  # float64 only: differences that overflow


def _values(dtype: type, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    width = 32 if dtype is np.float32 else 64
    finite = st.floats(-1e6, 1e6, width=width)
    special = SPECIAL if width == 32 else st.one_of(SPECIAL, HUGE)
    return hnp.arrays(dtype, shape, elements=st.one_of(finite, finite, finite, special))


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    actual = draw(_values(np.float32, shape))
    # Mostly a reference near `actual` (the usual case), sometimes unrelated values.
    if draw(st.booleans()):
        noise = draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e-3, 1e-3)))
        with np.errstate(invalid="ignore", over="ignore"):
            reference = actual.astype(np.float64) + noise
    else:
        reference = draw(_values(np.float64, shape))
    budget_shape = draw(st.sampled_from([(), shape]))
    budget = draw(
        hnp.arrays(
            np.float64,
            budget_shape,
            elements=st.one_of(st.floats(1e-9, 1.0), st.floats(1e-9, 1.0), SPECIAL, HUGE),
        )
    )
    return actual, reference, budget


def _same(a: Comparison, b: Comparison) -> bool:
    def same_float(x: float, y: float) -> bool:
        return x == y or (np.isnan(x) and np.isnan(y))

    return (
        same_float(a.utilization, b.utilization)
        and same_float(a.max_abs_error, b.max_abs_error)
        and a.worst_index == b.worst_index
        and a.nan_mismatch == b.nan_mismatch
        and a.shape_ok == b.shape_ok
    )


@settings(max_examples=400, deadline=None)
@given(cases())
def test_compare_matches_the_masked_path(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    actual, reference, budget = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # both paths may overflow alike
        fast, masked = (
            compare(actual, reference, budget),
            _compare_masked(actual, reference, budget),
        )
    assert _same(fast, masked), (fast, masked)


def test_fast_path_facts() -> None:
    """The figures of an all-finite comparison, worked by hand."""
    actual = np.array([[1.0, 2.0], [3.0, 4.5]], np.float32)
    reference = np.array([[1.0, 2.25], [3.0, 4.0]])
    cmp = compare(actual, reference, np.array([[1.0, 0.5], [1.0, 2.0]]))
    assert cmp == Comparison(0.5, 0.5, (0, 1), 0, True)
    # A zero budget: any error is unbudgeted, an exact element is not.
    cmp = compare(actual, reference, np.array(0.0))
    assert cmp.utilization == np.inf and cmp.worst_index == (0, 1)
    assert compare(actual, actual.astype(np.float64), np.array(0.0)).utilization == 0.0
    # A budget of -0.0 is a zero budget: an error there is unbudgeted (+Inf, not -Inf).
    cmp = compare(actual, reference, np.array([[1.0, -0.0], [1.0, 2.0]]))
    assert cmp.utilization == np.inf and cmp.worst_index == (0, 1)
    # A NaN where the reference has one is no mismatch; Inf against a number is.
    cmp = compare(np.array([np.nan, np.inf], np.float32), np.array([np.nan, 1.0]), np.array(1.0))
    assert cmp.nan_mismatch == 1

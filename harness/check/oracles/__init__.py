"""The oracle stack of docs/design.md §6, one function per oracle, each returning divergences.

The lockstep runner (harness/check/lockstep.py) decides when each runs; these functions only
compare what the backends reported with what the contract model and the float64 reference
predict, classify each difference and say which side is to blame. One module per group of
oracles: `errors` (errors and builds), `metadata` (dispatch logs, grids, validation),
`canaries` (poisoned slack), `numerics` (outputs against the reference, blame merging) and
`exact` (the exact tier); `where` says which op produced, wrote or reads a tensor.
"""

from __future__ import annotations

from harness.check.oracles.canaries import (
    POISON_HALF_MARK,
    POISON_HALF_MASK,
    POISON_MARK,
    POISON_MASK,
    canary_fill,
    check_canaries,
    decode_poison,
    poison_word,
)
from harness.check.oracles.errors import (
    check_build,
    check_errors,
    compiler_headline,
    error_key,
    error_op,
    kernel_build_divergence,
    op_crash,
    upstream_origin,
)
from harness.check.oracles.exact import (
    NOT_CLOSE,
    BitComparison,
    check_exact,
    compare_bits,
    exact_tolerance,
    same_device,
    ulp_distance,
)
from harness.check.oracles.metadata import (
    check_grids,
    check_metadata,
    check_validation,
    dispatch_json,
)
from harness.check.oracles.numerics import (
    STATISTICAL_PREFIX,
    check_degenerate,
    check_ops,
    check_outputs,
    merge_blame,
    numeric_divergence,
    statistical_key,
    suspect_divergence,
)
from harness.check.oracles.where import (
    consumer,
    producer,
    writer,
)

__all__ = [
    "NOT_CLOSE",
    "POISON_HALF_MARK",
    "POISON_HALF_MASK",
    "POISON_MARK",
    "POISON_MASK",
    "STATISTICAL_PREFIX",
    "BitComparison",
    "canary_fill",
    "check_build",
    "check_canaries",
    "check_degenerate",
    "check_errors",
    "check_exact",
    "check_grids",
    "check_metadata",
    "check_ops",
    "check_outputs",
    "check_validation",
    "compare_bits",
    "compiler_headline",
    "consumer",
    "decode_poison",
    "dispatch_json",
    "error_key",
    "error_op",
    "exact_tolerance",
    "kernel_build_divergence",
    "merge_blame",
    "numeric_divergence",
    "op_crash",
    "poison_word",
    "producer",
    "same_device",
    "statistical_key",
    "suspect_divergence",
    "ulp_distance",
    "upstream_origin",
    "writer",
]

"""What the oracle stack reports: divergences, their classes and which side is blamed."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol

from graph_format import runtime_api


class Kind(StrEnum):
    """Failure classes, from docs/design.md §6 and issue "Harness depth" item 3."""

    BUILD_ERROR = "build_error"  # a backend refused (or accepted) a graph unlike the contract
    ERROR_ASYMMETRY = "error_asymmetry"  # one side raised where the contract says otherwise
    STATE_AFTER_REJECT = "state_after_reject"  # a rejected step changed the graph
    CUR_DIMS = "cur_dims"  # live dims (or a SymInt's value) differ from the contract
    DISPATCH = "dispatch"  # dispatch log (kernel, workgroup size, count, ran) differs
    PHYSICAL_GRID = "physical_grid"  # a physical grid breaks device limits or misses work
    CANARY_WRITE = "canary_write"  # a write into the slack past a tensor's live bytes
    STALE_READ = "stale_read"  # poison from the slack showed up in a live value
    NUMERIC = "numeric"  # error above the derived budget
    NAN_INF = "nan_inf"  # another class than the reference: non-finite vs finite, +-inf, NaN
    BIT_MISMATCH = "bit_mismatch"  # a pair declared to round alike does not (exact tier)
    # within the rigorous budget, over the statistical tier's bound (docs/oracles.md)
    NUMERIC_SUSPECT = "numeric_suspect"
    VALIDATION = "validation"  # a validation-layer or API validation message
    CRASH = "crash"  # an unexpected exception or a lost device
    DEGENERATE = "degenerate"  # the case itself proves nothing (constant inputs, zero outputs)


# Bands of error / budget for numeric findings: marginal (a missing term in a derivation,
# or a subtly different accumulation), clear, and gross (a wrong element, a dropped factor).
# Bands rather than decades: one bug's factor can span many decades across cases (it
# depends on the data), and decades would split it into as many "different" bugs.
NUMERIC_BANDS = (("x1", 1.0), ("x10", 10.0), ("x1000", 1000.0))

# Within one step, the more fundamental finding comes first: a crash or a wrong dispatch
# explains the numeric errors that follow from it, not the other way round.
PRIORITY = {
    kind: rank
    for rank, kind in enumerate(
        [
            Kind.DEGENERATE,
            Kind.CRASH,
            Kind.BUILD_ERROR,
            Kind.VALIDATION,
            Kind.ERROR_ASYMMETRY,
            Kind.STATE_AFTER_REJECT,
            Kind.CUR_DIMS,
            Kind.DISPATCH,
            Kind.PHYSICAL_GRID,
            Kind.CANARY_WRITE,
            Kind.STALE_READ,
            Kind.NAN_INF,
            Kind.NUMERIC,
            Kind.BIT_MISMATCH,
            Kind.NUMERIC_SUSPECT,
        ]
    )
}

# Blame values: which side is wrong.
WEBGPU, VULKAN, BOTH, MODEL = "webgpu", "vulkan", "both", "model"


def numeric_band(factor: float | None) -> str:
    """The band of error / budget a numeric finding falls in (`NUMERIC_BANDS`); a factor
    that is unknown counts as gross."""
    value = math.inf if factor is None else factor
    return next((name for name, low in reversed(NUMERIC_BANDS) if value >= low), "x1")


# The kind of the verdict on a case whose results change between runs (harness.check.verdict).
NONDETERMINISTIC = "nondeterministic"


@dataclass(frozen=True, order=True)
class BugKey:
    """What makes two divergences "the same bug": the one definition, used by shrinking
    (harness.check.verdict: one exception class per key, so Hypothesis only accepts a shrink that
    keeps it), by grouping (findings, the summary and the report), by replay (a bundle still
    fails when its key shows again) and by expectations (an entry covers the keys it names).

    The fields, and why each is in the key:
    - `op_type`: the op type (`rms_norm`), not the op's name, which changes as a case
      shrinks; `-` for a divergence about no op.
    - `kind`: the failure class (`harness.check.divergence.Kind`, or `nondeterministic`).
    - `blame`: the side that is wrong (a backend: `webgpu`, `webgpu-dawn`, `vulkan`...;
      several, comma-separated; `both`: every backend; `model`; for a non-deterministic
      case the backends that were, comma-separated); see `blame_of`.
    - `band`: for numeric findings, the band of error / budget (`NUMERIC_BANDS`: x1
      marginal, x10 clear, x1000 gross; empty otherwise), so that shrinking keeps a gross
      error gross instead of trading it for a barely failing case, which may be another bug
      (a missing term in a derivation) or none; bands, not decades, since one bug's factor
      spans decades with the data.
    - `dtype`: `float16` for an op that ran in half precision (its `_f16` kernels), empty
      for float32: an f16 kernel is other code than its fp32 sibling, so its bugs are
      other bugs, and shrinking must not trade one for the other.

    The shape regime is not in the key: it is where a bug showed, and shrinking moves it
    (a bug found at `rows<max` shrinks to `rows=1`); reports list the regimes of each bug.

    Its text form (`str(key)`, `BugKey.parse`) is `op_type|kind|blame`, then `|band` for a
    numeric finding, with `@float16` after the op type of a half-precision op:
    `rms_norm|numeric|webgpu|x1000`, `rms_norm@float16|numeric|webgpu|x1000` (keys written
    before f16 existed read as they did).
    """

    op_type: str
    kind: str
    blame: str
    band: str = ""
    dtype: str = ""

    @classmethod
    def of(
        cls, kind: str, op_type: str | None, blame: str, factor: float | None, dtype: str = ""
    ) -> BugKey:
        """The key of a divergence from its fields (a `Divergence` or a record of one);
        `dtype` float32 counts as empty, the default."""
        band = numeric_band(factor) if kind == Kind.NUMERIC else ""
        return cls(op_type or "-", str(kind), str(blame), band, key_dtype(dtype))

    @classmethod
    def nondeterministic(cls, backends: Sequence[str]) -> BugKey:
        """The key of a case whose results changed between runs on `backends`."""
        return cls("-", NONDETERMINISTIC, ",".join(backends) or BOTH)

    @classmethod
    def parse(cls, text: str) -> BugKey:
        """A key from its text form.

        Raises:
            ValueError: not `op_type|kind|blame[|band]`.
        """
        parts = text.split("|")
        if len(parts) not in (3, 4) or not all(parts[:3]):
            raise ValueError(f"expected a bug key op_type|kind|blame[|band], got {text!r}")
        op_type, _, dtype = parts[0].partition("@")
        if not op_type or (dtype and dtype != "float16"):
            raise ValueError(f"expected op_type or op_type@float16 in a bug key, got {text!r}")
        band = parts[3] if len(parts) == 4 else ""
        return cls(op_type, parts[1], parts[2], band, dtype)

    def __str__(self) -> str:
        op = f"{self.op_type}@{self.dtype}" if self.dtype else self.op_type
        return "|".join([op, self.kind, self.blame] + ([self.band] if self.band else []))


def key_dtype(dtype: str | None) -> str:
    """The dtype field of a bug key: `float16`, or empty for float32 (and for no op)."""
    return "float16" if dtype == "float16" else ""


# ---------------------------------------------------------------------------- details
# What a divergence carries besides its message, one class per kind (`DETAILS`): what the
# report, the bundles and the first-divergent-op rule read, by attribute. JSON leaves out
# what is not set (`Details.to_json`), and records read them back by their kind.


@dataclass
class Details:
    """A divergence's structured evidence: the base of each kind's details, and the details
    of a kind that has none (a degenerate case)."""

    @property
    def element(self) -> int | list[int] | None:
        """The element the finding points at (an index, or a flat position), if any."""
        return None

    def to_json(self) -> dict[str, Any]:
        """Its fields that are set (None left out)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass
class NumericDetails(Details):
    """`numeric`, `nan_inf` and `numeric_suspect`: where the comparison was worst.

    Attributes:
        scope: "op" (the op's reference on the backend's own inputs) or "graph" (the graph's
            output against the end-to-end reference).
        worst_index: the element furthest over its budget (None: nothing compared by value).
        hard_utilization, statistical_utilization: a `numeric_suspect`'s error over its
            rigorous budget (within it) and over the statistical tier's bound (over it).
    """

    scope: str = "op"
    worst_index: list[int] | None = None
    max_abs_error: float = 0.0
    hard_utilization: float | None = None
    statistical_utilization: float | None = None

    @property
    def element(self) -> list[int] | None:
        """The worst element."""
        return self.worst_index


@dataclass
class BitPair:
    """One pair of backends of a `bit_mismatch`: how far apart their outputs were (ULPs, at
    how many elements, the first at flat index `first`) against what its kernels allow."""

    pair: list[str]
    ulps: int
    allowed_ulps: int
    differing: int
    first: int
    kernels: list[str] = field(default_factory=list)


@dataclass
class BitDetails(Details):
    """`bit_mismatch`: every pair of backends whose outputs differ beyond their declared
    ULPs on bit-identical inputs; `worst_index` the first differing flat index."""

    scope: str = "exact"
    worst_index: int | None = None
    pairs: list[BitPair] = field(default_factory=list)

    @property
    def element(self) -> int | None:
        """The first differing element (flat index)."""
        return self.worst_index


@dataclass
class CanaryDetails(Details):
    """`canary_write`: `words` written past the live size (with the first element and up to
    256 of them, the live and the largest element count), or past the whole allocation,
    into the guard after it (`past_allocation`)."""

    words: int = 0
    past_allocation: bool | None = None
    first_element: int | None = None
    elements: list[int] | None = None
    live_numel: int | None = None
    max_numel: int | None = None

    @property
    def element(self) -> int | None:
        """The first element written past the live size."""
        return self.first_element


@dataclass
class StaleReadDetails(Details):
    """`stale_read`: live elements holding slack poison (how many, the first flat index and
    up to 256 of them), and where the poison came from: [tensor, step] pairs."""

    elements: int = 0
    first: int = 0
    indices: list[int] = field(default_factory=list)
    origins: list[list[str | int]] = field(default_factory=list)

    @property
    def element(self) -> int:
        """The first poisoned element (flat index)."""
        return self.first


@dataclass
class LoggedDispatch:
    """One entry of a dispatch log, as the contract model predicted it or a backend ran it.

    Attributes:
        wg: workgroup size; `count`: logical workgroup count; `ran`: not skipped.
        grid: the physical grid a backend handed the API (None for the model's).
    """

    op: str
    kernel: str
    wg: list[int]
    count: list[int]
    ran: bool
    grid: list[int] | None = None

    def logical(self) -> tuple[str, tuple[int, ...], tuple[int, ...], bool]:
        """What must match across the backends and the model."""
        return (self.kernel, tuple(self.wg), tuple(self.count), self.ran)


@dataclass
class DispatchDetails(Details):
    """`dispatch`: one op's dispatch slots as the contract has them and as each backend ran
    them; `expected_by_manifest`, per backend running a manifest's kernels, what that
    manifest predicts instead."""

    expected: list[LoggedDispatch] = field(default_factory=list)
    got: dict[str, list[LoggedDispatch]] = field(default_factory=dict)
    expected_by_manifest: dict[str, list[LoggedDispatch]] | None = None


@dataclass
class CurDimsDetails(Details):
    """`cur_dims`: a tensor's live dims (or a SymInt's value) as the contract has it and as
    each backend reported it."""

    expected: list[int] | int | None = None
    got: dict[str, list[int] | int | None] = field(default_factory=dict)


@dataclass
class Upstream:
    """Where a wrong value an op refused was produced: the producing op (`op`, `op_type`),
    the value, and what the contract and the backend had for it (dims or an int)."""

    op: str
    op_type: str
    value: str
    expected: list[int] | int
    got: list[int] | int


@dataclass
class AsymmetryDetails(Details):
    """`error_asymmetry`: a refusal of a step the contract accepts (its error `key` and text,
    and the `upstream` op that produced the wrong value it refused, when one did), or a
    refusal the contract predicts that a backend did otherwise (`expected` key, or one per
    backend, and each backend's `got`)."""

    key: list[str | int | None] | None = None
    error: str | None = None
    upstream: Upstream | None = None
    expected: list[str | int | None] | dict[str, list[str | int | None]] | None = None
    got: dict[str, list[str | int | None] | None] | None = None


@dataclass
class BuildErrorDetails(Details):
    """`build_error`: a load the contract predicts otherwise (`expected` error or None for
    success, and each backend's outcome, `got`), or a kernel that does not build (`kernel`,
    `shader`, the `compiler`'s output) or whose manifest fails on a step's values
    (`manifest_values`)."""

    expected: str | None = None
    got: dict[str, str] | None = None
    kernel: str | None = None
    shader: str | None = None
    compiler: str | None = None
    manifest_values: str | None = None


@dataclass
class CrashDetails(Details):
    """`crash`: an op's own code failing (`stage`, `error`), or a lost device's `messages`."""

    stage: str | None = None
    error: str | None = None
    messages: list[str] | None = None


@dataclass
class StateDetails(Details):
    """`state_after_reject`: the tensors whose live dims a rejected step changed."""

    tensors: list[str] = field(default_factory=list)


@dataclass
class GridDetails(Details):
    """`physical_grid`: the grid a backend dispatched for a logical workgroup count."""

    grid: list[int] = field(default_factory=list)
    logical: list[int] = field(default_factory=list)


@dataclass
class ValidationDetails(Details):
    """`validation`: the validation layer's (or API's) message."""

    message: str = ""


# Each kind's details class (a kind not named has none: `Details`).
DETAILS: dict[str, type[Details]] = {
    Kind.NUMERIC: NumericDetails,
    Kind.NAN_INF: NumericDetails,
    Kind.NUMERIC_SUSPECT: NumericDetails,
    Kind.BIT_MISMATCH: BitDetails,
    Kind.CANARY_WRITE: CanaryDetails,
    Kind.STALE_READ: StaleReadDetails,
    Kind.DISPATCH: DispatchDetails,
    Kind.CUR_DIMS: CurDimsDetails,
    Kind.ERROR_ASYMMETRY: AsymmetryDetails,
    Kind.BUILD_ERROR: BuildErrorDetails,
    Kind.CRASH: CrashDetails,
    Kind.STATE_AFTER_REJECT: StateDetails,
    Kind.PHYSICAL_GRID: GridDetails,
    Kind.VALIDATION: ValidationDetails,
}


def details_of(kind: str, details: Details) -> Details:
    """`details` checked against its kind's class (`DETAILS`); none (`Details()`) becomes
    that class's empty one, so a divergence's details are always its kind's.

    Raises:
        TypeError: details of another kind's class (a harness bug).
    """
    want = DETAILS.get(str(kind), Details)
    if type(details) is Details:
        return want()
    if not isinstance(details, want):
        raise TypeError(
            f"a {kind} divergence's details must be {want.__name__}, got {type(details).__name__}"
        )
    return details


@dataclass
class Divergence:
    """One finding of one step.

    Attributes:
        step: step index (-1 for load time).
        kind: failure class.
        blame: a backend's name ("webgpu", "webgpu-dawn", "vulkan"), several of them
            comma-separated, "both" (every backend checked is wrong, alike or each in its
            own way) or "model" (the contract model disagrees with backends that agree
            with each other); see `blame_of`.
        op: the op concerned (its name in the graph), when known.
        op_type: that op's type (`rms_norm`...), which survives shrinking unlike the name.
        dtype: the precision that op ran in (`harness.model.op_dtype`), when known.
        tensor: the tensor concerned, when known.
        message: one line for humans.
        factor: error / budget for numeric divergences.
        details: structured evidence (indices, values, expected vs actual).
        cause: the key of the divergence this one follows from, which it counts under
            (`bug_key`): an op that refused a step the contract accepts because a value
            produced upstream was wrong (a view's wrong live dims, whose 32 rows a
            rms_norm cannot fit in a lowered grid limit) counts as that producer's
            `cur_dims` bug, the key the same bug has where nothing refuses.
    """

    step: int
    kind: Kind
    blame: str
    message: str
    op: str | None = None
    tensor: str | None = None
    factor: float | None = None
    details: Details = field(default_factory=Details)
    op_type: str | None = None
    dtype: str | None = None
    cause: BugKey | None = None

    def __post_init__(self) -> None:
        self.details = details_of(self.kind, self.details)

    def bug_key(self) -> BugKey:
        """The bug this divergence shows (see `BugKey`): its `cause`'s, when it has one."""
        if self.cause is not None:
            return self.cause
        return BugKey.of(str(self.kind), self.op_type, self.blame, self.factor, self.dtype or "")

    def to_json(self) -> dict[str, Any]:
        """Plain-data form for JSONL records."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["kind"] = str(self.kind)
        data["details"] = self.details.to_json()
        data["cause"] = str(self.cause) if self.cause is not None else None
        return data


class Found(Protocol):
    """What `FirstDivergent.of` reads of a divergence: a `Divergence` or a record of one."""

    @property
    def step(self) -> int: ...
    @property
    def op(self) -> str | None: ...
    @property
    def op_type(self) -> str | None: ...
    @property
    def tensor(self) -> str | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def blame(self) -> str: ...
    @property
    def details(self) -> Details: ...


@dataclass
class FirstDivergent:
    """The first (step, op, tensor, element) that left its budget while its inputs were
    within theirs, as a case record and its failure page name it.

    An op that refused a step because an input produced upstream was wrong (a `sym_size`
    that read stale dims, consumed by a `view_copy`) points at the op that produced it,
    with `refused_by` naming the op that raised.
    """

    step: int
    op: str | None
    op_type: str | None
    tensor: str | None
    element: int | list[int] | None
    kind: str
    blame: str
    refused_by: str | None = None

    @classmethod
    def of(cls, d: Found) -> FirstDivergent:
        """The first divergent op a divergence points at (upstream, for a refusal of a
        wrong value produced upstream)."""
        upstream = d.details.upstream if isinstance(d.details, AsymmetryDetails) else None
        if upstream is not None:
            return cls(
                d.step, upstream.op, upstream.op_type, upstream.value, d.details.element,
                str(d.kind), d.blame, refused_by=d.op,
            )  # fmt: skip
        return cls(d.step, d.op, d.op_type, d.tensor, d.details.element, str(d.kind), d.blame)


def blame_from(wrong: dict[str, bool], agree_with_each_other: bool = False) -> str:
    """Blame from which backends disagree with the contract (`blame_of`); `model` when every
    backend disagrees with it alike.

    Args:
        wrong: backend name -> whether it disagrees with the contract model, for every
            backend checked, in the run's order.
        agree_with_each_other: whether the disagreeing backends report the same thing.
    """
    bad = [name for name, is_wrong in wrong.items() if is_wrong]
    if len(bad) > 1 and len(bad) == len(wrong) and agree_with_each_other:
        return MODEL
    return blame_of(bad, list(wrong))


def blame_of(bad: Collection[str], backends: Sequence[str]) -> str:
    """The blame of a finding that `bad` backends show among those checked: the one
    backend's name; several names comma-separated in the run's order when some but not all
    are wrong (`webgpu,webgpu-dawn`: every WebGPU implementation, not Vulkan: the WGSL
    kernel or the runtime, rather than one implementation); `both` when every backend
    checked is wrong, however many there are, so that such a bug keeps its key when another
    implementation joins the run."""
    named = set(bad)
    if len(named) > 1 and named >= set(backends):
        return BOTH
    return ",".join(b for b in backends if b in named) or ",".join(sorted(named)) or BOTH


def blame_meaning(blame: str, backends: Sequence[str]) -> str:
    """What a blame says about where the bug is, in a run of `backends`, when several WebGPU
    implementations ran (the same WGSL on each); "" otherwise."""
    webgpu = [b for b in backends if runtime_api(b) == "webgpu"]
    named = blamed_backends(blame, backends)
    if len(webgpu) < 2 or not named or not set(named) <= set(webgpu):
        return ""
    if len(named) == 1:
        others = ", ".join(b for b in webgpu if b not in named)
        return (
            f"only {named[0]} shows it; the other WebGPU implementations ({others}) ran the "
            "same WGSL and agree with the contract and the reference: a WGSL portability "
            "difference or a bug of that implementation"
        )
    if set(named) == set(webgpu):
        return (
            "every WebGPU implementation shows it and Vulkan does not: the WGSL kernel or the "
            "WebGPU runtime, not one implementation"
        )
    return f"{' and '.join(named)} show it; {', '.join(set(webgpu) - set(named))} does not"


def blamed_backends(blame: str, backends: Sequence[str]) -> list[str]:
    """The backends a blame names (`both`: all of them; `model`: none)."""
    if blame == BOTH:
        return list(backends)
    if blame == MODEL:
        return []
    return blame.split(",")


def primary(divergences: list[Divergence], op_order: dict[str, int] | None = None) -> Divergence:
    """The divergence that stands for a case: earliest step, most fundamental class, first op."""
    order = op_order or {}
    return min(
        divergences,
        key=lambda d: (d.step, PRIORITY[d.kind], order.get(d.op or "", len(order))),
    )

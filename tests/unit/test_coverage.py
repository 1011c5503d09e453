"""Coverage regimes: tags of live sizes and transitions, and required cells."""

from __future__ import annotations

from harness.check.coverage import MULTIPLES, Coverage, missing_cells, size_regimes, transition
from harness.model import model_dtypes
from harness.ops import MODELS
from harness.run.profiles import PROFILES


def test_size_regimes_name_the_edges() -> None:
    assert size_regimes(1, 16) == {"size=1"}
    assert size_regimes(16, 16) == {"size=max", "size%4=0", "size%8=0"}
    assert size_regimes(63, 100) == {"size=mid", "size%4=-1", "size%8=-1", "size%64=-1"}
    assert size_regimes(65, 100) == {"size=mid", "size%4=+1", "size%8=+1", "size%64=+1"}
    assert size_regimes(2, 100) == {"size=mid"}


def test_transitions() -> None:
    assert [transition(None, 3), transition(3, 4), transition(4, 2), transition(2, 2)] == [
        "step=first",
        "step=grow",
        "step=shrink",
        "step=same",
    ]


def test_missing_cells_are_per_backend() -> None:
    cov = Coverage()
    cov.add("rms_norm", "webgpu", ["size=1"], ["rms_norm_vec4"])
    cov.add("rms_norm", "vulkan", ["size=1", "size=max"], ["rms_norm_vec4"])
    required = {"rms_norm": ("size=1", "size=max", "rms_norm_vec4"), "add": ("add_flat",)}
    assert missing_cells(cov, required, ["webgpu", "vulkan"]) == [
        ("rms_norm", "webgpu", "size=max"),
        ("add", "webgpu", "add_flat"),
        ("add", "vulkan", "add_flat"),
    ]
    merged = Coverage()
    merged.merge(cov.to_json())
    assert merged.to_json() == cov.to_json()


# Tags that `op_regimes` gives any op from its regime size; an op's own `regimes` adds more.
GENERIC_TAGS = {
    "size=1",
    "size=max",
    "size=mid",
    *(f"size%{m}={r}" for m in MULTIPLES for r in ("-1", "0", "+1")),
    *(f"step={t}" for t in ("first", "grow", "shrink", "same")),
}


def test_nightly_requires_every_ops_declared_regimes_and_kernels() -> None:
    """The nightly profile's cells come from the op models: every registered op (a new one
    too) with its declared regimes and every kernel variant, `dtype=float16` for an op with
    f16 kernels, and nothing else."""
    required = PROFILES["nightly"].required_coverage
    assert sorted(required) == sorted(MODELS)
    for op, model in MODELS.items():
        half = ("dtype=float16",) if "float16" in model_dtypes(op) and model.kernels else ()
        assert required[op] == (*model.required_regimes, *model.kernels, *half), op
        # A regime only the op's own `regimes` can name needs that method (no typo'd tag).
        own = set(model.required_regimes) - GENERIC_TAGS
        assert not own or hasattr(model, "regimes"), f"{op}: no model tags {sorted(own)}"
        assert "size=1" in model.required_regimes, f"{op}: live size 1 is every op's edge"

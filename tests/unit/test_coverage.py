"""Coverage regimes: tags of live sizes and transitions, and required cells."""

from __future__ import annotations

from harness.check.coverage import Coverage, missing_cells, size_regimes, transition


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

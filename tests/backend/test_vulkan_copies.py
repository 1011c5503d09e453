"""The Vulkan runtime's staging copies: nearby ranges of a graph's block are copied as one
region (fewer regions for the validation layer to check), with the same bytes as one region
per range."""

from __future__ import annotations

import numpy as np
import pytest

import vulkan_ref.recording
import vulkan_ref.staging
from graph_format import Runtime
from vulkan_ref.staging import coalesce

pytestmark = pytest.mark.gpu


def test_coalesce_merges_ranges_at_most_gap_apart() -> None:
    pieces = [(300, 20), (0, 16), (16, 8), (40, 8), (1000, 4)]
    runs, at = coalesce(pieces, 16)
    assert runs == [(0, 48), (300, 320), (1000, 1004)]
    assert at == [(1, 0), (0, 0), (0, 16), (0, 40), (2, 0)]
    # Gap 0 merges only touching ranges: nothing between them is copied.
    runs, at = coalesce(pieces, 0)
    assert runs == [(0, 24), (40, 48), (300, 320), (1000, 1004)]
    assert at[2] == (0, 16)


def test_merged_copies_read_and_write_the_same_bytes(
    vulkan: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.diff.test_decoder import golden_decoder

    case, _ = golden_decoder()
    regions: list[int] = []
    original = vulkan_ref.recording.copy_regions

    def counted(copies: list[tuple[int, int, int]]) -> object:
        regions.append(len(copies))
        return original(copies)

    monkeypatch.setattr(vulkan_ref.recording, "copy_regions", counted)

    def run(gap: int) -> tuple[list[dict[str, bytes]], list[int]]:
        monkeypatch.setattr(vulkan_ref.staging, "_MERGE_GAP", gap)
        regions.clear()
        graph = vulkan.load(case.graph)
        names = sorted(graph.tensors)  # type: ignore[attr-defined]
        steps = []
        try:
            for step in case.steps:
                result = graph.execute(step, read_raw=names)
                assert not result.guard_writes and not result.validation_messages
                steps.append({n: result.raw[n].tobytes() for n in names})
        finally:
            graph.close()
        return steps, list(regions)

    merged, merged_regions = run(vulkan_ref.staging._MERGE_GAP)
    separate, separate_regions = run(-1)
    assert merged == separate
    # Per step: the uploads (the first submit: every constant and guard), then the reads.
    assert sum(merged_regions) * 4 < sum(separate_regions), (merged_regions, separate_regions)
    assert np.all(np.array(merged_regions) <= np.array(separate_regions))

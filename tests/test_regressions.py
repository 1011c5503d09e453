"""Permanent regression tests: every repro bundle kept under tests/regressions/ is replayed.

`parity regress BUNDLE` copies a bundle here with a `regression.json` saying what to expect:
`fixed` (default) asserts the case now runs on both backends without any divergence, with
the working tree's shaders; `failing` asserts that a known bug still shows the same bug key
(harness.check.divergence.BugKey), so that fixing it makes the test fail until the entry is
switched to `fixed`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph_format import Runtime
from harness.run.bundle import load_bundle, replay

pytestmark = pytest.mark.gpu

REGRESSIONS = Path(__file__).parent / "regressions"
BUNDLES = sorted(p.parent for p in REGRESSIONS.glob("*/regression.json"))


@pytest.mark.parametrize("folder", BUNDLES, ids=[p.name for p in BUNDLES])
def test_regression_bundle(folder: Path, runtimes: list[Runtime]) -> None:
    expect = json.loads((folder / "regression.json").read_text())["expect"]
    bundle = load_bundle(folder)
    # A regression kept from a `--kernels` run may carry adapters: the repo holds it, so they run.
    outcome = replay(bundle, shaders="worktree", runtimes=runtimes, allow_adapters=True)
    if expect == "fixed":
        assert outcome.status == "fixed", f"{folder.name} diverges again: {outcome.divergences[:5]}"
    else:
        assert outcome.status == "still_failing", (
            f"{folder.name} no longer shows {sorted(outcome.expected)} (now {outcome.status}): "
            "if the bug is fixed, set expect to 'fixed' in its regression.json"
        )

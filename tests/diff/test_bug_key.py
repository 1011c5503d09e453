"""One bug key (harness.check.divergence.BugKey) for shrinking, grouping, replay and expectations.

A planted bug is run once; the key of its primary divergence must be the very key that
each consumer uses: the exception class Hypothesis shrinks by, the case record and its
finding's name, the summary's group, a bundle's replay verdict, and the expectation entry
that covers it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.check.divergence import BugKey
from harness.check.verdict import DivergenceFound, assert_parity, exception_for
from harness.run.bundle import load_bundle, replay, write_bundle
from harness.run.expectations import Expectation
from harness.run.findings import finding_id
from harness.run.plan import Chunk
from harness.run.records import ChunkFinding, ChunkRecord, RunMeta, case_record
from harness.run.summary import summarize
from tests.diff.test_planted_bugs import rms_norm_case
from tests.plants import glsl_substitution

pytestmark = pytest.mark.gpu


def test_shrinking_grouping_replay_and_expectations_share_one_key(tmp_path: Path) -> None:
    case = rms_norm_case()
    with glsl_substitution("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd") as runner:
        result = runner.run(case)
        main = result.primary()
        assert main is not None
        key = main.bug_key()
        assert isinstance(key, BugKey)
        assert (key.op_type, key.kind, key.blame) == ("rms_norm", "numeric", "vulkan")
        assert key.band and str(key) == f"rms_norm|numeric|vulkan|{key.band}"

        # Shrinking: the exception Hypothesis tells failures apart by stands for the key.
        with pytest.raises(DivergenceFound) as raised:
            assert_parity(result)
        assert type(raised.value) is exception_for(key) and type(raised.value).bug == key

        # Records and findings: the case's key and its finding's name.
        record = case_record(case, result, chunk="rms_norm/0", family="rms_norm", seq=0)
        assert record.bug == key and record.divergences[0].bug == key
        bundle_id = finding_id(record.case_id, record.bug)

        # Grouping: the summary groups by it and names the finding by it.
        chunk = ChunkRecord(
            "rms_norm/0", "complete", [ChunkFinding(record.case_id, 1, None, bug=record.bug)]
        )
        run = RunMeta(
            families=["rms_norm"],
            plan=[Chunk("rms_norm", 0, 1, 1)],
            chunks=["rms_norm/0"],
            adapters=runner.adapters,
        )
        summary = summarize([run], [[record, chunk]])
        assert [g.bug for g in summary.bugs] == [key]
        assert [(f.bug, f.id) for f in summary.findings] == [(key, bundle_id)]

        # Replay: the bundle's key, found again.
        folder = write_bundle(tmp_path / "bundles" / bundle_id, case, record, run=run)
        bundle = load_bundle(folder)
        assert bundle.bug == key
        outcome = replay(bundle, runtimes=runner.runtimes)
        assert outcome.status == "still_failing" and outcome.expected == key
        assert key in outcome.found

    # Expectations: an entry naming the key's fields covers it, and only it.
    entry = Expectation("e", "*", "*", "r", "l", op=key.op_type, kind=key.kind, blame=key.blame)
    assert entry.covers(key) and entry.matches(record.divergences[0], "rms_norm", runner.adapters)
    banded = Expectation("e", "*", "*", "r", "l", kind="numeric", band=key.band)
    other = "x1" if key.band != "x1" else "x10"
    assert banded.covers(key) and not banded.covers(BugKey(key.op_type, key.kind, key.blame, other))

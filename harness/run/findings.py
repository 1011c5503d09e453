"""What makes two findings the same finding: a case and its bug key.

Hypothesis shrinks a bug to the same minimal case from many chunks (a planted rms_norm bug
shrinks to the same 1x1 case from every chunk of its family). Those are one finding: the
same case (`harness.run.records.case_id`, a content hash) showing the same bug (its
`harness.check.divergence.BugKey`, the key the search shrank it by: `CaseRecord.bug`).
`finding_id` names it, and the name is used for its bundle folder (`bundles/<finding id>/`),
its failure page (`failures/<finding id>.html`) and its entry in `summary.json`, so chunks
that find it, in one process or in several writing to one run folder, all land on the same
bundle and the summary groups their chunk records into one finding.

A case may show several bugs (a Vulkan rms_norm and, downstream, a WebGPU silu); it stands
for the key of its primary one, and Hypothesis can shrink it by that key only. Every other
key of its unexpected divergences (`divergent_keys`) is a finding all the same: where no
case of a chunk stood for it, the chunk bundles the smallest case that showed it beside
another, as found (`ChunkFinding.beside` names the key that case stood for).

Cases are counted the same way everywhere (the CLI's lines, `summary.json`, the HTML): a
case is a distinct `case_id` (per device, when shards of several devices are merged), however
many times Hypothesis ran it; it is divergent when any run of it diverged.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from harness.check.divergence import BugKey
from harness.run.records import DivergenceRecord, Totals, primary_bug

# A case's severity: what counting it as a case means for the totals.
CLEAN, KNOWN, UNEXPECTED = 0, 1, 2


def finding_id(case_id: str, bug: BugKey | None) -> str:
    """The name of a finding and of its bundle folder: `<op type>-<case id>-<key hash>`.

    The op type is only there for people reading a folder listing; the case id and a hash
    of the bug key's text make the name unique and the same in any process.
    """
    key = str(bug) if bug is not None else ""
    op = bug.op_type if bug is not None else ""
    prefix = re.sub(r"[^A-Za-z0-9_]+", "_", op).strip("_") or "case"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{prefix}-{case_id}-{digest}"


def divergent_keys(divergences: Sequence[DivergenceRecord]) -> list[BugKey]:
    """The distinct keys of a case's unexpected divergences, the one it stands for
    (`primary_bug`) first, the others in the order they were found."""
    keys = list(dict.fromkeys(d.bug for d in divergences if d.expected is None))
    main = primary_bug(divergences)
    return sorted(keys, key=lambda k: k != main)


def severity(divergences: Sequence[DivergenceRecord]) -> int:
    """CLEAN (no divergence), KNOWN (only expected ones) or UNEXPECTED."""
    if not divergences:
        return CLEAN
    return UNEXPECTED if any(d.expected is None for d in divergences) else KNOWN


def totals_text(totals: Totals) -> str:
    """The counts every summary line prints (`parity run`'s last line, `parity report`)."""
    return (
        f"{totals.cases} cases, {totals.steps} steps, {totals.divergent_cases} "
        f"divergent cases ({totals.unexpected_cases} unexpected, {totals.known_cases} "
        f"known), {totals.findings} findings"
    )

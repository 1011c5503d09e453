"""What makes two findings the same finding: the one definition of a bug's key.

Hypothesis shrinks a bug to the same minimal case from many chunks (a planted rms_norm bug
shrinks to the same 1x1 case from every chunk of its family). Those are one finding: the
same case (`harness.run.records.case_id`, a content hash) failing the same way (the distinct
signatures `op_type|kind|blame|regime` of its divergences). `finding_id` names it, and the
name is used for its bundle folder (`bundles/<finding id>/`), its failure page
(`failures/<finding id>.html`) and its entry in `summary.json`, so chunks that find it, in
one process or in several writing to one run folder, all land on the same bundle and the
summary groups their chunk records into one finding.

Cases are counted the same way everywhere (the CLI's lines, `summary.json`, the HTML): a
case is a distinct `case_id` (per device, when shards of several devices are merged), however
many times Hypothesis ran it; it is divergent when any run of it diverged.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

# A case's severity: what counting it as a case means for the totals.
CLEAN, KNOWN, UNEXPECTED = 0, 1, 2


def record_signatures(record: Mapping[str, Any]) -> list[str]:
    """The sorted distinct signatures (`op_type|kind|blame|regime`) of a case record."""
    return sorted({str(d["signature"]) for d in record.get("divergences", [])})


def bug_key(signatures: Iterable[str]) -> str:
    """The bug a finding shows, besides its case: its sorted distinct signatures, joined."""
    return ",".join(sorted(set(signatures)))


def finding_id(case_id: str, signatures: Iterable[str]) -> str:
    """The name of a finding and of its bundle folder: `<op type>-<case id>-<key hash>`.

    The op type (of the first signature) is only there for people reading a folder listing;
    the case id and a hash of `bug_key` make the name unique and the same in any process.
    """
    key = bug_key(signatures)
    op = key.split("|", 1)[0] if key else ""
    prefix = re.sub(r"[^A-Za-z0-9_]+", "_", op).strip("_") or "case"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{prefix}-{case_id}-{digest}"


def severity(record: Mapping[str, Any]) -> int:
    """CLEAN (no divergence), KNOWN (only expected ones) or UNEXPECTED."""
    divergences = record.get("divergences", [])
    if not divergences:
        return CLEAN
    return UNEXPECTED if any(d.get("expected") is None for d in divergences) else KNOWN


def totals_text(totals: Mapping[str, Any]) -> str:
    """The counts every summary line prints (`parity run`'s last line, `parity report`).

    Args:
        totals: `cases`, `steps`, `divergent_cases`, `unexpected_cases`, `known_cases` and
            `findings`, as in summary.json's `totals`.
    """
    return (
        f"{totals['cases']} cases, {totals['steps']} steps, {totals['divergent_cases']} "
        f"divergent cases ({totals['unexpected_cases']} unexpected, {totals['known_cases']} "
        f"known), {totals['findings']} findings"
    )

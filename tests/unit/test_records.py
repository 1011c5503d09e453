"""Typed records: every file a run writes reads back as the same dataclasses; a malformed one
is named by file and line; version 1 records and bundles still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.check.divergence import BugKey
from harness.run.bundle import load_bundle
from harness.run.expectations import Expectation
from harness.run.plan import Chunk, Shard
from harness.run.records import (
    Budgets,
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    MergeMeta,
    RecordError,
    RecordWriter,
    RunMeta,
    Summary,
    from_json,
    plain,
    read_bundle_doc,
    read_records,
    read_run_meta,
    record_from_json,
    write_json,
)
from tests.unit.test_report import _case, _divergence, _run_meta, _summarize

KEPT = Path(__file__).resolve().parents[1] / "regressions" / "rms-norm-drops-weight"


def _records() -> list[dict[str, Any]]:
    d = _divergence()
    return [
        _case("rms_norm/0", "a", []),
        _case("rms_norm/0", "b", [d, _divergence(kind="dispatch", expected="known-1", step=1)]),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1.5,
         "findings": [{"case_id": "b", "bundle": "bundles/x", "shrunk": True, "unexpected": 1,
                       "bug": d["bug"], "repeatability": "deterministic"}]},
    ]  # fmt: skip


def test_records_round_trip(tmp_path: Path) -> None:
    typed = [record_from_json(r) for r in _records()]
    writer = RecordWriter(tmp_path / "cases.jsonl")
    for record in typed:
        writer.write(record)
    writer.close()
    again = list(read_records(tmp_path / "cases.jsonl"))
    assert again == typed
    case = again[1]
    assert isinstance(case, CaseRecord)
    assert case.bug == BugKey("rms_norm", "numeric", "webgpu", "x10")  # the unexpected one
    assert case.divergences[1].bug == BugKey("rms_norm", "dispatch", "webgpu")
    line = json.loads((tmp_path / "cases.jsonl").read_text().splitlines()[1])
    assert (line["v"], line["bug"], line["ok"]) == (2, "rms_norm|numeric|webgpu|x10", False)
    assert line["divergences"][0]["bug"] == "rms_norm|numeric|webgpu|x10"
    chunk = again[2]
    assert isinstance(chunk, ChunkRecord) and chunk.family == "rms_norm"
    assert chunk.findings == [
        ChunkFinding("b", 1, "bundles/x", shrunk=True, bug=case.bug, repeatability="deterministic")
    ]


def test_run_meta_and_summary_round_trip(tmp_path: Path) -> None:
    meta = RunMeta(
        profile="pr",
        seed=3,
        families=["rms_norm"],
        budgets=Budgets(4, 2, 60.0),
        shard=Shard(2, 3),
        plan=[Chunk("rms_norm", 0, 11, 2, 4)],
        chunks=["rms_norm/0"],
        expectations=[Expectation("e", "*", "*", "r", "l", op="add", band="x1000")],
    )
    write_json(tmp_path / "run.json", meta)
    assert read_run_meta(tmp_path / "run.json") == meta
    merged = MergeMeta(runs=[meta, meta], sources=["a", "b"])
    write_json(tmp_path / "merged.json", merged)
    assert read_run_meta(tmp_path / "merged.json") == merged
    summary = _summarize([_run_meta(["rms_norm/0"])], [_records()])[1]
    assert from_json(Summary, plain(summary)) == summary


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (lambda r: r["divergences"][0].update(bug=3), "field 'bug'"),  # ignored: derived
        (lambda r: r["divergences"][0].update(step="0"), "field divergences[0].'step' must be"),
        (lambda r: r["divergences"][0].update(factor="big"), "field divergences[0].'factor'"),
        (lambda r: r.update(timeline={}), "field 'timeline' must be a list"),
        (lambda r: r.update(meta=[]), "field 'meta' must be an object"),
        (lambda r: r.update(ops=["add", 3]), "field ops[1] must be a string, got an integer 3"),
        (
            lambda r: r["timeline"][0]["model"]["dispatches"][0].pop("kernel"),
            "field timeline[0].model.dispatches[0].'kernel' is missing",
        ),
    ],
)  # fmt: skip
def test_malformed_case_records_name_file_line_and_field(
    tmp_path: Path, edit: Any, what: str
) -> None:
    records = _records()
    edit(records[1])
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    if what == "field 'bug'":  # a record's bug text is derived, never trusted: it reads
        assert len(list(read_records(path))) == 3
        return
    with pytest.raises(RecordError) as info:
        list(read_records(path))
    assert str(info.value).startswith(f"{path}:2: case record: {what}"), info.value


def test_malformed_chunk_findings_and_run_json_are_named(tmp_path: Path) -> None:
    records = _records()
    records[2]["findings"][0]["bug"] = "not a key"
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(RecordError, match=r":3: chunk record: field findings\[0\].'bug' must be"):
        list(read_records(path))
    meta = _run_meta(["rms_norm/0"])
    meta["shard"] = {"index": "1", "count": 1}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    with pytest.raises(RecordError, match=r"run.json: field shard.'index' must be an integer"):
        read_run_meta(tmp_path / "run.json")


def test_version_1_records_still_read_and_name_their_bug(tmp_path: Path) -> None:
    """Records of version 1 carried `signature` strings (op|kind|blame|regime), and chunk
    findings `signatures`: the bug comes from the divergences' fields."""
    d = _divergence(factor=5000.0)
    del d["bug"]
    d["signature"] = "rms_norm|numeric|webgpu|rows<max"
    old = [
        {**_case("rms_norm/0", "b", [d]), "v": 1},
        {"record": "chunk", "v": 1, "chunk": "rms_norm/0", "status": "complete",
         "duration_s": 1, "findings": [{"case_id": "b", "bundle": None, "shrunk": True,
                                        "unexpected": 1, "signatures": [d["signature"]]}]},
    ]  # fmt: skip
    s = _summarize([_run_meta(["rms_norm/0"])], [old])[0]
    (finding,) = s["findings"]
    assert finding["bug"] == "rms_norm|numeric|webgpu|x1000"
    assert s["bugs"][0]["bug"] == finding["bug"] and s["bugs"][0]["findings"] == 1


def test_a_version_1_bundle_still_loads_with_its_bug() -> None:
    doc = read_bundle_doc(KEPT / "bundle.json")
    assert doc.format == "parity-bundle/1"
    assert doc.bug == BugKey("rms_norm", "numeric", "webgpu", "x1000")
    assert load_bundle(KEPT).bug == doc.bug
    assert doc.run.budgets == Budgets(6, 10, None) and doc.run.shard == Shard(1, 1)


def test_an_unknown_bundle_format_is_named(tmp_path: Path) -> None:
    doc = json.loads((KEPT / "bundle.json").read_text())
    doc["format"] = "parity-bundle/9"
    (tmp_path / "bundle.json").write_text(json.dumps(doc))
    with pytest.raises(RecordError, match=r"bundle.json: format must be one of"):
        read_bundle_doc(tmp_path / "bundle.json")

"""Typed records: every file a run writes reads back as the same dataclasses; a malformed one
is named by file and line; version 1 records and bundles still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.check.divergence import (
    AsymmetryDetails,
    BitDetails,
    BitPair,
    BugKey,
    BuildErrorDetails,
    CanaryDetails,
    CrashDetails,
    CurDimsDetails,
    DispatchDetails,
    Divergence,
    FirstDivergent,
    GridDetails,
    Kind,
    LoggedDispatch,
    NumericDetails,
    StaleReadDetails,
    StateDetails,
    Upstream,
    ValidationDetails,
)
from harness.check.repeatability import Repeatability
from harness.run.bundle import load_bundle
from harness.run.expectations import Expectation
from harness.run.plan import Chunk, Shard
from harness.run.records import (
    Budgets,
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    EvidenceElement,
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
    record_line,
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


# ---------------------------------------------------------------------------- typed payloads

# One divergence of every kind that carries details, as the oracles make them.
TYPED_DETAILS = {
    "numeric": NumericDetails("op", [1, 2], 0.5),
    "numeric_suspect": NumericDetails("op", [0], 1e-6, hard_utilization=0.2,
                                      statistical_utilization=3.0),
    "bit_mismatch": BitDetails(worst_index=7, pairs=[BitPair(["webgpu", "vulkan"], 3, 0, 2, 7,
                                                             ["rms_norm"])]),
    "canary_write": CanaryDetails(4, first_element=12, elements=[12, 13], live_numel=12,
                                  max_numel=64),
    "stale_read": StaleReadDetails(2, 5, [5, 6], [["b", 1]]),
    "dispatch": DispatchDetails(
        [LoggedDispatch("add", "add_flat", [64, 1, 1], [1, 1, 1], True)],
        {"webgpu": [LoggedDispatch("add", "add_flat", [64, 1, 1], [2, 1, 1], True)]},
        {"webgpu": []},
    ),
    "cur_dims": CurDimsDetails([2, 6], {"webgpu": [4, 6], "vulkan": [2, 6]}),
    "error_asymmetry": AsymmetryDetails(
        key=["InputError", "view", "numel"], error="InputError: no",
        upstream=Upstream("rows", "sym_size", "rows.out", 2, 4),
    ),
    "build_error": BuildErrorDetails(kernel="add_flat", shader="add.wgsl", compiler="error: x"),
    "crash": CrashDetails(messages=["device lost"]),
    "state_after_reject": StateDetails(["x"]),
    "physical_grid": GridDetails([70000, 1, 1], [70000, 1, 1]),
    "validation": ValidationDetails("VUID-1"),
}  # fmt: skip


def test_every_kind_s_details_round_trip_typed(tmp_path: Path) -> None:
    """What a divergence carries reads back as its kind's class (`DETAILS`), attribute for
    attribute, through cases.jsonl; what is not set is not written."""
    assert set(TYPED_DETAILS) | {"nan_inf", "degenerate"} == {str(k) for k in Kind}
    divergences = [
        _divergence(kind=kind, details=plain(details)) for kind, details in TYPED_DETAILS.items()
    ]
    writer = RecordWriter(tmp_path / "cases.jsonl")
    writer.write(record_from_json(_case("rms_norm/0", "c", divergences)))
    writer.close()
    (case,) = read_records(tmp_path / "cases.jsonl")
    assert isinstance(case, CaseRecord)
    assert {d.kind: d.details for d in case.divergences} == TYPED_DETAILS
    line = json.loads((tmp_path / "cases.jsonl").read_text())
    assert line["divergences"][0]["details"] == {
        "scope": "op", "worst_index": [1, 2], "max_abs_error": 0.5
    }  # fmt: skip


def test_first_divergent_and_repeatability_round_trip_typed(tmp_path: Path) -> None:
    """A case's first divergent op and repeatability are records of their own, written as
    before (`class`, not `kind`), and old records' plain objects read as them."""
    record = _case("rms_norm/0", "c", [_divergence()])
    record["first_divergent"] = {"step": 0, "op": "rows", "op_type": "sym_size",
                                 "tensor": "rows.out", "element": None, "kind": "error_asymmetry",
                                 "blame": "webgpu", "refused_by": "view"}  # fmt: skip
    record["repeatability"] = {"class": "deterministic", "hashes": {"webgpu": ["a", "a"]}}
    typed = record_from_json(record)
    assert isinstance(typed, CaseRecord)
    assert typed.first_divergent == FirstDivergent(
        0, "rows", "sym_size", "rows.out", None, "error_asymmetry", "webgpu", refused_by="view"
    )
    assert typed.repeatability == Repeatability("deterministic", {"webgpu": ["a", "a"]})
    again = json.loads(record_line(typed))
    assert again["repeatability"] == record["repeatability"]
    assert record_from_json(again) == typed


def test_a_kept_bundle_reads_typed() -> None:
    """A bundle written before the payloads were typed (tests/regressions) reads as them."""
    doc = read_bundle_doc(KEPT / "bundle.json")
    (d,) = [d for d in doc.divergences if d.kind == "numeric"][:1]
    assert isinstance(d.details, NumericDetails) and d.details.scope in ("op", "graph")
    assert d.details.element == d.details.worst_index is not None
    assert all(isinstance(e, EvidenceElement) for e in doc.evidence)


def test_a_divergence_s_details_are_its_kind_s() -> None:
    """No details become the kind's empty ones; another kind's are a harness bug."""
    crash = Divergence(0, Kind.CRASH, "webgpu", "webgpu crashed")
    assert crash.details == CrashDetails() and Divergence(0, Kind.DEGENERATE, "case", "").details
    with pytest.raises(TypeError, match="numeric divergence's details must be NumericDetails"):
        Divergence(0, Kind.NUMERIC, "webgpu", "", details=CrashDetails(stage="x"))

"""Records, plans, expectations, summaries, JUnit and HTML rendering, without a device.

Synthetic records stand in for a run: what the report shows must follow from them alone.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from harness.check.divergence import BugKey
from harness.run.expectations import ExpectationsError, entry_status, load_expectations
from harness.run.findings import finding_id, totals_text
from harness.run.plan import Shard, make_plan, plan_digest, shard_of
from harness.run.records import (
    DivergenceRecord,
    Record,
    RecordError,
    RecordWriter,
    RunMeta,
    from_json,
    plain,
    read_records,
    record_from_json,
    write_json,
)
from harness.run.report import images, render_report
from harness.run.summary import junit_xml, summarize

ADAPTERS = {
    "webgpu": {"adapter": "llvmpipe (LLVM 15)", "driver": "Mesa 22.3.6", "api": "wgpu"},
    "vulkan": {"adapter": "llvmpipe (LLVM 15)", "driver": "0x1", "driver_info": "Mesa 22.3.6"},
}


def _run_meta(chunks: list[str], status: str = "complete", **extra: Any) -> dict[str, Any]:
    plan = [
        {"family": c.split("/")[0], "index": int(c.split("/")[1]), "seed": 1, "max_examples": 2}
        for c in chunks
    ]
    return {
        "format": "parity-run/1",
        "status": status,
        "profile": "pr",
        "seed": 3,
        "families": sorted({c.split("/")[0] for c in chunks}),
        "budgets": {"max_examples": 2, "chunk_examples": 2, "time_budget_s": None},
        "shard": {"index": 1, "count": 1},
        "plan": plan,
        "plan_digest": "x",
        "chunks": chunks,
        "adapters": ADAPTERS,
        "versions": {"python": "3.11"},
        "expectations": [],
        "duration_s": 1.0,
        **extra,
    }


def _divergence(kind: str = "numeric", blame: str = "webgpu", **extra: Any) -> dict[str, Any]:
    d = {
        "step": 0,
        "kind": kind,
        "blame": blame,
        "message": f"{blame}: bad",
        "op": "rms_norm_0",
        "tensor": "rms_norm_0.out",
        "factor": 12.0,
        "details": {"scope": "op", "worst_index": [0, 1]},
        "op_type": "rms_norm",
        "regime": "rows<max",
        "expected": None,
    }
    d.update(extra)
    d["bug"] = str(_bug(d))
    return d


def _bug(d: dict[str, Any]) -> BugKey:
    return from_json(DivergenceRecord, d).bug


def _summarize(metas: list[dict[str, Any]], records: list[list[dict[str, Any]]]) -> Any:
    """The summary of runs given as JSON, as summary.json holds it."""
    typed = [[record_from_json(r) for r in recs] for recs in records]
    summary = summarize([from_json(RunMeta, m) for m in metas], typed)
    return plain(summary), summary, typed


def _typed(records: list[dict[str, Any]]) -> list[Record]:
    return [record_from_json(r) for r in records]


def _case(chunk: str, case_id: str, divergences: list[dict[str, Any]], **extra: Any) -> Any:
    record = {
        "record": "case",
        "chunk": chunk,
        "family": chunk.split("/")[0],
        "seq": 0,
        "case_id": case_id,
        "name": "rms_norm",
        "meta": {},
        "ops": ["rms_norm"],
        "step_shapes": [{"x": [2, 4]}],
        "steps": 1,
        "ok": not divergences,
        "unexpected": sum(1 for d in divergences if d["expected"] is None),
        "max_utilization": "inf" if divergences else 0.5,
        "duration_s": 0.01,
        "divergences": divergences,
        "coverage": {"rms_norm": {"webgpu": {"regimes": [], "variants": ["rms_norm"]}}},
    }
    if divergences:
        record["timeline"] = [
            {
                "index": 0,
                "inputs": {"x": [2, 4]},
                "model": {
                    "error": None,
                    "cur_dims": {"x": [2, 4], "rms_norm_0.out": [2, 4]},
                    "dispatches": [
                        {"op": "rms_norm_0", "kernel": "rms_norm", "wg": [64, 1, 1],
                         "count": [2, 1, 1], "ran": True}
                    ],
                },
                "backends": {
                    "webgpu": {
                        "error": None,
                        "cur_dims": {"x": [2, 4], "rms_norm_0.out": [8, 4]},
                        "dispatches": [
                            {"op": "rms_norm_0", "kernel": "rms_norm", "wg": [64, 1, 1],
                             "count": [8, 1, 1], "ran": True, "grid": [8, 1, 1]}
                        ],
                        "utilization": {"out": "inf"},
                        "validation_messages": [],
                    },
                    "vulkan": {
                        "error": None,
                        "cur_dims": {"x": [2, 4], "rms_norm_0.out": [2, 4]},
                        "dispatches": [
                            {"op": "rms_norm_0", "kernel": "rms_norm", "wg": [64, 1, 1],
                             "count": [2, 1, 1], "ran": True, "grid": [2, 1, 1]}
                        ],
                        "utilization": {"out": 0.1},
                        "validation_messages": [],
                    },
                },
                "divergences": divergences,
            }
        ]  # fmt: skip
    record.update(extra)
    return record


def _write_run(folder: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "run.json", meta)
    writer = RecordWriter(folder / "cases.jsonl")
    for r in _typed(records):
        writer.write(r)
    writer.close()
    return folder


# ---------------------------------------------------------------------------- records


def test_plain_makes_json_safe_data() -> None:
    data = plain({"a": np.float32(1.5), "b": np.int64(3), "c": (1, 2), "d": float("inf"),
                  "e": np.array([1.0, float("nan")]), "f": np.bool_(True)})  # fmt: skip
    assert data == {"a": 1.5, "b": 3, "c": [1, 2], "d": "inf", "e": [1.0, "nan"], "f": True}
    json.dumps(data, allow_nan=False)


def test_read_records_skips_only_a_cut_last_line(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    good = json.dumps(_case("rms_norm/0", "a", []))
    path.write_text(good + "\n" + good[:30])
    assert len(list(read_records(path))) == 1
    path.write_text(good + "\n" + good[:30] + "\n" + good + "\n")
    with pytest.raises(RecordError, match=r"cases.jsonl:2: corrupt record"):
        list(read_records(path))
    path.write_text("[1, 2]\n")
    with pytest.raises(RecordError, match=r':1: expected a JSON object with "record"'):
        list(read_records(path))


# ---------------------------------------------------------------------------- plan


def test_plan_is_deterministic_and_shards_partition_it() -> None:
    plan = make_plan(["rms_norm", "add"], seed=5, max_examples=25, chunk_examples=10)
    # The families interleave chunk by chunk, so a time budget gives each its share.
    assert [c.id for c in plan] == [f"{f}/{i}" for i in range(3) for f in ("rms_norm", "add")]
    assert [c.max_examples for c in plan if c.family == "rms_norm"] == [10, 10, 5]
    assert plan == make_plan(["rms_norm", "add"], seed=5, max_examples=25, chunk_examples=10)
    assert (
        plan[0].seed != make_plan(["rms_norm"], seed=6, max_examples=25, chunk_examples=10)[0].seed
    )
    # A chunk's seed depends on (seed, family, index) only, not on the other families.
    assert plan[1].seed == make_plan(["add"], 5, 25, 10)[0].seed
    shards = [shard_of(plan, Shard(i, 4)) for i in range(1, 5)]
    assert sorted(c.id for s in shards for c in s) == sorted(c.id for c in plan)
    assert plan_digest(plan) != plan_digest(plan[:-1])
    for bad in ("0/2", "3/2", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match="I/N"):
            Shard.parse(bad)


# ---------------------------------------------------------------------------- expectations


def test_expectations_file_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "expectations.toml"
    path.write_text('[[known]]\nid = "a"\ndevice = "*"\ndriver = "*"\nreason = "r"\n')
    with pytest.raises(ExpectationsError, match=r"entry 1: missing \['link'\]"):
        load_expectations(path)
    path.write_text(
        '[[known]]\nid = "a"\ndevice = "*"\ndriver = "*"\nreason = "r"\nlink = "l"\nkind = "nope"\n'
    )
    with pytest.raises(ExpectationsError, match="kind must be one of"):
        load_expectations(path)
    path.write_text("[[known]\n")
    with pytest.raises(ExpectationsError, match="not valid TOML"):
        load_expectations(path)


def test_expectations_match_by_op_class_blame_and_device(tmp_path: Path) -> None:
    path = tmp_path / "expectations.toml"
    path.write_text(
        """
[[known]]
id = "mesa-only"
op = "rms_norm"
kind = "numeric"
blame = "webgpu"
message = "ba+d"
device = "llvmpipe*"
driver = "Mesa 22.*"
reason = "r"
link = "l"
"""
    )
    exp = load_expectations(path)

    def div(**extra: Any) -> DivergenceRecord:
        return from_json(DivergenceRecord, _divergence(**extra))

    assert exp.match(div(), "rms_norm", ADAPTERS) == "mesa-only"
    assert exp.match(div(blame="vulkan"), "rms_norm", ADAPTERS) is None
    assert exp.match(div(kind="dispatch"), "rms_norm", ADAPTERS) is None
    nvidia = {b: {**a, "adapter": "NVIDIA H100"} for b, a in ADAPTERS.items()}
    assert exp.match(div(), "rms_norm", nvidia) is None
    entry = exp.entries[0]
    assert entry_status(entry, 0, [ADAPTERS], {"rms_norm"}, {"rms_norm"}) == "stale"
    assert entry_status(entry, 0, [nvidia], {"rms_norm"}, {"rms_norm"}) == "not_applicable"
    assert entry_status(entry, 0, [ADAPTERS], {"add"}, {"add"}) == "not_exercised"
    assert entry_status(entry, 2, [ADAPTERS], {"rms_norm"}, {"rms_norm"}) == "matched"


# ---------------------------------------------------------------------------- summary


def test_summary_counts_groups_and_finds_provisional_failures() -> None:
    known = _divergence(expected="known-1")
    records = [
        _case("rms_norm/0", "a", []),
        _case("rms_norm/0", "b", [_divergence()]),
        _case("rms_norm/0", "b", [_divergence()]),  # the final replay of the same case
        _case("rms_norm/0", "c", [known]),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1,
         "findings": [{"case_id": "b", "bundle": None, "shrunk": True, "unexpected": 1,
                       "bug": _divergence()["bug"]}]},
        # rms_norm/1 never ended (killed): its smallest divergent case is provisional.
        _case("rms_norm/1", "d", [_divergence()], step_shapes=[{"x": [9, 4]}, {"x": [9, 4]}]),
        _case("rms_norm/1", "e", [_divergence()]),
    ]  # fmt: skip
    meta = _run_meta(["rms_norm/0", "rms_norm/1"], status="running")
    meta["expectations"] = [
        {"id": "known-1", "device": "*", "driver": "*", "reason": "r", "link": "l"}
    ]
    s, typed_summary, typed = _summarize([meta], [records])
    assert s["status"] == "killed" and not s["complete"] and s["exit_status"] == 1
    t = s["totals"]
    assert (t["cases"], t["divergent_cases"], t["unexpected_cases"], t["known_cases"]) == (
        5,
        4,
        3,
        1,
    )
    assert [(f["chunk"], f["case_id"], f["provisional"]) for f in s["findings"]] == [
        ("rms_norm/0", "b", False),
        ("rms_norm/1", "e", True),
    ]
    group = next(g for g in s["bugs"] if g["expected"] is None)
    assert (group["bug"], group["regimes"], group["cases"], group["findings"]) == (
        "rms_norm|numeric|webgpu|x10",
        ["rows<max"],
        3,
        2,
    )
    assert s["expectations"][0]["status"] == "matched"
    assert s["per_family"]["rms_norm"]["chunks"] == {"complete": 1, "missing": 1}
    assert s["coverage"]["rms_norm"]["webgpu"]["variants"] == ["rms_norm"]
    xml = ET.fromstring(junit_xml(typed_summary, typed))
    suite = xml.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "1")


def test_every_key_of_a_case_is_a_finding_the_others_beside_its_own(tmp_path: Path) -> None:
    """Issue 18 item 4: a case stands for its first key; a key that only showed beside it is
    a finding too: the chunk's (bundled as found) and a killed chunk's (provisional, with
    no bundle: the provisional bundle is of the case's own key)."""
    own = _divergence(blame="vulkan")
    other = _divergence(op="silu_1", op_type="silu", tensor="silu_1.out")
    pair = [own, other]
    records = [
        _case("rms_norm/0", "b", pair),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1,
         "findings": [{"case_id": "b", "bundle": None, "shrunk": True, "unexpected": 2,
                       "bug": own["bug"]},
                      {"case_id": "b", "bundle": None, "shrunk": False, "unexpected": 2,
                       "bug": other["bug"], "beside": own["bug"]}]},
        # rms_norm/1 never ended (killed): both keys of its case are provisional findings.
        _case("rms_norm/1", "d", pair, provisional_bundle="bundles/provisional-rms_norm-1-d"),
    ]  # fmt: skip
    meta = _run_meta(["rms_norm/0", "rms_norm/1"], status="running")
    s, _, _ = _summarize([meta], [records])
    assert [
        (f["chunk"], f["bug"], f["provisional"], f["bundle"], f["beside"]) for f in s["findings"]
    ] == [
        ("rms_norm/0", own["bug"], False, None, None),
        ("rms_norm/0", other["bug"], False, None, own["bug"]),
        ("rms_norm/1", own["bug"], True, "bundles/provisional-rms_norm-1-d", None),
        ("rms_norm/1", other["bug"], True, None, own["bug"]),
    ]
    run = _write_run(tmp_path / "run", meta, records)
    render_report(run)
    index = (run / "index.html").read_text()
    assert index.count("as found, beside <code>rms_norm|numeric|vulkan|x10</code>") == 1
    page = (run / "failures" / f"{finding_id('b', _bug(other))}.html").read_text()
    assert 'id="beside"' in page and "rms_norm|numeric|vulkan|x10" in page


def _chunk(chunk: str, *findings: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"record": "chunk", "chunk": chunk, "status": "complete", "duration_s": 1,
            "findings": [{"case_id": c, "bundle": f"bundles/{finding_id(c, _bug(d))}",
                          "shrunk": True, "unexpected": 1, "bug": d["bug"]}
                         for c, d in findings]}  # fmt: skip


def test_chunks_that_shrink_to_the_same_case_and_bug_make_one_finding() -> None:
    d = _divergence()
    other = _divergence(kind="dispatch")
    records = [
        _case("rms_norm/0", "m", [_divergence()]),
        _chunk("rms_norm/0", ("m", d)),
        _case("rms_norm/1", "m", [_divergence()]),
        _chunk("rms_norm/1", ("m", d)),
        _case("rms_norm/2", "m", [_divergence()]),
        _case("rms_norm/2", "n", [other]),
        # The same case with another bug is another finding.
        _chunk("rms_norm/2", ("m", d), ("n", other)),
    ]
    s, typed_summary, typed = _summarize(
        [_run_meta(["rms_norm/0", "rms_norm/1", "rms_norm/2"])], [records]
    )
    assert [(f["case_id"], f["chunks"]) for f in s["findings"]] == [
        ("m", ["rms_norm/0", "rms_norm/1", "rms_norm/2"]),
        ("n", ["rms_norm/2"]),
    ]
    assert [f["id"] for f in s["findings"]] == [
        finding_id("m", _bug(d)),
        finding_id("n", _bug(other)),
    ]
    assert s["totals"]["findings"] == 2
    group = next(g for g in s["bugs"] if g["bug"] == d["bug"])
    assert (group["findings"], group["failures"]) == (1, [finding_id("m", _bug(d))])
    # Every chunk that found it fails in JUnit.
    suite = ET.fromstring(junit_xml(typed_summary, typed)).find("testsuite")
    assert suite is not None and suite.get("failures") == "3"


def test_finding_ids_are_content_addressed() -> None:
    bug = BugKey("rms_norm", "numeric", "webgpu", "x1000")
    a = finding_id("0123456789ab", bug)
    assert a == finding_id("0123456789ab", BugKey.parse("rms_norm|numeric|webgpu|x1000"))
    assert a.startswith("rms_norm-0123456789ab-")
    assert a != finding_id("0123456789ab", BugKey("rms_norm", "numeric", "vulkan", "x1000"))
    assert a != finding_id("0123456789ab", BugKey("rms_norm", "numeric", "webgpu", "x10"))
    assert finding_id("x", None).startswith("case-x-")


def test_counts_are_of_cases_and_agree_everywhere(tmp_path: Path) -> None:
    # One case failing the same check on three steps, run twice by the search (a shrink
    # attempt and the final replay), and reached again by a second chunk.
    steps = [_divergence(step=i) for i in range(3)]
    records = [
        _case("rms_norm/0", "m", steps, steps=3),
        _case("rms_norm/0", "m", steps, steps=3),
        _case("rms_norm/0", "ok", [], steps=2),
        _chunk("rms_norm/0", ("m", steps[0])),
        _case("rms_norm/1", "m", steps, steps=3),
        _case("rms_norm/1", "k", [_divergence(expected="known-1")], steps=1),
        _chunk("rms_norm/1", ("m", steps[0])),
    ]
    meta = _run_meta(["rms_norm/0", "rms_norm/1"])
    meta["expectations"] = [
        {"id": "known-1", "device": "*", "driver": "*", "reason": "r", "link": "l"}
    ]
    run = _write_run(tmp_path / "run", meta, records)
    s = plain(render_report(run))
    t = s["totals"]
    assert (t["cases"], t["steps"], t["divergent_cases"], t["unexpected_cases"]) == (3, 6, 2, 1)
    assert (t["known_cases"], t["divergences"], t["findings"]) == (1, 4, 1)
    group = next(g for g in s["bugs"] if g["expected"] is None)
    assert (group["cases"], group["divergences"], group["findings"]) == (1, 3, 1)
    assert s["per_family"]["rms_norm"]["divergent_cases"] == 2
    assert s["per_op"]["rms_norm"]["cases"] == 3
    index = (run / "index.html").read_text()
    for key in ("cases", "steps", "divergent_cases", "unexpected_cases", "known_cases",
                "divergences", "findings"):  # fmt: skip
        assert f'data-total="{key}">{t[key]}<' in index, key
    assert totals_text(render_report(run).totals) == (
        "3 cases, 6 steps, 2 divergent cases (1 unexpected, 1 known), 1 findings"
    )
    # The case pages list each case once, with the chunks that ran it.
    page = (run / "cases/page-1.html").read_text()
    assert page.count('<td><a href="../failures/') == 1
    assert "<code>rms_norm/0</code> <code>rms_norm/1</code>" in page


def test_report_escapes_names_and_messages_and_highlights_mismatches(tmp_path: Path) -> None:
    evil = '<script>alert("x")</script>'
    d = _divergence(message=evil, tensor=evil)
    records = [
        _case("rms_norm/0", "b", [d]),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1,
         "findings": [{"case_id": "b", "bundle": None, "shrunk": True, "unexpected": 1,
                       "bug": d["bug"]}]},
    ]  # fmt: skip
    meta = _run_meta(["rms_norm/0"])
    meta["expectations"] = [
        {"id": "x", "device": "*", "driver": "*", "reason": evil, "link": evil, "op": "add"}
    ]
    run = _write_run(tmp_path / "run", meta, records)
    summary = render_report(run)
    assert summary.exit_status == 1
    pages = [run / "index.html", *(run / "failures").glob("*.html"), run / "cases/page-1.html"]
    assert len(pages) == 3
    for page in pages:
        html = page.read_text()
        assert "<script>alert" not in html, page
    failure = next((run / "failures").glob("*.html")).read_text()
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in failure
    # The WebGPU cur_dims and dispatch count differ from the model: highlighted.
    assert '<td class="mismatch">[8, 4]</td>' in failure
    assert "rms_norm wg[64, 1, 1] ×[8, 1, 1]" in failure
    assert "Step <b>0</b>, op <code>rms_norm_0</code>" in failure  # first divergent op
    index = (run / "index.html").read_text()
    assert "not exercised" in index  # the entry is for add, which did not run


def test_report_pages_cases_so_the_index_stays_small(tmp_path: Path) -> None:
    records = [_case("rms_norm/0", f"c{i:05d}", []) for i in range(450)]
    records.append({"record": "chunk", "chunk": "rms_norm/0", "status": "complete",
                    "duration_s": 1, "findings": []})  # fmt: skip
    run = _write_run(tmp_path / "run", _run_meta(["rms_norm/0"]), records)
    summary = render_report(run)
    assert summary.exit_status == 0 and summary.totals.cases == 450
    assert sorted(p.name for p in (run / "cases").iterdir()) == [
        "page-1.html",
        "page-2.html",
        "page-3.html",
    ]
    assert "c00449" in (run / "cases/page-3.html").read_text()
    assert "c00001" not in (run / "index.html").read_text()


# ---------------------------------------------------------------------------- images


def _decode_png(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]
        assert zlib.crc32(kind + body) == crc
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    return size[0], size[1], zlib.decompress(idat)


def test_heatmap_png_is_valid_and_pools_large_tensors() -> None:
    util = np.zeros((1000, 300))
    util[999, 299] = 50.0
    util[0, 0] = np.inf
    width, height, raw = _decode_png(images.heatmap(util))
    assert (width, height) == (150, 125)  # pooled to at most 256 x 128
    rows = np.frombuffer(raw, np.uint8).reshape(height, 1 + 3 * width)[:, 1:]
    pixels = rows.reshape(height, width, 3)
    assert tuple(pixels[0, 0]) == (110, 0, 150)  # non-finite survives pooling
    assert tuple(pixels[-1, -1])[1] < 140  # the hot element stays visible
    assert tuple(pixels[60, 60]) == (255, 255, 255)


def test_utilization_treats_nan_policy_like_the_oracle() -> None:
    actual = np.array([1.0, np.nan, np.inf, 2.0])
    reference = np.array([1.0, 1.0, np.inf, 1.0])
    budget = np.array([0.1, 0.1, 0.1, 0.5])
    assert images.utilization(actual, reference, budget).tolist() == [0.0, np.inf, 0.0, 2.0]

"""Records, plans, expectations, summaries, JUnit and HTML rendering, without a device.

Synthetic records stand in for a run: what the report shows must follow from them alone.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import struct
import zlib
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from harness.check.divergence import BugKey
from harness.model.numerics import class_mismatch, compare, utilization_map
from harness.run.cli import _parser
from harness.run.commands import finding_commands, reproduce_commands
from harness.run.expectations import ExpectationsError, entry_status, load_expectations
from harness.run.findings import finding_id, totals_text
from harness.run.plan import Shard, make_plan, plan_digest, shard_of
from harness.run.profiles import quiet_hypothesis
from harness.run.records import (
    Budgets,
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


def test_hypothesis_notes_about_itself_stay_off_the_console(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: a run's console showed Hypothesis's "PLEASE REPORT THIS" slow-shrink notice
    and its large-repr warning. Under `quiet_hypothesis` (what a chunk runs in) the first is
    one log line, the second is dropped; the failure itself and other reports still show."""
    import warnings

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.internal.conjecture import engine
    from hypothesis.reporting import report

    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", 0)  # every shrink is "very slow"

    @settings(
        database=None,
        max_examples=20,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.just(b"\x01" * 40_000), st.integers())  # its repr: 160 kB
    def fails(blob: bytes, n: int) -> None:
        assert n < 5

    logged: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_hypothesis(logged.append, "c/0"):
            with pytest.raises(AssertionError):
                fails()
            report("another note")
    out, err = capsys.readouterr()
    assert "PLEASE REPORT" not in out + err and not any(
        "overly large repr" in str(w.message) for w in caught
    ), (out, err, [str(w.message) for w in caught])
    assert "another note" in out
    (line,) = logged
    assert line.startswith("parity: c/0: Hypothesis stopped shrinking")


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


@pytest.mark.parametrize(
    ("key", "value", "hint"),
    [("op", "ad", "did you mean 'add'?"), ("family", "rms_nrom", "did you mean 'rms_norm'?")],
)
def test_an_expectation_naming_no_op_or_family_is_refused_with_its_line(
    tmp_path: Path, key: str, value: str, hint: str
) -> None:
    """Issue 18: `op = "ad"` was accepted (and then matched nothing, silently)."""
    path = tmp_path / "expectations.toml"
    entry = 'id = "{}"\ndevice = "*"\ndriver = "*"\nreason = "r"\nlink = "l"\n'
    path.write_text(
        "# known divergences\n\n[[known]]\n"
        + entry.format("a")
        + 'op = "add"\n\n[[known]]\n'
        + entry.format("b")
        + f'{key} = "{value}"\n'
    )
    with pytest.raises(ExpectationsError) as info:
        load_expectations(path)
    message = str(info.value)
    assert message.startswith(f"{path}:17: [[known]] entry 2 ('b'): {key} {value!r} is not ")
    assert hint in message and "\n" not in message, message


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
    assert utilization_map(actual, reference, budget).tolist() == [0.0, np.inf, 0.0, 2.0]


def test_the_drawn_utilization_peaks_where_the_oracle_s_does() -> None:
    """The heatmap's per-element ratio, over the elements compared by value, has the
    maximum and the place `numerics.compare` gives, whatever the budgets (zero, negative,
    NaN) and values (non-finite on either side)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        reference = rng.standard_normal(24)
        actual = reference + rng.standard_normal(24) * 10.0 ** rng.integers(-6, 0)
        budget = np.abs(rng.standard_normal(24)) * 1e-3
        for array, specials in ((actual, (np.nan, np.inf)), (budget, (0.0, -1.0, np.nan))):
            at = rng.integers(0, 24, rng.integers(0, 4))
            array[at] = rng.choice(specials, at.size)
        reference[rng.integers(0, 24, rng.integers(0, 2))] = np.inf
        drawn = utilization_map(actual, reference, budget)
        judged = compare(actual, reference, budget)
        by_value = ~class_mismatch(actual, reference)
        assert np.max(drawn[by_value], initial=0.0) == judged.utilization
        assert int(np.sum(~by_value)) == judged.nan_mismatch
        if judged.worst_index is not None and judged.utilization > 0:
            assert drawn[judged.worst_index] == judged.utilization


# ---------------------------------------------------------------------------- commands


def _parsed(command: str) -> Any:
    """A printed `parity run ...` command, as the CLI's own parser reads it."""
    words = shlex.split(command)
    assert words[:2] == ["parity", "run"], command
    assert not any(Path(w).is_absolute() for w in words), command
    return _parser()[0].parse_args(words[1:])


def test_rerun_commands_carry_every_option_that_shaped_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    given = {name: tmp_path / name for name in ("my wgsl", "glsl2", "kern", "db", "exp.toml")}
    run = RunMeta(
        profile="pr",
        seed=5,
        families=["rms_norm", "view"],
        budgets=Budgets(40, 10, 30.0),
        shard=Shard(2, 3),
        database=str(given["db"]),
        expectations_file=str(given["exp.toml"]),
        shader_overrides={"webgpu": str(given["my wgsl"]), "vulkan": str(given["glsl2"])},
        kernels=str(given["kern"] / "kernels.toml"),
        max_workgroups_per_dim=7,
    )

    def at(arg: str) -> Path:  # a path the command names, from the run folder it runs in
        return (run_dir / arg).resolve()

    (whole,) = reproduce_commands([run], run_dir)
    args = _parsed(whole)
    assert (args.families, args.profile, args.seed) == ("rms_norm,view", "pr", 5)
    assert (args.max_examples, args.chunk_examples, args.time_budget) == (40, 10, 30.0)
    assert (args.shard, args.max_workgroups_per_dim, args.out) == ("2/3", 7, "rerun")
    assert at(args.wgsl_dir) == given["my wgsl"] and at(args.glsl_dir) == given["glsl2"]
    assert at(args.kernels) == given["kern"] and at(args.database) == given["db"]
    assert at(args.expectations) == given["exp.toml"] and not args.no_database
    # A finding's family alone, to its end, from its seed: no shard, time budget or database.
    rerun = _parsed(finding_commands("bundles/b", run, run_dir, "view")[-1])
    assert (rerun.families, rerun.seed, rerun.max_examples, rerun.chunk_examples) == (
        "view",
        5,
        40,
        10,
    )
    assert (rerun.shard, rerun.time_budget, rerun.no_database) == ("1/1", None, True)
    assert at(rerun.wgsl_dir) == given["my wgsl"] and at(rerun.kernels) == given["kern"]
    assert rerun.max_workgroups_per_dim == 7 and at(rerun.expectations) == given["exp.toml"]
    # Without a database or expectations, the command says so (a profile may default to them).
    bare = RunMeta(profile="nightly", seed=1, families=["view"], budgets=Budgets(2, 1))
    args = _parsed(reproduce_commands([bare], run_dir)[0])
    assert args.no_database and args.no_expectations and args.wgsl_dir is None
    # A merged folder: each shard's command, then their merge.
    shards = [
        RunMeta(profile="pr", families=["view"], budgets=Budgets(4, 2), shard=Shard(i, 2))
        for i in (1, 2)
    ]
    *runs, merge = reproduce_commands(shards, run_dir)
    assert [_parsed(c).shard for c in runs] == ["1/2", "2/2"]
    assert merge.startswith("parity merge --out rerun/merged ")


# ---------------------------------------------------------------------------- the index


def test_kernel_sources_list_only_replaced_slots_with_relative_paths(tmp_path: Path) -> None:
    manifest = tmp_path / "mine" / "kernels.toml"
    glsl_fork = tmp_path / "glsl-fork"
    adapters = {
        "webgpu": {**ADAPTERS["webgpu"], "kernels": {"rms_norm": "rms.wgsl"}},
        "vulkan": dict(ADAPTERS["vulkan"]),
    }
    records = [_case("rms_norm/0", "a", []), _chunk("rms_norm/0")]
    meta = _run_meta(
        ["rms_norm/0"],
        adapters=adapters,
        kernels=str(manifest),
        shader_dirs={"webgpu": "/repo/wgsl", "vulkan": str(glsl_fork)},
        shader_overrides={"vulkan": str(glsl_fork)},
    )
    run = _write_run(tmp_path / "run", meta, records)
    summary = render_report(run)
    assert summary.kernel_sources["rms_norm"] == {
        "webgpu": "rms.wgsl (manifest ../mine/kernels.toml)",
        "vulkan": "--glsl-dir ../glsl-fork",
    }
    assert summary.kernel_sources["add_flat"]["webgpu"] == "project"
    index = (run / "index.html").read_text()
    section = index[index.index('id="kernels"') : index.index('id="coverage"')]
    assert str(tmp_path) not in index
    folders = _text(re.search(r'<p id="kernel-folders">(.*?)</p>', section, re.S).group(1))
    assert "webgpu: the project's wgsl/" in folders
    assert "vulkan: every kernel from --glsl-dir ../glsl-fork" in folders
    rows = re.findall(r"<tr><td><code>(\w+)</code></td>(.*?)</tr>", section, re.S)
    assert [slot for slot, _ in rows] == ["rms_norm"]  # the one slot the manifest replaced
    assert "rms.wgsl (manifest ../mine/kernels.toml)" in rows[0][1]
    # A --wgsl-dir alone replaces no slot: no table, the folder named as such.
    meta = _run_meta(["rms_norm/0"], shader_overrides={"webgpu": str(tmp_path / "w")})
    run = _write_run(tmp_path / "run2", meta, records)
    render_report(run)
    index = (run / "index.html").read_text()
    assert 'id="kernel-sources"' not in index
    assert "every kernel from <code>--wgsl-dir ../w</code>" in index
    assert "project (" not in index


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def test_the_banner_says_why_a_run_ended_in_error(tmp_path: Path) -> None:
    died = (
        "worker 2 (pid 4242, llvmpipe (LLVM 15)) was killed by SIGKILL while running chunk "
        "rms_norm/1, after 3 of its cases; the rest of the chunk was not run"
    )
    raised = "KernelBuildError: webgpu: kernel 'rms_norm' does not build\nCaused by:\n  line 26"
    records = [_case("rms_norm/0", "a", []), _chunk("rms_norm/0")]
    meta = _run_meta(
        ["rms_norm/0", "rms_norm/1", "rms_norm/2"],
        status="error",
        exit_status=3,
        errors=[
            f"rms_norm/1: {died}",
            f"rms_norm/2: {raised}",
            "worker 3 (pid 7) exited with status 9 between chunks",
        ],
    )
    run = _write_run(tmp_path / "run", meta, records)
    render_report(run, exit_status=3)
    index = (run / "index.html").read_text()
    banner = re.search(r'<div id="error-banner">(.*?)</div>', index, re.S)
    assert banner, "no error banner"
    assert _text(banner.group(1)).startswith(
        "The run ended in error (exit status 3): 3 failures other than a divergence"
    )
    items = [_text(i) for i in re.findall(r"<li>(.*?)</li>", banner.group(1), re.S)]
    assert items[0] == f"chunk rms_norm/1: {died}"
    assert items[1].startswith("chunk rms_norm/2: KernelBuildError: webgpu: kernel 'rms_norm'")
    assert "whole text" in items[1] and "line 26" in items[1]  # the compiler's lines, folded
    assert items[2] == "worker 3 (pid 7) exited with status 9 between chunks"
    # A clean run has no banner.
    run = _write_run(tmp_path / "clean", _run_meta(["rms_norm/0"]), records)
    render_report(run)
    assert 'id="error-banner"' not in (run / "index.html").read_text()


def test_nondeterminism_is_said_in_words(tmp_path: Path) -> None:
    d = _divergence()
    repeat = {
        "class": "nondeterministic:webgpu",
        "hashes": {"webgpu": ["a1", "b2", "a1"], "vulkan": ["c3", "c3", "c3"]},
    }
    records = [
        _case("rms_norm/0", "m", [d], repeatability=repeat),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1,
         "findings": [{"case_id": "m", "bundle": None, "shrunk": True, "unexpected": 1,
                       "bug": d["bug"]}]},
    ]  # fmt: skip
    run = _write_run(tmp_path / "run", _run_meta(["rms_norm/0"]), records)
    render_report(run)
    page = next((run / "failures").glob("*.html")).read_text()
    section = page[page.index("<h2>Nondeterminism</h2>") : page.index('id="worst-elements"')]
    assert "a1" not in section and "[" not in _text(section)  # no dump of the hashes
    said = _text(re.search(r'<p id="repeatability">(.*?)</p>', section, re.S).group(1))
    assert said.startswith("Class: nondeterministic:webgpu: re-running the same case gave")
    assert "different bits on webgpu" in said
    runs = dict(re.findall(r'<li data-backend="(\w+)">(.*?)</li>', section, re.S))
    assert _text(runs["webgpu"]) == (
        "webgpu: 3 re-runs gave 2 different results (one result 2 times, another 1 time)"
    )
    assert _text(runs["vulkan"]) == "vulkan: 3 re-runs, all bit-identical"


def _svgs(page: str, backend: str) -> tuple[ET.Element, ET.Element]:
    figure = re.search(
        rf'<figure class="row-plot" data-backend="{backend}">(.*?)</figure>', page, re.S
    )
    assert figure, f"no row plot for {backend}"
    values, errors = re.findall(r"<svg.*?</svg>", figure.group(1), re.S)
    return ET.fromstring(values), ET.fromstring(errors)


def _all(svg: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter(f"{{http://www.w3.org/2000/svg}}{tag}") if e.get("class") == cls]


def test_row_plots_show_output_reference_band_and_error_against_budget(tmp_path: Path) -> None:
    d = _divergence()
    records = [
        _case("rms_norm/0", "m", [d]),
        _chunk("rms_norm/0", ("m", d)),
    ]
    run = _write_run(tmp_path / "run", _run_meta(["rms_norm/0"]), records)
    bundle = run / records[1]["findings"][0]["bundle"]
    bundle.mkdir(parents=True)
    write_json(bundle / "bundle.json", {"format": "parity-bundle/2", "id": bundle.name})
    reference = np.linspace(-1.0, 1.0, 12).reshape(2, 6)
    budget = np.full((2, 6), 1e-3)
    webgpu = reference.copy()
    webgpu[1, 3] += 1e-2  # 10x its budget: the worst element, in row 1
    webgpu[1, 5] = np.nan
    webgpu[0, 0] += 5e-4  # within budget
    vulkan = reference + 1e-5
    tensor = "s0/rms_norm_0.out"
    arrays = {
        f"{tensor}/{name}/{k}": v
        for name, actual in (("webgpu", webgpu), ("vulkan", vulkan))
        for k, v in (("actual", actual), ("reference", reference), ("budget", budget))
    }
    np.savez_compressed(bundle / "arrays.npz", **arrays)
    render_report(run)
    page = (run / "failures" / f"{bundle.name}.html").read_text()
    values, errors = _svgs(page, "webgpu")
    (output,) = _all(values, "polyline", "output")
    assert len(output.get("points", "").split()) == 5  # row 1's finite outputs
    (band,) = _all(values, "polygon", "band")
    assert len(band.get("points", "").split()) == 12  # reference ± budget, both edges
    assert len(_all(values, "circle", "nonfinite")) == 1
    # Over budget: the element off by 10x and the NaN; the others are within it.
    over = [c.findtext("{http://www.w3.org/2000/svg}title") for c in _all(errors, "circle", "over")]
    assert [t.split(":")[0] for t in over] == ["element 3", "element 5"]
    assert len(_all(errors, "polyline", "budget")[0].get("points", "").split()) == 6
    _, vulkan_errors = _svgs(page, "vulkan")
    assert _all(vulkan_errors, "circle", "over") == []
    caption = re.search(r'data-backend="webgpu">.*?<figcaption>(.*?)</figcaption>', page, re.S)
    assert caption and "row 1 of 2" in _text(caption.group(1))
    assert "2 elements over budget" in _text(caption.group(1))


def test_a_long_row_is_plotted_around_its_worst_element() -> None:
    assert images.plot_window(100, 7) == (0, 100)
    assert images.plot_window(2000, 1500) == (1244, 1756)
    assert images.plot_window(2000, 1990) == (1488, 2000)
    ref = np.zeros(512)
    svg = ET.fromstring(images.error_plot(ref + 1.0, ref, ref + 0.5, "webgpu", start=1244))
    labels = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "1244" in labels and "1755" in labels
    assert len(_all(svg, "circle", "over")) == 512


def test_the_ops_table_says_which_comparisons_were_exact(tmp_path: Path) -> None:
    bits = {
        "rms_norm|rms_norm|webgpu~vulkan": [0, 0],
        "rms_norm|rms_norm|webgpu~webgpu-chrome": [3, 2],
        "rms_norm|rms_norm|webgpu-chrome~vulkan": [7, None],  # nothing declared: not shown
    }
    run = _write_run(
        tmp_path / "run", _run_meta(["rms_norm/0"]), [_case("rms_norm/0", "a", [], bits=bits)]
    )
    summary = render_report(run)
    assert summary.per_op["rms_norm"].exact == {
        "webgpu~vulkan": [0, 0],
        "webgpu~webgpu-chrome": [3, 2],
    }
    row = re.search(r'<td class="exact">(.*?)</td>', (run / "index.html").read_text())
    assert row is not None
    assert row.group(1) == (
        'webgpu~vulkan: bit-identical<br>webgpu~webgpu-chrome: within 2 ULP <span class="bad">'
        "(3 ULP seen)</span><br>"
    )


def _finding_bundle(run: Path, records: list[dict[str, Any]]) -> Path:
    bundle = run / records[1]["findings"][0]["bundle"]
    bundle.mkdir(parents=True)
    return bundle


def test_a_failure_page_names_the_kernels_that_ran_and_no_other(tmp_path: Path) -> None:
    """Issue 21, item 7: "Shaders in the bundle" listed every project shader the case's ops
    may use (rms_norm_vec4's, which did not run; the WebGPU one a manifest replaced) and not
    the manifest's kernel that ran and was blamed. The page names, per backend, the kernel
    of each slot that ran: a manifest's file with its sha256, or the project's shader."""
    d = _divergence()
    records = [_case("rms_norm/0", "m", [d]), _chunk("rms_norm/0", ("m", d))]
    run = _write_run(tmp_path / "run", _run_meta(["rms_norm/0"]), records)
    bundle = _finding_bundle(run, records)
    (bundle / "kernels").mkdir()
    (bundle / "kernels" / "kernels.toml").write_text(
        'format = "parity-kernels/1"\n\n[webgpu.rms_norm]\nfile = "rms.wgsl"\n'
        'params.n_rows = "num_rows"\n'
    )
    (bundle / "kernels" / "rms.wgsl").write_text("// a foreign rms_norm\n")
    shaders = {
        "wgsl/rms_norm.wgsl": "a" * 64,
        "wgsl/rms_norm_vec4.wgsl": "b" * 64,
        "glsl/rms_norm.comp": "c" * 64,
        "glsl/rms_norm_vec4.comp": "d" * 64,
        "glsl/include/tensor_meta.glslh": "e" * 64,
    }
    kernels = {"kernels/kernels.toml": "f" * 64, "kernels/rms.wgsl": "0123456789abcdef" * 4}
    write_json(
        bundle / "bundle.json",
        {"format": "parity-bundle/2", "id": bundle.name, "shaders": shaders, "kernels": kernels},
    )
    render_report(run)
    page = (run / "failures" / f"{bundle.name}.html").read_text()
    assert "Shaders in the bundle" not in page
    table = re.search(r'<table id="kernels-ran">(.*?)</table>', page, re.S)
    assert table, page
    rows = {
        r.group(1): _text(r.group(2))
        for r in re.finditer(r'<tr data-slot="([\w]+)">(.*?)</tr>', table.group(1), re.S)
    }
    assert set(rows) == {"rms_norm"}  # rms_norm_vec4 did not run
    assert "kernels/rms.wgsl" in rows["rms_norm"] and "0123456789abcdef" in rows["rms_norm"]
    assert "manifest kernels/kernels.toml" in rows["rms_norm"]
    assert "glsl/rms_norm.comp" in rows["rms_norm"] and "c" * 16 in rows["rms_norm"]
    assert "wgsl/rms_norm.wgsl" not in page  # the project's WGSL did not run: replaced
    assert 'href="../bundles/' in table.group(1) and "/kernels/rms.wgsl" in table.group(1)


def test_the_heatmap_numbers_are_the_oracle_s(tmp_path: Path) -> None:
    """Issue 21, item 7: the page judged the evidence by a rule of its own
    (`images.utilization`: a NaN where the reference is finite made the maximum infinite);
    its numbers are `harness.model.numerics.compare`'s, as the oracle's verdict is: the
    largest |error| / budget of the elements compared by value, and the elements of another
    class than the reference counted apart."""
    d = _divergence(kind="nan_inf")
    records = [_case("rms_norm/0", "m", [d]), _chunk("rms_norm/0", ("m", d))]
    run = _write_run(tmp_path / "run", _run_meta(["rms_norm/0"]), records)
    bundle = _finding_bundle(run, records)
    write_json(bundle / "bundle.json", {"format": "parity-bundle/2", "id": bundle.name})
    reference = np.linspace(-1.0, 1.0, 12).reshape(2, 6)
    budget = np.full((2, 6), 1e-3)
    webgpu = reference.copy()
    webgpu[0, 2] += 5e-4  # half its budget: the largest of the compared elements
    webgpu[1, 5] = np.nan  # another class than the reference
    tensor = "s0/rms_norm_0.out"
    arrays = {
        f"{tensor}/{name}/{k}": v
        for name, actual in (("webgpu", webgpu), ("vulkan", reference))
        for k, v in (("actual", actual), ("reference", reference), ("budget", budget))
    }
    np.savez_compressed(bundle / "arrays.npz", **arrays)
    render_report(run)
    page = (run / "failures" / f"{bundle.name}.html").read_text()
    caption = re.search(r"<figcaption><b>webgpu</b>: (.*?)</figcaption>", page, re.S)
    assert caption, page
    text = _text(caption.group(1))
    assert text.startswith("max 0.5× budget at [0, 2]"), text
    assert "1 element of another class than the reference (NaN or ±∞)" in text, text

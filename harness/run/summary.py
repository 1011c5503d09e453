"""From records to a run's summary (`summary.json`) and its JUnit XML.

`summarize` reads nothing but run metadata (`run.json`, one per shard when merging) and the
JSONL records, so a report can be rebuilt from a killed run, re-rendered later, or merged
from shards. summary.json (format `parity-summary/1`) holds:

- `status`, `complete`, `exit_status` (the exit status of the command that wrote the
  summary: for `parity run` its own, from its tallies (0, 1, 3, 130); for `report` and
  `merge` the records' verdict: 0 no unexpected divergence and every required coverage cell
  filled, 1 otherwise);
- `profile`, `seed`, `families`, `budgets`, `shards`, `runs` (per shard: device, status,
  the run's exit status, duration), `adapters` (per backend: adapter, driver, API),
  `versions`, `duration_s`;
- `totals`: cases, steps, divergent / unexpected / known cases, divergences, findings
  (a case is a distinct case id per device and a finding a distinct case and bug: see
  harness.run.findings; the CLI's lines print the same numbers);
- `per_family` and `per_op`: cases, steps, divergent cases, divergences by class;
- `coverage`: per op type and backend, the shape regimes and kernel variants exercised;
  `coverage_required` (the profile's cells for the op types run), `coverage_checked` (a
  complete run of every shard) and `coverage_missing` ((op, backend, cell) left empty);
- `signatures`: failures grouped by (op type, class, blamed backend, regime), with the
  cases, divergences and findings of each;
- `findings`: the minimal failing cases, one per distinct case and bug, with their bundle
  and every chunk that found them; provisional ones for a chunk that never finished (a
  killed run);
- `expectations`: each known-divergence entry with its status (matched, stale,
  not_applicable, not_exercised) and match count.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from xml.etree import ElementTree as ET

from harness.check.coverage import missing_cells
from harness.run.expectations import entry_status
from harness.run.findings import (
    CLEAN,
    UNEXPECTED,
    finding_id,
    record_signatures,
    severity,
)
from harness.run.profiles import PROFILES
from harness.run.records import as_float

SUMMARY_FORMAT = "parity-summary/1"


def device_label(adapters: Mapping[str, Mapping[str, Any]]) -> str:
    """A short name for the devices a run used, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`."""
    names = sorted({str(a.get("adapter", "?")) for a in adapters.values()})
    return " + ".join(names) or "?"


def _case_size(record: Mapping[str, Any]) -> tuple[int, int]:
    shapes = record.get("step_shapes", [])
    numel = 0
    for step in shapes:
        for value in step.values():
            if isinstance(value, list):
                n = 1
                for d in value:
                    n *= int(d)
                numel += n
    return (len(shapes), numel)


def summarize(
    runs: Sequence[Mapping[str, Any]], records: Sequence[Sequence[Mapping[str, Any]]]
) -> dict[str, Any]:
    """The summary of one run, or of several shards merged.

    Args:
        runs: each shard's run.json.
        records: each shard's records (same order as `runs`).
    """
    first = runs[0]
    cases = distinct_cases(runs, records)
    chunk_records: dict[tuple[int, str], Mapping[str, Any]] = {}
    for source, recs in enumerate(records):
        for r in recs:
            if r.get("record") == "chunk":
                chunk_records[(source, str(r["chunk"]))] = r

    totals = _stats()
    per_family: dict[str, dict[str, Any]] = {}
    per_op: dict[str, dict[str, Any]] = {}
    coverage: dict[str, dict[str, dict[str, set[str]]]] = {}
    by_signature: dict[str, dict[str, Any]] = {}
    matches: Counter[str] = Counter()
    ops_run: set[str] = set()
    ops_folding: set[str] = set()  # run under a lowered workgroup limit
    families_run: set[str] = set()

    for family in first.get("families", []):
        per_family[family] = _stats()
    for r in cases:
        for family in r["families"]:
            families_run.add(family)
            _count(per_family.setdefault(family, _stats()), r)
        _count(totals, r)
        for op in r.get("ops", []):
            ops_run.add(op)
            if r.get("max_workgroups_per_dim"):
                ops_folding.add(op)
            _count(per_op.setdefault(op, _stats()), r, only_op=op)
        for op, per_backend in (r.get("coverage") or {}).items():
            for backend, cell in per_backend.items():
                target = coverage.setdefault(op, {}).setdefault(
                    backend, {"regimes": set(), "variants": set()}
                )
                target["regimes"].update(cell.get("regimes", []))
                target["variants"].update(cell.get("variants", []))
        groups_hit: set[str] = set()
        for d in r.get("divergences", []):
            if d.get("expected"):
                matches[str(d["expected"])] += 1
            # Known and unexpected occurrences of one signature are separate groups.
            key = f"{d['signature']}#{d.get('expected') or ''}"
            sig = by_signature.setdefault(
                key,
                {
                    "signature": d["signature"],
                    "op": d.get("op_type"),
                    "kind": d.get("kind"),
                    "blame": d.get("blame"),
                    "regime": d.get("regime"),
                    "expected": d.get("expected"),
                    "cases": 0,
                    "divergences": 0,
                    "findings": 0,
                    "example": d.get("message"),
                    "failures": [],
                },
            )
            sig["divergences"] += 1
            if key not in groups_hit:  # a case counts once per group, however many steps hit
                groups_hit.add(key)
                sig["cases"] += 1

    findings = _findings(runs, records, cases, chunk_records)
    for f in findings:
        for sig in f["signatures"]:
            keys = [f"{sig}#{k}" for k in ([""] if f["unexpected"] else f["known"])]
            for key in keys:
                if key in by_signature:
                    by_signature[key]["findings"] += 1
                    by_signature[key]["failures"].append(f["id"])

    adapters_seen = [run.get("adapters", {}) for run in runs]
    expectations = []
    for entry in first.get("expectations", []):
        status = entry_status(entry, matches[entry["id"]], adapters_seen, ops_run, families_run)
        expectations.append({**entry, "matches": matches[entry["id"]], "status": status})

    chunk_status: dict[str, Counter[str]] = defaultdict(Counter)
    for source, run in enumerate(runs):
        for chunk_id in run.get("chunks", []):
            rec = chunk_records.get((source, chunk_id))
            family = chunk_id.rsplit("/", 1)[0]
            chunk_status[family][rec["status"] if rec else "missing"] += 1
    for family, counter in chunk_status.items():
        per_family.setdefault(family, _stats())["chunks"] = dict(counter)

    statuses = [str(run.get("status", "running")) for run in runs]
    complete = all(s == "complete" for s in statuses) and all(
        (source, c) in chunk_records
        for source, run in enumerate(runs)
        for c in run.get("chunks", [])
    )
    unexpected = int(totals["unexpected_cases"])
    max_util = totals["max_utilization"]
    shards = sorted(
        {(int(r["shard"]["index"]), int(r["shard"]["count"])) for r in runs if r.get("shard")}
    )
    # Required coverage cells (the profile's) are judged only on a complete run of every
    # shard, and only for the op types the run exercised; a "fold" only of those it
    # exercised under a lowered workgroup limit.
    counts = {n for _, n in shards}
    all_shards = not shards or (
        len(counts) == 1 and {i for i, _ in shards} == set(range(1, next(iter(counts)) + 1))
    )
    profile = PROFILES.get(str(first.get("profile")))
    required = {
        op: kept
        for op, cells in (profile.required_coverage if profile else {}).items()
        if op in ops_run and (kept := tuple(c for c in cells if c != "fold" or op in ops_folding))
    }
    coverage_checked = complete and all_shards
    missing = (
        missing_cells(coverage, required, sorted(first.get("adapters", {})))
        if coverage_checked
        else []
    )
    summary = {
        "format": SUMMARY_FORMAT,
        "note": "internal to the parity harness; rebuilt by `parity report` from cases.jsonl",
        "status": _overall_status(statuses, complete),
        "complete": complete,
        "exit_status": 1 if unexpected or missing else 0,
        "profile": first.get("profile"),
        "seed": first.get("seed"),
        "families": first.get("families", []),
        "budgets": first.get("budgets", {}),
        "shards": [f"{i}/{n}" for i, n in shards],
        "runs": [
            {
                "shard": _shard_text(r),
                "device": device_label(r.get("adapters", {})),
                "status": r.get("status", "running"),
                "exit_status": r.get("exit_status"),  # the run process's own, once finalized
                "stop_reason": r.get("stop_reason"),
                "errors": r.get("errors", []),
                "duration_s": r.get("duration_s"),
                "started": r.get("started"),
                "git": r.get("git"),
                "shader_overrides": r.get("shader_overrides", {}),
            }
            for r in runs
        ],
        "adapters": first.get("adapters", {}),
        "adapter_sets": _distinct(run.get("adapters", {}) for run in runs),
        "versions": first.get("versions", {}),
        "duration_s": round(sum(float(r.get("duration_s") or 0.0) for r in runs), 2),
        "totals": {
            "cases": int(totals["cases"]),
            "steps": int(totals["steps"]),
            "divergent_cases": int(totals["divergent_cases"]),
            "unexpected_cases": unexpected,
            "known_cases": int(totals["known_cases"]),
            "divergences": sum(totals["divergences"].values()),
            "findings": len(findings),
            "unexpected_findings": sum(1 for f in findings if f["unexpected"]),
            "signatures": len(by_signature),
            "max_utilization": max_util,
        },
        "per_family": per_family,
        "per_op": per_op,
        "coverage": {
            op: {b: {k: sorted(v) for k, v in cell.items()} for b, cell in sorted(per.items())}
            for op, per in sorted(coverage.items())
        },
        "coverage_required": {op: list(cells) for op, cells in sorted(required.items())},
        "coverage_checked": coverage_checked,
        "coverage_missing": [list(m) for m in missing],
        "signatures": sorted(
            by_signature.values(), key=lambda s: (s["expected"] is not None, -s["cases"])
        ),
        "findings": findings,
        "expectations": expectations,
    }
    return summary


def _shard_text(run: Mapping[str, Any]) -> str:
    shard = run.get("shard") or {}
    return f"{shard.get('index', 1)}/{shard.get('count', 1)}"


def _stats() -> dict[str, Any]:
    return {
        "cases": 0,
        "steps": 0,
        "divergent_cases": 0,
        "unexpected_cases": 0,
        "known_cases": 0,
        "max_utilization": 0.0,
        "divergences": {},
    }


def _count(stats: dict[str, Any], r: Mapping[str, Any], only_op: str | None = None) -> None:
    stats["cases"] += 1
    stats["steps"] += int(r.get("steps", 0))
    divergences = [
        d for d in r.get("divergences", []) if only_op is None or d.get("op_type") == only_op
    ]
    util = as_float(r.get("max_utilization", 0.0))
    if util == util and util > stats["max_utilization"]:  # NaN-safe
        stats["max_utilization"] = util
    for d in divergences:
        kinds = stats["divergences"]
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    level = severity({"divergences": divergences})
    if level != CLEAN:
        stats["divergent_cases"] += 1
        stats["unexpected_cases" if level == UNEXPECTED else "known_cases"] += 1


def distinct_cases(
    runs: Sequence[Mapping[str, Any]], records: Sequence[Sequence[Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    """One record per distinct case (see harness.run.findings), in the order first seen.

    A case is its `case_id` on one device: Hypothesis runs a case several times (shrinking,
    the final replay) and several chunks may reach the same one. The record kept is the
    most severe run of it (unexpected, then known, then clean; the first among equals), with
    `chunks` (every chunk that ran it), `families`, `source` (the shard of the kept record)
    and `device` added.
    """
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for source, recs in enumerate(records):
        device = device_label(runs[source].get("adapters", {}))
        for r in recs:
            if r.get("record") != "case":
                continue
            key = (device, str(r["case_id"]))
            kept = out.get(key)
            if kept is None:
                out[key] = {**r, "source": source, "device": device, "chunks": [], "families": []}
                kept = out[key]
            elif severity(r) > severity(kept):
                extra = {k: kept[k] for k in ("chunks", "families")}
                kept = out[key] = {**r, "source": source, "device": device, **extra}
            if str(r["chunk"]) not in kept["chunks"]:
                kept["chunks"].append(str(r["chunk"]))
            if str(r.get("family")) not in kept["families"]:
                kept["families"].append(str(r.get("family")))
    return list(out.values())


def _chunk_order(chunk: str) -> tuple[str, int]:
    family, _, index = chunk.rpartition("/")
    return (family, int(index) if index.isdigit() else -1)


def _findings(
    runs: Sequence[Mapping[str, Any]],
    records: Sequence[Sequence[Mapping[str, Any]]],
    cases: Sequence[Mapping[str, Any]],
    chunk_records: Mapping[tuple[int, str], Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Findings from chunk records, plus provisional ones for chunks that never finished.

    Chunk findings of the same case and bug on one device are one finding
    (harness.run.findings.finding_id) listing every chunk that found it.
    """
    by_case = {(c["device"], str(c["case_id"])): c for c in cases}
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    ids: set[str] = set()

    def add(source: int, chunk: str, case_id: str, extra: Mapping[str, Any]) -> None:
        device = device_label(runs[source].get("adapters", {}))
        signatures = sorted(set(extra.get("signatures", [])))
        base = finding_id(case_id, signatures)
        found = by_key.get((device, base))
        if found is not None:
            if chunk not in found["chunks"]:
                found["chunks"].append(chunk)
            if source not in found["sources"]:
                found["sources"].append(source)
            found["bundle"] = found["bundle"] or extra.get("bundle")
            found["shrunk"] = found["shrunk"] or bool(extra.get("shrunk"))
            found["provisional"] = found["provisional"] and bool(extra.get("provisional"))
            found["repeatability"] = found["repeatability"] or extra.get("repeatability")
            return
        # The same finding on another device (a merge of several devices' shards) gets its
        # own page, named like the bundle `parity merge` copies for it.
        fid = base if base not in ids else f"{base}-s{source}"
        ids.add(fid)
        record = by_case.get((device, case_id)) or {}
        divergences = record.get("divergences", [])
        by_key[(device, base)] = {
            "id": fid,
            "source": source,
            "chunk": chunk,
            "chunks": [chunk],
            "sources": [source],
            "family": chunk.rsplit("/", 1)[0],
            "case_id": case_id,
            "device": device,
            "bundle": extra.get("bundle"),
            "shrunk": bool(extra.get("shrunk")),
            "provisional": bool(extra.get("provisional")),
            "repeatability": extra.get("repeatability"),
            "signatures": signatures,
            "unexpected": int(extra.get("unexpected", 0)),
            "known": sorted({str(d["expected"]) for d in divergences if d.get("expected")}),
            "steps": record.get("steps"),
            "step_shapes": record.get("step_shapes"),
        }

    ordered = sorted(chunk_records.items(), key=lambda kv: (kv[0][0], _chunk_order(kv[0][1])))
    for (source, chunk), rec in ordered:
        for f in rec.get("findings", []):
            add(source, chunk, str(f["case_id"]), f)
    # A chunk that never ended (a killed run): its smallest divergent case per bug.
    finished = set(chunk_records)
    best: dict[tuple[int, str, tuple[str, ...]], Mapping[str, Any]] = {}
    for source, recs in enumerate(records):
        for r in recs:
            chunk = str(r.get("chunk"))
            if r.get("record") != "case" or (source, chunk) in finished:
                continue
            if not r.get("unexpected"):
                continue
            # One provisional finding per bug (op, class, blame), whatever regime it showed
            # in: the case with a provisional bundle (replayable), else the smallest seen.
            bug = sorted({d["signature"].rsplit("|", 1)[0] for d in r["divergences"]})
            key = (source, chunk, tuple(bug))
            if key not in best or _provisional_rank(r) < _provisional_rank(best[key]):
                best[key] = r
    for (source, chunk, _), r in sorted(best.items(), key=lambda kv: kv[0]):
        add(
            source,
            chunk,
            str(r["case_id"]),
            {
                "signatures": record_signatures(r),
                "unexpected": r["unexpected"],
                "provisional": True,
                "shrunk": False,
                "bundle": r.get("provisional_bundle"),
            },
        )
    return list(by_key.values())


def _provisional_rank(record: Mapping[str, Any]) -> tuple[int, tuple[int, int]]:
    return (0 if record.get("provisional_bundle") else 1, _case_size(record))


def _overall_status(statuses: Sequence[str], complete: bool) -> str:
    for status in ("running", "interrupted", "error", "time_budget"):
        if status in statuses:
            # A run.json still saying "running" was never finalized: the run was killed.
            return "killed" if status == "running" else status
    return "complete" if complete else "incomplete"


def _distinct(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def junit_xml(summary: Mapping[str, Any], records: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    """JUnit XML for CI dashboards: a suite per family, a test case per chunk.

    A chunk fails when it found an unexpected divergence, errors when the harness failed or
    the chunk never finished (a killed run), and is skipped when the time budget or a signal
    stopped the run before it.
    """
    chunk_records = {}
    for source, recs in enumerate(records):
        for r in recs:
            if r.get("record") == "chunk":
                chunk_records[(source, r["chunk"])] = r
    suites = ET.Element("testsuites", name="parity")
    by_family: dict[str, list[tuple[str, Mapping[str, Any] | None, int]]] = {
        f: [] for f in summary.get("families", [])
    }
    runs = summary.get("runs", [])
    findings = defaultdict(list)
    for f in summary.get("findings", []):
        # A finding fails every chunk that found it (a chunk id is unique on a device).
        for source in f.get("sources", [f["source"]]):
            for chunk in f.get("chunks", [f["chunk"]]):
                findings[(source, chunk)].append(f)
    chunk_ids: dict[int, list[str]] = {}
    for source, recs in enumerate(records):
        chunk_ids[source] = []
        for r in recs:
            if r.get("record") in ("case", "chunk") and r["chunk"] not in chunk_ids[source]:
                chunk_ids[source].append(r["chunk"])
    for source, ids in chunk_ids.items():
        for chunk in ids:
            by_family.setdefault(chunk.rsplit("/", 1)[0], []).append(
                (chunk, chunk_records.get((source, chunk)), source)
            )
    for family, chunks in by_family.items():
        suite = ET.SubElement(suites, "testsuite", name=f"parity.{family}")
        props = ET.SubElement(suite, "properties")
        for key in ("profile", "seed"):
            ET.SubElement(props, "property", name=key, value=str(summary.get(key)))
        counts: Counter[str] = Counter()
        for chunk, rec, source in chunks:
            name = chunk + (f" [{runs[source]['shard']}]" if len(runs) > 1 else "")
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"parity.{family}",
                name=name,
                time=str(rec.get("duration_s", 0) if rec else 0),
            )
            counts["tests"] += 1
            if rec is None:
                counts["errors"] += 1
                ET.SubElement(
                    case, "error", message="no result: the run stopped before this chunk ended"
                )
                continue
            unexpected = [f for f in findings[(source, chunk)] if f["unexpected"]]
            if rec["status"] == "skipped":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"not run: {rec.get('reason')}")
            elif rec["status"] == "error":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=str(rec.get("reason")))
            elif unexpected:
                counts["failures"] += 1
                failure = ET.SubElement(
                    case,
                    "failure",
                    message=f"{len(unexpected)} unexpected finding(s): "
                    + ", ".join(s for f in unexpected for s in f["signatures"]),
                )
                failure.text = "\n".join(f"{f['id']}: bundle {f['bundle']}" for f in unexpected)
            known = [f for f in findings[(source, chunk)] if not f["unexpected"]]
            if known:
                ET.SubElement(case, "system-out").text = "known: " + ", ".join(
                    k for f in known for k in f["known"]
                )
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode")

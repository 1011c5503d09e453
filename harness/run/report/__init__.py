"""The static HTML report of a run folder, rebuilt from its records at any time.

`render_report(run_dir)` reads `run.json` and `cases.jsonl` (and the bundles), writes
`summary.json` and `junit.xml`, and renders a static, offline site:

- `index.html`: why a run ended `error` (a banner), totals, adapters and versions,
  families and ops, the kernel sources (each backend's folder; the slots a manifest
  replaced), the coverage matrix, failures grouped by bug key, findings, known-divergence
  expectations (stale ones flagged), the command that reproduces the run. It holds
  aggregates only, so it stays small with thousands of cases.
- `failures/<id>.html`: one page per finding (harness.run.findings: a minimal case and its
  bug, with every chunk that found it): divergences, first divergent op, nondeterminism
  class (the bundle's re-runs), the values at the worst element of each diverging tensor
  (the op's inputs around it, each backend's output, the float64 reference, the budget),
  the step timeline (WebGPU, Vulkan and the contract model side by side, mismatches
  highlighted), error heatmaps and, beside them, line plots of the row holding the worst
  element (each backend's output against the reference and its budget band; |error|
  against the budget; the numbers by the oracle's rule, `harness.model.numerics.compare`),
  the slack canary map, the kernels that ran per slot and backend (a manifest's file with
  its sha256, or the project's shader; never a bundled shader that did not run), replay
  commands (run from the run folder, so they stay right wherever the folder is published;
  `harness.run.commands`).
- `cases/page-<n>.html`: every case, `CASES_PER_PAGE` per page.

Pages are opened on demand, one file each; CSS and the small filter script are inline, so a
page survives being copied out of CI on its own. Every name and message is escaped. Each
file is written whole or not at all; a disk that will not take one (full, read-only) raises
`OutputError` naming it.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from jinja2 import Environment, PackageLoader

from graph_format import runtime_api
from graph_format.kernels import (
    MANIFEST_NAME,
    Backend,
    KernelManifest,
    KernelManifestError,
    load_manifest,
)
from harness.check.backends import ALL_BACKENDS, SHADER_LANGUAGES
from harness.check.divergence import (
    BuildErrorDetails,
    FirstDivergent,
    NumericDetails,
    blame_meaning,
)
from harness.check.repeatability import Repeatability
from harness.model.numerics import compare, utilization_map
from harness.ops import MODELS
from harness.run.commands import (
    COMMANDS_CWD,
    FINDING_COMMANDS_NOTE,
    finding_commands,
    names_adapters,
    relative_path,
    reproduce_commands,
    run_command,
)
from harness.run.records import (
    CASES_FILE,
    RUN_FILE,
    BundleDoc,
    CaseRecord,
    DivergenceRecord,
    EvidenceElement,
    Finding,
    LoggedDispatch,
    MergeMeta,
    Record,
    RecordError,
    RunMeta,
    Summary,
    TimelineStep,
    as_float,
    read_bundle_doc,
    read_records,
    read_run_meta,
    write_json,
    write_text,
    writing,
)
from harness.run.report import images
from harness.run.summary import distinct_cases, folder_source, junit_xml, summarize

CASES_PER_PAGE = 200
# A chunk's id, `<family>/<index>` (harness.run.plan.Chunk.id).
_CHUNK_ID = re.compile(r"[\w.-]+/\d+")
# The order the pages show the backends in.
BACKEND_ORDER = ALL_BACKENDS

_ENV = Environment(
    loader=PackageLoader("harness.run.report", "templates"),
    autoescape=True,  # every template is HTML; names and messages come from the records
    trim_blocks=True,
    lstrip_blocks=True,
)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    try:
        f = as_float(value)
    except (TypeError, ValueError):
        return str(value)
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "∞" if f > 0 else "-∞"
    return f"{f:.{digits}g}"


def _dims(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


_ENV.filters["fmt"] = _fmt
_ENV.filters["value"] = lambda v: _fmt(v, 7)
_ENV.filters["over_budget"] = lambda v: not as_float(v) <= 1.0  # NaN is over
_ENV.filters["dims"] = _dims
_ENV.filters["slug"] = lambda s: "".join(c if c.isalnum() else "-" for c in str(s))


@dataclass
class RunData:
    """A run folder read back: each shard's run.json and records."""

    path: Path
    runs: list[RunMeta]
    records: list[list[Record]]
    merged: bool = False


def load_run(run_dir: str | Path) -> RunData:
    """Read a run (or merged) folder.

    Raises:
        RecordError: the folder, run.json or cases.jsonl is missing or corrupt; the message
            names the file (and line).
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise RecordError(f"{path}: no such run folder (expected a folder with {RUN_FILE})")
    meta = read_run_meta(path / RUN_FILE)
    cases_path = path / CASES_FILE
    records = list(read_records(cases_path)) if cases_path.exists() else []
    if isinstance(meta, MergeMeta):
        split: list[list[Record]] = [[] for _ in meta.runs]
        for r in records:
            if not 0 <= r.source < len(meta.runs):
                raise RecordError(
                    f"{cases_path}: record names shard source {r.source}, but {RUN_FILE} lists "
                    f"{len(meta.runs)} shards"
                )
            split[r.source].append(r)
        return RunData(path, meta.runs, split, merged=True)
    return RunData(path, [meta], [records])


def render_report(run_dir: str | Path, exit_status: int | None = None) -> Summary:
    """Rebuild summary.json, junit.xml and the HTML site of a run folder; returns the summary.

    Args:
        exit_status: the exit status of the process writing the report, when it knows it
            better than the records (`parity run`: from its own tallies, 130 when
            interrupted, 3 on an internal error); default: the records' verdict (0 or 1).

    Raises:
        RecordError: see `load_run`.
        OutputError: a file of the report cannot be written (a full or read-only disk).
    """
    data = load_run(run_dir)
    summary = summarize(data.runs, data.records, data.path)
    summary.merged = data.merged
    if exit_status is not None:
        summary.exit_status = int(exit_status)
    for f in summary.findings:
        if f.bundle and not (data.path / f.bundle / "bundle.json").is_file():
            if not f.provisional:  # a provisional one a kill cut short needs no word
                f.bundle_error = f"{f.bundle} is missing (no bundle.json)"
            f.bundle = None
    out = data.path
    write_json(out / "summary.json", summary)
    write_text(out / "junit.xml", junit_xml(summary, data.records))
    write_site(data, summary)
    return summary


def write_site(data: RunData, summary: Summary) -> None:
    """Render index, failure and case pages into the run folder."""
    out = data.path
    with writing(out / "cases"):
        if (out / "cases").is_dir():
            shutil.rmtree(out / "cases")
        (out / "cases").mkdir()
    failures = out / "failures"
    if failures.is_dir():
        for page in failures.iterdir():
            # A page whose bundle exists stays, even if these records no longer name it.
            if not (out / "bundles" / page.stem).is_dir():
                with writing(page):
                    page.unlink()
    with writing(failures):
        failures.mkdir(exist_ok=True)
    cases = distinct_cases(data.runs, data.records)
    by_chunk = {
        (source, r.chunk, r.case_id): r
        for source, recs in enumerate(data.records)
        for r in recs
        if isinstance(r, CaseRecord)
    }
    finding_of: dict[tuple[str, str], list[str]] = {}
    for f in summary.findings:
        finding_of.setdefault((f.device, f.case_id), []).append(f.id)
    pages = max(1, -(-len(cases) // CASES_PER_PAGE))
    index = _ENV.get_template("index.html.j2").render(
        s=summary,
        case_pages=pages,
        commands=reproduce_commands(data.runs, out),
        kernels=_kernel_view(data.runs[0], out, summary.kernel_sources),
        errors=_error_view(summary),
        rel=lambda path: relative_path(path, out),
    )
    write_text(out / "index.html", index)
    for f in summary.findings:
        record = by_chunk.get((f.source, f.chunk, f.case_id))
        html = _failure_page(data, summary, f, record)
        write_text(out / "failures" / f"{f.id}.html", html)
    for number in range(pages):
        rows = cases[number * CASES_PER_PAGE : (number + 1) * CASES_PER_PAGE]
        html = _ENV.get_template("cases.html.j2").render(
            s=summary, rows=rows, page=number + 1, pages=pages, finding_of=finding_of
        )
        write_text(out / "cases" / f"page-{number + 1}.html", html)


def _error_view(summary: Summary) -> list[dict[str, Any]]:
    """Why the run ended `error`, for the index's banner: each failure the run recorded
    (a chunk that raised, a worker that died, and how: its exit status or signal, and the
    chunk it was running), with the chunk it concerns, its first line and its whole text."""
    out = []
    for run in summary.runs:
        for text in run.errors:
            # A chunk's failure reads "<family>/<index>: <why>" (harness.run.session).
            head, _, rest = text.partition(": ")
            chunk = head if _CHUNK_ID.fullmatch(head) else None
            body = rest if chunk is not None else text
            first, _, more = body.strip().partition("\n")
            out.append(
                {
                    "shard": run.shard if len(summary.runs) > 1 else None,
                    "chunk": chunk,
                    "headline": first,
                    "text": body if more.strip() else None,
                }
            )
    return out


def _kernel_view(
    run: RunMeta, run_dir: Path, sources: Mapping[str, Mapping[str, str]]
) -> dict[str, Any]:
    """The index's "Kernel sources": each backend's folder (what every slot not listed
    ran), and only the slots a kernel manifest replaced on some backend."""
    folders = {b: folder_source(run, b, run_dir) for b in BACKEND_ORDER if b in run.adapters}
    replaced = {
        slot: {b: per.get(b, "") for b in folders}
        for slot, per in sources.items()
        if any(per.get(b, folder) != folder for b, folder in folders.items())
    }
    return {"folders": folders, "replaced": replaced}


# ---------------------------------------------------------------------------- failure page


def _evidence(path: Path) -> dict[str, np.ndarray]:
    """A bundle's evidence arrays.

    Raises:
        RecordError: the archive is truncated or damaged.
    """
    try:
        # Our own handle: np.load leaks its own when the archive is damaged.
        with path.open("rb") as handle, np.load(handle, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise RecordError(
            f"{path}: not a readable .npz of evidence arrays (truncated or damaged?): "
            f"{type(err).__name__}: {err}"
        ) from None


def _failure_page(
    data: RunData,
    summary: Summary,
    finding: Finding,
    record: CaseRecord | None,
) -> str:
    bundle_doc: BundleDoc | None = None
    arrays: dict[str, np.ndarray] = {}
    bundle_dir = data.path / finding.bundle if finding.bundle else None
    if bundle_dir is not None and (bundle_dir / "bundle.json").exists():
        try:
            bundle_doc = read_bundle_doc(bundle_dir / "bundle.json")
        except RecordError:
            bundle_doc = None
        if (bundle_dir / "arrays.npz").exists():
            arrays = _evidence(bundle_dir / "arrays.npz")
    divergences = list(record.divergences) if record is not None else []
    timeline = [_step_view(s) for s in record.timeline] if record is not None else []
    bundle_rel = f"../{finding.bundle}" if finding.bundle else None
    bundle_files = []
    if bundle_dir is not None:
        for name in (
            "bundle.json",
            "README.md",
            "timeline.json",
            "case/case.json",
            "case/graph.json",
        ):
            if (bundle_dir / name).exists():
                bundle_files.append(name)
    # Relative to the run folder, never to where the report was rendered.
    run = data.runs[finding.source]
    if finding.bundle:
        # The manifest the bundle carries (kernels/kernels.toml), if any.
        manifest = next(
            (k for k in (bundle_doc.kernels if bundle_doc else {}) if k.endswith(MANIFEST_NAME)),
            None,
        )
        adapters = manifest is not None and names_adapters(data.path / finding.bundle / manifest)
        commands = finding_commands(
            finding.bundle, run, data.path, finding.family, allow_adapters=adapters
        )
    else:  # no bundle: searching the family again writes one
        commands = [run_command(run, data.path, family=finding.family)]
    # The bundle re-ran the case to classify it; the case record predates that.
    from_bundle = bundle_doc.repeatability if bundle_doc is not None else None
    repeatability = from_bundle or (record.repeatability if record is not None else None)
    repeat_source = "the bundle's re-runs" if from_bundle else "the run"
    if not repeatability and finding.repeatability:
        repeatability = Repeatability(finding.repeatability)
    first, first_source = _first_divergent(record, divergences) if record else (None, "")
    return _ENV.get_template("failure.html.j2").render(
        s=summary,
        f=finding,
        r=record,
        divergences=divergences,
        first=first,
        first_source=first_source,
        repeatability=repeatability,
        repeat_words=_repeatability_words(repeatability),
        repeat_source=repeat_source,
        timeline=timeline,
        elements=[_element_view(e) for e in (bundle_doc.evidence if bundle_doc else [])],
        heatmaps=_heatmaps(arrays),
        canaries=_canaries(arrays, divergences),
        bundle=bundle_doc,
        bundle_rel=bundle_rel,
        bundle_files=bundle_files,
        kernels_ran=_kernels_ran(run, data.path, record, divergences, bundle_dir, bundle_doc),
        commands=commands,
        commands_cwd=COMMANDS_CWD,
        commands_note=FINDING_COMMANDS_NOTE if finding.bundle else "",
        adapters=data.runs[finding.source].adapters,
        blame_note=blame_meaning(finding.bug.blame, list(data.runs[finding.source].adapters)),
        no_bundle=_no_bundle(data.runs[finding.source], finding),
    )


# A slot's project kernel per API: (shader folder in a bundle, file suffix) and the file stem.
_SHADER_SUFFIX = {"webgpu": ".wgsl", "vulkan": ".comp"}
_PROJECT_STEMS = {
    (api, name): spec.wgsl if api == "webgpu" else spec.glsl
    for model in MODELS.values()
    for name, spec in model.kernels.items()
    for api in _SHADER_SUFFIX
}


def _bundle_manifest(bundle_dir: Path | None) -> KernelManifest | None:
    """The kernel manifest a bundle carries (`kernels/kernels.toml`), if any and readable."""
    path = bundle_dir / "kernels" / MANIFEST_NAME if bundle_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return load_manifest(path)
    except KernelManifestError:
        return None


def _kernels_ran(
    run: RunMeta,
    run_dir: Path,
    record: CaseRecord | None,
    divergences: Sequence[DivergenceRecord],
    bundle_dir: Path | None,
    bundle: BundleDoc | None,
) -> dict[str, Any]:
    """The failure page's "Kernels that ran": per slot some backend ran a dispatch of in the
    case (its recorded dispatch logs), or could not build, the kernel each backend ran for it:
    a manifest's file (in the bundle's `kernels/`, with its sha256 and the manifest) or the
    project's shader (`wgsl/<stem>.wgsl`, `glsl/<stem>.comp`, from the project or a
    `--wgsl-dir`/`--glsl-dir`, as the bundle holds it); none where that backend did not
    run the slot. The bundle holds more shaders (every one the case's ops may pick, for
    replay): they are not listed."""
    backends = [b for b in BACKEND_ORDER if b in run.adapters]
    ran = _slots_ran(record, divergences)
    manifest = _bundle_manifest(bundle_dir)
    shaders = bundle.shaders if bundle is not None else {}
    kernels = bundle.kernels if bundle is not None else {}
    rows = []
    for slot in sorted(ran):
        cells: list[dict[str, Any] | None] = []
        for backend in backends:
            status = ran[slot].get(backend)
            if status is None:
                cells.append(None)
                continue
            cell: dict[str, Any] = {"status": status, "defines": {}, "adapter": None}
            cell |= _kernel_file(run, run_dir, backend, slot, manifest, shaders, kernels)
            cells.append(cell)
        rows.append({"slot": slot, "cells": cells})
    return {"backends": backends, "rows": rows}


def _slots_ran(
    record: CaseRecord | None, divergences: Sequence[DivergenceRecord]
) -> dict[str, dict[str, str]]:
    """Slot -> backend -> "ran" (a dispatch of it ran in the case) or "did not build"."""
    ran: dict[str, dict[str, str]] = {}
    for step in record.timeline if record is not None else ():
        for backend, seen in step.backends.items():
            for d in seen.dispatches:
                if d.ran:
                    ran.setdefault(d.kernel, {})[backend] = "ran"
    for failed in divergences:
        slot = failed.details.kernel if isinstance(failed.details, BuildErrorDetails) else None
        if isinstance(slot, str) and slot:
            ran.setdefault(slot, {}).setdefault(failed.blame, "did not build")
    return ran


def _kernel_file(
    run: RunMeta,
    run_dir: Path,
    backend: str,
    slot: str,
    manifest: KernelManifest | None,
    shaders: Mapping[str, str],
    kernels: Mapping[str, str],
) -> dict[str, Any]:
    """The kernel `backend` ran for `slot`: its file, link, sha256 and origin (and a
    manifest kernel's defines and adapter)."""
    api = cast(Backend, runtime_api(backend))
    entry = manifest.entry(api, slot) if manifest is not None else None
    replaced = (run.adapters.get(backend, {}).get("kernels") or {}).get(slot)
    if entry is not None and manifest is not None:
        rel = f"kernels/{entry.source.relative_to(manifest.folder).as_posix()}"
        return {
            "file": rel,
            "link": rel,
            "sha256": kernels.get(rel),
            "origin": f"manifest kernels/{MANIFEST_NAME}",
            "defines": entry.defines,
            "adapter": str(entry.adapter) if entry.adapter is not None else None,
            # The arithmetic it declares (`precision`) where not f32: its op's budget was
            # derived for it.
            "precision": entry.precision if entry.precision != "f32" else None,
        }
    if replaced:  # no bundle to read it from: the run's own path
        return {
            "file": relative_path(replaced, run_dir),
            "link": None,
            "sha256": None,
            "origin": "manifest",
        }
    stem = _PROJECT_STEMS.get((api, slot), slot)
    rel = f"{SHADER_LANGUAGES[api]}/{stem}{_SHADER_SUFFIX[api]}"
    return {
        "file": rel,
        "link": f"shaders/{rel}" if rel in shaders else None,
        "sha256": shaders.get(rel),
        "origin": folder_source(run, backend, run_dir),
    }


# What each repeatability class (harness.check.repeatability) means, in words.
_REPEAT_CLASSES = {
    "deterministic": "every re-run gave bit-identical results on each backend, so the "
    "divergence is not noise: it reproduces as long as the code stays the same",
    "history-dependent": "it diverged only where other cases had run before it in the same "
    "process, not when run alone in a fresh one: the bug depends on what ran earlier (a "
    "cache, pooled memory); replaying it needs that history",
}


def _repeatability_words(repeatability: Repeatability | None) -> dict[str, Any] | None:
    """A repeatability record (its class and per-backend hashes of each re-run) in words:
    what the class means and, per backend, how many re-runs gave how many distinct results."""
    if not repeatability:
        return None
    kind = repeatability.kind
    meaning = _REPEAT_CLASSES.get(kind)
    if meaning is None and kind.startswith("nondeterministic:"):
        which = kind.partition(":")[2]
        sides = "both backends" if which == "both" else which.replace(",", " and ")
        meaning = (
            f"re-running the same case gave different bits on {sides}: the results there "
            "depend on something besides the case (a race, uninitialized memory, timing), "
            "so a replay may not show the same values"
        )
    lines = []
    for backend, runs in sorted(repeatability.hashes.items()):
        if not runs:
            continue
        counts = Counter(runs)
        if len(counts) == 1:
            text = f"{len(runs)} re-run{'s' if len(runs) != 1 else ''}, all bit-identical"
        else:
            times = [f"{n} time{'s' if n != 1 else ''}" for n in sorted(counts.values())[::-1]]
            shares = ", ".join([f"one result {times[0]}", *(f"another {t}" for t in times[1:])])
            text = f"{len(runs)} re-runs gave {len(counts)} different results ({shares})"
        lines.append({"backend": backend, "text": text, "repeatable": len(counts) == 1})
    return {"kind": kind, "meaning": meaning, "backends": lines}


def _no_bundle(run: RunMeta, finding: Finding) -> str:
    """Why a finding has no bundle, as its page says it: never "killed" unless it was."""
    if finding.bundle_error:
        return finding.bundle_error
    ended = f"the run ended with status {run.status}" + (f": {run.errors[0]}" if run.errors else "")
    if finding.provisional:
        if run.status == "running":  # never finalized
            return "the run was killed before its chunk ended"
        return f"its chunk never ended ({ended})"
    return f"it could not be written ({ended})"


def _element_view(element: EvidenceElement) -> dict[str, Any]:
    """A worst element of bundle.json's `evidence` for the page: backends in report order,
    and one row per input, or one per backend where the backends' inputs differ."""
    order = {b: i for i, b in enumerate(BACKEND_ORDER)}
    backends = sorted(element.backends.items(), key=lambda kv: order.get(kv[0], 9))
    inputs: list[dict[str, Any]] = []
    slots = [i.slot for _, b in backends for i in b.inputs]
    for slot in dict.fromkeys(slots):
        views = [(name, i) for name, b in backends for i in b.inputs if i.slot == slot]
        if len(views) == len(backends) and all(v == views[0][1] for _, v in views):
            inputs.append({"backend": "all", "input": views[0][1]})
        else:
            inputs += [{"backend": name, "input": view} for name, view in views]
    return {"e": element, "backends": backends, "inputs": inputs}


def _first_divergent(
    record: CaseRecord, divergences: Sequence[DivergenceRecord]
) -> tuple[FirstDivergent | None, str]:
    """The harness's own record of the first divergent op, else the earliest divergence's
    (`FirstDivergent.of`), and which of the two it is.

    Earliest = lowest step, then the op's position in that step's contract dispatch order
    (graph order), then per-op findings before end-to-end ones.
    """
    if record.first_divergent:
        return record.first_divergent, "harness"
    if not divergences:
        return None, ""
    order: dict[tuple[int, str], int] = {}
    for step in record.timeline:
        for k, dispatch in enumerate(step.model.dispatches):
            order.setdefault((step.index, dispatch.op), k)

    def key(d: DivergenceRecord) -> tuple[int, int, int]:
        per_op = isinstance(d.details, NumericDetails) and d.details.scope == "op"
        return (d.step, order.get((d.step, str(d.op)), 1 << 20), 0 if per_op else 1)

    return FirstDivergent.of(min(divergences, key=key)), "earliest divergence"


def _step_view(step: TimelineStep) -> dict[str, Any]:
    """A step with rows for the side-by-side tables and mismatch flags."""
    model, backends = step.model, step.backends
    names = ["model", *backends]
    sides = [model, *backends.values()]
    tensors = sorted({t for side in sides for t in side.cur_dims})
    dims_rows: list[dict[str, Any]] = []
    for t in tensors:
        want_dims = model.cur_dims.get(t)
        cells = [side.cur_dims.get(t) for side in sides]
        dims_rows.append(
            {
                "tensor": t,
                "cells": [
                    {"text": _dims(c), "bad": i > 0 and want_dims is not None and c != want_dims}
                    for i, c in enumerate(cells)
                ],
            }
        )
    logs = [side.dispatches for side in sides]
    dispatch_rows: list[dict[str, Any]] = []
    for k in range(max((len(log) for log in logs), default=0)):
        want = logs[0][k].logical() if k < len(logs[0]) else None
        row = []
        for i, log in enumerate(logs):
            d = log[k] if k < len(log) else None
            text = "-" if d is None else _dispatch_text(d)
            row.append({"text": text, "bad": i > 0 and (d is None or d.logical() != want)})
        op = next((log[k].op for log in logs if k < len(log)), "?")
        dispatch_rows.append({"op": op, "cells": row})
    return {
        "index": step.index,
        "inputs": step.inputs,
        "names": names,
        "errors": [side.error for side in sides],
        "dims_rows": dims_rows,
        "dispatch_rows": dispatch_rows,
        "mismatch": any(c["bad"] for r in dims_rows + dispatch_rows for c in r["cells"]),
        "utilization": {
            name: sorted(b.utilization.items(), key=lambda kv: -_num(kv[1]))[:6]
            for name, b in backends.items()
        },
        "validation": {n: b.validation_messages for n, b in backends.items()},
        "divergences": step.divergences,
    }


def _num(value: float) -> float:
    return -1.0 if value != value else value


def _dispatch_text(d: LoggedDispatch) -> str:
    text = f"{d.kernel} wg{_dims(d.wg)} ×{_dims(d.count)}"
    if d.grid and d.grid != d.count:
        text += f" grid{_dims(d.grid)}"
    return text + ("" if d.ran else " skipped")


def _heatmaps(arrays: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per (step, tensor): per backend, an error/budget heatmap and its statistics."""
    groups: dict[tuple[int, str], dict[str, Any]] = {}
    for key in sorted(arrays):
        if not key.endswith("/actual"):
            continue
        step_part, rest = key.split("/", 1)
        tensor, backend, _ = rest.rsplit("/", 2)
        base = key[: -len("/actual")]
        actual, ref, budget = arrays[key], arrays[f"{base}/reference"], arrays[f"{base}/budget"]
        # The numbers are the oracle's (`compare`: the largest |error| / budget of the
        # elements compared by value, those of another class counted apart); the per-element
        # map only draws them.
        judged = compare(actual, ref, budget)
        util = utilization_map(actual, ref, budget)
        finite = util[np.isfinite(util)]
        worst = judged.worst_index
        if worst is None:  # nothing compared by value: the first element of another class
            at = np.unravel_index(int(np.argmax(util)), util.shape) if util.size else ()
            worst = tuple(int(i) for i in at)
        group = groups.setdefault(
            (int(step_part[1:]), tensor),
            {"step": int(step_part[1:]), "tensor": tensor, "shape": list(actual.shape), "maps": []},
        )
        rows, cols = images.as_2d(util).shape
        cell = max(2, min(24, 384 // max(cols, 1), 256 // max(rows, 1)))
        group["maps"].append(
            {
                "backend": backend,
                "width": max(24, min(cols, images.MAX_COLS) * cell),
                "height": max(8, min(rows, images.MAX_ROWS) * cell),
                "image": images.data_uri(images.heatmap(util)),
                "max": judged.utilization,
                "mismatch": judged.nan_mismatch,
                "over": int(np.sum(~(util <= 1.0))) - judged.nan_mismatch,
                "size": int(util.size),
                "worst": [int(i) for i in worst],
                "median": float(np.median(finite)) if finite.size else 0.0,
                "util": util,
                "base": base,
            }
        )
    order = {b: i for i, b in enumerate(BACKEND_ORDER)}
    for group in groups.values():
        group["maps"].sort(key=lambda m: order.get(m["backend"], 9))
        _row_plots(group, arrays)
    return [groups[k] for k in sorted(groups)]


def _row_plots(group: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Line plots beside a tensor's heatmaps: the row (last dim) that holds its worst
    element on any backend, or a window of it around that element, per backend its output
    against the reference and budget band and its |error| against the budget."""
    maps = group["maps"]
    # NaN counts as the worst, as everywhere in the report.
    worst = max(
        maps, key=lambda m: (m["mismatch"] > 0, np.inf if m["max"] != m["max"] else m["max"])
    )
    util2d = images.as_2d(worst["util"])
    shape = util2d.shape
    utils = [images.as_2d(m.pop("util")) for m in maps]
    rows, cols = shape
    if cols < 2:  # one element per row: nothing to draw a line through
        return
    flat = int(np.argmax(np.where(np.isnan(util2d), np.inf, util2d)))
    row, col = divmod(flat, cols)
    start, stop = images.plot_window(cols, col)
    group["row"] = {"index": row, "rows": rows, "first": start, "last": stop - 1, "cols": cols}
    for m, util in zip(maps, utils, strict=True):
        if util.shape != shape:  # judged on another shape: no common row to show
            continue
        actual, reference, budget = (
            images.as_2d(arrays[f"{m['base']}/{k}"])[row, start:stop]
            for k in ("actual", "reference", "budget")
        )
        m["values_plot"] = images.values_plot(actual, reference, budget, m["backend"], start)
        m["error_plot"] = images.error_plot(actual, reference, budget, m["backend"], start)
        m["row_over"] = int(np.sum(~(utilization_map(actual, reference, budget) <= 1.0)))


def _canaries(
    arrays: Mapping[str, np.ndarray], divergences: Sequence[DivergenceRecord]
) -> list[dict[str, Any]]:
    """Canary hits: one row per CANARY_WRITE / STALE_READ divergence, with the map image."""
    rows = []
    for d in divergences:
        if d.kind not in ("canary_write", "stale_read"):
            continue
        state = arrays.get(f"canary/s{d.step}/{d.tensor}/{d.blame}")
        image = None
        counts = None
        if state is not None:
            image = images.data_uri(images.canary_strip(state))
            counts = {
                "live": int(np.sum(state == 0)),
                "intact": int(np.sum(state == 1)),
                "written": int(np.sum(state == 2)),
            }
        rows.append({"d": d, "image": image, "counts": counts})
    return rows


def merged_meta(runs: Sequence[RunMeta], sources: Sequence[str]) -> MergeMeta:
    """run.json of a merged folder: every shard's run.json, in order."""
    return MergeMeta(runs=list(runs), sources=list(sources))

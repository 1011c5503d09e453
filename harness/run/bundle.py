"""Repro bundles: a self-contained folder per finding, and replaying one without Hypothesis.

One bundle per finding: `bundles/<finding id>/`, named from the minimal case and its bug
(harness.run.findings.finding_id), written atomically, so every chunk (or process) that
shrinks to the same finding lands on the same folder. Layout (format `parity-bundle/2`,
`harness.run.records.BundleDoc`; bundles of format /1 still load):

    bundle.json        what it is: its bug key, divergences, seed and chunk, profile and
                       budgets, the workgroups-per-dimension limit it ran under (null:
                       the device's), adapters, versions, `sources` (hashes of the Python and
                       shader sources the run ran), shader hashes, `repeatability`,
                       `evidence` (the worst element of each diverging tensor: inputs
                       around it, each backend's output, reference and budget there),
                       replay commands (relative to the run folder)
    case/              the case (`Case.save`): graph.json, graph.npz (constants),
                       steps.npz (every step's inputs), case.json (live shapes per step)
    shaders/wgsl/      the WGSL of every kernel the graph's ops use, as the run saw them
    shaders/glsl/      the GLSL likewise, with include/ (the files they include)
    kernels/           with `parity run --kernels`: the kernel manifest (kernels.toml) and
                       every file it names (shaders, SPIR-V, adapter modules, the GLSL
                       includes next to them), at the same paths relative to it
    timeline.json      every step: live inputs, cur_dims and dispatches of the contract
                       model and each backend, error/budget utilizations, divergences
    arrays.npz         evidence for the report: per diverging output and step, each
                       backend's values, the float64 reference and the per-element budget
                       (`s<step>/<tensor>/<backend>/{actual,reference,budget}`), and slack
                       canary maps (`canary/s<step>/<tensor>/<backend>`: 0 live, 1 slack
                       intact, 2 slack written)
    README.md          how to replay it, from the run folder

`parity replay BUNDLE` reruns the case through `LockstepRunner` with the bundle's own shader
copies (so a shader bug reproduces on a fresh clone) or, with `--shaders worktree`, with the
working tree's, under the workgroup limit it was found with; it says whether the same
bug (its `harness.check.divergence.BugKey`) still shows, and which Python files differ from the
ones the bundle was found with. A bundle with `kernels/` replays with that manifest's
kernels; when it names a Python adapter, only with `allow_adapters` (`parity replay
--allow-adapters`): otherwise it is refused, since replaying would run Python from the bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from graph_format import Graph, GraphFormatError, OpNode, Runtime, StepResult
from graph_format.kernels import MANIFEST_NAME, KernelManifest, KernelManifestError, load_manifest
from harness.check.backends import BACKENDS, SHADER_LANGUAGES, open_runtimes
from harness.check.contract import expected_build_error
from harness.check.divergence import BugKey
from harness.check.history import HistoryError, Loop, load_loops, run_loops, save_loops
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.check.reference import ReferenceEvaluator, op_args
from harness.check.steps import StepLoop, grid_limit, intermediates
from harness.gen.case import Case
from harness.model import Args, local_budgets
from harness.model.numerics import utilization_map
from harness.ops import MODELS, model_for
from harness.run.commands import (
    COMMANDS_CWD,
    FINDING_COMMANDS_NOTE,
    finding_commands,
    names_adapters,
)
from harness.run.records import (
    BUNDLE_FORMAT,
    OUTPUT_ERRNOS,
    BundleDoc,
    BundleHistory,
    BundleRun,
    CaseRecord,
    DivergenceRecord,
    ElementInput,
    ElementValues,
    EvidenceElement,
    OutputError,
    RecordError,
    RunMeta,
    divergence_record,
    read_bundle_doc,
    write_json,
    writing,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO_SHADER_DIRS = {"webgpu": REPO_ROOT / "wgsl", "vulkan": REPO_ROOT / "glsl"}
_EXT = {"webgpu": ".wgsl", "vulkan": ".comp"}
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# Largest tensor (elements) whose values a bundle keeps as evidence.
MAX_EVIDENCE_ELEMENTS = 1 << 20


class BundleError(ValueError):
    """A folder that is not a readable bundle; the message says what is missing."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kernel_stems(graph: Graph) -> dict[str, set[str]]:
    """Per backend, the shader file stems of every kernel variant the graph's ops may use."""
    out: dict[str, set[str]] = {"webgpu": set(), "vulkan": set()}
    for node in graph.ops:
        model = MODELS.get(node.op)
        for spec in model.kernels.values() if model is not None else ():
            out["webgpu"].add(spec.wgsl)
            out["vulkan"].add(spec.glsl)
    return out


KERNELS_DIR = "kernels"
# A history-dependent finding's history (harness.check.history): what runs before its case.
HISTORY_DIR = "history"


def copy_kernels(manifest: KernelManifest, dest: Path) -> dict[str, str]:
    """Copy a kernel manifest and every file it names (with the GLSL files their
    `#include`s name next to them) into `dest`, at their paths relative to the manifest.

    Returns `kernels/<relative path>` -> sha256 of every file copied.
    """
    root = manifest.folder
    pending = list(manifest.files())
    hashes: dict[str, str] = {}
    seen: set[Path] = set()
    while pending:
        src = pending.pop()
        if src in seen or not src.is_file():
            continue
        seen.add(src)
        try:
            rel = src.resolve().relative_to(root.resolve())
        except ValueError:
            continue  # an include outside the folder: the project's glsl/include
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        hashes[f"{KERNELS_DIR}/{rel.as_posix()}"] = sha256_file(target)
        if src.suffix in (".comp", ".glsl", ".glslh"):
            pending += [src.parent / n for n in _INCLUDE.findall(src.read_text(errors="replace"))]
    return hashes


def copy_shaders(
    graph: Graph, dest: Path, shader_dirs: Mapping[str, Path] | None = None
) -> dict[str, str]:
    """Copy the shaders of the graph's kernels (and GLSL includes) into `dest/<lang>/`.

    Returns relative path -> sha256 of every file copied.
    """
    dirs = {**REPO_SHADER_DIRS, **{k: Path(v) for k, v in (shader_dirs or {}).items()}}
    hashes: dict[str, str] = {}
    for backend, stems in kernel_stems(graph).items():
        lang = SHADER_LANGUAGES[backend]
        src_root, out_root = dirs[backend], dest / lang
        pending = [src_root / f"{stem}{_EXT[backend]}" for stem in sorted(stems)]
        seen: set[Path] = set()
        while pending:
            src = pending.pop()
            if src in seen or not src.exists():
                continue
            seen.add(src)
            rel = src.relative_to(src_root)
            target = out_root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            hashes[f"{lang}/{rel.as_posix()}"] = sha256_file(target)
            if backend == "vulkan":
                pending += [src_root / "include" / n for n in _INCLUDE.findall(src.read_text())]
    return hashes


# ---------------------------------------------------------------------------- evidence


@dataclass
class Evidence:
    """What a bundle keeps of a re-run: arrays for `arrays.npz`, worst elements for
    bundle.json's `evidence` (see `_worst_element`)."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    elements: list[EvidenceElement] = field(default_factory=list)


def capture_evidence(
    runtimes: Sequence[Runtime], case: Case, divergences: Sequence[DivergenceRecord]
) -> Evidence:
    """Re-run a case and keep the data behind its divergences (see the module docstring).

    Numeric and NaN/Inf divergences of an op get that op's reference evaluated on each
    backend's own inputs to it (as the per-op oracle does); graph-output divergences get the
    end-to-end reference. Each such tensor also gets its worst element: the values there
    (each backend's output, reference and budget) and the op's inputs around it. Canary
    divergences get a map of the tensor's allocation.
    """
    graph = case.graph
    wanted: dict[int, set[str]] = {}
    canary: dict[int, set[str]] = {}
    # Tensors found between the tiers: their evidence shows the statistical bound they broke.
    suspect: dict[int, set[str]] = {}
    for d in divergences:
        if not d.tensor or d.step < 0:
            continue
        if d.kind in ("numeric", "nan_inf", "bit_mismatch", "stale_read", "numeric_suspect"):
            wanted.setdefault(d.step, set()).add(d.tensor)
        if d.kind == "numeric_suspect":
            suspect.setdefault(d.step, set()).add(d.tensor)
        if d.kind in ("canary_write", "stale_read"):
            canary.setdefault(d.step, set()).add(d.tensor)
    evidence = Evidence()
    if (not wanted and not canary) or expected_build_error(graph) is not None:
        return evidence
    reference = ReferenceEvaluator(graph)
    with StepLoop(runtimes, case, reads=intermediates(graph), limit=grid_limit(runtimes)) as loop:
        # A runtime that did not load runs no step: the lockstep run recorded why.
        for step in loop.steps(until=max([*wanted, *canary])):
            if not step.accepted:
                continue  # the lockstep run already recorded the failure
            index, results, fill = step.index, step.results, step.fill
            values, errors, _ = reference.step(step.inputs)
            for tensor in sorted(wanted.get(index, ())):
                _numeric_evidence(
                    evidence,
                    graph,
                    index,
                    tensor,
                    step.inputs,
                    results,
                    values,
                    errors,
                    statistical=tensor in suspect.get(index, ()),
                )
            for tensor in sorted(canary.get(index, ())):
                for name, res in results.items():
                    raw = res.raw.get(tensor)
                    if raw is None:
                        continue
                    offset, word = fill[tensor]
                    words = raw[: len(raw) // 4 * 4].view(np.uint32)
                    state = np.zeros(words.shape, np.uint8)
                    state[offset // 4 :] = np.where(words[offset // 4 :] == word, 1, 2)
                    evidence.arrays[f"canary/s{index}/{tensor}/{name}"] = state
    return evidence


def _numeric_evidence(
    evidence: Evidence,
    graph: Graph,
    index: int,
    tensor: str,
    inputs: Mapping[str, Any],
    results: Mapping[str, StepResult],
    values: Mapping[str, np.ndarray],
    errors: Mapping[str, Any],
    *,
    statistical: bool = False,
) -> None:
    """The evidence of one tensor's numeric finding: each backend's output with the
    reference and budget it was judged by (the op's own, or end to end), and the worst
    element; `statistical`: the op's statistical tier bound instead of its rigorous budget
    (a `numeric_suspect`)."""
    node = graph.producer(tensor)
    judged: dict[str, _Judged] = {}
    for name, res in results.items():
        observed = {**res.tensors, **res.outputs}
        actual = observed.get(tensor)
        if actual is None:
            continue
        ref, budget, scope = values.get(tensor), errors.get(tensor), "graph"
        args: Args | None = None
        if node is not None:
            # The op's arguments as this backend computed them: graph inputs, constants and
            # the intermediates it produced.
            local: dict[str, np.ndarray] = {
                n: np.asarray(v, np.float64) for n, v in inputs.items() if isinstance(v, np.ndarray)
            }
            for t in graph.tensors():
                if t.constant is not None and not t.state:  # state: its initial data only
                    local[t.name] = graph.constants[t.constant].astype(np.float64)
            local.update({n: v.astype(np.float64) for n, v in observed.items()})
            try:
                args = op_args(graph, node, local, res.symints)
            except Exception:
                args = None  # e.g. a state tensor it does not read back
        if (
            node is not None
            and args is not None
            and not any(t.state for _, t in node.tensor_args(graph))
        ):
            # The op's reference on this backend's own inputs and its budget in the graph's
            # precision, as the per-op oracle judges it (`check_ops`): the f32 budget of an
            # f16 graph's op put the backend the oracle passed 5e4x over it on the page.
            try:
                model = model_for(node.op)
                outs = model.reference(node, args)
                tiers = local_budgets(graph, node, args, outs)
                budgets = tiers.statistical if statistical else tiers.hard
                slot = next(s for s, out in node.outputs.items() if out == tensor)
                ref, budget, scope = outs[slot], budgets[slot], "op"
            except Exception:
                pass  # fall back to the end-to-end reference
        if ref is None or np.shape(ref) != actual.shape:
            continue
        budget_array = np.broadcast_to(
            np.asarray(budget if budget is not None else 0.0, np.float64), actual.shape
        )
        judged[name] = _Judged(
            np.asarray(actual), np.asarray(ref, np.float64), budget_array, scope, args
        )
        if actual.size <= MAX_EVIDENCE_ELEMENTS:
            key = f"s{index}/{tensor}/{name}"
            evidence.arrays[f"{key}/actual"] = np.asarray(actual, np.float32)
            evidence.arrays[f"{key}/reference"] = np.asarray(ref, np.float64)
            evidence.arrays[f"{key}/budget"] = budget_array.copy()
    element = _worst_element(graph, node, index, tensor, judged)
    if element is not None:
        evidence.elements.append(element)


@dataclass
class _Judged:
    """One backend's output of a tensor with the reference and budget it is judged by."""

    actual: np.ndarray
    reference: np.ndarray
    budget: np.ndarray
    scope: str  # "op": the op's reference on this backend's inputs; "graph": end to end
    args: Mapping[str, Any] | None  # the op's arguments on this backend


# Values of an input's row the failure page shows around the worst element.
INPUT_WINDOW = 16


def _worst_element(
    graph: Graph,
    node: OpNode | None,
    index: int,
    tensor: str,
    judged: Mapping[str, _Judged],
) -> EvidenceElement | None:
    """The element of `tensor` furthest over its budget on any backend (by
    `numerics.utilization_map`, the oracle's rule; an element of another class than the
    reference first), and the values there on each backend, with the op's inputs around it
    (see `_input_view`): an entry of bundle.json's `evidence`.
    """
    utils = {
        name: utilization_map(j.actual, j.reference, j.budget)
        for name, j in judged.items()
        if j.actual.size
    }
    if not utils:
        return None
    ranked = {n: np.where(np.isnan(u), np.inf, u) for n, u in utils.items()}
    worst_on = max(ranked, key=lambda n: float(np.max(ranked[n])))
    at = tuple(
        int(i) for i in np.unravel_index(int(np.argmax(ranked[worst_on])), ranked[worst_on].shape)
    )
    backends = {}
    for name, util in utils.items():
        j = judged[name]
        actual, ref = float(j.actual[at]), float(j.reference[at])
        inputs = []
        for slot, value in (j.args or {}).items():
            arg = node.args.get(slot) if node is not None else None
            if value is None:
                continue
            label = ", ".join(arg) if isinstance(arg, tuple) else str(arg)
            inputs.append(_input_view(slot, label, value, j.actual.shape, at))
        backends[name] = ElementValues(
            actual, ref, float(j.budget[at]), abs(actual - ref), float(util[at]), j.scope, inputs
        )
    return EvidenceElement(
        step=index,
        tensor=tensor,
        shape=list(judged[worst_on].actual.shape),
        index=list(at),
        worst_on=worst_on,
        backends=backends,
        op=node.name if node is not None else None,
        op_type=node.op if node is not None else None,
    )


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    return len(shape) <= len(to) and all(
        a in (1, b) for a, b in zip(reversed(shape), reversed(to), strict=False)
    )


def _input_view(
    slot: str, name: str, value: Any, out_shape: tuple[int, ...], at: tuple[int, ...]
) -> ElementInput:
    """The values of one op argument (`slot`, passed `name`) around output element `at`,
    for the failure page.

    Which input elements feed an output element depends on the op, so this shows a row
    chosen by shape, and says how (`where`): an input of the output's shape, or one that
    broadcasts to it, shows its last-dim row at the same position with that element marked
    (`highlight`, an index into `values`); one whose leading dims match the output's shows
    the row at the same leading position (a matmul's activations); one whose first dim is
    the output's last shows its row at the output's column (a matmul's weight rows);
    anything else its first values. At most INPUT_WINDOW values, around the marked one.
    Scalars and SymInts are shown as they are.
    """
    if isinstance(value, tuple):
        return ElementInput(slot, name, "value", "", list(value), None, 0, len(value))
    a = np.asarray(value)
    if a.ndim == 0:
        return ElementInput(slot, name, "value", "", [a.item()], None, 0, 1)
    n = len(out_shape)
    column: int | None = None
    if _broadcasts(a.shape, out_shape):
        offset = n - a.ndim
        position = tuple(0 if a.shape[k] == 1 else at[offset + k] for k in range(a.ndim))
        lead, column = position[:-1], position[-1]
        where = "same position" if a.shape == out_shape else "same position, broadcast"
    elif a.ndim == n and a.shape[:-1] == out_shape[:-1]:
        lead, where = at[:-1], "same row"
    elif n and a.shape[0] == out_shape[-1]:
        lead, where = at[-1:], "row of the output's column"
    else:
        lead, where = (), "first values"
    row = a[lead].ravel()
    start = 0
    if column is not None:
        start = max(0, min(column - INPUT_WINDOW // 2, row.size - INPUT_WINDOW))
    stop = min(row.size, start + INPUT_WINDOW)
    flat = " flattened" if a.ndim - len(lead) > 1 else ""
    return ElementInput(
        slot,
        name,
        where + flat,
        "[" + "".join(f"{i}, " for i in lead) + f"{start}:{stop}]",
        row[start:stop].tolist(),
        None if column is None else column - start,
        start,
        int(row.size),
    )


# ---------------------------------------------------------------------------- writing


def write_bundle(
    folder: Path,
    case: Case,
    record: CaseRecord,
    *,
    run: RunMeta,
    runtimes: Sequence[Runtime] | None = None,
    shader_dirs: Mapping[str, Path] | None = None,
    shrunk: bool = True,
    provisional: bool = False,
    manifest: KernelManifest | None = None,
    unshrunk: str | None = None,
    bug: BugKey | None = None,
    history: Sequence[Loop] = (),
) -> Path:
    """Write the bundle of one failing case, atomically.

    The bundle is written into a temporary folder beside `folder` and renamed into place,
    so a reader (or another process writing the same finding into the same run folder)
    never sees half a bundle; when `folder` already holds a bundle, that one is kept.

    Args:
        folder: `bundles/<finding id>` (harness.run.findings.finding_id) of the run folder.
        record: the case's record (harness.run.records.case_record).
        run: the run's metadata (run.json): seed, profile, budgets, adapters, versions,
            source hashes.
        runtimes: when given, the case is re-run to capture evidence.
        shader_dirs: the shader folders the run used (default: the repo's).
        shrunk: whether Hypothesis finished shrinking it (False for an interrupted run).
        unshrunk: why it is not shrunk ("shrink budget spent", ...), if it is not.
        provisional: the first divergent case of a bug, written as soon as it was seen; the
            chunk's finding replaces it when the chunk ends (a killed run keeps it).
        manifest: the kernel manifest the run ran (`--kernels`): copied with its files.
        bug: the key the bundle is of, when not its case's own (`record.bug`): a key that
            showed beside it (harness.run.findings.divergent_keys); replay looks for it.
        history: for a history-dependent finding, the loops that must run before its case
            in a fresh process for its bug to show (harness.check.cold): kept in `history/`.

    Raises:
        OutputError: the disk would not take it (full, read-only): naming `folder`, which
            is then not there (nor any part of it).
    """
    with writing(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        _write_bundle_files(
            tmp,
            folder.name,
            case,
            record,
            run,
            runtimes,
            shader_dirs,
            shrunk,
            provisional,
            manifest,
            unshrunk,
            bug,
        )
        if history:
            _write_history(tmp, history)
        try:
            os.rename(tmp, folder)
        except OSError:
            if existing_bundle(folder) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # written meanwhile by another process
    except (OSError, OutputError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        code = err.errno
        if code is not None and (isinstance(err, OutputError) or code in OUTPUT_ERRNOS):
            raise OutputError(folder, code) from None  # named: the bundle, not its temp file
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _write_bundle_files(
    folder: Path,
    bundle_id: str,
    case: Case,
    record: CaseRecord,
    run: RunMeta,
    runtimes: Sequence[Runtime] | None,
    shader_dirs: Mapping[str, Path] | None,
    shrunk: bool,
    provisional: bool,
    manifest: KernelManifest | None,
    unshrunk: str | None = None,
    bug: BugKey | None = None,
) -> None:
    case.save(folder / "case")
    hashes = copy_shaders(case.graph, folder / "shaders", shader_dirs)
    kernels = copy_kernels(manifest, folder / KERNELS_DIR) if manifest is not None else {}
    write_json(folder / "timeline.json", {"steps": record.timeline})
    evidence = Evidence()
    if runtimes:
        evidence = capture_evidence(runtimes, case, record.divergences)
        # As dict[str, Any]: numpy's stub would let a **dict[str, ndarray] reach
        # savez_compressed's `allow_pickle: bool` keyword (no key here is called that).
        np.savez_compressed(folder / "arrays.npz", **cast(dict[str, Any], evidence.arrays))
    kept = BundleRun(
        seed=run.seed,
        profile=run.profile,
        families=list(run.families),
        budgets=run.budgets,
        shard=run.shard,
        adapters=run.adapters,
        versions=run.versions,
        git=run.git,
        shader_dirs=run.shader_dirs,
        backends=list(run.adapters),
    )
    doc = BundleDoc(
        format=BUNDLE_FORMAT,
        id=bundle_id,
        case_id=record.case_id,
        family=record.family,
        chunk=record.chunk,
        shrunk=shrunk,
        unshrunk=unshrunk,
        provisional=provisional,
        bug=bug or record.bug,
        beside=record.bug if bug is not None and bug != record.bug else None,
        divergences=record.divergences,
        max_utilization=record.max_utilization,
        utilization={
            str(s.index): {b: v.utilization for b, v in s.backends.items()} for s in record.timeline
        },
        evidence=evidence.elements,
        step_shapes=record.step_shapes,
        max_workgroups_per_dim=record.max_workgroups_per_dim,
        repeatability=record.repeatability,
        first_divergent=record.first_divergent,
        run=kept,
        sources=run.sources or source_digests(shader_dirs),
        chunk_seed=_chunk_seed(run, record.chunk),
        shaders=hashes,
        kernels=kernels,
        commands_cwd=COMMANDS_CWD,
        # `folder` is bundles/<id> (or its temporary twin): two levels below the run folder.
        commands=_commands(folder, bundle_id, run, folder.parent.parent, record.family),
    )
    write_json(folder / "bundle.json", doc)
    (folder / "README.md").write_text(_readme(doc))


def _commands(folder: Path, bundle_id: str, run: RunMeta, run_dir: Path, family: str) -> list[str]:
    """The commands of the bundle at `folder`, to be named `bundles/<bundle_id>` in
    `run_dir`: replay asks for `--allow-adapters` when its manifest names an adapter."""
    manifest = folder / KERNELS_DIR / MANIFEST_NAME
    adapters = manifest.is_file() and names_adapters(manifest)
    return finding_commands(f"bundles/{bundle_id}", run, run_dir, family, allow_adapters=adapters)


def rewrite_commands(folder: Path, run: RunMeta, run_dir: Path) -> None:
    """Render the commands of a bundle copied into another run folder (`parity merge`)
    again, for where it now lies: bundle.json's `commands` and README.md.

    Raises:
        RecordError: its bundle.json is unreadable.
    """
    doc = read_bundle_doc(folder / "bundle.json")
    doc.commands = _commands(folder, folder.name, run, run_dir, doc.family or "")
    write_json(folder / "bundle.json", doc)
    (folder / "README.md").write_text(_readme(doc))


def _write_history(folder: Path, loops: Sequence[Loop]) -> None:
    """Keep a history-dependent finding's history in the bundle being written at `folder`:
    `history/` (harness.check.history.save_loops) and bundle.json's `history` entry."""
    save_loops(folder / HISTORY_DIR, loops)
    doc = read_bundle_doc(folder / "bundle.json")
    doc.history = BundleHistory(HISTORY_DIR, len(loops), len({id(entry.case) for entry in loops}))
    write_json(folder / "bundle.json", doc)
    (folder / "README.md").write_text(_readme(doc))


def existing_bundle(folder: Path) -> BundleDoc | None:
    """The bundle.json of a complete bundle at `folder`, or None when there is none."""
    try:
        return read_bundle_doc(folder / "bundle.json")
    except RecordError:
        return None


def _chunk_seed(run: RunMeta, chunk: str) -> int | None:
    return next((c.seed for c in run.plan if c.id == chunk), None)


def _readme(doc: BundleDoc) -> str:
    lines = [
        f"# Repro bundle {doc.id}",
        "",
        f"Family `{doc.family}`, first found by chunk `{doc.chunk}`, case `{doc.case_id}`"
        + (
            " (provisional: the first divergent case seen; the run ended before its chunk did)"
            if doc.provisional
            else (
                f" (as found, not shrunk: its case showed `{doc.beside}` first, the key "
                "shrinking follows)"
                if doc.beside is not None
                else (
                    ""
                    if doc.shrunk
                    else f" (unshrunk: {doc.unshrunk or 'the run was interrupted'})"
                )
            )
        )
        + ". Other chunks that shrank to the same case and bug share this bundle; the run's "
        "report lists them.",
        "",
        f"Bug (op type | class | blamed backend | numeric band): `{doc.bug}`",
        "",
        "Replay from the run folder (the folder that holds `bundles/` and `index.html`; the "
        "paths below are relative to it). " + FINDING_COMMANDS_NOTE,
        "",
        "```sh",
        "cd <run folder>",
        *doc.commands,
        "```",
        "",
        "Or from inside this folder: `parity replay .`",
        "",
        f"Found with commit `{doc.run.git}`; `sources` in bundle.json "
        "hashes the Python and shader sources, and `parity replay` warns when the Python "
        "code it runs differs.",
        "",
    ]
    if doc.history:
        lines += [
            "This finding is history-dependent: its bug showed only after what ran before it "
            f"in the worker. `{doc.history.folder}/` keeps "
            f"{doc.history.loops} loop(s) of that history (shrunk), which `parity "
            "replay` runs, in order and on fresh runtimes, before the case (`--no-history`: "
            "the case alone).",
            "",
        ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- sources

# The Python packages whose code decides what a case does and how it is judged.
PYTHON_SOURCES = ("graph_format", "harness", "webgpu_backend", "vulkan_ref")


def _short_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def python_digests(root: Path = REPO_ROOT) -> dict[str, str]:
    """Per Python file of PYTHON_SOURCES under `root` (relative path), a 16-hex sha256."""
    out = {}
    for package in PYTHON_SOURCES:
        for path in sorted((root / package).rglob("*.py")):
            out[path.relative_to(root).as_posix()] = _short_sha(path.read_bytes())
    return out


def _tree_digest(root: Path) -> str | None:
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(root).as_posix()}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


def source_digests(shader_dirs: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """Hashes of the code a run runs (git's "+dirty" misses untracked and ignored files).

    `python`: per file of PYTHON_SOURCES; `python_digest`: of them all; `shaders`: per
    language, the whole shader folder the run builds kernels from.
    """
    python = python_digests()
    dirs = {**REPO_SHADER_DIRS, **{k: Path(v) for k, v in (shader_dirs or {}).items()}}
    return {
        "python": python,
        "python_digest": _short_sha(json.dumps(python, sort_keys=True).encode()),
        "shaders": {SHADER_LANGUAGES[b]: _tree_digest(Path(d)) for b, d in sorted(dirs.items())},
    }


def python_differences(bundle: Bundle) -> list[str] | None:
    """Python files of the running code that differ from the ones the bundle was found with
    (changed, added or removed), or None when the bundle records no hashes."""
    recorded = bundle.doc.sources.get("python")
    if not isinstance(recorded, dict) or not recorded:
        return None
    now = python_digests()
    return sorted(p for p in set(recorded) | set(now) if recorded.get(p) != now.get(p))


# ---------------------------------------------------------------------------- replay


@dataclass
class Bundle:
    """A bundle read back from disk."""

    path: Path
    doc: BundleDoc
    case: Case

    @property
    def bug(self) -> BugKey | None:
        """The bug it was found with (None: its case did not diverge)."""
        return self.doc.bug

    def shader_dirs(self) -> dict[str, Path]:
        """The bundle's own shader folders, per API."""
        return {api: self.path / "shaders" / lang for api, lang in SHADER_LANGUAGES.items()}

    @property
    def backends(self) -> tuple[str, ...]:
        """The runtimes it was found on (and replays on), in the run's order."""
        return tuple(self.doc.run.backends) or BACKENDS

    def manifest(self, allow_adapters: bool = False) -> KernelManifest | None:
        """The kernel manifest the bundle carries (None: the run had none).

        Raises:
            BundleError: it is malformed, or names a Python adapter and `allow_adapters`
                is off (replaying would run Python from the bundle), or an adapter module
                whose sha256 is not the one bundle.json records (changed since the run).
        """
        if not self.doc.kernels:
            return None
        path = self.path / KERNELS_DIR / MANIFEST_NAME
        try:
            manifest = load_manifest(path)
        except KernelManifestError as err:
            raise BundleError(str(err)) from None
        adapters = sorted({str(e.adapter) for e in manifest.entries.values() if e.adapter})
        if adapters and not allow_adapters:
            raise BundleError(
                f"{path}: names the Python adapter(s) {', '.join(adapters)}: replaying would run "
                "Python from the bundle; pass --allow-adapters to allow it"
            )
        # Only the code the run ran may run: an adapter edited since (by hand, or by whoever
        # handed the bundle on) is refused, naming both hashes.
        for module in sorted({e.adapter.file for e in manifest.entries.values() if e.adapter}):
            rel = (Path(KERNELS_DIR) / module.relative_to(path.parent)).as_posix()
            recorded, now = self.doc.kernels.get(rel), sha256_file(module)
            if recorded != now:
                was = f"the {recorded} bundle.json records" if recorded else "recorded"
                raise BundleError(
                    f"{self.path / rel}: sha256 {now} is not {was}: the adapter changed since "
                    "the run, so replaying would run other code; refused (restore the file, or "
                    "take the bundle again)"
                )
        return manifest

    @property
    def max_workgroups_per_dim(self) -> int | None:
        """The lowered workgroups-per-dimension limit the case ran under (None: none)."""
        return self.doc.max_workgroups_per_dim


def load_bundle(path: str | Path) -> Bundle:
    """Read a bundle folder (either bundle format).

    Raises:
        BundleError: the folder is missing or is not a bundle; the message says what.
    """
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"{path}: no such bundle folder (expected a folder with bundle.json)")
    try:
        doc = read_bundle_doc(path / "bundle.json")
    except RecordError as err:
        raise BundleError(str(err)) from None
    try:
        case = Case.load(path / "case")
    except GraphFormatError as err:  # its message names the file
        raise BundleError(str(err)) from None
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise BundleError(f"{path / 'case' / 'case.json'}: not a case description: {err}") from None
    for rel in sorted(doc.shaders):
        if not (path / "shaders" / rel).is_file():
            raise BundleError(
                f"{path / 'shaders' / rel}: missing: bundle.json lists it among the shaders "
                "the run used (the bundle is incomplete; copy it whole)"
            )
    for rel in sorted(doc.kernels):
        if not (path / rel).is_file():
            raise BundleError(
                f"{path / rel}: missing: bundle.json lists it among the kernel manifest's files "
                "(the bundle is incomplete; copy it whole)"
            )
    return Bundle(path, doc, case)


@dataclass
class ReplayOutcome:
    """What a replay found.

    Attributes:
        status: still_failing (its bug shows again), fixed (no divergence) or changed.
        expected: the bundle's bug; `found`: the bug keys the replay showed.
    """

    status: str
    expected: BugKey | None
    found: set[BugKey]
    divergences: list[DivergenceRecord] = field(default_factory=list)
    shader_mismatch: list[str] = field(default_factory=list)
    # Python files that differ from the bundle's run; None: the bundle records no hashes.
    python_mismatch: list[str] | None = None
    # Loops of the bundle's history run before its case (0: none, or `history=False`).
    history_loops: int = 0

    @property
    def exit_status(self) -> int:
        """0 when fixed, 1 when it still (or differently) diverges."""
        return 0 if self.status == "fixed" else 1


def replay(
    bundle: Bundle,
    *,
    shaders: str = "bundle",
    runtimes: Sequence[Runtime] | None = None,
    allow_adapters: bool = False,
    history: bool = True,
) -> ReplayOutcome:
    """Re-run a bundle's case on both backends and look for its bug.

    A history-dependent bundle (`history/`) first runs its history, in order, on fresh
    runtimes (never `runtimes`, whose pools hold what ran on them before): in a fresh
    process (`parity replay`), this is the state the worker was in when the case failed.

    Args:
        shaders: "bundle" (its own copies) or "worktree" (the repo's wgsl/ and glsl/); the
            kernels of a manifest the bundle carries are always the bundle's.
        runtimes: runtimes to use instead of opening them (their shaders are then theirs);
            ignored unless they are the bundle's backends (`Bundle.backends`: the WebGPU
            implementations it was found on, and Vulkan), for a bundle found under a
            lowered workgroup limit, which is replayed under that limit, and for one that
            carries a kernel manifest.
        allow_adapters: run the Python adapters of the bundle's manifest.
        history: run the bundle's history first, if it has one (False: the case alone).

    Raises:
        BackendUnavailable: no driver; the message says what to install.
        BundleError: the bundle's workgroup limit is above this device's, its manifest
            names an adapter and `allow_adapters` is off, or its history is unreadable.
    """
    mismatch: list[str] = []
    limit = bundle.max_workgroups_per_dim
    manifest = bundle.manifest(allow_adapters)
    loops = bundle_history(bundle) if history else []
    given = [rt.name for rt in runtimes] if runtimes is not None else []
    if (
        runtimes is None
        or given != list(bundle.backends)
        or limit is not None
        or manifest is not None
        or loops
    ):
        dirs = bundle.shader_dirs() if shaders == "bundle" else None
        try:
            runtimes = open_runtimes(bundle.backends, dirs, limit, manifest, allow_adapters)
        except ValueError as err:  # a limit this device cannot lower to
            raise BundleError(
                f"{bundle.path / 'bundle.json'}: max_workgroups_per_dim: {err}"
            ) from None
    if shaders == "worktree":
        mismatch = shader_differences(bundle)
    if loops:
        try:
            run_loops({rt.name: rt for rt in runtimes}, loops)
        except HistoryError as err:
            raise BundleError(f"{bundle.path / HISTORY_DIR}: {err}") from None
    result: CaseResult = LockstepRunner(runtimes).run(bundle.case)
    found_records = [divergence_record(d, bundle.case) for d in result.divergences]
    found = {d.bug for d in found_records}
    if not found:
        status = "fixed"
    elif bundle.bug in found:
        status = "still_failing"
    else:
        status = "changed"
    return ReplayOutcome(
        status, bundle.bug, found, found_records, mismatch, python_differences(bundle), len(loops)
    )


def bundle_history(bundle: Bundle) -> list[Loop]:
    """The history a history-dependent bundle keeps (empty for any other bundle).

    Raises:
        BundleError: bundle.json names a history that is missing or unreadable.
    """
    if not bundle.doc.history:
        return []
    folder = bundle.path / bundle.doc.history.folder
    try:
        return load_loops(folder)
    except HistoryError as err:
        raise BundleError(f"{err} (bundle.json names it as the finding's history)") from None


def shader_differences(bundle: Bundle) -> list[str]:
    """Shader files whose working-tree copy differs from the bundle's (or is missing)."""
    out = []
    for rel, digest in sorted(bundle.doc.shaders.items()):
        lang, _, name = rel.partition("/")
        root = REPO_SHADER_DIRS["webgpu" if lang == "wgsl" else "vulkan"]
        path = root / name
        if not path.exists() or sha256_file(path) != digest:
            out.append(rel)
    return out

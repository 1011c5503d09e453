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

from graph_format import Graph, GraphFormatError, Runtime
from graph_format.kernels import MANIFEST_NAME, KernelManifest, KernelManifestError, load_manifest
from harness.check.backends import BACKENDS, SHADER_LANGUAGES, open_runtimes
from harness.check.divergence import BugKey
from harness.check.history import HistoryError, Loop, load_loops, run_loops, save_loops
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.gen.case import Case
from harness.ops import MODELS
from harness.run.commands import (
    COMMANDS_CWD,
    FINDING_COMMANDS_NOTE,
    finding_commands,
    names_adapters,
)
from harness.run.evidence import Evidence, capture_evidence
from harness.run.records import (
    BUNDLE_FORMAT,
    OUTPUT_ERRNOS,
    BundleDoc,
    BundleHistory,
    BundleRun,
    CaseRecord,
    DivergenceRecord,
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
    opened: list[Runtime] = []  # the runtimes opened here, closed on the way out
    if (
        runtimes is None
        or given != list(bundle.backends)
        or limit is not None
        or manifest is not None
        or loops
    ):
        dirs = bundle.shader_dirs() if shaders == "bundle" else None
        try:
            runtimes = opened = open_runtimes(
                bundle.backends, dirs, limit, manifest, allow_adapters
            )
        except ValueError as err:  # a limit this device cannot lower to
            raise BundleError(
                f"{bundle.path / 'bundle.json'}: max_workgroups_per_dim: {err}"
            ) from None
    if shaders == "worktree":
        mismatch = shader_differences(bundle)
    try:
        if loops:
            try:
                run_loops({rt.name: rt for rt in runtimes}, loops)
            except HistoryError as err:
                raise BundleError(f"{bundle.path / HISTORY_DIR}: {err}") from None
        result: CaseResult = LockstepRunner(runtimes).run(bundle.case)
    finally:
        for runtime in opened:
            runtime.close()
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

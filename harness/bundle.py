"""Repro bundles: a self-contained folder per finding, and replaying one without Hypothesis.

Layout of `bundles/<id>/` (format `parity-bundle/1`):

    bundle.json        what it is: signatures, divergences, seed and chunk, profile and
                       budgets, the workgroups-per-dimension limit it ran under (null:
                       the device's), adapters, versions, shader hashes, replay commands
    case/              the case (`Case.save`): graph.json, graph.npz (constants),
                       steps.npz (every step's inputs), case.json (live shapes per step)
    shaders/wgsl/      the WGSL of every kernel the graph's ops use, as the run saw them
    shaders/glsl/      the GLSL likewise, with include/ (the files they include)
    timeline.json      every step: live inputs, cur_dims and dispatches of the contract
                       model and each backend, error/budget utilizations, divergences
    arrays.npz         evidence for the report: per diverging output and step, each
                       backend's values, the float64 reference and the per-element budget
                       (`s<step>/<tensor>/<backend>/{actual,reference,budget}`), and slack
                       canary maps (`canary/s<step>/<tensor>/<backend>`: 0 live, 1 slack
                       intact, 2 slack written)
    README.md          how to replay it

`parity replay BUNDLE` reruns the case through `LockstepRunner` with the bundle's own shader
copies (so a shader bug reproduces on a fresh clone) or, with `--shaders worktree`, with the
working tree's, under the workgroup limit it was found with; it says whether the same
divergence signature (class, op, blamed backend) still shows.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graph_format import Graph, GraphFormatError, Runtime, StepResult, TensorValue
from harness.backends import BACKENDS, SHADER_LANGUAGES, open_runtimes
from harness.case import Case
from harness.contract import ContractModel, ModelStep, expected_build_error
from harness.lockstep import CaseResult, LockstepRunner
from harness.ops import MODELS, model_for
from harness.oracles import canary_fill
from harness.records import (
    RecordError,
    divergence_record,
    plain,
    read_json,
    write_json,
)
from harness.reference import ReferenceEvaluator, op_args

BUNDLE_FORMAT = "parity-bundle/1"
REPO_ROOT = Path(__file__).resolve().parents[1]
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
        for spec in getattr(model, "kernels", {}).values():
            out["webgpu"].add(spec.wgsl)
            out["vulkan"].add(spec.glsl)
    return out


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


def capture_evidence(
    runtimes: Sequence[Runtime], case: Case, divergences: Sequence[Mapping[str, Any]]
) -> dict[str, np.ndarray]:
    """Re-run a case and keep the arrays behind its divergences (see the module docstring).

    Numeric and NaN/Inf divergences of an op get that op's reference evaluated on each
    backend's own inputs to it (as the per-op oracle does); graph-output divergences get the
    end-to-end reference. Canary divergences get a map of the tensor's allocation.
    """
    graph = case.graph
    wanted: dict[int, set[str]] = {}
    canary: dict[int, set[str]] = {}
    for d in divergences:
        tensor, step = d.get("tensor"), int(d.get("step", -1))
        if not tensor or step < 0:
            continue
        if d.get("kind") in ("numeric", "nan_inf", "stale_read"):
            wanted.setdefault(step, set()).add(str(tensor))
        if d.get("kind") in ("canary_write", "stale_read"):
            canary.setdefault(step, set()).add(str(tensor))
    arrays: dict[str, np.ndarray] = {}
    if (not wanted and not canary) or expected_build_error(graph) is not None:
        return arrays
    loaded = {}
    try:
        for rt in runtimes:
            loaded[rt.name] = rt.load(graph)
        model = ContractModel(graph)
        reference = ReferenceEvaluator(graph)
        written = [n for node in graph.ops for n in node.outputs.values()]
        intermediates = [
            n
            for n in written
            if isinstance(graph.values[n], TensorValue) and n not in graph.outputs
        ]
        canaried = [t.name for t in graph.tensors() if t.constant is None and not t.state]
        for index, inputs in enumerate(case.steps):
            if index > max([*wanted, *canary]):
                break
            expected = model.try_step(inputs)
            fill: dict[str, tuple[int, int]] = {}
            if isinstance(expected, ModelStep):
                fill = canary_fill(index, graph, expected, canaried)
            results: dict[str, StepResult] = {}
            for name, lg in loaded.items():
                try:
                    results[name] = lg.execute(
                        inputs, read=intermediates, read_raw=list(fill), fill=fill
                    )
                except Exception:
                    continue  # the lockstep run already recorded the failure
            if not isinstance(expected, ModelStep):
                continue
            values, errors, _ = reference.step(inputs)
            for tensor in sorted(wanted.get(index, ())):
                _numeric_evidence(arrays, graph, index, tensor, inputs, results, values, errors)
            for tensor in sorted(canary.get(index, ())):
                for name, res in results.items():
                    raw = res.raw.get(tensor)
                    if raw is None:
                        continue
                    offset, word = fill[tensor]
                    words = raw[: len(raw) // 4 * 4].view(np.uint32)
                    state = np.zeros(words.shape, np.uint8)
                    state[offset // 4 :] = np.where(words[offset // 4 :] == word, 1, 2)
                    arrays[f"canary/s{index}/{tensor}/{name}"] = state
    finally:
        for lg in loaded.values():
            lg.close()
    return arrays


def _numeric_evidence(
    arrays: dict[str, np.ndarray],
    graph: Graph,
    index: int,
    tensor: str,
    inputs: Mapping[str, Any],
    results: Mapping[str, StepResult],
    values: Mapping[str, np.ndarray],
    errors: Mapping[str, Any],
) -> None:
    node = graph.producer(tensor)
    for name, res in results.items():
        observed = {**res.tensors, **res.outputs}
        actual = observed.get(tensor)
        if actual is None or actual.size > MAX_EVIDENCE_ELEMENTS:
            continue
        ref, budget = values.get(tensor), errors.get(tensor)
        if node is not None and not any(t.state for _, t in node.tensor_args(graph)):
            # The op's reference on this backend's own inputs, as the per-op oracle judges it.
            local: dict[str, np.ndarray] = {
                n: np.asarray(v, np.float64) for n, v in inputs.items() if isinstance(v, np.ndarray)
            }
            for t in graph.tensors():
                if t.constant is not None:
                    local[t.name] = graph.constants[t.constant].astype(np.float64)
            local.update({n: v.astype(np.float64) for n, v in observed.items()})
            try:
                model = model_for(node.op)
                args = op_args(graph, node, local, res.symints)
                outs = model.reference(node, args)
                budgets = model.budget(node, args, outs)
                slot = next(s for s, out in node.outputs.items() if out == tensor)
                ref, budget = outs[slot], budgets[slot]
            except Exception:
                pass  # fall back to the end-to-end reference
        if ref is None or np.shape(ref) != actual.shape:
            continue
        key = f"s{index}/{tensor}/{name}"
        arrays[f"{key}/actual"] = np.asarray(actual, np.float32)
        arrays[f"{key}/reference"] = np.asarray(ref, np.float64)
        arrays[f"{key}/budget"] = np.broadcast_to(
            np.asarray(budget if budget is not None else 0.0, np.float64), actual.shape
        ).copy()


# ---------------------------------------------------------------------------- writing


def write_bundle(
    folder: Path,
    case: Case,
    record: Mapping[str, Any],
    *,
    run: Mapping[str, Any],
    runtimes: Sequence[Runtime] | None = None,
    shader_dirs: Mapping[str, Path] | None = None,
    shrunk: bool = True,
) -> Path:
    """Write the bundle of one failing case.

    Args:
        record: the case's JSONL record (harness.records.case_record).
        run: the run's metadata (run.json): seed, profile, budgets, adapters, versions.
        runtimes: when given, the case is re-run to capture evidence arrays.
        shader_dirs: the shader folders the run used (default: the repo's).
        shrunk: whether Hypothesis finished shrinking it (False for an interrupted run).
    """
    folder.mkdir(parents=True, exist_ok=True)
    case.save(folder / "case")
    hashes = copy_shaders(case.graph, folder / "shaders", shader_dirs)
    write_json(folder / "timeline.json", {"steps": record.get("timeline", [])})
    if runtimes:
        arrays = capture_evidence(runtimes, case, record.get("divergences", []))
        np.savez_compressed(folder / "arrays.npz", **arrays)
    rel = folder.name
    doc = {
        "format": BUNDLE_FORMAT,
        "id": folder.name,
        "case_id": record.get("case_id"),
        "family": record.get("family"),
        "chunk": record.get("chunk"),
        "shrunk": shrunk,
        "signatures": sorted({d["signature"] for d in record.get("divergences", [])}),
        "divergences": record.get("divergences", []),
        "max_utilization": record.get("max_utilization"),
        "utilization": {
            str(s.get("index")): {b: v.get("utilization", {}) for b, v in s["backends"].items()}
            for s in record.get("timeline", [])
        },
        "step_shapes": record.get("step_shapes"),
        "max_workgroups_per_dim": record.get("max_workgroups_per_dim"),
        "repeatability": record.get("repeatability"),
        "first_divergent": record.get("first_divergent"),
        "run": {
            k: run.get(k)
            for k in (
                "seed",
                "profile",
                "families",
                "budgets",
                "shard",
                "adapters",
                "versions",
                "git",
                "shader_dirs",
            )
        },
        "chunk_seed": _chunk_seed(run, record.get("chunk")),
        "shaders": hashes,
        "commands": replay_commands(f"bundles/{rel}", run, record),
    }
    write_json(folder / "bundle.json", doc)
    (folder / "README.md").write_text(_readme(doc))
    return folder


def _chunk_seed(run: Mapping[str, Any], chunk: Any) -> int | None:
    for c in run.get("plan", []):
        if f"{c['family']}/{c['index']}" == chunk:
            return int(c["seed"])
    return None


def replay_commands(path: str, run: Mapping[str, Any], record: Mapping[str, Any]) -> list[str]:
    """Commands that replay a finding: the bundle, with either shaders, and its chunk."""
    budgets = run.get("budgets", {})
    chunk_run = (
        f"parity run --families {record.get('family')} --profile {run.get('profile')} "
        f"--seed {run.get('seed')} --max-examples {budgets.get('max_examples')} "
        f"--chunk-examples {budgets.get('chunk_examples')} --no-database"
    )
    if run.get("max_workgroups_per_dim"):
        chunk_run += f" --max-workgroups-per-dim {run['max_workgroups_per_dim']}"
    return [
        f"parity replay {path}",
        f"parity replay {path} --shaders worktree",
        f"parity regress {path}",
        chunk_run,
    ]


def _readme(doc: Mapping[str, Any]) -> str:
    lines = [
        f"# Repro bundle {doc['id']}",
        "",
        f"Family `{doc['family']}`, chunk `{doc['chunk']}`, case `{doc['case_id']}`"
        + ("" if doc["shrunk"] else " (not fully shrunk: the run was interrupted)")
        + ".",
        "",
        "Signatures (op type | class | blamed backend | regime):",
        "",
        *[f"- `{s}`" for s in doc["signatures"]],
        "",
        "Replay (from the repository root; the bundle's own shaders by default):",
        "",
        "```sh",
        *doc["commands"],
        "```",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- replay


@dataclass
class Bundle:
    """A bundle read back from disk."""

    path: Path
    doc: dict[str, Any]
    case: Case

    @property
    def signatures(self) -> set[tuple[str, str, str]]:
        """(class, op type, blamed backend) of every divergence recorded."""
        return {
            (str(d.get("kind")), str(d.get("op_type")), str(d.get("blame")))
            for d in self.doc.get("divergences", [])
        }

    def shader_dirs(self) -> dict[str, Path]:
        """The bundle's own shader folders, per backend."""
        return {b: self.path / "shaders" / SHADER_LANGUAGES[b] for b in BACKENDS}

    @property
    def max_workgroups_per_dim(self) -> int | None:
        """The lowered workgroups-per-dimension limit the case ran under (None: none)."""
        limit = self.doc.get("max_workgroups_per_dim")
        return int(limit) if limit is not None else None


def load_bundle(path: str | Path) -> Bundle:
    """Read a bundle folder.

    Raises:
        BundleError: the folder is missing or is not a bundle; the message says what.
    """
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"{path}: no such bundle folder (expected a folder with bundle.json)")
    try:
        doc = read_json(path / "bundle.json", "bundle description")
    except RecordError as err:
        raise BundleError(str(err)) from None
    if doc.get("format") != BUNDLE_FORMAT:
        raise BundleError(
            f"{path / 'bundle.json'}: format must be {BUNDLE_FORMAT!r}, got {doc.get('format')!r}"
        )
    limit = doc.get("max_workgroups_per_dim")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BundleError(
            f"{path / 'bundle.json'}: max_workgroups_per_dim must be a positive integer or "
            f"null, got {limit!r}"
        )
    try:
        case = Case.load(path / "case")
    except (GraphFormatError, OSError, KeyError, ValueError) as err:
        raise BundleError(f"{path / 'case'}: the case cannot be read: {err}") from None
    return Bundle(path, doc, case)


@dataclass
class ReplayOutcome:
    """What a replay found."""

    status: str  # "still_failing" | "fixed" | "changed"
    expected: set[tuple[str, str, str]]
    found: set[tuple[str, str, str]]
    divergences: list[dict[str, Any]] = field(default_factory=list)
    shader_mismatch: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """0 when fixed, 1 when it still (or differently) diverges."""
        return 0 if self.status == "fixed" else 1


def replay(
    bundle: Bundle, *, shaders: str = "bundle", runtimes: Sequence[Runtime] | None = None
) -> ReplayOutcome:
    """Re-run a bundle's case on both backends and compare signatures.

    Args:
        shaders: "bundle" (its own copies) or "worktree" (the repo's wgsl/ and glsl/).
        runtimes: runtimes to use instead of opening them (their shaders are then theirs);
            ignored for a bundle found under a lowered workgroup limit, which is replayed
            under that limit.

    Raises:
        BackendUnavailable: no driver; the message says what to install.
        BundleError: the bundle's workgroup limit is above this device's.
    """
    mismatch: list[str] = []
    limit = bundle.max_workgroups_per_dim
    if runtimes is None or limit is not None:
        dirs = bundle.shader_dirs() if shaders == "bundle" else None
        try:
            runtimes = open_runtimes(BACKENDS, dirs, limit)
        except ValueError as err:  # a limit this device cannot lower to
            raise BundleError(
                f"{bundle.path / 'bundle.json'}: max_workgroups_per_dim: {err}"
            ) from None
    if shaders == "worktree":
        mismatch = shader_differences(bundle)
    result: CaseResult = LockstepRunner(runtimes).run(bundle.case)
    found_records = [divergence_record(d, bundle.case) for d in result.divergences]
    found = {(d["kind"], d["op_type"], str(d["blame"])) for d in found_records}
    expected = bundle.signatures
    if not found:
        status = "fixed"
    elif expected & found:
        status = "still_failing"
    else:
        status = "changed"
    return ReplayOutcome(status, expected, found, plain(found_records), mismatch)


def shader_differences(bundle: Bundle) -> list[str]:
    """Shader files whose working-tree copy differs from the bundle's (or is missing)."""
    out = []
    for rel, digest in sorted(bundle.doc.get("shaders", {}).items()):
        lang, _, name = rel.partition("/")
        root = REPO_SHADER_DIRS["webgpu" if lang == "wgsl" else "vulkan"]
        path = root / name
        if not path.exists() or sha256_file(path) != digest:
            out.append(rel)
    return out

"""The commands a run folder prints to reproduce what it found, rendered in one place.

A run folder prints commands in three places: each bundle's README.md and bundle.json, each
failure page, and the index's "Reproduce this run". All of them are rendered here, from the
run's own record of its configuration (run.json, `harness.run.records.RunMeta`), so each
carries every option that shaped what the run found: profile, families, seed, example
budgets, shard and time budget (for the whole run), the example database (`--no-database`
or the folder), the expectations file, the shader folders (`--wgsl-dir`/`--glsl-dir`), the
kernel manifest (`--kernels`) and a lowered workgroup limit (`--max-workgroups-per-dim`).
Options that do not change what is found are left out (`--jobs`, `--adapters`,
`--worker-cases`, `--progress-every`).

Every command runs from the run folder (COMMANDS_CWD): paths are relative to it, so they
stay right wherever the folder is published, provided the shader folders and manifests a
run was given outside it travel alongside at the same relative place. A bundle needs
nothing outside itself to replay: it carries its case, the shaders its ops use, the kernel
manifest and its files, and the workgroup limit its chunk ran under.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from graph_format import runtime_api, webgpu_implementation
from graph_format.kernels import KernelManifestError, load_manifest
from harness.check.backends import DEFAULT_WEBGPU, SHADER_LANGUAGES
from harness.run.expectations import DEFAULT_FILE
from harness.run.records import RunMeta

# Where the commands run: their paths are relative to it.
COMMANDS_CWD = "the run folder (the folder that holds bundles/ and index.html)"
# The folder a re-run writes into, inside the run folder.
RERUN_OUT = "rerun"
# What each of a finding's commands (`finding_commands`) does, in their order.
FINDING_COMMANDS_NOTE = (
    "In order: replay the case with the bundle's own copies of its shaders and kernels (as "
    "the run had them; exit 1 while the bug shows); replay it with the working tree's wgsl/ "
    "and glsl/, to check a fix there (not a --wgsl-dir/--glsl-dir folder the run was given); "
    "keep the bundle as a regression test; search the finding's family again with the "
    "run's options, into rerun/."
)


def relative_path(path: str | Path, run_dir: Path) -> str:
    """`path` as a command run from `run_dir` names it (relative; `.` for the folder itself).

    A relative `path` is taken as relative to this process's working folder, like a path
    on its command line.
    """
    return os.path.relpath(Path(path).resolve(), Path(run_dir).resolve())


def _path_arg(path: str | Path, run_dir: Path) -> str:
    return shlex.quote(relative_path(path, run_dir))


def run_command(
    run: RunMeta,
    run_dir: Path,
    *,
    family: str | None = None,
    out: str = RERUN_OUT,
) -> str:
    """The `parity run` command that searches again what `run` searched, run from `run_dir`.

    Args:
        run: the run's run.json.
        run_dir: the run folder (the command's working folder).
        family: search only this family, to its end, with no example database (a finding's
            family: its chunks' seeds depend only on the run seed, the family and the
            chunk's index, so they are the chunks that found it); the run's shard, time
            budget and database are then left out. Default: the whole run, as it ran.
        out: the folder it writes into, relative to `run_dir`.
    """
    words = [
        "parity",
        "run",
        "--families",
        family if family is not None else ",".join(run.families),
        "--profile",
        run.profile,
        "--seed",
        str(run.seed),
        "--max-examples",
        str(run.budgets.max_examples),
        "--chunk-examples",
        str(run.budgets.chunk_examples),
    ]
    if family is None:
        words += _whole_run_words(run, run_dir)
    else:
        words.append("--no-database")
    if run.expectations_file is None:
        words.append("--no-expectations")
    elif Path(run.expectations_file).resolve() != DEFAULT_FILE:
        words += ["--expectations", _path_arg(run.expectations_file, run_dir)]
    for backend, folder in sorted(run.shader_overrides.items()):
        words += [f"--{SHADER_LANGUAGES[backend]}-dir", _path_arg(folder, run_dir)]
    if run.kernels:  # the manifest file: the command takes its folder
        words += ["--kernels", _path_arg(Path(run.kernels).parent, run_dir)]
    if run.max_workgroups_per_dim:
        words += ["--max-workgroups-per-dim", str(run.max_workgroups_per_dim)]
    webgpu = [webgpu_implementation(b) for b in run.adapters if runtime_api(b) == "webgpu"]
    if webgpu and tuple(webgpu) != DEFAULT_WEBGPU:
        words += ["--webgpu", ",".join(webgpu)]
    words += ["--out", shlex.quote(out)]
    return " ".join(words)


def _whole_run_words(run: RunMeta, run_dir: Path) -> list[str]:
    """The options of a whole run's command that a one-family search leaves out: its
    shard, time budget and example database."""
    words = []
    if run.shard.count > 1:
        words += ["--shard", str(run.shard)]
    if run.budgets.time_budget_s is not None:
        words += ["--time-budget", f"{run.budgets.time_budget_s:g}"]
    if run.database is not None:
        words += ["--database", _path_arg(run.database, run_dir)]
    else:
        words.append("--no-database")
    return words


def reproduce_commands(runs: Sequence[RunMeta], run_dir: Path) -> list[str]:
    """The index's "Reproduce this run": the run's command (or each shard's and their
    merge, for a merged folder), run from `run_dir`."""
    if len(runs) == 1:
        return [run_command(runs[0], run_dir)]
    outs = [f"{RERUN_OUT}/shard-{r.shard.index}-of-{r.shard.count}" for r in runs]
    return [
        *(run_command(r, run_dir, out=o) for r, o in zip(runs, outs, strict=True)),
        f"parity merge --out {RERUN_OUT}/merged {' '.join(outs)}",
    ]


def names_adapters(manifest: Path) -> bool:
    """Whether the kernel manifest at `manifest` (a kernels.toml, or its folder) names a
    Python adapter (False when it cannot be read)."""
    try:
        return any(e.adapter for e in load_manifest(manifest).entries.values())
    except KernelManifestError:
        return False


def finding_commands(
    bundle: str, run: RunMeta, run_dir: Path, family: str, *, allow_adapters: bool = False
) -> list[str]:
    """The commands of one finding, run from `run_dir`: replay its bundle (`bundle`, relative
    to `run_dir`) with its own shaders and with the working tree's, keep it as a regression
    test, and search its family again (into `rerun/`).

    Args:
        allow_adapters: the bundle's kernel manifest names a Python adapter, which replay
            runs only when asked (`--allow-adapters`).
    """
    replay = f"parity replay {shlex.quote(bundle)}"
    if allow_adapters:
        replay += " --allow-adapters"
    return [
        replay,
        f"{replay} --shaders worktree",
        f"parity regress {shlex.quote(bundle)}",
        run_command(run, run_dir, family=family),
    ]


__all__ = [
    "COMMANDS_CWD",
    "FINDING_COMMANDS_NOTE",
    "RERUN_OUT",
    "finding_commands",
    "names_adapters",
    "relative_path",
    "reproduce_commands",
    "run_command",
]

"""Kernels from elsewhere on the command line (docs/design.md §9): `parity run --kernels DIR`
and `parity check-kernels DIR`.

A kernel folder holds a manifest (`kernels.toml`, format parity-kernels/1) whose
`[<backend>.<slot>]` sections say which backend runs which of its kernels
(docs/bring-your-own-kernels.md). `parity run --kernels DIR` hands the manifest to both
runtimes (each takes its own sections) and lets its adapters run: the user named it.
`parity check-kernels DIR` validates a manifest against its shaders without running a case:
for each replaced slot it loads the smallest generated graph that runs the slot (and meets
the kernel's `requires`) on that backend, which reflects the kernel, resolves every binding,
member, override and specialization constant, and compiles it.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Mapping
from pathlib import Path

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample

from graph_format import (
    SLOTS,
    GraphBuildError,
    InputError,
    KernelBuildError,
    ParityError,
    ResizeError,
    Runtime,
)
from graph_format.kernels import (
    BACKENDS,
    MANIFEST_NAME,
    MASK_WRITERS,
    MASKED_READ,
    Backend,
    KernelManifest,
    KernelManifestError,
    load_manifest,
)
from harness.check.backends import SHADER_LANGUAGES, open_runtime
from harness.check.contract import BackendKernels, ContractModel, ModelStep
from harness.families import FAMILIES, family_for_op
from harness.gen.case import Case
from harness.run import console
from harness.run.console import UsageError
from harness.run.exitcodes import ExitStatus

# Generated examples tried per slot to find a graph that runs it (each takes milliseconds).
SEARCH_EXAMPLES = 300
# The device limit a slot's example is predicted under (expressions may read it).
DEFAULT_LIMIT = 65535


def load_kernels(text: str, flag: str = "--kernels ", *, resolve: bool = True) -> KernelManifest:
    """The manifest of `--kernels DIR` (a folder holding kernels.toml, or the file itself).

    Args:
        flag: how the command line named it, for the message.
        resolve: hold absolute paths (what a run records and hands its workers); else the
            paths as given, for a command that reads the files in this process only. A
            malformed manifest is named as given either way.

    Raises:
        UsageError: no such folder or file.
        KernelManifestError: the manifest is malformed (one line naming file and field).
    """
    path = Path(text)
    if not path.exists():
        raise UsageError(
            f"{flag}{text}: no such folder (expected a kernel folder holding {MANIFEST_NAME})"
        )
    try:
        return load_manifest(path.resolve() if resolve else path)
    except KernelManifestError as err:
        given = path / MANIFEST_NAME if path.is_dir() else path
        raise KernelManifestError(given, err.what, where=err.where, line=err.line) from None


def shown_path(path: Path) -> Path:
    """`path` relative to the working folder when inside it (as the user typed it)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def manifest_backends(manifest: KernelManifest) -> list[Backend]:
    """The backends a manifest replaces slots on, in the project's order."""
    return [b for b in BACKENDS if manifest.slots(b)]


def check_exclusive(manifest: KernelManifest | None, shader_dirs: Mapping[str, Path]) -> None:
    """`--wgsl-dir`/`--glsl-dir` and `--kernels` may not both replace one backend's kernels.

    Raises:
        UsageError: they do (one line naming both).
    """
    if manifest is None:
        return
    for backend in manifest_backends(manifest):
        if backend in shader_dirs:
            flag = f"--{SHADER_LANGUAGES[backend]}-dir"
            raise UsageError(
                f"{flag} and --kernels both replace {backend} kernels "
                f"({shown_path(manifest.path)} has [{backend}.*] sections): give the kernels in "
                "one of them"
            )


def _runs_slot(case: Case, slot: str, kernels: BackendKernels) -> bool:
    """Whether some step of `case` runs `slot` on the backend of `kernels`, as the contract
    predicts it there (the kernel's `requires` met)."""
    model = ContractModel(case.graph, None, {kernels.backend: kernels})
    for inputs in case.steps:
        contract, per_backend = model.verdicts(inputs)
        verdict = per_backend.get(kernels.backend, contract)
        if isinstance(verdict, ModelStep) and any(
            d[1] == slot and d[4] for d in verdict.dispatches
        ):
            return True
    return False


def example_case(slot: str, kernels: BackendKernels) -> Case | None:
    """A generated case that runs `slot` on the backend of `kernels` (None: none found)."""
    family = family_for_op(SLOTS[slot].op)
    if family is None:
        return None
    search = settings(
        database=None,
        max_examples=SEARCH_EXAMPLES,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Hypothesis's notes on large reprs
        try:
            return find(FAMILIES[family](), lambda c: _runs_slot(c, slot, kernels), settings=search)
        except NoSuchExample:
            return None


def _build_and_run(runtime: Runtime, case: Case) -> None:
    """Load `case`'s graph and execute its steps: the load reflects and compiles the kernel,
    the steps evaluate its manifest's expressions (counts, members) on real values. A step
    the graph refuses (its inputs, a kernel's `requires`) is passed over: a refusal the
    contract expects, not the kernel's fault."""
    loaded = runtime.load(case.graph)
    try:
        for inputs in case.steps:
            try:
                loaded.execute(inputs)
            except (InputError, ResizeError):
                continue
    finally:
        loaded.close()


def check_kernels_command(args: argparse.Namespace) -> int:
    """`parity check-kernels DIR`: every replaced slot's kernel reflects, binds, compiles and
    runs the steps of a generated case (its expressions evaluated on their values).

    Prints one line per slot on stderr; a kernel that does not fit its slot or does not
    compile is one line naming the file, the slot and what is wrong (the compiler's whole
    text follows, indented). Exits 0 when every kernel builds, 2 otherwise.
    """
    manifest = load_kernels(args.kernels_dir, flag="", resolve=False)  # its paths as typed
    backends = manifest_backends(manifest)
    if not backends:
        raise KernelManifestError(manifest.path, "replaces no slot: nothing to check")
    failed = 0
    for backend in backends:
        for slot in manifest.slots(backend):
            if not _check_slot(manifest, backend, slot):
                failed += 1
    if failed:
        console.err(f"parity check-kernels: {failed} kernel(s) of {manifest.path} do not build")
        return ExitStatus.BAD_INPUT
    return ExitStatus.CLEAN


def _alone(manifest: KernelManifest, backend: Backend, slot: str) -> KernelManifest:
    """A manifest replacing `slot` alone (with the qk kernels writing what a softmax
    reads): the slot's example graph may run other replaced slots too (a GEMV case holds a
    GEMM node), and the slot is judged on its own kernel, never on a neighbour's error."""
    entry = manifest.entry(backend, slot)
    assert entry is not None
    alone_entries = {(backend, slot): entry}
    if entry.masked_columns == MASKED_READ:  # with the qk kernels writing what it reads
        for writer in MASK_WRITERS:
            found = manifest.entry(backend, writer)
            if found is not None:
                alone_entries[(backend, writer)] = found
    return KernelManifest(manifest.path, alone_entries)


def _check_slot(manifest: KernelManifest, backend: Backend, slot: str) -> bool:
    """Build and run one replaced slot's kernel on its example case, with its line on
    stderr; False when the kernel does not build (not checked is not a failure)."""
    entry = manifest.entry(backend, slot)
    assert entry is not None
    where = f"{shown_path(entry.source)}: {backend}.{slot}"
    alone = _alone(manifest, backend, slot)
    runtime = open_runtime(backend, manifest=alone, allow_adapters=True)
    kernels = BackendKernels(backend, alone, DEFAULT_LIMIT)
    case = example_case(slot, kernels)
    if case is None:
        console.err(
            f"parity check-kernels: {where}: not checked: no generated graph runs "
            "the slot with its requires met"
        )
        return True
    try:
        _build_and_run(runtime, case)
    except KernelBuildError as err:
        _print_build_error(manifest, backend, slot, where, err)
        return False
    except KernelManifestError as err:
        console.err(f"parity check-kernels: {err}")
        return False
    except GraphBuildError as err:
        # The op refused the example (or its kernel's requires at load): the kernel
        # was not built, so it is not checked.
        console.err(f"parity check-kernels: {where}: not checked: {err}")
        return True
    except ParityError as err:
        console.err(f"parity check-kernels: {where}: {type(err).__name__}: {err}")
        return False
    # A kernel computing in another arithmetic is judged by budgets derived for it.
    arithmetic = f" (computes in {entry.precision})" if entry.precision != "f32" else ""
    console.err(f"parity check-kernels: {where}: ok{arithmetic}")
    return True


def _print_build_error(
    manifest: KernelManifest, backend: Backend, slot: str, where: str, err: KernelBuildError
) -> None:
    """A kernel that does not build: one line naming the file (the manifest's, for an error
    of a manifest key), the slot and what is wrong, then the compiler's text indented."""
    head, _, rest = err.compiler.partition("\n")
    while head.startswith(f"{slot}: "):  # `where` names the slot already
        head = head.removeprefix(f"{slot}: ")
    if head.startswith(f"{backend}.{slot}."):  # a manifest key: file, table, key
        console.err(f"parity check-kernels: {shown_path(manifest.path)}: {head}")
    else:
        console.err(f"parity check-kernels: {where}: {head}")
    if rest.strip():
        console.err("\n".join("    " + line for line in rest.splitlines()))

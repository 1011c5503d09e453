"""Helpers for tests that drive the `parity` command in subprocesses.

A planted bug is planted in a copy of the shaders (a WGSL rms_norm that drops its weight),
never in the shipped ones: `parity run --wgsl-dir` builds the WebGPU kernels from the copy.
Runs shared by several tests are made once per test session, even across pytest-xdist
workers (a lock file in the session's common temp folder serializes the first run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
WEIGHT_USE = "* weight[i]"
WEIGHT_DROPPED = "* (weight[i] * 0.0 + 1.0)"  # keeps the binding used, drops its effect
# The q4 GEMV's main loop (4 words in flight per lane, K > 1536) scaling its 4th word by the
# 3rd word's group scale (issue 20): the 3rd word's scale is kept and reused.
THIRD_WORD = "acc = fma(pair_dot(a2, b2, i2), scales[sr.x], acc);"
THIRD_SCALE_KEPT = "let s2 = scales[sr.x];\n            acc = fma(pair_dot(a2, b2, i2), s2, acc);"
FOURTH_WORD = "acc = fma(pair_dot(a3, b3, i3), scales[sr.x], acc);"
FOURTH_REUSES_THIRD = "acc = fma(pair_dot(a3, b3, i3), s2, acc);"

# The decode route's reduction over the splits dropping the 32nd split's term from the output
# (contexts past 1984 rows only).
SPLIT_TERM = "acc += exp(part_ml[2u * (base + i)] - top) * part_o[(base + i) * dim + d];"
SPLIT_32_DROPPED = (
    "acc += select(exp(part_ml[2u * (base + i)] - top), 0.0, i == 31u)"
    " * part_o[(base + i) * dim + d];"
)

# The rms_norm kernels' sum of squares stopping after a row's first 2048 elements (512 vec4
# texels in rms_norm_vec4).
SQUARES_LOOP = "for (var i = lane; i < params.row_width; i += wg_size) {\n        let v = "
SQUARES_CAPPED = (
    "for (var i = lane; i < min(params.row_width, 2048u); i += wg_size) {\n        let v = "
)
TEXELS_LOOP = "for (var i = lane; i < texels; i += wg_size) {\n        let v = "
TEXELS_CAPPED = "for (var i = lane; i < min(texels, 512u); i += wg_size) {\n        let v = "

# The flat binary kernel's mul reading b modulo 1024 (as if b sat in a tile of 4 workgroups
# of 256 invocations): wrong from the 1025th element on.
FLAT_MUL = "out[i] = a[i] * b[i];"
FLAT_MUL_WRAPPED = "out[i] = a[i] * b[i % 1024u];"

# fused_sdpa's softmax summing the exps of a row's first 1024 scores only: every long case
# (L of 2048 to 4096) shows it; the short ones (L <= 70) cannot.
EXP_SUM = "for (var c = lane; c < n; c += wg_size) {\n        sum += exp("
EXP_SUM_CAPPED = "for (var c = lane; c < min(n, 1024u); c += wg_size) {\n        sum += exp("


def plant_wgsl(dest: Path, plants: Mapping[str, Sequence[tuple[str, str]]]) -> Path:
    """A copy of wgsl/ at `dest` (made once) in which each (old, new) of `plants[name]` is
    applied to kernel file `name`; every old must occur there exactly once. Returns the
    folder."""
    if dest.exists():
        return dest
    from tests.plants import apply_swaps  # here: tests.plants imports both backends

    tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
    shutil.copytree(REPO / "wgsl", tmp)
    swaps = [(Path(name).stem, old, new) for name, pairs in plants.items() for old, new in pairs]
    apply_swaps(tmp, ".wgsl", swaps, once=True)
    tmp.rename(dest)
    return dest


def plant_rms_norm_without_weight(dest: Path) -> Path:
    """A copy of wgsl/ whose rms_norm kernels ignore the weight; returns the folder."""
    swap = [(WEIGHT_USE, WEIGHT_DROPPED)]
    return plant_wgsl(dest, {"rms_norm.wgsl": swap, "rms_norm_vec4.wgsl": swap})


def plant_gemv_fourth_word_reusing_third_scale(dest: Path) -> Path:
    """A copy of wgsl/ whose q4 GEMVs (f32 and f16) scale the 4th word in flight of their
    main loop by the 3rd word's scale; returns the folder."""
    swaps = [(THIRD_WORD, THIRD_SCALE_KEPT), (FOURTH_WORD, FOURTH_REUSES_THIRD)]
    return plant_wgsl(dest, {"q4gsw_gemv.wgsl": swaps, "q4gsw_gemv_f16.wgsl": swaps})


def plant_decode_dropping_split_32(dest: Path) -> Path:
    """A copy of wgsl/ whose sdpa decode reductions (f32 and f16) leave out the 32nd split
    (cache rows 1984-2047) of the output's sum; returns the folder."""
    swap = [(SPLIT_TERM, SPLIT_32_DROPPED)]
    return plant_wgsl(dest, {"sdpa_fd_reduce.wgsl": swap, "sdpa_fd_reduce_f16.wgsl": swap})


def plant_rms_norm_capping_its_sum(dest: Path) -> Path:
    """A copy of wgsl/ whose rms_norm kernels (scalar, vec4, f16) sum the squares of a row's
    first 2048 elements only; returns the folder."""
    scalar = [(SQUARES_LOOP, SQUARES_CAPPED)]
    return plant_wgsl(
        dest,
        {
            "rms_norm.wgsl": scalar,
            "rms_norm_f16.wgsl": scalar,
            "rms_norm_vec4.wgsl": [(TEXELS_LOOP, TEXELS_CAPPED)],
        },
    )


# Small bugs on long paths, far under the rigorous budgets there (issue 20: what only the
# exact tier, or the statistical one, sees). The q4 GEMV's main loop reading the lowest code of
# one word in flight (lane 8's first 4th word: codes 8 (3 wg_size + 8) ... + 7) one off.
GEMV_FOURTH_LOAD = "let a3 = weight[row0 + i3];"
GEMV_ONE_CODE_OFF = "let a3 = weight[row0 + i3] ^ select(0u, 1u, i3 == span + 8u);"
# The decode route's split kernel leaving cache row 2000 out of its softmax (numerator and
# normalizer): one key of a context past 2000.
SPLIT_PROB = "let p = select(0.0, exp(score - top), valid);"
SPLIT_ROW_2000_DROPPED = "let p = select(0.0, exp(score - top), valid && first + lane != 2000u);"
# rms_norm's mean over n + 1 in rows of 4096 or more, and without eps there.
RMS_MEAN = "let rstd = inverseSqrt(partial[0] / f32(params.row_width) + params.eps);"
RMS_MEAN_OVER_N_PLUS_1 = (
    "let rstd = inverseSqrt(partial[0] / f32(params.row_width + "
    "select(0u, 1u, params.row_width >= 4096u)) + params.eps);"
)
RMS_EPS_DROPPED = (
    "let rstd = inverseSqrt(partial[0] / f32(params.row_width) + "
    "select(params.eps, 0.0, params.row_width >= 4096u));"
)


def plant_gemv_one_code_off(dest: Path) -> Path:
    """A copy of wgsl/ whose f32 q4 GEMV reads one weight code of each even row one off, in
    its main loop (K > 1536 only); returns the folder."""
    return plant_wgsl(dest, {"q4gsw_gemv.wgsl": [(GEMV_FOURTH_LOAD, GEMV_ONE_CODE_OFF)]})


def plant_decode_dropping_row_2000(dest: Path) -> Path:
    """A copy of wgsl/ whose f32 sdpa decode split kernel leaves cache row 2000 out."""
    return plant_wgsl(dest, {"sdpa_fd_split.wgsl": [(SPLIT_PROB, SPLIT_ROW_2000_DROPPED)]})


def plant_rms_norm_mean_over_n_plus_1(dest: Path) -> Path:
    """A copy of wgsl/ whose f32 rms_norm kernels divide by n + 1 in rows of 4096 or more."""
    swap = [(RMS_MEAN, RMS_MEAN_OVER_N_PLUS_1)]
    return plant_wgsl(dest, {"rms_norm.wgsl": swap, "rms_norm_vec4.wgsl": swap})


def plant_rms_norm_dropping_eps(dest: Path) -> Path:
    """A copy of wgsl/ whose f32 rms_norm kernels add no eps in rows of 4096 or more."""
    swap = [(RMS_MEAN, RMS_EPS_DROPPED)]
    return plant_wgsl(dest, {"rms_norm.wgsl": swap, "rms_norm_vec4.wgsl": swap})


def plant_flat_mul_wrapping_at_1024(dest: Path) -> Path:
    """A copy of wgsl/ whose flat mul (f32) reads b[i % 1024]; returns the folder."""
    return plant_wgsl(dest, {"binary_flat.wgsl": [(FLAT_MUL, FLAT_MUL_WRAPPED)]})


def plant_softmax_capping_its_sum(dest: Path) -> Path:
    """A copy of wgsl/ whose fused_sdpa softmax normalizes by the exps of a row's first 1024
    scores; returns the folder."""
    return plant_wgsl(dest, {"fused_sdpa_softmax.wgsl": [(EXP_SUM, EXP_SUM_CAPPED)]})


# The position rope's exponent over D where 2/D belongs (theta^(-i/D)): every pair but the
# first turns at the wrong frequency, at every position but 0.
ROPE_EXPONENT = "let exponent = f32(2u * i) / f32(params.head_dim);"
ROPE_EXPONENT_OVER_D = "let exponent = f32(i) / f32(params.head_dim);"


def plant_rope_pos_exponent_over_d(dest: Path) -> Path:
    """A copy of wgsl/ whose position rope kernels (f32, f16) compute theta's exponent as
    i / D instead of 2i / D; returns the folder."""
    swaps = [(ROPE_EXPONENT, ROPE_EXPONENT_OVER_D)]
    return plant_wgsl(dest, {"rotary_emb_pos.wgsl": swaps, "rotary_emb_pos_f16.wgsl": swaps})


def read_summary(folder: Path) -> dict[str, Any]:
    """A run folder's summary.json."""
    summary: dict[str, Any] = json.loads((folder / "summary.json").read_text())
    return summary


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of a run folder's cases.jsonl."""
    return [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]


def live_records(folder: Path) -> list[dict[str, Any]]:
    """The records a (live) run has written to its cases.jsonl so far, the line being
    written skipped."""
    path = folder / "cases.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _divergent_case_records(folder: Path) -> list[tuple[str, str]]:
    """(chunk, case id) of every case record with unexpected divergences so far."""
    return [
        (r["chunk"], r["case_id"])
        for r in live_records(folder)
        if r.get("record") == "case" and r.get("unexpected")
    ]


def claimed_bundles(folder: Path) -> tuple[list[str], list[str]]:
    """The provisional bundles that the case records of a (live) run's unfinished chunks
    name so far: (written, not yet written).

    A record names its provisional bundle before the bundle is written (the bundle re-runs
    the case for its evidence: seconds on a loaded machine), so a run killed as soon as a
    divergent record appears can lose that bundle; the report then drops the claim. A test
    that needs the bundle waits until it is written. (A chunk that ended replaced its
    provisional bundles with its findings' own.)
    """
    records = live_records(folder)
    ended = {r["chunk"] for r in records if r.get("record") == "chunk"}
    claimed = dict.fromkeys(
        r["provisional_bundle"]
        for r in records
        if r.get("provisional_bundle") and r["chunk"] not in ended
    )
    written = [b for b in claimed if (folder / b / "bundle.json").is_file()]
    return written, [b for b in claimed if b not in written]


def divergent_records(folder: Path) -> int:
    """Case records with unexpected divergences a (live) run has written so far, a case
    Hypothesis runs again while shrinking counted each time."""
    return len(_divergent_case_records(folder))


def divergent_cases(folder: Path) -> int:
    """Distinct cases with unexpected divergences a (live) run has recorded so far, each
    counted once, as the summary counts them."""
    return len(set(_divergent_case_records(folder)))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `predicate` every 0.2 s; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def parity(
    *args: str | Path,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    python: str = sys.executable,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m harness.cli ARGS` and capture its output."""
    return subprocess.run(
        [python, "-m", "harness.cli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def popen_parity(
    *args: str | Path, stderr_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `parity ARGS` in the background, stderr to a file."""
    with stderr_path.open("wb") as stderr:  # the child keeps its own copy of the handle
        return subprocess.Popen(
            [sys.executable, "-m", "harness.cli", *map(str, args)],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def once(root: Path, name: str, make: Callable[[Path], None], timeout: float = 900) -> Path:
    """`root/name`, made by `make(path)` exactly once across test processes."""
    path = root / name
    done = root / f"{name}.done"
    lock = root / f"{name}.lock"
    deadline = time.monotonic() + timeout
    while not done.exists():
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"waited {timeout} s for another worker to make {path}"
                ) from None
            time.sleep(0.5)
            continue
        os.close(fd)
        try:
            if not done.exists():
                make(path)
                done.touch()
        finally:
            lock.unlink()
    return path


def shared_root(tmp_path_factory: object) -> Path:
    """The temp folder common to every xdist worker of this session."""
    base: Path = tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    shared = root / "parity-cli-shared"
    shared.mkdir(exist_ok=True)
    return shared


PLANTED_RUN_ARGS: Sequence[str] = (
    "--families",
    "rms_norm",
    "--profile",
    "nightly",
    "--seed",
    "7",
    "--max-examples",
    "2",
    "--chunk-examples",
    "1",
    "--no-database",
    "--no-expectations",
    "--progress-every",
    "5",
    "--jobs",
    "1",
)


@pytest.fixture(scope="session")
def planted_wgsl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """wgsl/ with rms_norm ignoring its weight."""
    return once(shared_root(tmp_path_factory), "planted-wgsl", plant_rms_norm_without_weight)


@pytest.fixture(scope="session")
def planted_run(tmp_path_factory: pytest.TempPathFactory, planted_wgsl: Path) -> Path:
    """A nightly-profile run (2 chunks, no database) against the planted shaders."""

    def make(out: Path) -> None:
        proc = parity("run", *PLANTED_RUN_ARGS, "--wgsl-dir", planted_wgsl, "--out", out)
        assert proc.returncode == 1, proc.stderr
        (out.parent / "planted-run.stderr").write_text(proc.stderr)

    return once(shared_root(tmp_path_factory), "planted-run", make)

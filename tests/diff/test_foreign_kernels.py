"""examples/foreign-kernels: kernels written in a foreign style, checked through their manifest.

The folder replaces rms_norm (both slots), the q4gsw GEMM and GEMV, the HF rope (split into a
q and a k dispatch) and embedding_q4gsw (32-wide blocks, `requires embed_dim % 32 == 0`) on
both backends: WGSL for WebGPU, GLSL for Vulkan, rms_norm as SPIR-V compiled elsewhere
without names (docs/bring-your-own-kernels.md walks through it).

- Their ops' families run in lockstep on both runtimes built from the manifest, every oracle
  on, and agree with the contract and the float64 reference; so do fixed cases that run
  every replaced slot (the baseline the planted bugs are measured against).
- A one-line bug planted in each kernel (text substitution in a temporary copy of the folder;
  the SPIR-V recompiled from its planted source with the README's command) is found and
  blamed on the backend whose kernel carries it.
- The tutorial of docs/bring-your-own-kernels.md: its manifests, step by step, give the
  refusals it quotes word for word, then the finding of the wrong units, then nothing.
- `parity run --kernels examples/foreign-kernels --profile pr` exits 0.

The lockstep runner judges a replaced slot's dispatches by the manifest's design and a case
breaking a kernel's `requires` as an expected refusal of that backend (docs/oracles.md), so
every divergence left is a finding.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_format import Runtime
from graph_format.kernels import load_manifest
from harness import GraphBuilder, single_op_graph
from harness.check.divergence import BugKey, Divergence, Kind
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.families import FAMILIES
from harness.gen.case import Case
from harness.model import q4
from tests.cli_support import parity
from vulkan_ref import VulkanRuntime
from vulkan_ref.reflection import reflect_spirv_file
from webgpu_backend import WebGPURuntime

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "foreign-kernels"
# The families of the ops whose slots the examples replace.
EXAMPLE_FAMILIES = ("rms_norm", "linear_q4gsw", "rope_hf", "embedding")
# The command examples/foreign-kernels/README.md gives for the precompiled module.
SPIRV_COMMAND = ("glslc", "-O", "--target-env=vulkan1.1", "glsl/rms_norm.comp", "-o")
SPIRV_SOURCE, SPIRV_MODULE = "glsl/rms_norm.comp", "spirv/rms_norm.spv"


# --- runtimes built from a kernel folder ----------------------------------------------------


def foreign_runner(folder: Path, **limits: int) -> LockstepRunner:
    """Both runtimes running the folder's kernels for the slots it replaces."""
    manifest = load_manifest(folder)
    runtimes: list[Runtime] = [
        WebGPURuntime(manifest=manifest, **limits),
        VulkanRuntime(manifest=manifest, **limits),
    ]
    return LockstepRunner(runtimes)


@pytest.fixture(scope="module")
def examples() -> LockstepRunner:
    return foreign_runner(EXAMPLES)


# --- fixed cases that run every replaced slot -----------------------------------------------


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _linear(k: int, group: int, rows: list[int]) -> Case:
    """linear_q4gsw with a bias, N = 13 (scales padded to 16 columns), one step per M."""
    rng = np.random.default_rng(7)
    n = 13
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group)
    b = GraphBuilder()
    x = b.input("x", "float32", [max(rows), k])
    out = b.op(
        "linear_q4gsw",
        name="linear",
        out_dims=[max(rows), n],
        x=x,
        weight=b.constant("weight", packed),
        scales=b.constant("scales", scales),
        group_size=b.int(group, "group_size"),
        bias=b.constant("bias", _f32(rng, n)),
    )
    b.output(out)
    return Case(b.build(), [{"x": _f32(rng, m, k)} for m in rows], name=f"linear K={k}")


def _fixed_cases() -> dict[str, Case]:
    rng = np.random.default_rng(5)
    rms = single_op_graph(
        "rms_norm",
        {"x": _f32(rng, 3, 30), "weight": _f32(rng, 30), "eps": 1e-5},
        constants={"weight"},
    )
    rms_vec4 = single_op_graph(
        "rms_norm",
        {"x": _f32(rng, 5, 96), "weight": _f32(rng, 96), "eps": 1e-6},
        constants={"weight"},
    )
    rope = single_op_graph(
        "apply_rotary_emb_hf",
        {
            "xq": _f32(rng, 2, 3, 4, 8),
            "xk": _f32(rng, 2, 3, 2, 8),
            "cos": _f32(rng, 9, 8),
            "sin": _f32(rng, 9, 8),
            "start_pos": 2,
        },
        constants={"cos", "sin"},
    )
    vocab, dim, group = 9, 64, 16
    embedding = single_op_graph(
        "embedding_q4gsw",
        {
            "weight": rng.integers(0, 256, (vocab, dim // 2), dtype=np.uint8),
            "scales": rng.uniform(0.1, 1.0, (vocab, dim // group)).astype(np.float32),
            "group_size": group,
            "indices": rng.integers(0, vocab, (2, 3)).astype(np.int32),
        },
        constants={"weight", "scales"},
    )
    return {
        "rms_norm": rms,
        "rms_norm_vec4": rms_vec4,
        # K = 60: a padded last word (4 bytes more per row than K / 2), the GEMM alone.
        "q4gsw_gemm": _linear(60, 20, [5, 1]),
        # K = 64, two scale groups: the GEMM at M = 3, then the GEMV at M = 1.
        "q4gsw_gemv": _linear(64, 32, [3, 1]),
        "rotary_emb_hf": rope,
        "embedding_q4gsw": embedding,
    }


FIXED = _fixed_cases()


def _slots_run(result: CaseResult) -> dict[str, set[str]]:
    """The slots each backend ran in a case."""
    ran: dict[str, set[str]] = {}
    for step in result.steps:
        for backend, seen in step.backends.items():
            ran.setdefault(backend, set()).update(d["kernel"] for d in seen.dispatches if d["ran"])
    return ran


# --- the examples pass ----------------------------------------------------------------------


@pytest.mark.parametrize("slot", sorted(FIXED))
def test_the_examples_pass_on_a_case_running_their_slot(
    examples: LockstepRunner, slot: str
) -> None:
    runner = examples
    result = runner.run(FIXED[slot])
    assert result.divergences == []
    assert result.steps and all(slot in ran for ran in _slots_run(result).values())


@pytest.mark.parametrize("family", EXAMPLE_FAMILIES)
@given(data=st.data())
def test_the_examples_agree_over_their_families(
    examples: LockstepRunner, family: str, data: st.DataObject
) -> None:
    """Every case of the family: the contract's dims and refusals, canaries, the float64
    reference within budget on both backends, the manifest's dispatches."""
    runner = examples
    result = runner.run(data.draw(FAMILIES[family](), label=family))
    assert result.divergences == []


def test_a_graph_breaking_a_requirement_is_refused_by_both_kernels(
    examples: LockstepRunner,
) -> None:
    """An embedding width of 48 breaks `embed_dim % 32 == 0`: both backends refuse the graph
    at load, naming the requirement, and that is the only divergence."""
    rng = np.random.default_rng(3)
    case = single_op_graph(
        "embedding_q4gsw",
        {
            "weight": rng.integers(0, 256, (4, 24), dtype=np.uint8),
            "scales": np.ones((4, 3), np.float32),
            "group_size": 16,
            "indices": np.array([1, 2], np.int32),
        },
        constants={"weight", "scales"},
    )
    runner = examples
    result = runner.run(case)
    assert result.divergences == []
    assert result.steps == []  # both refused the graph at load, as the manifests declare


# --- planted bugs ---------------------------------------------------------------------------

# (file, slot whose fixed case shows it, the line as shipped, the line with the bug)
PLANTS = [
    (
        "wgsl/rms_norm.wgsl",
        "rms_norm",
        "inverseSqrt(lane_sums[0] / f32(width) + settings.epsilon)",
        "inverseSqrt(lane_sums[0] / f32(LANES) + settings.epsilon)",  # mean over the lanes
    ),
    (
        "wgsl/q4_gemm.wgsl",
        "q4gsw_gemm",
        "let shift = 8u * (byte_at % 4u) + 4u * (k % 2u);",
        "let shift = 8u * (byte_at % 4u) + 4u * ((k + 1u) % 2u);",  # nibbles swapped
    ),
    (
        "wgsl/q4_gemv.wgsl",
        "q4gsw_gemv",
        "dot = fma(q, vec_in[w * 8u + j], dot);",
        "dot = fma(q, vec_in[w * 8u + 7u - j], dot);",  # nibbles in reverse order
    ),
    (
        "wgsl/rope_hf.wgsl",
        "rotary_emb_hf",
        "t_out[at + h] = hi * t_cos[table + col + h] + lo * t_sin[table + col + h];",
        "t_out[at + h] = hi * t_cos[table + col] + lo * t_sin[table + col];",  # 1st half columns
    ),
    (
        "wgsl/embed_q4.wgsl",
        "embedding_q4gsw",
        "f32(i32((packed >> (4u * j)) & 0xFu) - 8)",
        "f32(i32((packed >> (4u * j)) & 0x7u) - 8)",  # a 3-bit mask
    ),
    (
        SPIRV_SOURCE,
        "rms_norm_vec4",
        "for (uint half_lanes = lanes / 2; half_lanes > 0; half_lanes /= 2) {",
        "for (uint half_lanes = lanes / 2; half_lanes > 1; half_lanes /= 2) {",  # one level short
    ),
    (
        "glsl/q4_gemm.comp",
        "q4gsw_gemm",
        "const uint byte_at = col * dims.k_bytes + k / 2;",
        "const uint byte_at = col * (dims.k_len / 2) + k / 2;",  # rows taken as K / 2 bytes
    ),
    (
        "glsl/q4_gemv.comp",
        "q4gsw_gemv",
        "w_scale[(w / mv.group_words) * mv.scale_cols + feature]",
        "w_scale[(w / mv.group_words) * mv.features + feature]",  # scale rows of N, not N_pad
    ),
    (
        "glsl/rope_hf.comp",
        "rotary_emb_hf",
        "const uint table = (rope.start + token) * 2 * h;",
        "const uint table = token * 2 * h;",  # start_pos forgotten
    ),
    (
        "glsl/embed_q4.comp",
        "embedding_q4gsw",
        "w_scale[vocab_row * info.group_count + d / info.group]",
        "w_scale[vocab_row * info.group_count + first_dim / info.group]",  # one scale a block
    ),
]


@pytest.fixture()
def planted_folder(tmp_path: Path) -> Iterator[Path]:
    """A copy of the examples to plant a bug in."""
    folder = tmp_path / "foreign-kernels"
    shutil.copytree(EXAMPLES, folder)
    yield folder


def plant(folder: Path, file: str, old: str, new: str) -> None:
    """Replace the one occurrence of `old` in the folder's `file`, recompiling the SPIR-V
    module when `file` is its source."""
    path = folder / file
    source = path.read_text()
    assert source.count(old) == 1, f"{file} holds {source.count(old)} copies of {old!r}"
    path.write_text(source.replace(old, new))
    if file == SPIRV_SOURCE:
        subprocess.run([*SPIRV_COMMAND, SPIRV_MODULE], cwd=folder, check=True)


@pytest.mark.parametrize(
    ("file", "slot", "old", "new"), PLANTS, ids=[f"{p[0]}:{p[1]}" for p in PLANTS]
)
def test_a_bug_planted_in_a_kernel_is_found_and_blamed_on_its_backend(
    planted_folder: Path, file: str, slot: str, old: str, new: str
) -> None:
    plant(planted_folder, file, old, new)
    runner = foreign_runner(planted_folder)
    result = runner.run(FIXED[slot])
    found = result.divergences
    backend = "webgpu" if file.startswith("wgsl/") else "vulkan"
    assert found, f"the bug planted in {file} went unnoticed"
    assert {d.blame for d in found} == {backend}, [str(d) for d in found]
    assert {d.kind for d in found} <= {Kind.NUMERIC, Kind.NAN_INF}, [str(d) for d in found]


def test_a_manifest_failing_on_a_step_s_values_is_no_compiler_error(
    planted_folder: Path,
) -> None:
    """Issue 18: a count that divides by zero on some values was reported as a kernel that
    "does not build", pointing at compiler output that does not exist. It is still the
    kernel's finding, on each backend, now saying that its manifest fails on those values."""
    manifest = planted_folder / "kernels.toml"
    text = manifest.read_text()
    assert text.count('"div_up(m * n, 64)"') == 2  # the GEMM's count, on both backends
    manifest.write_text(text.replace('"div_up(m * n, 64)"', '"div_up(m * n, k - 60)"'))
    result = foreign_runner(planted_folder).run(FIXED["q4gsw_gemm"])  # K = 60
    found = result.divergences
    assert {d.blame for d in found} == {"webgpu", "vulkan"}, [str(d) for d in found]
    for d in found:
        assert d.kind == Kind.BUILD_ERROR
        assert "its manifest fails on this step's values" in d.message, d.message
        assert "division by zero in div_up (at k=60, m=" in d.message, d.message
        # The manifest's table and key: where to fix it.
        assert f"{d.blame}.q4gsw_gemm.dispatch: expression 'div_up(m * n, k - 60)'" in d.message
        assert "compiler" not in d.message and d.details.compiler is None


def test_the_shipped_spirv_carries_no_names_and_is_bound_by_index() -> None:
    """spirv/rms_norm.spv was compiled as another project's build would (README.md): without
    debug names, so the manifest binds it by index, and the examples pass with it."""
    module = reflect_spirv_file(EXAMPLES / SPIRV_MODULE)
    assert not module.has_debug_names
    assert [b.binding for b in module.bindings] == [0, 1, 2]


# --- the command ----------------------------------------------------------------------------


@pytest.mark.slow  # a `parity run --profile pr` over every example family: about a minute
def test_parity_run_with_the_examples_exits_clean(tmp_path: Path) -> None:
    """`parity run --kernels examples/foreign-kernels --profile pr` over their families, with a
    small budget of two chunks a family (the second under pr's lowered workgroup limit): every
    chunk agrees and the profile's coverage cells (`fold` included) are met, exit 0."""
    proc = parity(
        "run", "--kernels", EXAMPLES, "--profile", "pr",
        "--families", ",".join(EXAMPLE_FAMILIES), "--max-examples", "60", "--chunk-examples", "30",
        "--no-database", "--no-expectations", "--jobs", "1", "--out", tmp_path / "run",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the tutorial tells the truth -----------------------------------------------------------

DOC = EXAMPLES.parents[1] / "docs" / "bring-your-own-kernels.md"


def _tutorial_blocks() -> list[tuple[str, str]]:
    """(language, text) of each fenced block of the doc's tutorial, in order."""
    text = DOC.read_text()
    start = text.index("## Tutorial: from refused to checked")
    section = text[start : text.index("\n## ", start + 1)]
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def _manifest_after(fragments: list[str]) -> str:
    """The tutorial's manifest after these fragments: each line `key = value` replaces an
    earlier line of the same key, as the reader edits the file."""
    lines: dict[str, str] = {}
    for fragment in fragments:
        for line in fragment.splitlines():
            key = line.split("=")[0].strip() if "=" in line and not line.startswith("[") else line
            if key and not key.startswith("#"):
                lines[key] = line
    return "\n".join(lines.values()) + "\n"


def test_the_tutorial_steps_give_the_errors_and_findings_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each manifest of docs/bring-your-own-kernels.md's tutorial, on the K = 60 GEMM case:
    the refusals it quotes, word for word; the finding of the wrong units; then clean."""
    blocks = _tutorial_blocks()
    manifests = [text for lang, text in blocks if lang == "toml"]
    quoted = [text.strip() for lang, text in blocks if lang == "" and "\n" not in text.strip()]
    assert len(manifests) == 4 and len(quoted) == 3, (manifests, quoted)
    monkeypatch.chdir(tmp_path)
    folder = Path("my-kernels")
    folder.mkdir()
    shutil.copy(EXAMPLES / "wgsl" / "q4_gemm.wgsl", folder / "q4_gemm.wgsl")
    seen: list[list[Divergence]] = []
    for step in range(len(manifests)):
        (folder / "kernels.toml").write_text(_manifest_after(manifests[: step + 1]))
        runner = foreign_runner(folder)
        seen.append(runner.run(FIXED["q4gsw_gemm"]).divergences)
    refused_bindings, refused_params, wrong_units, checked = seen
    for found, line in [(refused_bindings, quoted[0]), (refused_params, quoted[1])]:
        (refusal,) = found
        assert (refusal.kind, refusal.blame) == (Kind.BUILD_ERROR, "webgpu")
        assert refusal.message.startswith(line), (refusal.message, line)
    finding = quoted[2].removeprefix("numeric, blamed on webgpu: ")
    assert any(
        d.kind is Kind.NUMERIC and d.blame == "webgpu" and finding in d.message for d in wrong_units
    ), [str(d) for d in wrong_units]
    assert checked == []


@pytest.mark.parametrize("declared", [False, True], ids=["undeclared", "exact"])
def test_a_foreign_kernel_is_held_to_bit_identity_only_where_its_manifest_says_so(
    planted_folder: Path, declared: bool
) -> None:
    # WebGPU's rstd 2^-20 too large: ~8 ULPs, a fifth of the budget at width 96.
    manifest = planted_folder / "kernels.toml"
    if declared:
        text = manifest.read_text()
        for section in ("[webgpu.rms_norm_vec4]\n", "[vulkan.rms_norm_vec4]\n"):
            text = text.replace(section, f"{section}exact = true\n")
        manifest.write_text(text)
    plant(
        planted_folder,
        "wgsl/rms_norm.wgsl",
        "+ settings.epsilon);",
        "+ settings.epsilon) * (1.0 + 1.0 / 1048576.0);",
    )
    result = foreign_runner(planted_folder).run(FIXED["rms_norm_vec4"])
    assert result.max_utilization < 0.5
    keys = {d.bug_key() for d in result.divergences}
    assert keys == ({BugKey("rms_norm", "bit_mismatch", "webgpu")} if declared else set())

"""Kernels from elsewhere through the `parity` command (docs/bring-your-own-kernels.md,
"Using it from parity"): `parity run --kernels DIR`, `parity check-kernels DIR`, bundles that
carry the manifest, its shaders and its adapter module, and `parity replay --allow-adapters`.

The kernel folders are copies of tests/data/kernels/foreign (an RMS norm and a split HF rope
in a foreign style, for both backends) with, where a test needs one, a bug planted in the copy
(a WGSL RMS norm that ignores its weight) or an adapter (tests/data/kernels/foreign: a two-pass
Vulkan RMS norm whose adapter adds a value and a scratch buffer).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.run.bundle import sha256_file
from harness.run.profiles import DEFAULT_DATABASE_DIR
from tests.cli_support import REPO, parity

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parent / "data"
FOREIGN = DATA / "kernels" / "foreign"
GAMMA_USE = "* gamma[i]"
GAMMA_DROPPED = "* (gamma[i] * 0.0 + 1.0)"  # keeps the binding used, drops its effect

TWO_PASS = "".join(
    f"""
[vulkan.{slot}]
glsl = "rms_norm_two_pass.comp"
adapter = "adapters.py:TwoPassAdapter"

[[vulkan.{slot}.dispatch_list]]
push.pass_index = 0
dispatch = "div_up(row_width, 32)"

[[vulkan.{slot}.dispatch_list]]
push.pass_index = 1
dispatch = "num_rows"
"""
    for slot in ("rms_norm", "rms_norm_vec4")
)


def _main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def _foreign(dest: Path, *, planted: bool = False, adapter: bool = False) -> Path:
    """A copy of the foreign kernel folder; `planted`: its WGSL RMS norm drops the weight;
    `adapter`: its Vulkan RMS norm is the two-pass kernel with an adapter."""
    shutil.copytree(FOREIGN, dest)
    if planted:
        wgsl = dest / "rms.wgsl"
        text = wgsl.read_text()
        assert text.count(GAMMA_USE) == 1, "the planted substitution no longer applies"
        wgsl.write_text(text.replace(GAMMA_USE, GAMMA_DROPPED))
    if adapter:
        for name in ("rms_norm_two_pass.comp", "adapters.py"):
            shutil.copy(FOREIGN / name, dest / name)
        manifest = dest / "kernels.toml"
        head, _, _ = manifest.read_text().partition("\n[vulkan.rms_norm]")
        rest = manifest.read_text().partition("\n[vulkan.rotary_emb_hf]")[2]
        manifest.write_text(head + TWO_PASS + "\n[vulkan.rotary_emb_hf]" + rest)
    return dest


# --- check-kernels ----------------------------------------------------------------------------


def test_check_kernels_passes_a_manifest_whose_kernels_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = _main(capsys, "check-kernels", FOREIGN)
    assert status == 0, err
    for where in ("webgpu.rms_norm", "webgpu.rotary_emb_hf", "vulkan.rotary_emb_hf"):
        assert f"{where}: ok" in err


BROKEN = {
    # A manifest error: one line naming the file and the field.
    "unknown key": (
        ("kernels.toml", "fold = true\n", "fold = true\nfolds = 1\n"),
        "kernels.toml: webgpu.rms_norm.folds: unknown key 'folds'",
    ),
    # An override the kernel does not declare (issue 12, item 4).
    "override": (
        ("kernels.toml", 'block_size = "workgroup_size // 2"', 'group_size = "workgroup_size"'),
        "rms_norm: override 'group_size' is not declared in",
    ),
    # A params member the manifest maps but the kernel does not declare.
    "member": (
        ("kernels.toml", 'params.n_rows = "num_rows"', 'params.rows = "num_rows"'),
        "params.rows: the params block of",
    ),
    # A binding no role fills.
    "binding": (
        ("kernels.toml", 'gamma = "weight", ', ""),
        "binding 1 ('gamma') of",
    ),
    # A shader the compiler refuses: its whole text follows.
    "compile": (
        ("rope.wgsl", "let x2 = t_in[first + h];", "let x2 = t_in[first + h]"),
        "rope.wgsl",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_kernels_names_what_does_not_fit(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (file, old, new), words = BROKEN[name]
    folder = _foreign(tmp_path / "k")
    path = folder / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 2, err
    assert words in err, err
    assert "Traceback" not in err
    first = next(line for line in err.splitlines() if "ok" not in line.split(": ")[-1])
    assert first.startswith("parity check-kernels: "), err


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "foreign-kernels"
# A GEMM kernel broken on each backend; the GEMV slot's example graph also holds a GEMM node
# (issue 18: the GEMV slot was failed with the GEMM kernel's error).
BROKEN_GEMM = {
    "webgpu": (
        "wgsl/q4_gemm.wgsl",
        "let word = packed_w[byte_at / 4u];",
        "let word = packed_w[byte_at / 4u]",
    ),
    "vulkan": ("glsl/q4_gemm.comp", "#version 450\n", '#version 450\n#include "missing.glsl"\n'),
}


@pytest.mark.parametrize("backend", sorted(BROKEN_GEMM))
def test_check_kernels_judges_each_slot_on_its_own_kernel(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "k"
    shutil.copytree(EXAMPLES, folder)
    file, old, new = BROKEN_GEMM[backend]
    path = folder / file
    assert path.read_text().count(old) == 1
    path.write_text(path.read_text().replace(old, new))
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 2, err
    verdicts = {
        line.split(": ")[2]: line.split(": ")[3]
        for line in err.splitlines()
        if line.startswith("parity check-kernels: ") and line.count(": ") >= 3
    }
    assert verdicts[f"{backend}.q4gsw_gemm"] != "ok", err
    untouched = {k: v for k, v in verdicts.items() if k != f"{backend}.q4gsw_gemm"}
    assert set(untouched.values()) == {"ok"}, err
    assert "1 kernel(s) of" in err


# The attention op binds the kernels of all its slots when a graph loads (both routes,
# chosen per step): a broken softmax failed the load of every sdpa slot's example graph, and
# check-kernels printed the softmax's error on each of them (issue 21; main at ffb265a).
SDPA_SLOTS = ("sdpa_qk", "sdpa_softmax", "sdpa_fd_split")
BROKEN_SOFTMAX = {
    "webgpu": ("wgsl", "wgsl", "file", "let row = wid.x + wid.y * nwg.x;", "let row = 0u"),
    "vulkan": ("glsl", "comp", "glsl", "const uint row = flat_workgroup_id();", "uint row = 0u"),
}


@pytest.mark.parametrize("backend", sorted(BROKEN_SOFTMAX))
def test_check_kernels_blames_the_sdpa_slot_that_is_broken(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder_name, suffix, key, old, new = BROKEN_SOFTMAX[backend]
    folder = tmp_path / "k"
    folder.mkdir()
    manifest = ['format = "parity-kernels/1"']
    for slot in SDPA_SLOTS:
        source = (REPO / folder_name / f"{slot}.{suffix}").read_text()
        if slot == "sdpa_softmax":
            assert source.count(old) == 1, "the planted substitution no longer applies"
            source = source.replace(old, new)
        (folder / f"{slot}.{suffix}").write_text(source)
        manifest += [f"[{backend}.{slot}]", f'{key} = "{slot}.{suffix}"', "fold = true"]
        manifest += (
            ["padding = ['_pad0', '_pad1', '_pad2', '_pad3']"] if backend == "webgpu" else []
        )
        manifest += ['overrides = { wg_size = "workgroup_size" }'] if backend == "webgpu" else []
        manifest += ['spec.0 = "workgroup_size"'] if backend == "vulkan" else []
    (folder / "kernels.toml").write_text("\n".join(manifest) + "\n")
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 2, err
    verdicts = {
        line.split(": ")[2]: line.split(": ", 3)[3]
        for line in err.splitlines()
        if line.startswith("parity check-kernels: ") and line.count(": ") >= 3
    }
    assert set(verdicts) == {f"{backend}.{slot}" for slot in SDPA_SLOTS}, err
    assert verdicts[f"{backend}.sdpa_softmax"] != "ok", err
    assert verdicts[f"{backend}.sdpa_qk"] == verdicts[f"{backend}.sdpa_fd_split"] == "ok", err
    assert "1 kernel(s) of" in err


def _extending(folder: Path, target: str) -> int:
    """Keep the foreign folder's WebGPU RMS norms only, the vec4 one as `extends = target`;
    the line of its `extends`."""
    manifest = folder / "kernels.toml"
    text = manifest.read_text()
    head = text.partition("[webgpu.rms_norm_vec4]")[0]
    manifest.write_text(f'{head}[webgpu.rms_norm_vec4]\nextends = "{target}"\n')
    return head.count("\n") + 2


def test_check_kernels_checks_a_section_that_extends_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21 item 6: `extends` takes every key of the section it names; an unknown one is
    one line naming the file, the line and the sections there are."""
    folder = _foreign(tmp_path / "k")
    _extending(folder, "rms_norm")
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 0, err
    assert "webgpu.rms_norm: ok" in err and "webgpu.rms_norm_vec4: ok" in err
    line = _extending(folder, "rms_nrom")
    monkeypatch.chdir(tmp_path)
    status, _, err = _main(capsys, "check-kernels", "k")
    assert status == 2, err
    assert err.strip() == (
        f"parity check-kernels: k/kernels.toml:{line}: webgpu.rms_norm_vec4.extends: no "
        "section [webgpu.rms_nrom] in this manifest (did you mean 'rms_norm'?); expected the "
        "slot of another [webgpu.<slot>] section: rms_norm"
    )


# Expressions that fail on a step's values, or give a member a value it cannot hold: the
# checked kernel's line names the expression or member with the values (issue 18: they were
# passed, then failed every case of a run as a kernel that "does not build").
FAILING_VALUES = {
    "division by zero": (
        'dispatch = "div_up(m * n, 64)"',
        'dispatch = "div_up(m * n, k - k)"',
        "k/kernels.toml: webgpu.q4gsw_gemm.dispatch: expression 'div_up(m * n, k - k)': "
        "division by zero in div_up (at k=",
    ),
    "past u32": (
        'params.out_features = "n"',
        'params.out_features = "n * 4294967296"',
        "webgpu.q4gsw_gemv: mv.out_features (u32) of ",
    ),
    "past u32, vulkan": (
        'params.features = "n"',
        'params.features = "n * 4294967296"',
        "vulkan.q4gsw_gemv: params (binding 0) member 'features' (uint): 'n * 4294967296' gave ",
    ),
}


@pytest.mark.parametrize("name", sorted(FAILING_VALUES))
def test_check_kernels_evaluates_the_manifest_on_a_case_s_values(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old, new, words = FAILING_VALUES[name]
    folder = tmp_path / "k"
    shutil.copytree(EXAMPLES, folder)
    manifest = folder / "kernels.toml"
    assert old in manifest.read_text()
    manifest.write_text(manifest.read_text().replace(old, new, 1))  # the webgpu table's
    monkeypatch.chdir(tmp_path)
    status, _, err = _main(capsys, "check-kernels", "k")
    assert status == 2, err
    assert words in err, err
    assert "Traceback" not in err


def test_check_kernels_refuses_a_constant_division_by_zero_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "k"
    shutil.copytree(EXAMPLES, folder)
    manifest = folder / "kernels.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('"div_up(m * n, 64)"', '"div_up(m * n, 0)"', 1))
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 2, err
    (line,) = err.strip().splitlines()
    assert "kernels.toml: webgpu.q4gsw_gemm.dispatch: expression 'div_up(m * n, 0)': " in line
    assert "division by zero in div_up" in line


@pytest.mark.parametrize("command", ["check-kernels", "run"])
def test_a_relative_kernel_folder_is_named_as_given(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 18: errors named the absolute path of a folder given as a relative one."""
    folder = _foreign(tmp_path / "k")
    manifest = folder / "kernels.toml"
    manifest.write_text(
        manifest.read_text().replace("fold = true\n", "fold = true\nfolds = 1\n", 1)
    )
    monkeypatch.chdir(tmp_path)
    args = ["check-kernels", "k"] if command == "check-kernels" else ["run", "--kernels", "k"]
    status, _, err = _main(capsys, *args)
    assert status == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"parity {command}: k/kernels.toml: webgpu.rms_norm.folds: "), line
    assert str(tmp_path) not in err


def test_check_kernels_names_a_relative_folder_s_files_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "k"
    shutil.copytree(EXAMPLES, folder)
    file, old, new = BROKEN_GEMM["vulkan"]
    (folder / file).write_text((folder / file).read_text().replace(old, new))
    monkeypatch.chdir(tmp_path)
    status, _, err = _main(capsys, "check-kernels", "k")
    assert status == 2, err
    assert "parity check-kernels: k/glsl/q4_gemm.comp: vulkan.q4gsw_gemm: " in err
    assert "k/glsl/q4_gemm.comp:2: error: " in err  # glslc's own line, as given too
    assert "1 kernel(s) of k/kernels.toml do not build" in err
    assert str(tmp_path) not in err


def test_check_kernels_builds_glsl_with_the_manifest_s_defines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21, item 5: a kernel written for a template (its constants left to the build)
    compiles from its source with `defines`; without them glslc refuses it."""
    folder = _foreign(tmp_path / "k")
    comp = folder / "rms_norm_foreign.comp"
    text = comp.read_text()
    assert text.count("const uint LANES = 64;") == 1
    comp.write_text(text.replace("const uint LANES = 64;", "const uint LANES = LANE_COUNT;"))
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 2 and "LANE_COUNT" in err, err
    manifest = folder / "kernels.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'glsl = "rms_norm_foreign.comp"\n',
            'glsl = "rms_norm_foreign.comp"\ndefines = { LANE_COUNT = "64u" }\n',
        )
    )
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 0, err
    assert "vulkan.rms_norm: ok" in err and "vulkan.rms_norm_vec4: ok" in err


def test_check_kernels_names_the_spirv_version_a_module_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21, item 5: SPIR-V newer than the runtime's Vulkan version accepts (built for
    Vulkan 1.2: SPIR-V 1.5) is refused in one line naming the file, both versions and the
    glslc --target-env to use; it was the validation layer's "Invalid SPIR-V binary version
    1.5 for target environment SPIR-V 1.3"."""
    folder = tmp_path / "k"
    shutil.copytree(EXAMPLES, folder)
    module = folder / "spirv" / "rms_norm.spv"
    code = bytearray(module.read_bytes())
    assert code[:4] == b"\x03\x02\x23\x07"  # the magic number, little-endian
    code[4:8] = (0x00010500).to_bytes(4, "little")  # the header's version word: SPIR-V 1.5
    module.write_bytes(bytes(code))
    status, _, err = _main(capsys, "check-kernels", folder)
    assert status == 2, err
    lines = [line for line in err.splitlines() if "vulkan.rms_norm:" in line]
    assert len(lines) == 1, err
    assert f"{module} is SPIR-V 1.5; this runtime accepts SPIR-V 1.0 to 1.3 (Vulkan 1.1" in lines[0]
    assert lines[0].endswith("build it with glslc --target-env=vulkan1.1"), lines[0]
    assert "Invalid SPIR-V" not in err


def test_check_kernels_of_a_missing_folder_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = _main(capsys, "check-kernels", tmp_path / "none")
    assert status == 2 and "no such folder" in err and "Traceback" not in err


# --- run --------------------------------------------------------------------------------------


def test_kernels_with_a_shader_dir_for_the_same_backend_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wgsl = tmp_path / "wgsl"
    wgsl.mkdir()
    monkeypatch.chdir(FOREIGN.parent)
    status, _, err = _main(
        capsys, "run", "--kernels", FOREIGN.name, "--wgsl-dir", wgsl, "--out", tmp_path / "o"
    )
    assert status == 2, err
    assert "--wgsl-dir and --kernels both replace webgpu kernels" in err
    assert "(foreign/kernels.toml has [webgpu.*] sections)" in err  # named as typed
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_a_bad_manifest_is_one_line_of_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _foreign(tmp_path / "k")
    (folder / "kernels.toml").write_text('format = "parity-kernels/0"\n')
    status, _, err = _main(capsys, "run", "--kernels", folder, "--out", tmp_path / "o")
    assert status == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("parity run: ") and "kernels.toml" in line


@pytest.fixture(scope="module")
def planted_foreign_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`parity run --kernels` over a kernel folder whose WebGPU RMS norm drops its weight
    and whose Vulkan RMS norm has an adapter; the kernel folder is deleted afterwards, so
    that replays can only use the bundle's copies."""
    root = tmp_path_factory.mktemp("foreign-run")
    folder = _foreign(root / "kernels", planted=True, adapter=True)
    out = root / "out"
    done = parity(
        "run",
        "--kernels",
        folder,
        "--families",
        "rms_norm,rope_hf",
        "--max-examples",
        "6",
        "--jobs",
        "1",
        "--repeats",
        "0",
        "--no-expectations",
        "--out",
        out,
        timeout=900,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    shutil.rmtree(folder)
    return out


def test_a_bug_in_a_foreign_kernel_is_found_and_blamed_on_its_backend(
    planted_foreign_run: Path,
) -> None:
    summary = json.loads((planted_foreign_run / "summary.json").read_text())
    blamed = {f["bug"].split("|")[2] for f in summary["findings"]}
    assert blamed == {"webgpu"}, summary["findings"]
    assert {f["family"] for f in summary["findings"]} == {"rms_norm"}
    # Coverage marks what ran foreign kernels; the report names every slot's source.
    rms = summary["coverage"]["rms_norm"]
    assert set(rms["webgpu"]["foreign"]) & {"rms_norm", "rms_norm_vec4"}
    assert set(rms["vulkan"]["foreign"]) & {"rms_norm", "rms_norm_vec4"}
    sources = summary["kernel_sources"]
    assert "rms.wgsl (manifest" in sources["rms_norm"]["webgpu"]
    assert "rms_norm_two_pass.comp (manifest" in sources["rms_norm"]["vulkan"]
    assert sources["add_flat"]["webgpu"].startswith("project")
    html = (planted_foreign_run / "index.html").read_text()
    assert 'id="kernel-sources"' in html and "pill foreign" in html
    # Reproducing the run takes the manifest and the example database it used, named
    # from the run folder.
    (command,) = [
        line
        for line in re.search(r'<pre id="run-commands">(.*?)</pre>', html, re.S)
        .group(1)
        .split("\n")
        if line.startswith("parity run ")
    ]
    assert " --kernels ../kernels " in command
    database = command.split(" --database ")[1].split()[0]
    assert (planted_foreign_run / database).resolve() == (REPO / DEFAULT_DATABASE_DIR).resolve()
    assert " --families rms_norm,rope_hf " in command


def _bundle(run: Path) -> Path:
    summary = json.loads((run / "summary.json").read_text())
    return run / summary["findings"][0]["bundle"]


def test_a_bundle_carries_the_manifest_its_shaders_and_its_adapter(
    planted_foreign_run: Path,
) -> None:
    bundle = _bundle(planted_foreign_run)
    doc = json.loads((bundle / "bundle.json").read_text())
    assert set(doc["kernels"]) >= {
        "kernels/kernels.toml",
        "kernels/rms.wgsl",
        "kernels/rms_norm_two_pass.comp",
        "kernels/adapters.py",
    }
    assert GAMMA_DROPPED in (bundle / "kernels" / "rms.wgsl").read_text()
    assert any("--allow-adapters" in c for c in doc["commands"])


def test_the_failure_page_names_the_manifest_kernels_that_ran(planted_foreign_run: Path) -> None:
    """Issue 21, item 7: the page listed the project's shaders the case's ops may use, which
    did not run, and not the manifest's kernel that ran and was blamed; it names, per
    backend, the kernel each slot ran: the manifest's file with its sha256."""
    summary = json.loads((planted_foreign_run / "summary.json").read_text())
    finding = summary["findings"][0]
    bundle = planted_foreign_run / finding["bundle"]
    hashes = json.loads((bundle / "bundle.json").read_text())["kernels"]
    page = (planted_foreign_run / "failures" / f"{finding['id']}.html").read_text()
    table = re.search(r'<table id="kernels-ran">(.*?)</table>', page, re.S)
    assert table, page
    rows = re.findall(r'<tr data-slot="(\w+)">(.*?)</tr>', table.group(1), re.S)
    slots = {slot for slot, _ in rows}
    assert slots and slots <= {"rms_norm", "rms_norm_vec4"}, slots
    for _, row in rows:
        webgpu, vulkan = re.findall(r"<td>(.*?)</td>", row, re.S)[1:]
        assert "kernels/rms.wgsl</a>" in webgpu and hashes["kernels/rms.wgsl"][:16] in webgpu
        assert "manifest kernels/kernels.toml" in webgpu
        assert "kernels/rms_norm_two_pass.comp</a>" in vulkan
        assert hashes["kernels/rms_norm_two_pass.comp"][:16] in vulkan
        assert "adapters.py:TwoPassAdapter" in vulkan
    assert "Shaders in the bundle" not in page
    for project in ("wgsl/rms_norm.wgsl", "glsl/rms_norm.comp", "wgsl/rms_norm_vec4.wgsl"):
        assert project not in page  # replaced by the manifest: never ran


def test_replay_runs_the_bundles_adapter_only_when_allowed(
    planted_foreign_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _bundle(planted_foreign_run)
    status, _, err = _main(capsys, "replay", bundle)
    assert status == 2, err
    (line,) = [line for line in err.splitlines() if line.startswith("parity replay:")]
    assert "would run Python from the bundle" in line and "--allow-adapters" in line
    status, out, err = _main(capsys, "replay", bundle, "--allow-adapters", "--json")
    assert status == 1, err
    assert json.loads(out)["status"] == "still_failing"


def test_regress_takes_allow_adapters_and_never_leaves_a_half_copied_folder(
    planted_foreign_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: regress told the user to pass --allow-adapters, which it rejected, and left
    the copied folder behind."""
    bundle = _bundle(planted_foreign_run)
    dest = tmp_path / "regressions"
    status, _, err = _main(capsys, "regress", bundle, "--dest", dest, "--name", "foreign")
    assert status == 2, err
    (line,) = [line for line in err.splitlines() if line.startswith("parity regress:")]
    assert "--allow-adapters" in line
    assert not dest.exists() or not any(dest.iterdir())
    status, _, err = _main(
        capsys, "regress", bundle, "--dest", dest, "--name", "foreign", "--allow-adapters"
    )
    assert status == 0, err
    assert [p.name for p in dest.iterdir()] == ["foreign"]  # no staging folder left
    assert json.loads((dest / "foreign" / "regression.json").read_text())["expect"] == "fixed"
    assert (dest / "foreign" / "kernels" / "adapters.py").is_file()


def test_replay_refuses_an_adapter_changed_since_the_run(
    planted_foreign_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: an adapter whose sha256 no longer matches bundle.json ran without a word."""
    bundle = tmp_path / "bundle"
    shutil.copytree(_bundle(planted_foreign_run), bundle)
    adapter = bundle / "kernels" / "adapters.py"
    recorded = json.loads((bundle / "bundle.json").read_text())["kernels"]["kernels/adapters.py"]
    adapter.write_text(adapter.read_text() + "\n# edited after the run\n")
    status, _, err = _main(capsys, "replay", bundle, "--allow-adapters")
    assert status == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("parity replay: ") and "adapters.py" in line, line
    assert recorded in line and sha256_file(adapter) in line, line


def test_replay_that_diverges_differently_prints_what_it_found(
    planted_foreign_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: the "diverges differently" line named the new bug keys but hid the errors."""
    bundle = tmp_path / "bundle"
    shutil.copytree(_bundle(planted_foreign_run), bundle)
    doc = json.loads((bundle / "bundle.json").read_text())
    found = doc["bug"]
    op, kind, blamed, *rest = found.split("|")
    doc["bug"] = "|".join([op, kind, "vulkan" if blamed == "webgpu" else "webgpu", *rest])
    (bundle / "bundle.json").write_text(json.dumps(doc))
    status, _, err = _main(capsys, "replay", bundle, "--allow-adapters")
    assert status == 1, err
    assert "diverges differently" in err
    new = [line for line in err.splitlines() if line.startswith("  step ")]
    assert new and f"{kind} ({blamed})" in new[0], err

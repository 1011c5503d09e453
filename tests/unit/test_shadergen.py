"""The kernel generator, scripts/gen_shaders.py: every committed kernel in wgsl/ and glsl/ is what
its family's template under shaders/ generates (`--check`), a hand edit of a generated variant
or a kernel no template makes is caught, and the template language renders as documented.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_shaders.py"


def load_generator() -> ModuleType:
    """scripts/gen_shaders.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_shaders", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_shaders"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The templates and the generated kernels, copied (what `--check` reads)."""
    for folder in ("shaders", "wgsl", "glsl"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def test_committed_kernels_are_what_their_templates_generate() -> None:
    result = run_check(ROOT)
    assert result.returncode == 0, result.stderr


def test_a_hand_edit_of_a_generated_variant_fails_the_check(repo_copy: Path) -> None:
    path = repo_copy / "wgsl" / "rms_norm_f16.wgsl"
    lines = path.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if "rstd * f32(weight[i])" in line)
    lines[number - 1] = lines[number - 1].replace("rstd *", "rstd * 1.0 *")
    path.write_text("".join(lines))
    result = run_check(repo_copy)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{path}:{number}: differs from what its template generates: expected "
        "'        out[base + i] = f16(f32(x[base + i]) * rstd * f32(weight[i]));', found "
        "'        out[base + i] = f16(f32(x[base + i]) * rstd * 1.0 * f32(weight[i]));' "
        "(edit the template under shaders/ and run scripts/gen_shaders.py)"
    ]


def test_a_kernel_no_template_generates_fails_the_check(repo_copy: Path) -> None:
    shutil.copy(repo_copy / "glsl" / "rms_norm_f16.comp", repo_copy / "glsl" / "mine_f16.comp")
    (repo_copy / "wgsl" / "silu_mul_f16.wgsl").unlink()
    result = run_check(repo_copy)
    assert result.returncode == 1
    assert f"{repo_copy / 'wgsl' / 'silu_mul_f16.wgsl'}: missing" in result.stderr
    assert f"{repo_copy / 'glsl' / 'mine_f16.comp'}: no template generates it" in result.stderr


def test_a_template_no_family_names_is_refused(repo_copy: Path) -> None:
    orphan = repo_copy / "shaders" / "glsl" / "mine.comp.in"
    orphan.write_text("#version 450\n")
    result = run_check(repo_copy)
    assert result.returncode == 2
    assert result.stderr == (
        f"gen_shaders: {orphan}: no family of {repo_copy / 'shaders' / 'variants.toml'} names it\n"
    )


def test_generating_writes_what_check_then_accepts(repo_copy: Path) -> None:
    stale = repo_copy / "glsl" / "rotary_emb_hf_f16.comp"
    stale.write_text("// stale\n")
    assert gen.main(["--root", str(repo_copy)]) == 0
    assert stale.read_text() == (ROOT / "glsl" / "rotary_emb_hf_f16.comp").read_text()
    assert run_check(repo_copy).returncode == 0


def test_a_malformed_template_is_one_line_naming_it(repo_copy: Path) -> None:
    template = repo_copy / "shaders" / "wgsl" / "silu_mul.wgsl.in"
    template.write_text(template.read_text() + "$if DTYPE = f16\n$endif\n")
    result = run_check(repo_copy)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"gen_shaders: {template}:{len(template.read_text().splitlines()) - 1}: expected "
        "`NAME == value` or `NAME != value`, got 'DTYPE = f16'"
    ]


def render(template: str, language: str = "wgsl", **params: str) -> str:
    variant = gen.Variant("k", {"DTYPE": "f32", "KERNEL_F32": "k", **params})
    return str(gen.render(template, Path("t.in"), language, variant))


def test_conversions_nest_and_vanish_in_f32() -> None:
    line = "out[i] = ${store(${load(x[i])} * ${load(w[(i)])})};\n"
    assert render(line) == "out[i] = x[i] * w[(i)];\n"
    assert render(line, DTYPE="f16") == "out[i] = f16(f32(x[i]) * f32(w[(i)]));\n"
    assert render(line, "glsl", DTYPE="f16") == (
        "out[i] = float16_t(float(x[i]) * float(w[(i)]));\n"
    )
    assert render("array<${T}>\n", DTYPE="f16") == "array<f16>\n"


def test_directives_choose_lines_and_nest() -> None:
    template = (
        "a\n$if DTYPE == f16\nhalf\n  $if VEC == 4\nhalf4\n  $endif\n$elif VEC == 4\n"
        "vec4\n$else\nplain\n$endif\nz\n"
    )
    assert render(template, VEC="1") == "a\nplain\nz\n"
    assert render(template, VEC="4") == "a\nvec4\nz\n"
    assert render(template, DTYPE="f16", VEC="4") == "a\nhalf\nhalf4\nz\n"
    assert render("$if DTYPE == f16 or VEC != 4\nx\n$endif\n", VEC="4") == ""


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("${T\n", "t.in:1: `${T` not closed by `}`"),
        ("${load(x}\n", "t.in:1: unbalanced `${load(`"),
        ("${N}\n", "t.in:1: 'N' is not a parameter here"),
        ("$endif\n", "t.in:1: $endif without an open $if"),
        ("$if DTYPE == f16\n", "t.in: 1 $if without $endif"),
    ],
)
def test_template_errors_name_the_line(template: str, message: str) -> None:
    with pytest.raises(gen.TemplateError) as error:
        render(template)
    assert str(error.value).startswith(message)

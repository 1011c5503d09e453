"""Kernel manifests (graph_format/kernels/): the format, its errors, the expression language,
and the implicit entries of the project's own kernels against what those kernels declare."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from graph_format import SLOTS
from graph_format.kernels import (
    MANIFEST_NAME,
    AdapterRef,
    Expression,
    ExpressionError,
    KernelInterfaceError,
    KernelManifestError,
    adapter_provides,
    builtin_entry,
    load_adapter,
    load_manifest,
    parse_manifest,
)
from harness.ops import MODELS
from vulkan_ref.reflection import reflect_spirv
from vulkan_ref.spirv import BASE_FLAGS, GLSL_DIR
from webgpu_backend.reflection import WgslReflection, reflect_wgsl_many
from webgpu_backend.shaders import WGSL_DIR

# slot -> (op, project kernel stem), from the contract's kernel specs
PROJECT = {
    name: (op, spec.wgsl) for op, model in MODELS.items() for name, spec in model.kernels.items()
}


# --- the project's kernels against their slots ------------------------------------------------


def test_every_contract_kernel_is_a_slot_with_its_roles() -> None:
    assert set(SLOTS) == set(PROJECT)
    for op, model in MODELS.items():
        for name, spec in model.kernels.items():
            assert SLOTS[name].op == op
            assert SLOTS[name].tensors == tuple(b.name for b in spec.tensors), name


@pytest.fixture(scope="module")
def wgsl() -> dict[str, WgslReflection]:
    stems = sorted({stem for _, stem in PROJECT.values()})
    reflections = reflect_wgsl_many(
        (str(WGSL_DIR / f"{s}.wgsl"), (WGSL_DIR / f"{s}.wgsl").read_text()) for s in stems
    )
    return dict(zip(stems, reflections, strict=True))


def _params_members(reflection: WgslReflection) -> list[str]:
    (params,) = [b for b in reflection.bindings if b.kind == "uniform"]
    return [m.name for m in params.type.members]


@pytest.mark.parametrize("slot", sorted(PROJECT))
def test_a_project_wgsl_kernel_binds_through_its_implicit_entry(
    slot: str, wgsl: dict[str, WgslReflection]
) -> None:
    """Every params member (but padding) and override the kernel declares is a value of its
    slot, and the implicit entry fills every binding, member and override by the defaults."""
    reflection = wgsl[PROJECT[slot][1]]
    interface = SLOTS[slot]
    entry = builtin_entry("webgpu", slot, WGSL_DIR / f"{PROJECT[slot][1]}.wgsl")
    members = _params_members(reflection)
    for member in members:
        assert member.startswith("_pad") or member in interface.values, (slot, member)
    filled = entry.resolve_members(members)
    assert {m for m, e in filled.items() if e is None} == {
        m for m in members if m.startswith("_pad")
    }
    assert all(e is None or e.text == m for m, e in filled.items())

    declared = [(b.binding, b.name) for b in reflection.bindings]
    targets = entry.resolve_bindings(declared)
    storage = [targets[b.binding] for b in reflection.bindings if b.kind != "uniform"]
    assert storage == list(interface.tensors)  # every role, in the project's order
    assert [targets[b.binding] for b in reflection.bindings if b.kind == "uniform"] == ["params"]

    overrides = [o.name for o in reflection.overrides]
    passed = {name: e.text for name, e in entry.resolve_overrides(overrides).items()}
    assert passed == {o: "workgroup_size" if o == "wg_size" else o for o in overrides}
    assert "workgroups" in interface.values


def _glsl_with_names(stem: str, tmp: Path) -> bytes:
    """The project kernel compiled as vulkan_ref compiles it, but keeping debug names (-O
    strips them; reflection needs them to match by name)."""
    out = tmp / f"{stem}.spv"
    flags = [f for f in BASE_FLAGS if f != "-O"]
    source = GLSL_DIR / f"{stem}.comp"
    subprocess.run(
        ["glslc", *flags, "-I", str(GLSL_DIR / "include"), "-o", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


@pytest.mark.parametrize("slot", sorted(PROJECT))
def test_a_project_glsl_kernel_binds_through_its_implicit_entry(slot: str, tmp_path: Path) -> None:
    """Every specialization and push constant and every scalar uniform the project's GLSL
    reads is a value of its slot; the implicit entry fills each binding (an anonymous block
    named by its only member) and constant by the defaults."""
    stem = PROJECT[slot][1]
    reflection = reflect_spirv(_glsl_with_names(stem, tmp_path), f"glsl/{stem}.comp")
    interface = SLOTS[slot]
    entry = builtin_entry("vulkan", slot, GLSL_DIR / f"{stem}.comp")

    named = [
        (b.binding, b.name or (b.block.members[0].name if b.block else None))
        for b in reflection.bindings
    ]
    targets = entry.resolve_bindings(named)
    storage = [targets[b.binding] for b in reflection.bindings if b.kind == "storage_buffer"]
    assert storage == list(interface.tensors)
    for b in reflection.bindings:
        if targets[b.binding] == "params":  # a uniform of values, packed by member name
            assert b.block is not None
            members = [m.name for m in b.block.members if m.name is not None]
            assert all(m in interface.values for m in members), (slot, members)
        elif b.kind == "uniform_buffer":
            assert targets[b.binding].endswith(".meta"), (slot, b.binding)

    declared = [(s.id, s.name) for s in reflection.spec_constants if s.name is not None]
    local_ids = [d.spec_id for d in reflection.local_size if d.spec_id is not None]
    spec = {i: e.text for i, e in entry.resolve_spec(declared, local_ids).items()}
    assert spec == {0: "workgroup_size"} | {i: name.lower() for i, name in declared}, slot
    assert all(name.lower() in interface.values for _, name in declared)
    if reflection.push_constants is not None:
        members = [m.name for m in reflection.push_constants.members if m.name is not None]
        assert entry.resolve_members(members, block="push") == {m: Expression(m) for m in members}


def test_every_offered_value_is_read_by_a_project_kernel(
    wgsl: dict[str, WgslReflection],
) -> None:
    """The vocabulary is what the project's kernels read, plus the workgroup size and count
    (and the Vulkan GEMV's grid cap), and the attention's largest shape, which sizes its
    scratch on the host (the project's and a manifest's `scratch.<role>`): nothing offered
    that nobody reads."""
    sizing = {"max_seq", "cache_rows"}
    for slot, (_, stem) in PROJECT.items():
        read = set(_params_members(wgsl[stem])) | {o.name for o in wgsl[stem].overrides}
        glsl = (GLSL_DIR / f"{stem}.comp").read_text()
        read |= {w.lower() for w in re.findall(r"\w+", glsl)}
        unread = set(SLOTS[slot].values) - read - {"workgroup_size", "workgroups"} - sizing
        assert not unread, (slot, unread)


# --- the manifest format ----------------------------------------------------------------------

SAMPLE = """\
format = "parity-kernels/1"

[webgpu.q4gsw_gemv]
file = "gemv.wgsl"
entry = "gemv_main"
overrides = { wg_size = "64", group_size = 128 }
params.K_bytes = "k_words * 4"
padding = ["_pad0"]
bindings = { t_out = "out", t_in = "x", 5 = "params" }
dispatch = "ceil(n / 2)"
fold = true
requires = ["k % 32 == 0 and n >= 2"]
adapter = "adapters.py:GemvAdapter"

[webgpu.rotary_emb_hf]
file = "rope.wgsl"
params.half = "half_dim"

[[webgpu.rotary_emb_hf.dispatch_list]]
bindings = { t_out = "xq_out", t_in = "xq" }
params.n_heads = "q_heads"
dispatch = "ceil(q_heads * seq * half_dim / 64)"

[[webgpu.rotary_emb_hf.dispatch_list]]
bindings = { t_out = "xk_out", t_in = "xk" }
params.n_heads = "k_heads"
dispatch = ["div_up(k_heads * seq * half_dim, 64)", 1, 1]

[vulkan.rms_norm]
spirv = "rms.spv"
bindings = { 0 = "out", t_x = "x", 3 = "out.meta", 4 = "params" }
push.epsilon = "eps"
spec.0 = "workgroup_size"
spec.ROWS = "min(num_rows, max_workgroups_per_dim)"
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("gemv.wgsl", "rope.wgsl", "rms.spv", "rms.comp", "adapters.py"):
        (tmp_path / name).write_text("")
    (tmp_path / MANIFEST_NAME).write_text(SAMPLE)
    return tmp_path


def test_a_manifest_reads_every_key(folder: Path) -> None:
    manifest = load_manifest(folder)
    assert manifest.path == folder / MANIFEST_NAME
    assert manifest.slots("webgpu") == ("q4gsw_gemv", "rotary_emb_hf")
    assert manifest.entry("vulkan", "q4gsw_gemv") is None
    gemv = manifest.entry("webgpu", "q4gsw_gemv")
    assert gemv is not None
    assert (gemv.source, gemv.kind, gemv.entry, gemv.fold) == (
        folder / "gemv.wgsl",
        "wgsl",
        "gemv_main",
        True,
    )
    assert gemv.overrides == {"wg_size": Expression("64"), "group_size": Expression("128")}
    (only,) = gemv.dispatches
    assert only.bindings == {"t_out": "out", "t_in": "x", 5: "params"}
    assert only.params == {"K_bytes": Expression("k_words * 4")}
    assert only.workgroups({"n": 7}) == 4
    assert gemv.padding == ("_pad0",)
    assert str(gemv.adapter) == "adapters.py:GemvAdapter"
    assert gemv.unmet_requirements({"k": 64, "n": 4}) == []
    assert gemv.unmet_requirements({"k": 48, "n": 4}) == ["k % 32 == 0 and n >= 2"]

    rope = manifest.entry("webgpu", "rotary_emb_hf")
    assert rope is not None
    q, k = rope.dispatches
    assert q.params == {"half": Expression("half_dim"), "n_heads": Expression("q_heads")}
    assert k.params == {"half": Expression("half_dim"), "n_heads": Expression("k_heads")}
    values = {"q_heads": 4, "k_heads": 2, "seq": 3, "half_dim": 32}
    assert (q.workgroups(values), k.workgroups(values)) == (6, (3, 1, 1))
    assert rope.fold is False and rope.overrides == {}  # only what is listed is passed

    rms = manifest.entry("vulkan", "rms_norm")
    assert rms is not None and rms.kind == "spirv"
    assert rms.spec == {
        0: Expression("workgroup_size"),
        "ROWS": Expression("min(num_rows, max_workgroups_per_dim)"),
    }
    assert rms.dispatches[0].push == {"epsilon": Expression("eps")}
    assert rms.dispatches[0].bindings == {0: "out", "t_x": "x", 3: "out.meta", 4: "params"}
    assert rms.dispatches[0].count == Expression("workgroups")  # the op's count by default
    assert set(manifest.files()) == {
        folder / n for n in (MANIFEST_NAME, "gemv.wgsl", "rope.wgsl", "rms.spv", "adapters.py")
    }


def test_a_manifest_round_trips_through_toml(folder: Path) -> None:
    manifest = load_manifest(folder)
    again = parse_manifest(tomli_w.dumps(manifest.to_doc()), folder / MANIFEST_NAME)
    assert again == manifest
    assert load_manifest(folder / MANIFEST_NAME) == manifest  # the file itself, too


def _edit(old: str, new: str) -> str:
    assert old in SAMPLE, old
    return SAMPLE.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (
            _edit('format = "parity-kernels/1"', 'format = "parity-kernels/0"'),
            "format",
            "expected 'parity-kernels/1', got string 'parity-kernels/0'",
        ),
        (_edit('format = "parity-kernels/1"\n', ""), "format", "missing"),
        (_edit("[vulkan.rms_norm]", "[metal.rms_norm]"), "metal", "unknown key 'metal'"),
        (
            _edit("[webgpu.q4gsw_gemv]", "[webgpu.q4gsw_gemvv]"),
            "webgpu.q4gsw_gemvv",
            "unknown slot 'q4gsw_gemvv' (did you mean 'q4gsw_gemv'?)",
        ),
        (
            _edit("fold = true", "fold = true\nfodl = 1"),
            "webgpu.q4gsw_gemv.fodl",
            "unknown key 'fodl' (did you mean 'fold'?)",
        ),
        (
            _edit('t_in = "x"', 't_in = "input"'),
            "webgpu.q4gsw_gemv.bindings.t_in",
            "expected a role of slot q4gsw_gemv (out, x, weight, scales, bias) or 'params', "
            "got string 'input'",
        ),
        (
            _edit('t_in = "x"', 't_in = "x.meta"'),
            "webgpu.q4gsw_gemv.bindings.t_in",
            "(WebGPU kernels have no metadata buffers)",
        ),
        (
            _edit('3 = "out.meta"', '3 = "scores.meta"'),
            "vulkan.rms_norm.bindings.3",
            "or '<tensor>.meta' of an op tensor (x, weight, out), got string 'scores.meta'",
        ),
        (
            _edit('"k_words * 4"', '"K * 4"'),
            "webgpu.q4gsw_gemv.params.K_bytes",
            "'K * 4' reads 'K' (did you mean 'k'?), which slot q4gsw_gemv does not offer; "
            "expected one of m, n, k,",
        ),
        (
            _edit('"ceil(n / 2)"', '"ceil(cols / 2)"'),
            "webgpu.q4gsw_gemv.dispatch",
            "reads 'cols'",
        ),
        (_edit('"gemv.wgsl"', '"gemv2.wgsl"'), "webgpu.q4gsw_gemv.file", "no file 'gemv2.wgsl'"),
        (
            _edit('"gemv.wgsl"', '"../gemv.wgsl"'),
            "webgpu.q4gsw_gemv.file",
            "expected a path inside the manifest's folder",
        ),
        (
            _edit('file = "gemv.wgsl"', 'file = "gemv.wgsl"\nglsl = "rms.comp"'),
            "webgpu.q4gsw_gemv.glsl",
            "not a webgpu key: a webgpu kernel is WGSL",
        ),
        (
            _edit('spirv = "rms.spv"', 'spirv = "rms.spv"\nglsl = "rms.comp"'),
            "vulkan.rms_norm",
            "expected exactly one of glsl = ... or spirv = ..., got glsl and spirv",
        ),
        (
            _edit('spirv = "rms.spv"', 'file = "rms.spv"'),
            "vulkan.rms_norm.file",
            'not a vulkan key: a vulkan kernel is glsl = "<name>.comp"',
        ),
        (_edit('spirv = "rms.spv"\n', ""), "vulkan.rms_norm", "got none"),
        (
            _edit('push.epsilon = "eps"', 'overrides = { eps = "eps" }'),
            "vulkan.rms_norm.overrides",
            "Vulkan has specialization constants",
        ),
        (
            _edit('"ceil(n / 2)"', '"n.bit_length()"'),
            "webgpu.q4gsw_gemv.dispatch",
            "attribute access is not allowed",
        ),
        (
            _edit('"ceil(n / 2)"', '"n == 2"'),
            "webgpu.q4gsw_gemv.dispatch",
            "a comparison is not allowed",
        ),
        (
            _edit('"k % 32 == 0 and n >= 2"', '"k % 32 == 0 and nn >= 2"'),
            "webgpu.q4gsw_gemv.requires[0]",
            "reads 'nn'",
        ),
        (
            _edit('"ceil(n / 2)"', '["n", 1]'),
            "webgpu.q4gsw_gemv.dispatch",
            "expected one expression or [x, y, z], got 2 items",
        ),
        (
            _edit('"ceil(n / 2)"', '["n", 1, 1]'),
            "webgpu.q4gsw_gemv.dispatch",
            "fold = true folds a 1-D count",
        ),
        (_edit("fold = true", 'fold = "yes"'), "webgpu.q4gsw_gemv.fold", "expected true or false"),
        (
            _edit('"adapters.py:GemvAdapter"', '"adapters.py"'),
            "webgpu.q4gsw_gemv.adapter",
            'expected "<module>.py:<Class>"',
        ),
        (
            _edit('"adapters.py:GemvAdapter"', '"adapt.py:GemvAdapter"'),
            "webgpu.q4gsw_gemv.adapter",
            "no file 'adapt.py'",
        ),
        (
            _edit('params.n_heads = "q_heads"', 'params.n_heads = "q_heads"\nfold = true'),
            "webgpu.rotary_emb_hf.dispatch_list[0].fold",
            "unknown key 'fold'; expected one of bindings, params, dispatch",
        ),
        (
            _edit('entry = "gemv_main"', 'entry = "gemv-main"'),
            "webgpu.q4gsw_gemv.entry",
            "function name",
        ),
        (_edit('padding = ["_pad0"]', 'padding = "_pad0"'), "webgpu.q4gsw_gemv.padding", "a list"),
        (
            _edit("group_size = 128", "group_size = true"),
            "webgpu.q4gsw_gemv.overrides.group_size",
            "expected a string, an integer or a float",
        ),
        # Issue 18: a constant divisor of zero, or a constant past 2**64, fails on every
        # step whatever the values: refused when the manifest is read.
        (
            _edit('dispatch = "ceil(n / 2)"', 'dispatch = "div_up(n * k, 0)"'),
            "webgpu.q4gsw_gemv.dispatch",
            "division by zero in div_up (in 'div_up(n * k, 0)', whatever the values)",
        ),
        (
            _edit('dispatch = "ceil(n / 2)"', 'dispatch = "n // (4 - 2 * 2)"'),
            "webgpu.q4gsw_gemv.dispatch",
            "division by zero in //",
        ),
        (
            _edit('"k_words * 4"', '"k_words * (4294967296 * 4294967296 * 2)"'),
            "webgpu.q4gsw_gemv.params.K_bytes",
            "exceeds 2**64",
        ),
        (
            _edit('"k_words * 4"', '"k_words + 36893488147419103232"'),
            "webgpu.q4gsw_gemv.params.K_bytes",
            "exceeds 2**64",
        ),
    ],
)
def test_a_bad_manifest_names_file_field_expected_and_got(
    folder: Path, text: str, where: str, what: str
) -> None:
    with pytest.raises(KernelManifestError) as info:
        parse_manifest(text, folder / MANIFEST_NAME)
    message = str(info.value)
    assert message.startswith(f"{folder / MANIFEST_NAME}: {where}: "), message
    assert what in message, message
    assert info.value.where == where


def test_an_entry_names_each_expression_by_its_manifest_key(folder: Path) -> None:
    manifest = parse_manifest(SAMPLE, folder / MANIFEST_NAME)
    gemv = manifest.entry("webgpu", "q4gsw_gemv")
    rope = manifest.entry("webgpu", "rotary_emb_hf")
    assert gemv is not None and rope is not None
    assert {k: e.text for k, e in gemv.expressions().items()} == {
        "overrides.wg_size": "64",
        "overrides.group_size": "128",
        "requires[0]": "k % 32 == 0 and n >= 2",
        "params.K_bytes": "k_words * 4",
        "dispatch": "ceil(n / 2)",
    }
    assert rope.expressions()["dispatch_list[1].dispatch[0]"].text == (
        "div_up(k_heads * seq * half_dim, 64)"
    )
    with pytest.raises(ExpressionError) as info:
        gemv.dispatches[0].workgroups({"n": 1e400})
    assert gemv.failure_text(info.value).startswith(
        "webgpu.q4gsw_gemv.dispatch: expression 'ceil(n / 2)': "
    )


def test_a_toml_syntax_error_names_its_line(folder: Path) -> None:
    text = _edit('entry = "gemv_main"', 'entry = "gemv_main')
    with pytest.raises(KernelManifestError) as info:
        parse_manifest(text, folder / MANIFEST_NAME)
    assert str(info.value).startswith(f"{folder / MANIFEST_NAME}:5: not valid TOML")
    assert info.value.line == 5


def test_a_missing_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(KernelManifestError, match=f"{tmp_path / MANIFEST_NAME}: cannot read"):
        load_manifest(tmp_path)


def test_a_manifest_without_slots_says_so(tmp_path: Path) -> None:
    with pytest.raises(KernelManifestError, match="names no slot"):
        parse_manifest('format = "parity-kernels/1"\n', tmp_path / MANIFEST_NAME)


# --- extends ----------------------------------------------------------------------------------

EXTENDS = """\
format = "parity-kernels/1"

[webgpu.rms_norm]
file = "rms.wgsl"
overrides = { wg_size = "workgroup_size" }
bindings = { t_in = "x", gamma = "weight" }
params.n_rows = "num_rows"
params.width = "row_width"
padding = ["_pad"]
requires = ["row_width % 4 == 0"]
dispatch = "num_rows"

[webgpu.rms_norm_vec4]
extends = "rms_norm"
file = "rms_vec4.wgsl"
params.width = "row_width // 4"

[webgpu.rms_norm_f16]
extends = "rms_norm_vec4"
file = "rms_vec4_f16.wgsl"
requires = []

[vulkan.rms_norm]
spirv = "rms.spv"
push.epsilon = "eps"
spec.0 = "workgroup_size"

[vulkan.rms_norm_f16]
extends = "rms_norm"
glsl = "rms_f16.comp"
"""

FLAT = """\
format = "parity-kernels/1"

[webgpu.rms_norm]
file = "rms.wgsl"
overrides = { wg_size = "workgroup_size" }
bindings = { t_in = "x", gamma = "weight" }
params.n_rows = "num_rows"
params.width = "row_width"
padding = ["_pad"]
requires = ["row_width % 4 == 0"]
dispatch = "num_rows"

[webgpu.rms_norm_vec4]
file = "rms_vec4.wgsl"
overrides = { wg_size = "workgroup_size" }
bindings = { t_in = "x", gamma = "weight" }
params.n_rows = "num_rows"
params.width = "row_width // 4"
padding = ["_pad"]
requires = ["row_width % 4 == 0"]
dispatch = "num_rows"

[webgpu.rms_norm_f16]
file = "rms_vec4_f16.wgsl"
overrides = { wg_size = "workgroup_size" }
bindings = { t_in = "x", gamma = "weight" }
params.n_rows = "num_rows"
params.width = "row_width // 4"
padding = ["_pad"]
dispatch = "num_rows"

[vulkan.rms_norm]
spirv = "rms.spv"
push.epsilon = "eps"
spec.0 = "workgroup_size"

[vulkan.rms_norm_f16]
glsl = "rms_f16.comp"
push.epsilon = "eps"
spec.0 = "workgroup_size"
"""


def test_a_section_extends_another_key_by_key(tmp_path: Path) -> None:
    """Issue 21 item 6: `extends` inherits every key of the section it names (itself
    resolved first); the section's own keys override, tables of members (params, push,
    spec, overrides, bindings) member by member, a source key replaces the inherited one."""
    extended = parse_manifest(EXTENDS, tmp_path / MANIFEST_NAME, check_files=False)
    flat = parse_manifest(FLAT, tmp_path / MANIFEST_NAME, check_files=False)
    assert extended.entries == flat.entries
    vec4 = extended.entry("webgpu", "rms_norm_vec4")
    assert vec4 is not None and vec4.source == tmp_path / "rms_vec4.wgsl"
    f16 = extended.entry("vulkan", "rms_norm_f16")
    assert f16 is not None and (f16.kind, f16.source.name) == ("glsl", "rms_f16.comp")
    # What a bundle records is the resolved manifest: it reads back without extends.
    again = parse_manifest(
        tomli_w.dumps(extended.to_doc()), tmp_path / MANIFEST_NAME, check_files=False
    )
    assert again == extended


def _extends_error(text: str, tmp_path: Path) -> KernelManifestError:
    with pytest.raises(KernelManifestError) as info:
        parse_manifest(text, tmp_path / MANIFEST_NAME, check_files=False)
    assert "\n" not in str(info.value)
    return info.value


def test_a_bad_extends_names_file_line_and_section(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    lines = EXTENDS.splitlines()
    vec4_line = lines.index('extends = "rms_norm"') + 1
    err = _extends_error(EXTENDS.replace('extends = "rms_norm"', 'extends = "rms_nrom"'), tmp_path)
    assert str(err) == (
        f"{path}:{vec4_line}: webgpu.rms_norm_vec4.extends: no section [webgpu.rms_nrom] in "
        "this manifest (did you mean 'rms_norm'?); expected the slot of another [webgpu.<slot>] "
        "section: rms_norm, rms_norm_f16"
    )
    assert (err.line, err.where) == (vec4_line, "webgpu.rms_norm_vec4.extends")

    cyclic = EXTENDS.replace('file = "rms.wgsl"', 'file = "rms.wgsl"\nextends = "rms_norm_f16"')
    err = _extends_error(cyclic, tmp_path)
    assert str(err) == (
        f"{path}:5: webgpu.rms_norm.extends: extends a section that extends it: "
        "webgpu.rms_norm -> rms_norm_f16 -> rms_norm_vec4 -> rms_norm"
    )
    itself = EXTENDS.replace('extends = "rms_norm"', 'extends = "rms_norm_vec4"')
    err = _extends_error(itself, tmp_path)
    assert f"{path}:{vec4_line}: webgpu.rms_norm_vec4.extends: extends a section that " in str(err)
    assert "webgpu.rms_norm_vec4 -> rms_norm_vec4" in str(err)

    other = EXTENDS.replace('extends = "rms_norm"', 'extends = "vulkan.rms_norm"')
    err = _extends_error(other, tmp_path)
    assert str(err).startswith(f"{path}:{vec4_line}: webgpu.rms_norm_vec4.extends: ")
    assert (
        "a section extends one of its own backend: [webgpu.<slot>], got 'vulkan.rms_norm'"
        in str(err)
    )
    assert "webgpu.rms_norm_vec4" in str(
        _extends_error(EXTENDS.replace('extends = "rms_norm"', "extends = 3"), tmp_path)
    )

    # A key inherited that does not fit the extending slot says where it comes from.
    inherited = """\
format = "parity-kernels/1"

[webgpu.add_broadcast]
file = "add.wgsl"
params.ne0 = "out_sizes[3]"

[webgpu.add_flat]
extends = "add_broadcast"
file = "add_flat.wgsl"
"""
    err = _extends_error(inherited, tmp_path)
    assert str(err).startswith(f"{path}: webgpu.add_flat.params.ne0: 'out_sizes[3]' reads "), err
    assert str(err).endswith(" (inherited from [webgpu.add_broadcast])"), err


# --- resolving a kernel's declarations --------------------------------------------------------


def _entry(folder: Path, backend: str, slot: str) -> Any:
    entry = load_manifest(folder).entry(backend, slot)  # type: ignore[arg-type]
    assert entry is not None
    return entry


def test_an_override_the_kernel_does_not_declare_is_named(folder: Path) -> None:
    gemv = _entry(folder, "webgpu", "q4gsw_gemv")
    assert set(gemv.resolve_overrides(["wg_size", "group_size"])) == {"wg_size", "group_size"}
    with pytest.raises(KernelInterfaceError) as info:
        gemv.resolve_overrides(["wg_size"])
    assert str(info.value) == (
        f"q4gsw_gemv: override 'group_size' is not declared in {folder / 'gemv.wgsl'} "
        "(declared: wg_size)"
    )


def test_params_members_fill_by_rename_padding_and_name(folder: Path) -> None:
    gemv = _entry(folder, "webgpu", "q4gsw_gemv")
    assert gemv.resolve_members(["m", "K_bytes", "_pad0"]) == {
        "m": Expression("m"),
        "K_bytes": Expression("k_words * 4"),
        "_pad0": None,
    }
    with pytest.raises(
        KernelInterfaceError,
        match=r"params member '_pad1' \(u32 at offset 8\) of .*gemv.wgsl has no value; "
        r"linear_q4gsw offers \[m, n, k, .*\]; map it with params._pad1 = \"<expression>\"",
    ):
        gemv.resolve_members(["m", "K_bytes", "_pad1"], layout={"_pad1": "u32 at offset 8"})
    # An adapter's values fill members of their names (and only with the adapter).
    assert gemv.resolve_members(["m", "K_bytes", "blocks"], extra_values=["blocks"]) == {
        "m": Expression("m"),
        "K_bytes": Expression("k_words * 4"),
        "blocks": Expression("blocks"),
    }
    with pytest.raises(KernelInterfaceError, match=r"its adapter adds \[blocks\]"):
        gemv.resolve_members(["m", "K_bytes", "_pad1"], extra_values=["blocks"])
    with pytest.raises(
        KernelInterfaceError,
        match=r"params\.K_bytes: the params block of .* declares no member 'K_bytes' "
        r"\(declared: m\)",
    ):
        gemv.resolve_members(["m"])


def test_every_member_without_a_value_is_named_in_one_error(folder: Path) -> None:
    """Issue 21 item 6: a foreign kernel of 20-29 members took a round per member."""
    gemv = _entry(folder, "webgpu", "q4gsw_gemv")
    layout = {
        name: f"u32 at offset {4 * i}"
        for i, name in enumerate(["m", "K_bytes", "ne0", "ne1", "nb1"])
    }
    with pytest.raises(KernelInterfaceError) as info:
        gemv.resolve_members(list(layout), layout=layout)
    message = str(info.value)
    assert "\n" not in message
    assert (
        "params members 'ne0' (u32 at offset 8), 'ne1' (u32 at offset 12), 'nb1' (u32 at "
        "offset 16) of " in message
    ), message
    assert "gemv.wgsl have no value (3 of 5 members); linear_q4gsw offers [m, n, k," in message
    assert 'map each with params.<member> = "<expression>" or list it in padding' in message
    # Members the manifest maps but the block lacks: all of them, and those without a
    # value, in the same line.
    push = _entry(folder, "vulkan", "rms_norm")
    declared = {"n_cols": "uint at offset 0", "eps_value": "float at offset 4"}
    with pytest.raises(KernelInterfaceError) as info:
        push.resolve_members(list(declared), block="push", layout=declared)
    message = str(info.value)
    assert "push.epsilon: the push block of " in message, message
    assert "declares no member 'epsilon' (declared: n_cols, eps_value)" in message
    assert (
        "push members 'n_cols' (uint at offset 0), 'eps_value' (float at offset 4) of " in message
    )
    text = _edit(
        'params.K_bytes = "k_words * 4"', 'params.K_bytes = "k_words * 4"\nparams.half = "n // 2"'
    )
    two = parse_manifest(text, folder / MANIFEST_NAME).entry("webgpu", "q4gsw_gemv")
    assert two is not None
    with pytest.raises(KernelInterfaceError) as info:
        two.resolve_members(["m"])
    assert "params.K_bytes, params.half: the params block of " in str(info.value)
    assert "declares no members 'K_bytes', 'half' (declared: m)" in str(info.value)


def test_bindings_fill_by_index_name_and_default(folder: Path) -> None:
    gemv = _entry(folder, "webgpu", "q4gsw_gemv")
    declared = [(0, "t_out"), (1, "t_in"), (2, "t_weight"), (3, "scales"), (4, "bias"), (5, "u")]
    assert gemv.resolve_bindings(declared) == {
        0: "out",
        1: "x",
        2: "weight",
        3: "scales",
        4: "bias",
        5: "params",
    }
    with pytest.raises(
        KernelInterfaceError,
        match=r"binding 6 \('extra'\) of .* fills no role of the slot \(the kernel declares: "
        r"0 't_out', .*, 6 'extra'; the slot's roles: out, x, weight, scales, bias; or 'params'\)",
    ):
        gemv.resolve_bindings([*declared, (6, "extra")])
    # An adapter's scratch buffers are roles too, by the same name rule.
    assert gemv.resolve_bindings([*declared, (6, "t_extra")], extra_roles=["extra"])[6] == "extra"
    undeclared = r"bindings\.t_in: .* declares no binding 't_in'"
    with pytest.raises(KernelInterfaceError, match=undeclared):
        gemv.resolve_bindings([(0, "t_out"), (5, "u")])
    rope = _entry(folder, "webgpu", "rotary_emb_hf")
    split = [(0, "t_out"), (1, "t_in"), (2, "cos"), (3, "sin"), (4, "params")]
    assert [rope.resolve_bindings(split, dispatch=i)[0] for i in (0, 1)] == ["xq_out", "xk_out"]


def test_spec_constants_fill_by_id_and_name(folder: Path) -> None:
    rms = _entry(folder, "vulkan", "rms_norm")
    assert rms.resolve_spec([(3, "ROWS")], [0]) == {
        0: Expression("workgroup_size"),
        3: Expression("min(num_rows, max_workgroups_per_dim)"),
    }
    with pytest.raises(
        KernelInterfaceError,
        match=r"constant 'ROWS' is not declared in .*rms\.spv "
        r"\(declared: 3 'COLS', 0 \(local size\)\)",
    ):
        rms.resolve_spec([(3, "COLS")], [0])


# --- the expression language ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("ceil(n / 2)", 4),
        ("n // 2", 3),
        ("n % 4", 3),
        ("-n + 10", 3),
        ("div_up(n, 4) * 4", 8),
        ("div_up(n * 1.0, 2)", 4),
        ("floor(n / 2)", 3),
        ("min(n, 3, 5)", 3),
        ("max(n, 2 * (n + 1))", 16),
        ("n / 2", 3.5),
        ("2 + 3 * n", 23),
        ("eps * 2", 2e-6),
    ],
)
def test_expressions_evaluate_like_python(text: str, value: float) -> None:
    expr = Expression.compile(text)
    result = expr.evaluate({"n": 7, "eps": 1e-6})
    assert result == pytest.approx(value) and type(result) is type(value)


VECTORS = {"n": 7, "sizes": (1, 3, 5, 64), "eps": 1e-6}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("sizes[3]", 64),
        ("sizes[-1]", 64),
        ("sizes[-4]", 1),
        ("sizes[n - 6] * sizes[2]", 15),
        ("sizes[0] * sizes[1] * sizes[2] * sizes[3]", 960),
        ("1 << n", 128),
        ("n >> 1", 3),
        ("(0 - n) >> 1", -4),
        ("sizes[3] << 32 >> 40", 0),
        ("1 << 64", 1 << 64),
        ("2 ** n", 128),
        ("n ** 2", 49),
        ("2 ** -1", 0.5),
        ("2 ** 0.5", 2**0.5),
        ("eps ** 2", 1e-12),
        ("log2(sizes[3])", 6),
        ("log2(1)", 0),
        ("ceil_log2(n)", 3),
        ("ceil_log2(1)", 0),
        ("ceil_log2(64)", 6),
        ("ceil_log2(65)", 7),
        ("fastdiv_shift(n)", 3),
        ("fastdiv_mul(n)", 613566757),  # floor(2**32 * (8 - 7) / 7) + 1
        ("fastdiv_mul(1)", 1),
        ("fastdiv_shift(1)", 0),
        ("fastdiv_mul(2 ** 31)", 1),
        ("fastdiv_shift(2 ** 31)", 31),
    ],
)
def test_subscripts_shifts_powers_and_logs(text: str, value: float) -> None:
    result = Expression.compile(text).evaluate(VECTORS)
    assert result == pytest.approx(value) and type(result) is type(value)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            "sizes[4]",
            "index 4 is out of range for 'sizes', a vector of 4 values (0 to 3, or -4 to -1 "
            "from the end) (at sizes=(1, 3, 5, 64))",
        ),
        ("sizes[-5]", "index -5 is out of range for 'sizes', a vector of 4 values"),
        ("sizes[n]", "index 7 is out of range for 'sizes'"),
        ("n[0]", "'n' is a scalar (7), not a vector: only a vector value takes a subscript"),
        ("sizes[n / 7]", "index of 'sizes' is 1.0, expected an integer"),
        ("sizes + 1", "'sizes' is a vector (1, 3, 5, 64): pass it whole by its bare name"),
        ("log2(n)", "log2(7): 7 is not a power of two (log2 is exact: use ceil_log2"),
        ("log2(eps)", "log2(1e-06): expected a positive integer"),
        ("ceil_log2(n - 7)", "ceil_log2(0): expected a positive integer"),
        ("1 << (n - 8)", "negative shift count -1 in <<"),
        ("n << 62", "a value exceeds 2**64 (7 << 62)"),
        ("eps << 1", "'<<' takes integers, got 1e-06 and 1"),
        ("n ** 23", "a value exceeds 2**64 (7 ** 23)"),
        ("(0 - n) ** eps", "(-7) ** 1e-06: a negative number to a fractional power"),
        ("n ** 1e6 ", "'**' overflows (7 ** 1000000.0)"),
        ("fastdiv_mul(2 ** 31 + n)", "fastdiv_mul(2147483655): expected an integer divisor"),
        ("fastdiv_shift(eps)", "fastdiv_shift(1e-06): expected an integer divisor"),
    ],
)
def test_new_operations_fail_naming_the_expression(text: str, what: str) -> None:
    with pytest.raises(ExpressionError) as info:
        Expression.compile(text).evaluate(VECTORS)
    assert str(info.value).startswith(f"expression {text!r}: "), str(info.value)
    assert what in str(info.value), str(info.value)


def _fastdiv_divisors() -> list[int]:
    """Every d up to 2**12, and around every power of two up to 2**31."""
    edges = {d + e for k in range(12, 32) for d in (1 << k,) for e in (-1, 0, 1)}
    edges |= {3 * (1 << k) for k in range(12, 30)} | {1_000_003, 999_999_937, 2**31 - 1}
    return [*range(1, 1 << 12), *sorted(d for d in edges if 1 <= d <= 1 << 31)]


def test_fastdiv_values_divide_every_32_bit_n() -> None:
    """`(mulhi(n, fastdiv_mul(d)) + n) >> fastdiv_shift(d) == n // d` for every n < 2**32
    that a quotient step could fail on: the multiplier rounds 2**(32 + L) / d up, so the
    estimate is never low and is first too high at n = q * d - 1, for the largest q most
    (its error grows with n); those n for the 4096 largest q of each d, every n below 2**16,
    and random n. With a 32-bit sum (what a GLSL or WGSL kernel has) the sum does not wrap
    for n < 2**31."""
    np = pytest.importorskip("numpy")
    mul, shift = Expression.compile("fastdiv_mul(d)"), Expression.compile("fastdiv_shift(d)")
    rng = np.random.default_rng(21)
    low = np.arange(1 << 16, dtype=np.uint64)
    randoms = rng.integers(0, 1 << 32, size=4096, dtype=np.uint64)
    for d in _fastdiv_divisors():
        mp, shift_l = mul.evaluate_int({"d": d}), shift.evaluate_int({"d": d})
        assert 0 < mp < 1 << 32 and 0 <= shift_l <= 31, d
        top = (1 << 32) // d
        q = np.arange(max(top - 4096, 1), top + 1, dtype=np.uint64)
        n = np.concatenate([low, randoms, q * np.uint64(d) - np.uint64(1), q * np.uint64(d)])
        n = n[n < np.uint64(1 << 32)]
        high = (n * np.uint64(mp)) >> np.uint64(32)  # mulhi: n, mp < 2**32, no wrap in 64
        quotient = (high + n) >> np.uint64(shift_l)
        wrong = n[quotient != n // np.uint64(d)]
        assert wrong.size == 0, (d, mp, shift_l, wrong[:5])
        narrow = n < np.uint64(1 << 31)
        assert ((high + n)[narrow] < np.uint64(1 << 32)).all(), d


def test_a_compiled_expression_evaluates_many_times() -> None:
    expr = Expression.compile("div_up(m * n, 64)")
    assert expr.names == {"m", "n"}
    assert [expr.evaluate_int({"m": m, "n": 16}) for m in (1, 4, 5)] == [1, 1, 2]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("n.real", "attribute access is not allowed"),
        ("values['n']", "the literal 'n' is not allowed"),
        ("(n + 1)[0]", "a subscript of 'n + 1' is not allowed: only a value's name takes one"),
        ("sizes[0][1]", "a subscript of 'sizes[0]' is not allowed"),
        ("sizes[1:3]", "a slice is not allowed; expected one index (out_sizes[3])"),
        ("sizes[1, 2]", "Tuple is not allowed"),
        ("(lambda: 1)()", "a lambda is not allowed"),
        ("lambda: 1", "a lambda is not allowed"),
        ("__import__('os')", "calls '__import__'"),
        ("import os", "not an expression"),
        # Refused when read, never computed (9 ** 387420489 would take minutes).
        ("2 ** 10000", "a value exceeds 2**64 (2 ** 10000)"),
        ("9 ** 9 ** 9", "a value exceeds 2**64 (9 ** 387420489)"),
        ("n * (1 << 70)", "a value exceeds 2**64 (1 << 70)"),
        ("n + (2 << 1000000000000)", "a value exceeds 2**64 (2 << 1000000000000)"),
        ("(0 - 8) ** 0.5", "(-8) ** 0.5: a negative number to a fractional power"),
        ("2.5 << 1", "'<<' takes integers, got 2.5 and 1"),
        ("n + (1 >> (0 - 1))", "negative shift count -1 in >>"),
        ("log2(12)", "log2(12): 12 is not a power of two"),
        ("ceil_log2(0)", "ceil_log2(0): expected a positive integer"),
        ("fastdiv_mul(0)", "fastdiv_mul(0): expected an integer divisor 1 <= d <= 2**31"),
        ("0 ** (0 - 1)", "division by zero in **"),
        ("'text'", "the literal 'text' is not allowed"),
        ("True", "the literal True is not allowed"),
        ("n if n else 1", "a conditional is not allowed"),
        ("n == 1", "a comparison is not allowed"),
        ("n and 1", "and/or is not allowed"),
        ("not n", "UnaryOp is not allowed"),
        ("n & 2", "the operator BitAnd is not allowed"),
        ("n @ 2", "the operator MatMult is not allowed"),
        ("ceil(n, 2)", "ceil() takes 1 arguments, got 2"),
        ("min(n)", "min() takes at least 2 arguments, got 1"),
        ("max(*n)", "max() takes plain arguments"),
        ("abs(n)", "calls 'abs'"),
        ("[n]", "List is not allowed"),
        ("", "not an expression"),
        ("-" * 990 + "1", "nested too deeply"),
        ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
        ("1" * 1001, "longer than 1000"),
    ],
)
def test_the_evaluator_refuses_everything_else(text: str, what: str) -> None:
    with pytest.raises(ExpressionError) as info:
        Expression.compile(text)
    assert what in str(info.value), str(info.value)
    assert str(info.value).startswith("expression ")


def test_conditions_compare_and_combine() -> None:
    cond = Expression.compile("embed_dim % 32 == 0 and 0 < n <= 8 or not n", condition=True)
    assert [
        cond.evaluate({"embed_dim": d, "n": n}) for d, n in ((64, 3), (48, 3), (64, 9), (48, 0))
    ] == [
        True,
        False,
        False,
        True,
    ]


@pytest.mark.parametrize(
    ("text", "values", "what"),
    [
        ("n // m", {"n": 1, "m": 0}, "division by zero in //"),
        ("div_up(n, m)", {"n": 1, "m": 0}, "division by zero in div_up"),
        ("n + k", {"n": 1}, "no value 'k' (given: n)"),
        (
            "v + 1",
            {"v": (1, 2, 3, 4)},
            "'v' is a vector (1, 2, 3, 4): pass it whole by its bare name, or an element as v[0]",
        ),
        ("n * n * n * n * n", {"n": 1 << 20}, "exceeds 2**64 (1.209e+24) (at n=1048576)"),
        ("div_up(n * m, k - 64)", {"n": 1, "m": 2, "k": 64}, "div_up (at k=64, m=2, n=1)"),
        ("n * 1e308 * 10", {"n": 10}, "is inf"),
    ],
)
def test_evaluation_errors_name_the_expression(
    text: str, values: dict[str, Any], what: str
) -> None:
    with pytest.raises(ExpressionError) as info:
        Expression.compile(text).evaluate(values)
    assert str(info.value).startswith(f"expression {text!r}: ")
    assert what in str(info.value)


def test_a_bare_name_passes_a_vector() -> None:
    assert Expression.compile("out_sizes").evaluate({"out_sizes": (1, 2, 3, 4)}) == (1, 2, 3, 4)


def test_a_count_is_a_non_negative_int() -> None:
    with pytest.raises(ExpressionError, match=r"gave 3\.5, expected an integer"):
        Expression.compile("n / 2").evaluate_int({"n": 7})
    assert Expression.compile("n / 2").evaluate({"n": 8}) == 4.0
    entry = builtin_entry("webgpu", "add_flat", WGSL_DIR / "binary_flat.wgsl")
    assert entry.dispatches[0].workgroups({"workgroups": 5}) == 5
    with pytest.raises(ExpressionError, match="negative workgroup count -1"):
        entry.dispatches[0].workgroups({"workgroups": -1})


def test_the_reference_s_example_manifest_parses() -> None:
    """docs/bring-your-own-kernels.md's example stays a valid manifest."""
    page = (Path(__file__).parents[2] / "docs" / "bring-your-own-kernels.md").read_text()
    (example,) = [
        block
        for block in re.findall(r"```toml\n(.*?)```", page, re.S)
        if block.startswith('format = "parity-kernels/1"')
    ]
    manifest = parse_manifest(example, Path("kernels") / MANIFEST_NAME, check_files=False)
    assert manifest.slots("webgpu") == ("q4gsw_gemv", "rotary_emb_hf")
    assert manifest.slots("vulkan") == ("rms_norm",)


# --- adapters ---------------------------------------------------------------------------------

GOOD_ADAPTER = """\
class Blocks:
    provides = ("blocks",)

    def __init__(self, static):
        self.width = static["embed_dim"]

    def values(self, values):
        return {"blocks": values["numel"] // 32}

    def scratch(self):
        return {"tmp": 4 * self.width}
"""


def _adapter_ref(tmp_path: Path, code: str, name: str = "Blocks") -> AdapterRef:
    (tmp_path / "adapters.py").write_text(code)
    return AdapterRef(tmp_path / "adapters.py", name)


def test_an_adapter_loads_from_its_file(tmp_path: Path) -> None:
    cls = load_adapter(_adapter_ref(tmp_path, GOOD_ADAPTER), SLOTS["embedding_q4gsw"])
    assert adapter_provides(cls) == ("blocks",)
    adapter = cls({"embed_dim": 64})
    assert adapter.values({"numel": 96}) == {"blocks": 3}
    assert adapter.scratch() == {"tmp": 256}
    assert load_adapter(_adapter_ref(tmp_path, GOOD_ADAPTER)) is cls  # imported once


@pytest.mark.parametrize(
    ("code", "name", "what"),
    [
        ("raise RuntimeError('boom')\n", "Blocks", "importing it failed:\nTraceback"),
        ("def broken(:\n", "Blocks", "importing it failed"),
        (
            "class Other:\n    pass\n",
            "Blocks",
            "expected a class 'Blocks' in adapters.py, got nothing (classes there: Other)",
        ),
        (
            "class Blocks:\n    def values(self, v):\n        return {}\n",
            "Blocks",
            "class Blocks lacks scratch()",
        ),
        (GOOD_ADAPTER.replace('("blocks",)', '"blocks"'), "Blocks", "must be a tuple of value"),
        (
            GOOD_ADAPTER.replace('("blocks",)', '("numel",)'),
            "Blocks",
            "names numel, which slot embedding_q4gsw offers already",
        ),
    ],
)
def test_a_bad_adapter_names_its_file_and_class(
    tmp_path: Path, code: str, name: str, what: str
) -> None:
    ref = _adapter_ref(tmp_path, code, name)
    with pytest.raises(KernelManifestError) as info:
        load_adapter(ref, SLOTS["embedding_q4gsw"])
    assert str(info.value).startswith(f"{ref.file}: adapter adapters.py:{name}: "), info.value
    assert what in str(info.value), info.value

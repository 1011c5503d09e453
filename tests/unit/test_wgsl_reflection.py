"""WGSL reflection (webgpu_backend/reflection.py through node and wgsl_reflect): every shipped,
test and upstream kernel reflects; the result agrees with the project's declared interfaces
(the contract's KernelSpec bindings; the params the runtime packs from reflection are checked
against the former hand-written formats in tests/backend/test_webgpu_slots.py) and with
WGSL's layout rules; the shim's repairs of the library hold; errors name the file;
the cache spares the second process. tests/backend/test_reflection_pipelines.py checks the
same reflections against wgpu's own validation and the GPU's reading of a struct."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from pathlib import Path

import pytest

from graph_format import KernelBuildError
from harness.model import KernelSpec
from harness.ops import MODELS
from tests.reflection_support import DATA, ROOT, SHIPPED_WGSL, TEST_WGSL, upstream_wgsl
from webgpu_backend import reflection
from webgpu_backend.reflection import (
    ReflectionUnavailable,
    WgslReflectionError,
    WgslType,
    reflect_wgsl,
    reflect_wgsl_file,
    reflect_wgsl_many,
)
from webgpu_backend.shaders import WGSL_DIR

KERNELS: dict[str, tuple[str, KernelSpec]] = {
    name: (op, spec) for op, model in MODELS.items() for name, spec in model.kernels.items()
}


def _members(t: WgslType) -> list[tuple[str, str, int, int | None, int]]:
    return [(m.name, m.type.name, m.offset, m.size, m.align) for m in t.members]


# --- every kernel reflects, and agrees with the project's declarations -----------------------


@pytest.mark.parametrize("path", [*SHIPPED_WGSL, *TEST_WGSL], ids=lambda p: p.name)
def test_every_shipped_and_test_kernel_reflects(path: Path) -> None:
    found = reflect_wgsl_file(path)
    assert found.tool == "wgsl_reflect 1.6.0"
    entry = found.entry_point() if len(found.entry_points) == 1 else found.entry_points[0]
    assert entry.workgroup_size is not None and len(entry.workgroup_size) == 3
    assert found.bindings, f"{path}: no bindings reflected"
    assert all(b.kind in ("uniform", "storage_ro", "storage_rw") for b in found.bindings)
    # Every binding the entry point uses was reflected.
    assert set(entry.resources) <= {(b.group, b.binding) for b in found.bindings}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_bindings_and_workgroup_size_agree_with_the_contract(kernel: str) -> None:
    _, spec = KERNELS[kernel]
    found = reflect_wgsl_file(WGSL_DIR / f"{spec.wgsl}.wgsl")
    storage = [
        (b.binding, b.name, b.access, b.element.name if b.element else b.type.name)
        for b in found.bindings
        if b.resource == "storage"
    ]
    declared = [(i, t.name, t.access, t.element) for i, t in enumerate(spec.tensors)]
    assert storage == declared
    assert {b.group for b in found.bindings} == {0}
    uniforms = [b.binding for b in found.bindings if b.resource == "uniform"]
    assert uniforms == list(range(len(spec.tensors), len(found.bindings)))
    x, y, z = found.entry_point("main").workgroup_size  # type: ignore[misc]
    assert (x.overrides, x.value, y.value, z.value) == (("wg_size",), 64, 1, 1)
    assert found.override("wg_size").type == "u32"


# --- layout rules, f16, overrides, workgroup sizes -------------------------------------------


def test_struct_offsets_follow_wgsl_layout_rules() -> None:
    """Offsets worked out by hand from the WGSL spec's alignment and size table."""
    found = reflect_wgsl_file(DATA / "layout_probe.wgsl")
    probe = found.struct("Probe")
    assert _members(probe) == [
        ("s", "f32", 0, 4, 4),
        ("v3", "vec3<f32>", 16, 12, 16),  # vec3 aligns to 16
        ("u", "u32", 28, 4, 4),  # fills vec3's tail
        ("h", "f16", 32, 2, 2),
        ("v2h", "vec2<f16>", 36, 4, 4),
        ("m", "mat3x3<f32>", 48, 48, 16),  # 3 columns of vec3, stride 16
        ("arr", "array<vec4<f32>, 2>", 96, 32, 16),
        ("inner", "Inner", 128, 16, 16),
        ("tail", "u32", 144, 4, 16),  # @align(16)
        ("sized", "u32", 148, 8, 4),  # @size(8)
        ("last", "vec2<f32>", 160, 8, 8),
    ]
    assert (probe.size, probe.align) == (176, 16)  # 168 rounded up to the alignment
    assert _members(found.struct("Inner")) == [
        ("a", "vec3<f32>", 0, 12, 16),
        ("b", "f32", 12, 4, 4),
    ]
    config = reflect_wgsl_file(DATA / "foreign_rms_norm_f16.wgsl").struct("NormConfig")
    assert _members(config) == [
        ("rows", "u32", 0, 4, 4),
        ("cols", "u32", 4, 4, 4),
        ("_pad0", "vec2<u32>", 8, 8, 8),
        ("epsilon", "f32", 16, 4, 4),
        ("gain", "f16", 20, 2, 2),
        ("scale4", "vec4<f32>", 32, 16, 16),  # 6 bytes of padding before it
    ]
    assert config.size == 48


def test_a_layout_that_breaks_the_rules_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every struct layout the package computes is checked: one wrong offset is an error
    naming the struct, the member, its offset and the rules' offset."""
    source = (DATA / "layout_probe.wgsl").read_text()
    tool, (raw,) = reflection._run_shim([source])
    broken = copy.deepcopy(raw)
    probe = next(s for s in broken["structs"] if s["name"] == "Probe")
    next(m for m in probe["members"] if m["name"] == "u")["offset"] = 32
    reflection._build("probe.wgsl", "sha", tool, raw)  # the package's own layout passes
    with pytest.raises(WgslReflectionError) as caught:
        reflection._build("probe.wgsl", "sha", tool, broken)
    text = str(caught.value)
    assert "probe.wgsl:" in text and "member 'u'" in text
    assert "offset 32" in text and "rules give offset 28" in text


def test_f16_sources() -> None:
    found = reflect_wgsl_file(DATA / "foreign_rms_norm_f16.wgsl")
    assert found.uses_f16 and found.enables == ("f16",)
    src = found.binding(1)
    assert (src.name, src.kind, src.type.name, src.type.stride) == (
        "src_rows",
        "storage_ro",
        "array<vec4<f16>>",
        8,
    )
    assert found.binding(2).type.name == "array<f16>" and found.binding(2).min_binding_size == 2
    out = found.binding(0, group=1)
    assert (out.name, out.kind, out.min_binding_size) == ("dst_rows", "storage_rw", 8)
    assert not reflect_wgsl_file(WGSL_DIR / "rms_norm.wgsl").uses_f16


def test_overrides() -> None:
    foreign = reflect_wgsl_file(DATA / "foreign_rms_norm_f16.wgsl")
    threads = foreign.override("threads")
    assert (threads.id, threads.key, threads.type, threads.default, threads.default_text) == (
        1000,
        "1000",
        "u32",
        128,
        "128u",
    )
    assert not threads.required
    rows = foreign.override("rows_per_group")
    assert (rows.id, rows.key, rows.default, rows.required) == (None, "rows_per_group", None, True)
    exprs = reflect_wgsl_file(DATA / "expressions.wgsl")
    height = exprs.override("height")
    assert (height.default, height.default_text, height.type) == (4, "width / 4u", None)
    assert (exprs.override("gain").default, exprs.override("gain").type) == (0.5, "f32")
    assert exprs.override("enabled").default is True
    assert [o.name for o in exprs.overrides] == ["width", "height", "gain", "enabled"]


def test_workgroup_sizes_literal_override_and_expression() -> None:
    exprs = reflect_wgsl_file(DATA / "expressions.wgsl")
    with pytest.raises(KeyError, match="name the one to use"):
        exprs.entry_point()
    tiled = exprs.entry_point("tiled")
    assert [(d.text, d.value, d.overrides) for d in tiled.workgroup_size or ()] == [
        ("width", 16, ("width",)),
        ("height * 2u", 8, ("height",)),
        ("TILE / 4u", 2, ()),
    ]
    # wgsl_reflect alone reads `64u` as 1.
    flat = exprs.entry_point("flat_copy")
    assert [(d.text, d.value) for d in flat.workgroup_size or ()] == [
        ("64u", 64),
        (None, 1),
        (None, 1),
    ]
    assert tiled.resources == ((0, 0), (0, 2))
    assert tiled.overrides == ("width", "height", "gain", "enabled")
    foreign = reflect_wgsl_file(DATA / "foreign_rms_norm_f16.wgsl").entry_point()
    assert foreign.name == "norm_rows"
    assert [(d.text, d.value) for d in foreign.workgroup_size or ()] == [
        ("threads", 128),
        ("rows_per_group", None),  # no default: the pipeline must pass one
        (None, 1),
    ]


def test_constant_expressions_in_attributes() -> None:
    """`@binding(PARAMS_SLOT - 1)` and `@align(4 * 8)` are folded before the layout."""
    exprs = reflect_wgsl_file(DATA / "expressions.wgsl")
    wide = exprs.binding(2)
    assert (wide.name, wide.kind) == ("wide", "uniform")
    assert _members(wide.type) == [("a", "u32", 0, 4, 4), ("b", "u32", 32, 4, 32)]
    assert (wide.type.size, wide.type.align) == (64, 32)


def test_block_is_a_name() -> None:
    """wgsl_reflect takes `block` for a keyword; upstream's embedding kernel names a value so."""
    found = reflect_wgsl(
        "@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n"
        "@compute @workgroup_size(1) fn main() { let block = 3u; o[block] = block; }\n",
        "block.wgsl",
    )
    assert found.binding(0).name == "o"


# --- errors ----------------------------------------------------------------------------------


def test_a_syntax_error_names_the_file_line_and_column() -> None:
    with pytest.raises(WgslReflectionError) as caught:
        reflect_wgsl("struct P { a: u32, }\nfn main( {\n}\n", "kernels/bad.wgsl")
    error = caught.value
    assert isinstance(error, KernelBuildError) and error.backend == "webgpu"
    assert (error.line, error.column) == (2, 10)
    assert str(error).startswith("webgpu: kernels/bad.wgsl:2:10: cannot reflect kernel 'bad'")
    assert "wgsl_reflect 1.6.0: Expected argument name.. Line: 2" in str(error)


def test_a_library_keyword_used_as_a_name_says_so() -> None:
    with pytest.raises(WgslReflectionError, match="takes 'storage' for a keyword"):
        reflect_wgsl("fn f() -> u32 {\n  let storage = 1u;\n  return storage;\n}\n", "kw.wgsl")


def _fresh_source() -> str:
    return (
        f"// {uuid.uuid4()}\n@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"
        "@compute @workgroup_size(1) fn main() { o[0] = 1.0; }\n"
    )


def test_missing_node_is_a_setup_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VULKAN_PARITY_REFLECT_CACHE", str(tmp_path))
    monkeypatch.setattr(reflection.shutil, "which", lambda name: None)
    reflection._node.cache_clear()
    try:
        with pytest.raises(ReflectionUnavailable, match=r"node \(Debian package 'nodejs'\)"):
            reflect_wgsl(_fresh_source())
    finally:
        reflection._node.cache_clear()


def test_a_runtime_needs_node_and_the_package_before_any_graph(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`require_tool` (what WebGPURuntime checks when it opens, so that a run without node
    refuses at set-up instead of failing every op) names whatever is missing, and a node that
    cannot run the shim (a Debian node without a module it needs) too."""

    def check() -> None:
        reflection.require_tool.cache_clear()
        try:
            reflection.require_tool()
        finally:
            reflection.require_tool.cache_clear()

    check()  # this machine has both
    broken = tmp_path / "broken.mjs"
    broken.write_text('console.error("Cannot load externalized builtin"); process.exit(3);\n')
    with monkeypatch.context() as patch:
        patch.setattr(reflection, "SHIM", broken)
        with pytest.raises(ReflectionUnavailable, match=r"node could not run broken.mjs \(exit"):
            check()
    monkeypatch.setattr(reflection, "NODE_PREFIX", tmp_path / "node")
    with pytest.raises(ReflectionUnavailable, match="the npm package wgsl_reflect in ") as caught:
        check()
    assert "node (" not in str(caught.value) and "scripts/setup.sh" in str(caught.value)
    monkeypatch.setattr(reflection.shutil, "which", lambda name: None)
    with pytest.raises(ReflectionUnavailable, match=r"node \(Debian package 'nodejs'\) and the"):
        check()


def test_missing_or_wrong_package_is_a_setup_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VULKAN_PARITY_REFLECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(reflection, "NODE_PREFIX", tmp_path / "node")
    with pytest.raises(ReflectionUnavailable) as caught:
        reflect_wgsl(_fresh_source())
    assert "wgsl_reflect is not installed" in str(caught.value)
    assert "scripts/setup.sh" in str(caught.value) and "npm install" in str(caught.value)
    package = tmp_path / "node" / "node_modules" / "wgsl_reflect" / "package.json"
    package.parent.mkdir(parents=True)
    package.write_text(json.dumps({"version": "0.0.1"}))
    with pytest.raises(ReflectionUnavailable, match=r"0\.0\.1 is installed .* 1\.6\.0 is pinned"):
        reflect_wgsl(_fresh_source())


# --- the cache -------------------------------------------------------------------------------


def _count_processes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    real = subprocess.run

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(reflection.subprocess, "run", counting)
    return calls


def test_a_second_reflection_spawns_no_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VULKAN_PARITY_REFLECT_CACHE", str(tmp_path))
    calls = _count_processes(monkeypatch)
    source = _fresh_source()
    first = reflect_wgsl(source, "a.wgsl")
    assert len(calls) == 1
    again = reflect_wgsl(source, "b.wgsl")  # memory: same content under another name
    assert len(calls) == 1 and again.name == "b.wgsl" and again.bindings == first.bindings
    assert len(list((tmp_path / "wgsl").glob("*.json"))) == 1
    monkeypatch.setattr(reflection, "_MEMORY", {})  # a new process: the disk answers
    from_disk = reflect_wgsl(source, "a.wgsl")
    assert len(calls) == 1 and from_disk == first


def test_a_batch_takes_one_process_and_a_refusal_is_remembered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VULKAN_PARITY_REFLECT_CACHE", str(tmp_path))
    calls = _count_processes(monkeypatch)
    sources = [(f"k{i}.wgsl", _fresh_source()) for i in range(3)]
    assert [r.name for r in reflect_wgsl_many(sources)] == ["k0.wgsl", "k1.wgsl", "k2.wgsl"]
    assert len(calls) == 1
    bad = f"// {uuid.uuid4()}\nfn (\n"
    for _ in range(2):
        with pytest.raises(WgslReflectionError):
            reflect_wgsl(bad, "bad.wgsl")
    assert len(calls) == 2


# --- upstream ExecuTorch's generated WGSL (vendored: tests/data/executorch) ----------------


def test_upstream_generated_wgsl_reflects() -> None:
    sources = upstream_wgsl()
    found = reflect_wgsl_many(sorted(sources.items()))
    assert len(found) == len(sources) == 14  # tests/data/executorch/README.md
    for r in found:
        assert r.entry_points, r.name
        for entry in r.entry_points:  # gelu has two (tanh and erf)
            assert entry.stage == "compute" and entry.workgroup_size is not None, r.name
            assert set(entry.resources) <= {(b.group, b.binding) for b in r.bindings}, r.name
    assert any(r.uses_f16 for r in found)


def _fields(t: WgslType) -> list[tuple[str, int, str]]:
    return [(m.name, m.offset, m.type.name) for m in t.members]


def test_upstream_kernels_the_issue_names_against_the_projects() -> None:
    """The interface facts the manifest design rests on (issue 12; shared/reference/
    upstream-kernel-interfaces.md), as reflection sees them."""
    sources = upstream_wgsl()

    def upstream(path: str) -> reflection.WgslReflection:
        return reflect_wgsl(sources[path], path)

    def ours(stem: str) -> reflection.WgslReflection:
        return reflect_wgsl_file(ROOT / "wgsl" / f"{stem}.wgsl")

    def params(r: reflection.WgslReflection) -> WgslType:
        return next(b.type for b in r.bindings if b.resource == "uniform")

    def kinds(r: reflection.WgslReflection) -> list[str | None]:
        return [b.kind for b in r.bindings]

    # rms_norm: same bindings, same params layout (one field named otherwise), same override.
    up, mine = upstream("rms_norm/rms_norm_wgsl.h"), ours("rms_norm")
    assert kinds(up) == kinds(mine)
    assert [(o, t) for _, o, t in _fields(params(up))] == [
        (o, t) for _, o, t in _fields(params(mine))
    ]
    assert [n for n, _, _ in _fields(params(up))] == ["num_rows", "row_width", "epsilon", "_pad"]
    assert [o.name for o in up.overrides] == [o.name for o in mine.overrides] == ["wg_size"]
    # The q4gsw GEMM: field 3 is K_packed (bytes per row) where the project has k_words.
    up = upstream("quantized_linear/q4gsw_linear_wgsl.h")
    assert kinds(up) == kinds(ours("q4gsw_gemm"))
    assert (
        params(up).member("K_packed").offset
        == params(ours("q4gsw_gemm")).member("k_words").offset
        == 12
    )
    # The coop4 GEMV declares wg_size only: the project's GEMV also takes group_size.
    up = upstream("quantized_linear/q4gsw_linear_coop4_bicol_wgsl.h")
    assert [o.name for o in up.overrides] == ["wg_size"]
    assert [o.name for o in ours("q4gsw_gemv").overrides] == ["wg_size", "group_size"]
    # HF rope: one output per dispatch (5 bindings) where the project binds q and k (7).
    up = upstream("rope/rotary_embedding_hf_wgsl.h")
    assert kinds(up) == ["storage_rw", "storage_ro", "storage_ro", "storage_ro", "uniform"]
    assert len(ours("rotary_emb_hf").bindings) == 7
    # embedding_q4gsw: eight u32 params, five of them fields the project does not have.
    up = upstream("embedding_q4gsw/embedding_q4gsw_wgsl.h")
    names = [n for n, _, _ in _fields(params(up))]
    assert len(names) == 8 and "blocks_per_row" in names and "is_linear_weight" in names
    theirs_only = set(names) - {n for n, _, _ in _fields(params(ours("embedding_q4gsw")))}
    assert len(theirs_only) == 5

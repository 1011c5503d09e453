"""Kernels from elsewhere on the Vulkan runtime: a manifest replaces a slot's kernel, bound
through the same path as the project's own (vulkan_ref/binding.py).

Foreign kernels live in tests/data/kernels/foreign/, written in a style other than the
project's: a params block instead of TensorMeta, other binding names and order, spec
constants with other ids and names, one tensor per dispatch, two passes with an adapter's
scratch buffer. Each runs generated cases against the float64 reference (the contract
decides which steps are refused) with the validation layer on and silent.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from graph_format import (
    GraphBuildError,
    InputError,
    KernelBuildError,
    ParityError,
    Runtime,
    StepResult,
)
from graph_format.kernels import (
    KernelManifest,
    KernelManifestError,
    KernelRequirementError,
    load_manifest,
)
from harness.check.contract import ContractModel
from harness.check.oracles import error_key
from harness.check.reference import ReferenceEvaluator
from harness.gen.case import Case
from harness.model.numerics import compare
from harness.ops.rms_norm import rms_norm_cases
from harness.ops.rotary import rope_hf_cases
from vulkan_ref import VulkanRuntime
from vulkan_ref.graph import ComputeGraph
from vulkan_ref.pipeline import spec_bytes
from vulkan_ref.spirv import GLSL_DIR

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "kernels" / "foreign"
FORMAT = 'format = "parity-kernels/1"\n'

FOREIGN_RMS_NORM = """
[vulkan.{slot}]
glsl = "rms_norm_foreign.comp"
bindings = {{ shape = "params", src = "x", gamma = "weight", dst = "out" }}
params.epsilon = "eps"
params.cols = "row_width"
params.rows = "num_rows"
spec.4 = "workgroup_size // 2"
spec.LANES = "workgroup_size // 2"
dispatch = "num_rows"
fold = true
"""

# The same kernel compiled elsewhere without debug names: everything by index.
FOREIGN_RMS_NORM_SPIRV = """
[vulkan.{slot}]
spirv = "rms_norm_foreign.spv"
bindings = {{ 0 = "params", 1 = "x", 2 = "weight", 3 = "out" }}
params.0 = "num_rows"
params.1 = "eps"
params.2 = "row_width"
spec.4 = 32
spec.2 = 32
dispatch = "num_rows"
fold = true
"""

SPLIT_ROPE = """
[vulkan.rotary_emb_hf]
glsl = "rope_hf_split.comp"

[[vulkan.rotary_emb_hf.dispatch_list]]
bindings = { t_out = "xq_out", t_in = "xq" }
push.pairs = "q_pairs"
push.n_heads = "q_heads"
dispatch = "div_up(q_pairs, 64)"

[[vulkan.rotary_emb_hf.dispatch_list]]
bindings = { t_out = "xk_out", t_in = "xk" }
push.pairs = "total_pairs - q_pairs"
push.n_heads = "k_heads"
dispatch = "div_up(total_pairs - q_pairs, 64)"
"""

TWO_PASS_RMS_NORM = """
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

RMS_NORM_SLOTS = ("rms_norm", "rms_norm_vec4")


def kernel_folder(folder: Path, sections: str, *files: str) -> KernelManifest:
    """A kernel folder with these manifest sections and copies of these test kernels."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copy(DATA / name, folder / name)
    (folder / "kernels.toml").write_text(FORMAT + sections)
    return load_manifest(folder)


def for_rms_norm_slots(template: str) -> str:
    """A manifest section per rms_norm slot (the foreign kernels serve both)."""
    return "".join(template.format(slot=slot) for slot in RMS_NORM_SLOTS)


def compile_elsewhere(source: Path, out: Path) -> None:
    """glslc as another project's build would run it: optimized, no debug names, outside
    this project's SPIR-V cache."""
    flags = ["-fshader-stage=compute", "--target-env=vulkan1.1", "-O"]
    subprocess.run(
        ["glslc", *flags, str(source), "-o", str(out)],
        check=True,
        capture_output=True,
    )


def run_checked(runtime: Runtime, case: Case) -> list[StepResult]:
    """Run `case`: a step the contract refuses must be refused alike (class and key); an
    accepted one must match the float64 reference within its end-to-end budget, with no
    validation message. Returns the accepted steps' results."""
    contract = ContractModel(case.graph)
    reference = ReferenceEvaluator(case.graph)
    results = []
    graph = runtime.load(case.graph)
    try:
        for index, inputs in enumerate(case.steps):
            try:
                expected = contract.step(inputs)
            except ParityError as refusal:
                with pytest.raises(ParityError) as info:
                    graph.execute(inputs)
                assert error_key(info.value) == error_key(refusal), (index, info.value)
                continue
            result = graph.execute(inputs)
            assert result.validation_messages == [], result.validation_messages
            assert result.cur_dims == expected.cur_dims
            values, errors, _ = reference.step(inputs)
            for name in case.graph.outputs:
                cmp = compare(result.outputs[name], values[name], errors[name])
                assert cmp.ok, (index, name, cmp)
            results.append(result)
    finally:
        graph.close()
    return results


@pytest.fixture(scope="module")
def kernels_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture(scope="module")
def foreign_rms_norm(vulkan: Runtime, kernels_dir: Path) -> VulkanRuntime:
    assert isinstance(vulkan, VulkanRuntime)
    manifest = kernel_folder(
        kernels_dir / "glsl", for_rms_norm_slots(FOREIGN_RMS_NORM), "rms_norm_foreign.comp"
    )
    return VulkanRuntime(vulkan.context, manifest=manifest)


@pytest.fixture(scope="module")
def foreign_rms_norm_spirv(vulkan: Runtime, kernels_dir: Path) -> VulkanRuntime:
    assert isinstance(vulkan, VulkanRuntime)
    folder = kernels_dir / "spirv"
    folder.mkdir()
    compile_elsewhere(DATA / "rms_norm_foreign.comp", folder / "rms_norm_foreign.spv")
    manifest = kernel_folder(folder, for_rms_norm_slots(FOREIGN_RMS_NORM_SPIRV))
    return VulkanRuntime(vulkan.context, manifest=manifest)


@pytest.fixture(scope="module")
def split_rope(vulkan: Runtime, kernels_dir: Path) -> VulkanRuntime:
    assert isinstance(vulkan, VulkanRuntime)
    manifest = kernel_folder(kernels_dir / "rope", SPLIT_ROPE, "rope_hf_split.comp")
    return VulkanRuntime(vulkan.context, manifest=manifest)


@pytest.fixture(scope="module")
def two_pass_rms_norm(vulkan: Runtime, kernels_dir: Path) -> VulkanRuntime:
    assert isinstance(vulkan, VulkanRuntime)
    manifest = kernel_folder(
        kernels_dir / "two_pass",
        for_rms_norm_slots(TWO_PASS_RMS_NORM),
        "rms_norm_two_pass.comp",
        "adapters.py",
    )
    return VulkanRuntime(vulkan.context, manifest=manifest, allow_adapters=True)


FIXTURE_SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


# The foreign kernels here replace the fp32 slots (rms_norm, rms_norm_vec4): fp32 cases only.
FP32_RMS_NORM = rms_norm_cases().filter(lambda case: case.graph.float_dtypes() == {"float32"})


def _rows(result: StepResult, name: str = "x") -> int:
    return int(np.prod(result.cur_dims[name][:-1]))


@FIXTURE_SETTINGS
@given(case=FP32_RMS_NORM)
def test_a_foreign_glsl_rms_norm_matches_the_reference(
    foreign_rms_norm: VulkanRuntime, case: Case
) -> None:
    for result in run_checked(foreign_rms_norm, case):
        (record,) = result.dispatches
        assert record.kernel in RMS_NORM_SLOTS  # the slot, whatever kernel fills it
        assert record.workgroup_size == (32, 1, 1)  # the kernel's own, from reflection
        assert record.logical_count == (_rows(result), 1, 1)  # the manifest's dispatch


@FIXTURE_SETTINGS
@given(case=FP32_RMS_NORM)
def test_a_spirv_module_without_names_binds_by_index(
    foreign_rms_norm_spirv: VulkanRuntime, case: Case
) -> None:
    for result in run_checked(foreign_rms_norm_spirv, case):
        (record,) = result.dispatches
        assert (record.workgroup_size, record.logical_count) == ((32, 1, 1), (_rows(result), 1, 1))


@FIXTURE_SETTINGS
# The split manifest fills the f32 slot only: the family's f16 cases take rotary_emb_hf_f16.
@given(case=rope_hf_cases().filter(lambda c: c.meta.get("dtype", "float32") == "float32"))
def test_a_split_hf_rope_dispatches_q_then_k(split_rope: VulkanRuntime, case: Case) -> None:
    for result in run_checked(split_rope, case):
        q_record, k_record = result.dispatches  # one record per dispatch of the split
        assert q_record.kernel == k_record.kernel == "rotary_emb_hf"
        q_pairs = int(np.prod(result.cur_dims["xq"])) // 2
        k_pairs = int(np.prod(result.cur_dims["xk"])) // 2
        assert q_record.logical_count == (-(-q_pairs // 64), 1, 1)
        assert k_record.logical_count == (-(-k_pairs // 64), 1, 1)


@FIXTURE_SETTINGS
@given(case=FP32_RMS_NORM)
def test_an_adapter_adds_a_value_and_a_scratch_buffer(
    two_pass_rms_norm: VulkanRuntime, case: Case
) -> None:
    width = case.graph.tensor("x").dims[-1]
    for result in run_checked(two_pass_rms_norm, case):
        copy, normalize = result.dispatches
        assert copy.logical_count == (-(-width // 32), 1, 1)
        assert normalize.logical_count == (_rows(result), 1, 1)


def test_info_names_each_replaced_slot_source(
    foreign_rms_norm: VulkanRuntime, vulkan: Runtime
) -> None:
    kernels = foreign_rms_norm.info()["kernels"]
    assert set(kernels) == set(RMS_NORM_SLOTS)
    assert all(path.endswith("rms_norm_foreign.comp") for path in kernels.values())
    assert "kernels" not in vulkan.info()  # the project's kernels everywhere


def test_adapters_are_refused_without_allow_adapters(vulkan: Runtime, tmp_path: Path) -> None:
    assert isinstance(vulkan, VulkanRuntime)
    manifest = kernel_folder(
        tmp_path, TWO_PASS_RMS_NORM.format(slot="rms_norm"), "rms_norm_two_pass.comp", "adapters.py"
    )
    with pytest.raises(KernelManifestError) as info:
        VulkanRuntime(vulkan.context, manifest=manifest)
    assert str(info.value) == (
        f"{tmp_path / 'kernels.toml'}: vulkan.rms_norm.adapter: names the Python adapter "
        "adapters.py:TwoPassAdapter; running it needs VulkanRuntime(allow_adapters=True) "
        "(parity: --allow-adapters)"
    )


# --- errors -------------------------------------------------------------------------------------


def _rms_norm_case(width: int = 10, rows: tuple[int, ...] = (2, 3)) -> Case:
    """One rms_norm step; a width that is no multiple of 4 runs the rms_norm slot."""
    from harness.gen.builder import GraphBuilder

    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.input("x", "float32", [*rows, width])
    w = b.constant("weight", rng.uniform(0.5, 1.5, width).astype(np.float32))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    steps = [{"x": rng.standard_normal((*rows, width)).astype(np.float32)}]
    return Case(b.build(), steps)


ONE_SLOT = FOREIGN_RMS_NORM.format(slot="rms_norm")
KERNEL = "rms_norm_foreign.comp"


@dataclass(frozen=True)
class Broken:
    """A foreign rms_norm made not to fit: the manifest or the kernel edited (old -> new),
    refused at load or at the first execute with these words in the message ({path}: the
    kernel's file)."""

    manifest: tuple[str, str] | None = None
    kernel: tuple[tuple[str, str], ...] = ()
    when: str = "load"
    error: type[Exception] = KernelBuildError
    words: tuple[str, ...] = ()
    adapter: str | None = None
    kernel_name: str = "rms_norm"  # a KernelBuildError's kernel: the slot (glslc: the file)


BROKEN = {
    "binding no role fills": Broken(
        manifest=('src = "x", ', ""),
        kernel=(("} src;", "} source;"), ("src.data", "source.data")),
        words=(
            "binding 1 ('source') of {path} fills no role of the slot (the kernel declares: "
            "0 'shape', 1 'source', 2 'gamma', 3 'dst'; the slot's roles: out, x, weight; or "
            "'params'); map it with bindings = {{ source = \"<role>\" }}",
        ),
    ),
    "explicit binding by name not declared": Broken(
        kernel=(("} src;", "} source;"), ("src.data", "source.data")),
        words=(
            "bindings.src: {path} declares no binding 'src' (declared: 0 'shape', 1 'source', "
            "2 'gamma', 3 'dst')",
        ),
    ),
    "explicit binding not declared": Broken(
        manifest=('dst = "out" }', 'dst = "out", 9 = "x" }'),
        words=(
            "bindings.9: {path} declares no binding 9 (declared: 0 'shape', 1 'src', "
            "2 'gamma', 3 'dst')",
        ),
    ),
    "params member not offered": Broken(
        kernel=(("uint cols;\n", "uint cols;\n  uint stride;\n"),),
        words=(
            "params member 'stride' (uint at offset 12 of binding 0) of {path} has no value; "
            "rms_norm offers [num_rows, row_width, eps, workgroup_size, workgroups]; map it "
            'with params.stride = "<expression>" or list it in padding',
        ),
    ),
    "explicit params member not declared": Broken(
        manifest=("params.epsilon", "params.epsilonn"),
        words=(
            "params.epsilonn: the params block of {path} declares no member 'epsilonn' "
            "(declared: rows, epsilon, cols)",
        ),
    ),
    "push member not offered": Broken(
        kernel=(
            (
                "shared float partial",
                "layout(push_constant) uniform Push { uint stride; } pc;\nshared float partial",
            ),
            ("  uint lane", "  if (pc.stride == 12345u) {\n    return;\n  }\n  uint lane"),
        ),
        words=(
            "push member 'stride' (uint at offset 0) of {path} has no value; rms_norm offers "
            "[num_rows, row_width, eps, workgroup_size, workgroups]; map it with push.stride",
        ),
    ),
    # Issue 21 item 6: a params block and a push block without values are one error.
    "params and push members not offered": Broken(
        kernel=(
            ("uint cols;\n", "uint cols;\n  uint stride;\n"),
            (
                "shared float partial",
                "layout(push_constant) uniform Push { uint ne0; uint ne1; } pc;\n"
                "shared float partial",
            ),
            (
                "  uint lane",
                "  if (pc.ne0 == 12345u || pc.ne1 == 7u) {\n    return;\n  }\n  uint lane",
            ),
        ),
        words=(
            "params member 'stride' (uint at offset 12 of binding 0) of {path} has no value; ",
            "; and push members 'ne0' (uint at offset 0), 'ne1' (uint at offset 4) of {path} "
            "have no value (2 of 2 members); rms_norm offers",
        ),
    ),
    "spec constant not declared": Broken(
        manifest=("spec.LANES", "spec.NOPE = 1\nspec.LANES"),
        words=(
            "specialization constant 'NOPE' is not declared in {path} (declared: 2 'LANES', "
            "4 (local size))",
        ),
    ),
    "spec constant of a live value": Broken(
        manifest=('spec.LANES = "workgroup_size // 2"', 'spec.LANES = "num_rows"'),
        words=(
            "specialization constant 2 = 'num_rows' reads num_rows, which change with the "
            "live sizes; a specialization constant is fixed when the pipeline is built, at "
            "load (values fixed at load: eps, max_workgroups_per_dim, row_width, "
            "workgroup_size)",
        ),
    ),
    "glslc refuses the kernel": Broken(
        kernel=(("uint lane = ", "undeclared = 1;\n  uint lane = "),),
        words=("rms_norm_foreign.comp:", "error: 'undeclared'", "glslc exited 1"),
        kernel_name="rms_norm_foreign",
    ),
    "the validation layer refuses the pipeline": Broken(
        kernel=(("acc += v * v;", "acc += float(double(v) * double(v));"),),
        words=("Float64",),
    ),
    "an entry point the kernel lacks": Broken(
        manifest=(
            'glsl = "rms_norm_foreign.comp"',
            'glsl = "rms_norm_foreign.comp"\nentry = "run"',
        ),
        words=("entry point 'run' is not in {path} (it declares 'main'; GLSL's is always 'main')",),
    ),
    "a uniform block bound as a tensor": Broken(
        manifest=('shape = "params"', 'shape = "x"'),
        words=(
            "binding 0 ('shape') of {path} is a uniform buffer, but 'x' is a tensor (a storage "
            "buffer)",
        ),
    ),
    "a storage buffer bound as TensorMeta": Broken(
        manifest=('src = "x"', 'src = "x.meta"'),
        words=(
            "binding 1 ('src') of {path} is a storage buffer, but 'x.meta' is the project's "
            "TensorMeta uniform (48 bytes, glsl/include/tensor_meta.glslh)",
        ),
    ),
    "a storage buffer bound as params": Broken(
        manifest=('src = "x"', 'src = "params"'),
        words=(
            "binding 1 ('src') of {path} is a storage buffer, but 'params' is a uniform buffer "
            "packed from values",
        ),
    ),
    "another descriptor set": Broken(
        kernel=(("set = 0, binding = 2", "set = 1, binding = 2"),),
        words=("binding 2 ('gamma') of {path} is in descriptor set 1; the runtime binds set 0",),
    ),
    "a local size above the device's": Broken(
        manifest=('spec.4 = "workgroup_size // 2"', "spec.4 = 4096"),
        error=GraphBuildError,
        words=("local size (4096, 1, 1); the device allows 1 to",),
    ),
    "a float for an integer member": Broken(
        manifest=('params.rows = "num_rows"', 'params.rows = "num_rows / 1"'),
        when="execute",
        words=(
            "params (binding 0) member 'rows' (uint): 'num_rows / 1' gave 6.0, a float for an "
            "integer member",
        ),
    ),
    "a float dispatch count": Broken(
        manifest=('dispatch = "num_rows"', 'dispatch = "num_rows / 4"'),
        when="execute",
        words=("expression 'num_rows / 4': gave 1.5, expected an integer",),
    ),
    "a value the adapter does not add": Broken(
        kernel=(("uint cols;\n", "uint cols;\n  uint stride;\n"),),
        adapter="class A:\n    provides = ('stride',)\n    def __init__(self, static): pass\n"
        "    def values(self, values): return {}\n    def scratch(self): return {}\n",
        when="execute",
        words=("adapter adapters.py:A: values() returned []; its provides declares ['stride']",),
    ),
    "an adapter value named like the op's": Broken(
        adapter="class A:\n    provides = ('eps',)\n    def __init__(self, static): pass\n"
        "    def values(self, values): return {'eps': 0.5}\n    def scratch(self): return {}\n",
        error=KernelManifestError,
        words=("A.provides names eps, which slot rms_norm offers already",),
    ),
    "an adapter that raises": Broken(
        adapter="class A:\n    def __init__(self, static):\n        raise KeyError('cols')\n"
        "    def values(self, values): return {}\n    def scratch(self): return {}\n",
        words=("adapter adapters.py:A: __init__ raised KeyError: 'cols'", "line 3, in __init__"),
    ),
    "an adapter scratch buffer named like a role": Broken(
        adapter="class A:\n    def __init__(self, static): pass\n"
        "    def values(self, values): return {}\n    def scratch(self): return {'x': 4}\n",
        words=("adapter adapters.py:A: scratch() names 'x'; a scratch role is a new name",),
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_kernel_that_does_not_fit_is_refused_naming_what(
    vulkan: Runtime, tmp_path: Path, name: str
) -> None:
    broken = BROKEN[name]
    assert isinstance(vulkan, VulkanRuntime)
    sections = ONE_SLOT
    if broken.manifest is not None:
        assert broken.manifest[0] in sections
        sections = sections.replace(*broken.manifest)
    if broken.adapter is not None:
        (tmp_path / "adapters.py").write_text(broken.adapter)
        sections += 'adapter = "adapters.py:A"\n'
    manifest = kernel_folder(tmp_path, sections, KERNEL)
    source = (tmp_path / KERNEL).read_text()
    for old, new in broken.kernel:
        assert old in source
        source = source.replace(old, new)
    (tmp_path / KERNEL).write_text(source)
    runtime = VulkanRuntime(vulkan.context, manifest=manifest, allow_adapters=True)
    case = _rms_norm_case()
    with pytest.raises(broken.error) as info:
        graph = runtime.load(case.graph)
        try:
            assert broken.when == "execute", "loaded"
            graph.execute(case.steps[0])
        finally:
            graph.close()
    message = str(info.value)
    for words in broken.words:
        assert words.format(path=tmp_path / KERNEL) in message, message
    if isinstance(info.value, KernelBuildError):  # a finding against Vulkan, naming the op
        assert (info.value.backend, info.value.op) == ("vulkan", "norm")
        assert info.value.kernel == broken.kernel_name


# --- requires, fold, skipped slots ----------------------------------------------------------------


def _steps_of(rows: list[tuple[int, ...]], width: int = 10) -> list[dict[str, np.ndarray | int]]:
    rng = np.random.default_rng(9)
    return [{"x": rng.standard_normal((*r, width)).astype(np.float32)} for r in rows]


def test_a_requirement_on_values_fixed_at_load_refuses_the_graph(
    vulkan: Runtime, tmp_path: Path
) -> None:
    assert isinstance(vulkan, VulkanRuntime)
    sections = ONE_SLOT + 'requires = ["row_width <= 8"]\n'
    runtime = VulkanRuntime(vulkan.context, manifest=kernel_folder(tmp_path, sections, KERNEL))
    with pytest.raises(GraphBuildError) as info:
        runtime.load(_rms_norm_case(width=10).graph)
    assert info.value.op == "norm"
    assert isinstance(info.value, KernelRequirementError)
    assert (info.value.slot, info.value.requirement) == ("rms_norm", "row_width <= 8")
    assert str(info.value) == (
        f"op 'norm': rms_norm: the kernel {tmp_path / KERNEL} requires row_width <= 8, which "
        "this graph breaks"
    )
    runtime.load(_rms_norm_case(width=6).graph).close()  # a width it takes


def test_a_requirement_on_live_values_refuses_the_step(vulkan: Runtime, tmp_path: Path) -> None:
    assert isinstance(vulkan, VulkanRuntime)
    sections = ONE_SLOT + 'requires = ["num_rows <= 4"]\n'
    runtime = VulkanRuntime(vulkan.context, manifest=kernel_folder(tmp_path, sections, KERNEL))
    case = _rms_norm_case()
    case.steps = _steps_of([(1, 3), (2, 3), (1, 2)])
    graph = runtime.load(case.graph)
    try:
        before = graph.execute(case.steps[0]).cur_dims
        with pytest.raises(InputError) as info:
            graph.execute(case.steps[1])  # 6 rows
        assert info.value.key() == ("norm", "kernel_requires")
        assert str(info.value) == (
            f"vulkan: norm: the kernel of slot rms_norm ({tmp_path / KERNEL}) requires "
            "num_rows <= 4 (num_rows = 6)"
        )
        assert graph.cur_dims() == before  # refused with the graph untouched
    finally:
        graph.close()
    case.steps = [case.steps[0], case.steps[2]]
    run_checked(runtime, case)  # the steps it takes are right


@pytest.mark.parametrize("fold", [False, True])
def test_a_count_past_the_limit_folds_only_where_the_kernel_does(
    vulkan: Runtime, tmp_path: Path, fold: bool
) -> None:
    assert isinstance(vulkan, VulkanRuntime)
    sections = ONE_SLOT.replace("fold = true", f"fold = {str(fold).lower()}")
    manifest = kernel_folder(tmp_path, sections, KERNEL)
    runtime = VulkanRuntime(vulkan.context, max_workgroups_per_dim=4, manifest=manifest)
    case = _rms_norm_case()
    case.steps = _steps_of([(1, 3), (2, 3)])  # 3 rows, then 6: one workgroup each
    if fold:
        last = run_checked(runtime, case)[-1]
        (record,) = last.dispatches
        assert (record.logical_count, record.physical_grid) == ((6, 1, 1), (4, 2, 1))
        return
    graph = runtime.load(case.graph)
    try:
        graph.execute(case.steps[0])
        with pytest.raises(InputError) as info:
            graph.execute(case.steps[1])
        assert info.value.key() == ("norm", "grid_limit")
        assert "does not fold a 1-D count (fold = false)" in str(info.value)
    finally:
        graph.close()


GEMV_AS_WRITTEN = """
[vulkan.q4gsw_gemv]
glsl = "q4gsw_gemv.comp"
spec.0 = "workgroup_size"
spec.group_size = "group_size"
spec.has_bias = "has_bias"
spec.max_workgroups = "max_workgroups"
dispatch = "gemv_workgroups"
fold = true
"""


def test_a_replaced_slot_is_skipped_when_the_op_skips_it(vulkan: Runtime, tmp_path: Path) -> None:
    """The project's own GEMV through a manifest whose count is never 0: at M > 1 the op
    takes the GEMM and the GEMV does not run, whatever the formula says."""
    from harness.gen.builder import GraphBuilder
    from harness.model import q4

    assert isinstance(vulkan, VulkanRuntime)
    shutil.copy(GLSL_DIR / "q4gsw_gemv.comp", tmp_path / "q4gsw_gemv.comp")
    manifest = kernel_folder(tmp_path, GEMV_AS_WRITTEN)
    runtime = VulkanRuntime(vulkan.context, manifest=manifest)
    rng = np.random.default_rng(3)
    packed, scales = q4.quantize(rng.standard_normal((12, 64)), 32)
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 64])
    out = b.op(
        "linear_q4gsw",
        name="lin",
        x=x,
        weight=b.constant("weight", packed),
        scales=b.constant("scales", scales),
        group_size=b.int(32, "group_size"),
        out_dims=[4, 12],
    )
    b.output(out)
    steps = [{"x": rng.standard_normal((m, 64)).astype(np.float32)} for m in (1, 3, 1)]
    results = run_checked(runtime, Case(b.build(), steps))
    ran = [[(d.kernel, d.logical_count) for d in r.dispatches if d.ran] for r in results]
    assert ran == [
        [("q4gsw_gemv", (6, 1, 1))],
        [("q4gsw_gemm", (1, 1, 1))],
        [("q4gsw_gemv", (6, 1, 1))],
    ]
    gemv = results[1].dispatches[1]
    assert (gemv.kernel, gemv.ran, gemv.logical_count) == ("q4gsw_gemv", False, (0, 0, 0))


# --- the project's kernels through the same path --------------------------------------------------


def _old_spec_constants(graph: ComputeGraph, op: str, slot: str) -> tuple[int | float, ...]:
    """The specialization constants from id 3 on that the op modules packed by hand before
    kernels were bound by their declarations (vulkan_ref/ops at 3992c70)."""
    node = next(n for n in graph.graph.ops if n.name == op)
    if slot.startswith(("add_", "mul_")) or slot in ("sigmoid", "silu"):
        return ({"add": 0, "mul": 1, "sigmoid": 0, "silu": 1}[node.op],)
    if slot.startswith("q4gsw_"):
        group_size = int(graph.scalar_arg(node, "group_size"))
        has_bias = int(node.optional_arg("bias") is not None)
        return (group_size, has_bias) + ((8192,) if slot == "q4gsw_gemv" else ())
    if slot == "embedding_q4gsw":
        return (int(graph.scalar_arg(node, "group_size")),)
    if slot in ("sdpa_qk", "sdpa_fd_split"):
        scale = node.optional_arg("scale")
        head_dim = graph.tensor_arg(node, "q").max_sizes[3]
        return (float(graph.scalar_arg(node, "scale")) if scale else 1.0 / head_dim**0.5,)
    return ()


def test_project_kernels_keep_their_packing(vulkan: Runtime) -> None:
    """What the op modules packed by hand comes out of the kernels' declarations and the
    ops' values, byte for byte: rms_norm's eps push constant, the specialization constants
    (the local size at id 0, then each op's own: op kinds, group size, bias flag, GEMV grid
    cap, sdpa's scale), and the SymInt's own UBO bound for input_pos, over a decoder."""
    from harness.families.decoder import DecoderConfig, DecoderWeights, build_decoder

    config = DecoderConfig()
    weights = DecoderWeights.random(config, np.random.default_rng(4))
    graph = vulkan.load(build_decoder(config, weights))
    assert isinstance(graph, ComputeGraph)
    try:
        seen = set()
        for node in graph._dispatch_nodes:
            for slot, kernel in node.kernels.items():
                seen.add(slot)
                (part,) = kernel.parts
                assert kernel.local_size == (64, 1, 1)
                old = struct.pack("<I", 64) + b"".join(
                    struct.pack("<f" if isinstance(v, float) else "<I", v)
                    for v in _old_spec_constants(graph, node.op, slot)
                )
                spec = part.pipeline.key.spec_constants
                assert [i for i, _, _ in spec] == [0, *range(3, 3 + len(spec) - 1)], slot
                assert b"".join(spec_bytes(v) for v in spec) == old, slot
                if slot.startswith("rms_norm"):
                    assert part.push_data == struct.pack("<f", config.eps)
                else:
                    assert part.push is None
                if slot.startswith("sdpa_"):
                    pos = graph.symints["input_pos"].ubo
                    assert any(r is pos for r in part.ranges), slot
                assert not part.params  # nothing packed per resize: TensorMeta and SymInts
        assert {"rms_norm_vec4", "q4gsw_gemv", "embedding_q4gsw", "sdpa_qk"} <= seen
    finally:
        graph.close()


def test_a_glsl_folder_without_a_kernel_is_a_build_error(vulkan: Runtime, tmp_path: Path) -> None:
    """A `--glsl-dir` folder holds the project's kernels by file name: one it lacks is a
    finding against Vulkan naming the file, not a crash."""
    assert isinstance(vulkan, VulkanRuntime)
    runtime = VulkanRuntime(vulkan.context, shader_dir=tmp_path)
    with pytest.raises(KernelBuildError) as info:
        runtime.load(_rms_norm_case().graph)
    assert str(info.value).endswith(f"rms_norm: no such file: {tmp_path / 'rms_norm.comp'}")

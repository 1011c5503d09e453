"""WGSL reflection against wgpu's own validation and the GPU's reading of memory.

- Every shipped, test and vendored upstream (tests/data/executorch) kernel builds a compute
  pipeline whose bind group layouts come from reflection alone: binding kinds, and each buffer's
  `min_binding_size` set to the reflected size. wgpu refuses a layout whose binding type
  differs from the shader's access, or whose minimum size is below what the shader needs, so
  one more check shrinks each size by 4 bytes and expects the refusal: the reflected sizes
  are exact, not merely large enough.
- A struct packed at the reflected offsets (vec3, matrix, f16, arrays, nested struct, @align,
  @size) reads back on the GPU as packed: naga lays it out as reflection says.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import wgpu

from graph_format import Runtime
from tests.reflection_support import DATA, SHIPPED_WGSL, TEST_WGSL, upstream_wgsl
from webgpu_backend.reflection import (
    WgslReflection,
    WgslType,
    reflect_wgsl,
    reflect_wgsl_file,
    reflect_wgsl_many,
)

pytestmark = pytest.mark.gpu

_BUFFER_TYPES = {
    "uniform": wgpu.BufferBindingType.uniform,
    "storage_ro": wgpu.BufferBindingType.read_only_storage,
    "storage_rw": wgpu.BufferBindingType.storage,
}


@functools.cache
def _device() -> wgpu.GPUDevice:
    """A device of the default adapter with shader-f16 when it has it (lavapipe does)."""
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    features = [f for f in ("shader-f16",) if f in adapter.features]
    limits = {"max-storage-buffers-per-shader-stage": 10}
    return adapter.request_device_sync(required_features=features, required_limits=limits)


@pytest.fixture
def device(webgpu: Runtime) -> wgpu.GPUDevice:  # the runtime fixture fails without an adapter
    return _device()


def _pipeline(
    device: wgpu.GPUDevice,
    found: WgslReflection,
    source: str,
    entry_point: str,
    shrink: tuple[int, int] | None = None,
) -> wgpu.GPUComputePipeline:
    """A pipeline built from reflection only; `shrink` lowers one binding's minimum size by 4.
    Overrides without a default get 1 (enough to build)."""
    if found.uses_f16 and "shader-f16" not in device.features:
        pytest.skip("the adapter lacks shader-f16")
    groups: dict[int, list[dict]] = {}
    for b in found.bindings:
        assert b.kind is not None, f"{found.name}: {b.name} is not a buffer"
        size = b.min_binding_size or 0
        if shrink == (b.group, b.binding):
            size -= 4
        groups.setdefault(b.group, []).append(
            {
                "binding": b.binding,
                "visibility": wgpu.ShaderStage.COMPUTE,
                "buffer": {"type": _BUFFER_TYPES[b.kind], "min_binding_size": size},
            }
        )
    layouts = [
        device.create_bind_group_layout(entries=groups.get(g, [])) for g in range(max(groups) + 1)
    ]
    constants = {o.key: 1 for o in found.overrides if o.required}
    module = device.create_shader_module(label=found.name, code=source)
    return device.create_compute_pipeline(
        layout=device.create_pipeline_layout(bind_group_layouts=layouts),
        compute={"module": module, "entry_point": entry_point, "constants": constants},
    )


def _check_builds_and_sizes_are_exact(
    device: wgpu.GPUDevice, found: WgslReflection, source: str
) -> None:
    for entry in found.entry_points:
        _pipeline(device, found, source, entry.name)
    entry = found.entry_points[0]
    for b in found.bindings:
        if (b.group, b.binding) not in entry.resources or (b.min_binding_size or 0) <= 4:
            continue  # 0 means "no minimum", so a 4-byte minimum cannot shrink
        with pytest.raises(wgpu.GPUValidationError):
            _pipeline(device, found, source, entry.name, shrink=(b.group, b.binding))


@pytest.mark.parametrize("path", [*SHIPPED_WGSL, *TEST_WGSL], ids=lambda p: p.name)
def test_a_pipeline_from_reflection_alone_builds(device: wgpu.GPUDevice, path: Path) -> None:
    _check_builds_and_sizes_are_exact(device, reflect_wgsl_file(path), path.read_text())


def test_upstream_pipelines_from_reflection_alone_build(device: wgpu.GPUDevice) -> None:
    sources = upstream_wgsl()
    for found in reflect_wgsl_many(sorted(sources.items())):
        _check_builds_and_sizes_are_exact(device, found, sources[found.name])


def _pack(t: WgslType, base: int, into: bytearray, values: list[float]) -> None:
    """Writes the next values into every scalar of `t` at `base`, in declaration order."""
    if t.kind == "scalar":
        code = {"f32": "<f4", "u32": "<u4", "i32": "<i4", "f16": "<f2"}[t.name]
        value = len(values) + 1
        values.append(float(value))
        into[base : base + (t.size or 0)] = np.array([value], code).tobytes()
    elif t.kind == "vector":
        assert t.element is not None and t.count is not None
        for i in range(t.count):
            _pack(t.element, base + i * (t.element.size or 0), into, values)
    elif t.kind == "matrix":
        assert t.element is not None and t.count is not None and t.rows is not None
        column = WgslType("vector", "", None, None, t.element, count=t.rows)
        for c in range(t.count):
            _pack(column, base + c * ((t.size or 0) // t.count), into, values)
    elif t.kind == "array":
        assert t.element is not None and t.count is not None and t.stride is not None
        for i in range(t.count):
            _pack(t.element, base + i * t.stride, into, values)
    else:
        for m in t.members:
            _pack(m.type, base + m.offset, into, values)


def test_the_gpu_reads_a_struct_where_reflection_puts_it(device: wgpu.GPUDevice) -> None:
    source = (DATA / "layout_probe.wgsl").read_text()
    found = reflect_wgsl(source, "layout_probe.wgsl")
    probe = found.binding(0).type
    assert probe.size is not None
    packed = bytearray(b"\xff" * probe.size)  # padding holds garbage, as it may
    expected: list[float] = []
    _pack(probe, 0, packed, expected)
    pipeline = _pipeline(device, found, source, "main")
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    probe_buffer = device.create_buffer_with_data(data=bytes(packed), usage=usage)
    flat = device.create_buffer(size=4 * len(expected), usage=usage)
    bind_group = device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[
            {"binding": 0, "resource": {"buffer": probe_buffer}},
            {"binding": 1, "resource": {"buffer": flat}},
        ],
    )
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, bind_group)
    compute.dispatch_workgroups(1)
    compute.end()
    device.queue.submit([encoder.finish()])
    got = np.frombuffer(device.queue.read_buffer(flat), "<f4")
    np.testing.assert_array_equal(got, np.array(expected, "<f4"))

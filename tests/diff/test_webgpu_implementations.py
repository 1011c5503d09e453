"""The remote WebGPU implementations (`dawn`: Dawn in a node host; `chrome`: a page in headless
Chromium) through the device seam, on real devices: buffers written, a project kernel run and
read back, Tint's refusals as `KernelBuildError` (with line:col), validation errors and a dead
host as `DeviceError`, never a hang.

Dawn needs node, the pinned npm package `webgpu` and a Vulkan driver it accepts (Mesa 25's
lavapipe, or a GPU's); chrome needs Debian's chromium. Without them the tests fail with the
reason, or skip with PARITY_SKIP_GPU_TESTS=1 (scripts/setup.sh installs them all).
"""

from __future__ import annotations

import gc
import math
import os
import signal
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import wgpu

from graph_format import ADAPTER_VARIABLE, BackendUnavailable, DeviceError, KernelBuildError
from tests.conftest import _no_device
from webgpu_backend import reflection
from webgpu_backend.gpu import (
    BindEntry,
    BufferUsage,
    Copy,
    Implementation,
    Launch,
    dawn_setup,
    open_implementation,
)
from webgpu_backend.gpu.chrome import ChromeImplementation
from webgpu_backend.gpu.dawn import DawnImplementation

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
BINARY_FLAT = ROOT / "wgsl" / "binary_flat.wgsl"
FLAT_LAYOUT = ((0, "storage_rw"), (1, "storage_ro"), (2, "storage_ro"), (3, "uniform"))
# What Tint refuses and Naga accepts: the literal is above FLT_MAX (3.40282346638528859e38).
LOWEST = "const LOWEST: f32 = -3.4028235e38;\n"
# A kernel that adds one to every element (binding 0), for the steps that are not about a kernel.
ADD_ONE = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&x)) { x[gid.x] = x[gid.x] + 1.0; }
}
"""
# A kernel that runs for long (each invocation loops `n` times over storage, which the
# compiler cannot drop), so that a host killed after the submit dies mid-run.
SPIN = """
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    for (var i = 0u; i < x[0]; i++) { x[gid.x + 1u] = x[gid.x + 1u] * 1664525u + i; }
}
"""

IMPLEMENTATIONS = [
    pytest.param("dawn", id="dawn"),
    pytest.param("chrome", id="chrome", marks=pytest.mark.browser),
]
OPENERS: dict[str, type[DawnImplementation] | type[ChromeImplementation]] = {
    "dawn": DawnImplementation,
    "chrome": ChromeImplementation,
}


def _open(name: str, fresh: bool = False) -> Implementation:
    """The process-wide implementation `name` (or a fresh one); without its set-up the test
    fails with the reason, or skips with PARITY_SKIP_GPU_TESTS=1 (as every device test)."""
    try:
        return OPENERS[name].open() if fresh else open_implementation(name)
    except BackendUnavailable as err:
        _no_device(f"webgpu-{name}", err)
        raise  # not reached: _no_device skips or fails


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> Implementation:
    """Each remote implementation, shared by the process (as the runtime shares it)."""
    return _open(str(request.param))


@pytest.fixture(params=IMPLEMENTATIONS)
def fresh(request: pytest.FixtureRequest) -> Iterator[Implementation]:
    """A remote implementation of its own, for a test that ends its host."""
    opened = _open(str(request.param), fresh=True)
    yield opened
    opened.close()


def _one_buffer_step(impl: Implementation, source: str, values: bytes) -> bytes:
    """Run `source` (binding 0: a read-write storage buffer holding `values`) over 64
    invocations and read the buffer back."""
    layout = impl.create_layout(((0, "storage_rw"),))
    pipeline = impl.create_pipeline("step", source, Path("step.wgsl"), layout, {}, "main")
    buffer = impl.create_buffer("x", len(values), BufferUsage.STORAGE)
    readback = impl.create_buffer("readback", len(values), BufferUsage.READBACK)
    group = impl.create_bind_group(layout, [BindEntry(0, buffer, 0, len(values))])
    impl.write_buffer(buffer, 0, values)
    try:
        copy = Copy(buffer, 0, readback, 0, len(values))
        return impl.run([Launch(pipeline, group, (1, 1, 1))], [copy], readback, len(values))
    finally:
        impl.destroy_buffer(buffer)
        impl.destroy_buffer(readback)


@pytest.mark.parametrize("op_kind", [0, 1], ids=["add", "mul"])
def test_project_kernel_runs_and_reads_back(impl: Implementation, op_kind: int) -> None:
    """wgsl/binary_flat.wgsl with its override constants, storage and uniform bindings: the
    read-back is numpy's float32 sum or product (one correctly rounded operation each)."""
    n = 1000
    rng = np.random.default_rng(19)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    layout = impl.create_layout(FLAT_LAYOUT)
    source = BINARY_FLAT.read_text()
    pipeline = impl.create_pipeline(
        "binary_flat", source, BINARY_FLAT, layout, {"op_kind": op_kind}, "main"
    )
    out, in_a, in_b = (impl.create_buffer(name, 4 * n, BufferUsage.STORAGE) for name in "oab")
    params = impl.create_buffer("params", 16, BufferUsage.UNIFORM)
    readback = impl.create_buffer("readback", 4 * n, BufferUsage.READBACK)
    group = impl.create_bind_group(
        layout,
        [
            BindEntry(0, out, 0, 4 * n),
            BindEntry(1, in_a, 0, 4 * n),
            BindEntry(2, in_b, 0, 4 * n),
            BindEntry(3, params, 0, 16),
        ],
    )
    impl.write_buffer(in_a, 0, a.tobytes())
    impl.write_buffer(in_b, 0, memoryview(b.tobytes()))
    impl.write_buffer(params, 0, struct.pack("<4I", n, 0, 0, 0))
    launch = Launch(pipeline, group, (math.ceil(n / 64), 1, 1))
    data = impl.run([launch], [Copy(out, 0, readback, 0, 4 * n)], readback, 4 * n)
    expected = a + b if op_kind == 0 else a * b
    np.testing.assert_array_equal(np.frombuffer(data, np.float32), expected)
    # A read-back of part of the buffer is that part.
    part = impl.run([], [], readback, 8)
    assert part == data[:8]
    for buffer in (out, in_a, in_b, params, readback):
        impl.destroy_buffer(buffer)


def test_adapter_facts(impl: Implementation) -> None:
    """Limits by WebGPU's dashed names (at least WebGPU's defaults), and f16 explained."""
    assert impl.limits["max-compute-workgroups-per-dimension"] >= 65535
    assert impl.limits["max-texture-dimension-1d"] >= 8192
    assert impl.limits["max-storage-buffer-binding-size"] >= 128 << 20
    assert impl.limits["max-buffer-size"] >= 256 << 20
    assert impl.facts.adapter
    assert ("shader-f16" in impl.features) == (impl.f16_unavailable == "")
    assert impl.backend == f"webgpu-{impl.name}"


def test_tint_rejection_is_a_build_error_with_line_and_column(
    impl: Implementation, tmp_path: Path
) -> None:
    """Tint refuses a literal above FLT_MAX: KernelBuildError naming the implementation's
    backend, the kernel, the file and Tint's whole message at line:col; the device stays
    usable, and the same source without the line builds."""
    path = tmp_path / "lowest.wgsl"
    layout = impl.create_layout(((0, "storage_rw"),))
    with pytest.raises(KernelBuildError) as caught:
        impl.create_pipeline("lowest", LOWEST + ADD_ONE, path, layout, {}, "main")
    err = caught.value
    assert (err.backend, err.kernel, err.shader) == (impl.backend, "lowest", str(path))
    assert f"{path}:1:21 error: value -340282349999999991754788743781432688640.0" in err.compiler
    assert "cannot be represented as 'f32'" in err.compiler
    values = struct.pack("<64f", *range(64))
    assert _one_buffer_step(impl, ADD_ONE, values) == struct.pack("<64f", *range(1, 65))


def test_naga_accepts_what_tint_rejects() -> None:
    """The same source builds on wgpu-native (Naga): the refusal above is Tint's alone."""
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    if adapter is None:
        pytest.skip("wgpu found no adapter")
    device = adapter.request_device_sync()
    device.create_shader_module(code=LOWEST + ADD_ONE)


def test_validation_error_is_a_device_error_at_the_next_step(impl: Implementation) -> None:
    """A bind group whose range runs past its buffer is sent without waiting; its error comes
    back with the next round trip and is raised by the next step (a pipeline built between
    does not swallow it); the step after that runs."""
    layout = impl.create_layout(((0, "storage_rw"),))
    buffer = impl.create_buffer("small", 256, BufferUsage.STORAGE)
    readback = impl.create_buffer("readback", 256, BufferUsage.READBACK)
    too_long = impl.create_bind_group(layout, [BindEntry(0, buffer, 0, 512)])
    pipeline = impl.create_pipeline("add_one", ADD_ONE, Path("add_one.wgsl"), layout, {}, "main")
    copy = Copy(buffer, 0, readback, 0, 256)
    with pytest.raises(DeviceError) as caught:
        impl.run([Launch(pipeline, too_long, (1, 1, 1))], [copy], readback, 256)
    assert caught.value.backend == impl.backend
    assert "Binding size (512) is larger than the size (256)" in str(caught.value)
    fine = impl.create_bind_group(layout, [BindEntry(0, buffer, 0, 256)])
    data = impl.run([Launch(pipeline, fine, (1, 1, 1))], [copy], readback, 256)
    assert struct.unpack("<64f", data) == (1.0,) * 64


def test_failed_read_back_is_a_device_error_and_the_host_stays(impl: Implementation) -> None:
    """A step reading back a buffer that cannot be mapped (a storage buffer): its map fails
    (the host must not die of the rejection): DeviceError; the next step runs."""
    storage = impl.create_buffer("not mappable", 256, BufferUsage.STORAGE)
    with pytest.raises(DeviceError, match="read-back"):
        impl.run([], [], storage, 256)
    impl.destroy_buffer(storage)
    values = struct.pack("<64f", *range(64))
    assert _one_buffer_step(impl, ADD_ONE, values) == struct.pack("<64f", *range(1, 65))


def test_killed_host_is_a_lost_device_not_a_hang(fresh: Implementation) -> None:
    """The host killed while a long step runs (or before it reaches the host: the client
    cannot tell, and must not care): DeviceError saying the device is lost, at once, and on
    every later step."""
    values = struct.pack("<65I", 1 << 30, *range(64))  # x[0]: the loop count
    layout = fresh.create_layout(((0, "storage_rw"),))
    pipeline = fresh.create_pipeline("spin", SPIN, Path("spin.wgsl"), layout, {}, "main")
    buffer = fresh.create_buffer("x", len(values), BufferUsage.STORAGE)
    readback = fresh.create_buffer("readback", len(values), BufferUsage.READBACK)
    group = fresh.create_bind_group(layout, [BindEntry(0, buffer, 0, len(values))])
    fresh.write_buffer(buffer, 0, values)
    step = ([Launch(pipeline, group, (1, 1, 1))], [Copy(buffer, 0, readback, 0, 4)], readback, 4)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fresh.run(*step)
        except BaseException as err:
            raised.append(err)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert isinstance(fresh, DawnImplementation | ChromeImplementation)
    os.kill(fresh.host_pid, signal.SIGKILL)
    # Generous: only a hang (the failure this test is about) takes anywhere near this long.
    runner.join(timeout=120)
    assert not runner.is_alive(), "the step still waits for a host that was killed"
    assert len(raised) == 1 and isinstance(raised[0], DeviceError), raised
    assert "device lost" in str(raised[0])
    with pytest.raises(DeviceError, match="device lost"):
        fresh.run(*step)


def test_missing_package_is_unavailable_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the npm package (an empty node prefix) dawn does not open: one message naming
    the package and the set-up script."""
    monkeypatch.setattr(reflection, "NODE_PREFIX", tmp_path)
    with pytest.raises(BackendUnavailable, match=r"npm package webgpu .*scripts/setup\.sh"):
        DawnImplementation.open()


def test_no_adapter_is_unavailable_saying_what_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no Vulkan driver at all (no private lavapipe, and the loader pointed at a manifest
    that does not exist) Dawn finds no adapter: BackendUnavailable saying which drivers Dawn
    accepts, not a crash and not a hang."""
    monkeypatch.setattr(dawn_setup, "MESA_DIR", tmp_path)
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "no_such_icd.json"))
    with pytest.raises(BackendUnavailable, match="Mesa 25") as caught:
        DawnImplementation.open()
    assert "requestAdapter() found no adapter" in str(caught.value)


def test_adapter_variable_picks_among_dawns_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    """VULKAN_PARITY_ADAPTER picks from Dawn's own ranked list, as the Vulkan runtime and
    wgpu pick from theirs: index 0 is the default adapter; an index past the list is
    BackendUnavailable naming the adapters there are."""
    default = _open("dawn")
    monkeypatch.setenv(ADAPTER_VARIABLE, "0")
    first = _open("dawn", fresh=True)
    try:
        assert first.facts.adapter == default.facts.adapter
    finally:
        first.close()
    monkeypatch.setenv(ADAPTER_VARIABLE, "99")
    with pytest.raises(BackendUnavailable, match=r"asks for adapter 99, but there .*: 0: "):
        DawnImplementation.open()


def test_host_that_cannot_start_is_unavailable_with_its_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A host that ends before it answers (here: node given a script that is not there) is
    BackendUnavailable quoting node's own last output, and leaves no pipe open behind it
    (an unclosed one is a ResourceWarning, an error in this suite)."""
    import webgpu_backend.gpu.dawn as dawn

    monkeypatch.setattr(dawn, "HOST", tmp_path / "missing_host.mjs")
    with pytest.raises(BackendUnavailable, match=r"ended with status 1; .*missing_host\.mjs"):
        DawnImplementation.open()
    gc.collect()

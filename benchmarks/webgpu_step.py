"""Cost of one step per WebGPU implementation: `python -m benchmarks.webgpu_step` (measured,
never asserted).

One step is what a graph's execute costs the device at the least: a 4 KiB buffer write, 8
dispatches of a trivial kernel (1024 invocations each) in one compute pass, a 4 KiB copy and
its mapped read-back. It runs `--steps` times after `--warmup` untimed ones on each of:

- `wgpu-direct`: wgpu-py's own API, no seam (the reference the issue compares against);
- `wgpu`, `dawn`, `chrome`: `webgpu_backend.gpu.open_implementation(name)`, through the seam
  (the remote two through the client of `webgpu_backend.gpu.remote`, IPC included).

Prints wall time per step in µs (median and 90th percentile) per implementation; one that
cannot open here is listed with the reason.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from graph_format import BackendUnavailable
from webgpu_backend.gpu import (
    BindEntry,
    BufferUsage,
    Copy,
    Implementation,
    Launch,
    open_implementation,
)

KERNEL = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&x)) { x[gid.x] = x[gid.x] * 0.5 + 1.0; }
}
"""
NBYTES = 4096
DISPATCHES = 8
GRID = (NBYTES // 4 // 64, 1, 1)


def seam_step(impl: Implementation) -> Callable[[], bytes]:
    """One step through the device seam."""
    layout = impl.create_layout(((0, "storage_rw"),))
    pipeline = impl.create_pipeline("step", KERNEL, Path("step.wgsl"), layout, {}, "main")
    buffer = impl.create_buffer("x", NBYTES, BufferUsage.STORAGE)
    readback = impl.create_buffer("readback", NBYTES, BufferUsage.READBACK)
    group = impl.create_bind_group(layout, [BindEntry(0, buffer, 0, NBYTES)])
    launches = [Launch(pipeline, group, GRID)] * DISPATCHES
    copies = [Copy(buffer, 0, readback, 0, NBYTES)]
    data = bytes(NBYTES)

    def step() -> bytes:
        impl.write_buffer(buffer, 0, data)
        return impl.run(launches, copies, readback, NBYTES)

    return step


def wgpu_direct_step() -> Callable[[], bytes]:
    """One step through wgpu-py's API, as the runtime drove it before the seam."""
    import wgpu

    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    device = adapter.request_device_sync()
    module = device.create_shader_module(code=KERNEL)
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": module, "entry_point": "main"}
    )
    buffer = device.create_buffer(
        size=NBYTES,
        usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST,
    )
    readback = device.create_buffer(
        size=NBYTES, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
    )
    group = device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[{"binding": 0, "resource": {"buffer": buffer, "offset": 0, "size": NBYTES}}],
    )
    data = bytes(NBYTES)

    def step() -> bytes:
        device.queue.write_buffer(buffer, 0, data)
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, group)
        for _ in range(DISPATCHES):
            compute.dispatch_workgroups(*GRID)
        compute.end()
        encoder.copy_buffer_to_buffer(buffer, 0, readback, 0, NBYTES)
        device.queue.submit([encoder.finish()])
        readback.map_sync(wgpu.MapMode.READ, 0, NBYTES)
        out = bytes(readback.read_mapped(0, NBYTES, copy=True))
        readback.unmap()
        return out

    return step


def measure(step: Callable[[], bytes], steps: int, warmup: int) -> list[float]:
    """Seconds per step, after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    """Print a table of µs per step per implementation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--implementations", default="wgpu-direct,wgpu,dawn,chrome")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args(argv)
    print("| implementation | adapter | steps | median µs | p90 µs |")
    print("|---|---|---|---|---|")
    for name in args.implementations.split(","):
        try:
            if name == "wgpu-direct":
                step, adapter = wgpu_direct_step(), "wgpu-py's high-performance adapter"
            else:
                impl = open_implementation(name)
                step, adapter = seam_step(impl), f"{impl.facts.adapter} ({impl.facts.api})"
        except (BackendUnavailable, ImportError) as err:
            print(f"| {name} | unavailable: {err} | | | |", flush=True)
            continue
        times = sorted(measure(step, args.steps, args.warmup))
        median = 1e6 * statistics.median(times)
        p90 = 1e6 * times[int(0.9 * (len(times) - 1))]
        print(f"| {name} | {adapter} | {len(times)} | {median:.0f} | {p90:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

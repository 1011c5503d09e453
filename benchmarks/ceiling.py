"""The memory-read ceiling of each API, and a clock warm-up, as kernels of the benchmarks.

The read kernel (`shaders/read_bandwidth.{wgsl,comp}`) is the best case for a memory-bound
kernel such as the q4 GEMV: every byte is read once, in 16-byte loads, four in flight per
invocation, with nothing else to do. Its bandwidth, measured in the same run through the same
API and timestamps, is what the GEMV's bandwidth is compared with. It can rotate over several
buffers (`copies`) so that a read of a buffer that fits in L2 still comes from memory, and a
read of a tiny buffer measures the fixed cost of one timed dispatch.

`*_read_times(..., batch=B)` time the read the back-to-back way (`benchmarks.timing`):
B reads recorded back to back (one WebGPU compute pass, no Vulkan barriers between them),
each with its own sink (so that wgpu sees no shared written buffer), rotating over the copies;
the time of a read is the batch's GPU time over B.

The burn kernel (`shaders/burn.{wgsl,comp}`) is a long chain of fused multiply-adds on every
SM. NVIDIA GPUs drop to idle clocks (345 MHz seen on an H200, 1980 MHz at full speed)
between the benchmark's submits, while the host loads the next graphs, and take a while to
come back: timed dispatches that follow a burn in the same submit run at the clocks a
steady decode loop would see. These shaders belong to the benchmarks, not to an op, so they
live here and not in wgsl/ and glsl/.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import vulkan as vk
import wgpu

from graph_format import BackendUnavailable
from vulkan_ref import profiling as vk_profiling
from vulkan_ref.instance import VulkanContext
from vulkan_ref.memory import STORAGE_USAGE, Buffer
from webgpu_backend import profiling as wg_profiling
from webgpu_backend.device import WebGPUDevice
from webgpu_backend.profiling import wgpu_device

SHADER_DIR = Path(__file__).resolve().parent / "shaders"
WORKGROUP = 256
MAX_WORKGROUPS = 8192  # 2M invocations: enough to fill any current GPU
BURN_WORKGROUPS = 2048  # 512K invocations: every SM full
BURN_ITERS = 1 << 16  # ~2 ms per pass on an H200 at full clocks, ~12 ms at idle clocks

# One pass of a benchmark kernel: encodes (WebGPU) or records (Vulkan) one dispatch.
Encoder = Callable[[Any], None]


def _workgroups(n_vec4: int) -> int:
    """Enough workgroups that each invocation reads at least 4 vec4."""
    return max(1, min(MAX_WORKGROUPS, n_vec4 // (WORKGROUP * 4)))


# ---------------------------------------------------------------------------------- WebGPU


class WebGPUKernel:
    """A benchmark kernel on WebGPU: one pipeline, one bind group per set of buffers."""

    def __init__(
        self, dev: WebGPUDevice, shader: str, bind_sets: Sequence[Sequence[Any]], groups: int
    ) -> None:
        device = wgpu_device(dev)
        module = device.create_shader_module(
            label=shader, code=(SHADER_DIR / f"{shader}.wgsl").read_text()
        )
        self.pipeline = device.create_compute_pipeline(
            label=shader,
            layout="auto",
            compute={"module": module, "entry_point": "main", "constants": {"wg_size": WORKGROUP}},
        )
        self.bind_groups = [
            device.create_bind_group(
                layout=self.pipeline.get_bind_group_layout(0),
                entries=[
                    {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                    for i, b in enumerate(buffers)
                ],
            )
            for buffers in bind_sets
        ]
        self.groups = groups

    def encoder(self, index: int) -> Encoder:
        """Encodes one dispatch with bind group `index`."""
        bind_group = self.bind_groups[index]

        def encode(cpass: Any) -> None:
            cpass.set_pipeline(self.pipeline)
            cpass.set_bind_group(0, bind_group)
            cpass.dispatch_workgroups(self.groups, 1, 1)

        return encode


def _webgpu_params(dev: WebGPUDevice, value: int) -> Any:
    usage = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
    params = wgpu_device(dev).create_buffer(size=16, usage=usage)
    wgpu_device(dev).queue.write_buffer(params, 0, struct.pack("<4I", value, 0, 0, 0))
    return params


class WebGPURead:
    """The read kernel over `copies` buffers of `nbytes` each.

    `encoders[i]` (i < `slots`, at least `copies`) reads copy i % copies into sink i.
    """

    def __init__(self, dev: WebGPUDevice, nbytes: int, copies: int = 1, slots: int = 0) -> None:
        n_vec4 = max(1, nbytes // 16)
        slots = max(slots, copies)
        storage = wgpu.BufferUsage.STORAGE
        device = wgpu_device(dev)
        self.buffers = [
            device.create_buffer(size=n_vec4 * 16, usage=storage | wgpu.BufferUsage.COPY_DST)
            for _ in range(copies)
        ]
        self.sinks = [wgpu_device(dev).create_buffer(size=16, usage=storage) for _ in range(slots)]
        self.params = _webgpu_params(dev, n_vec4)
        kernel = WebGPUKernel(
            dev,
            "read_bandwidth",
            [(self.sinks[i], self.buffers[i % copies], self.params) for i in range(slots)],
            _workgroups(n_vec4),
        )
        self.encoders = [kernel.encoder(i) for i in range(slots)]

    def close(self) -> None:
        """Free the buffers."""
        for buffer in (*self.buffers, *self.sinks, self.params):
            buffer.destroy()


class WebGPUBurn:
    """The clock warm-up kernel; `rounds(n)` gives n untimed rounds of one burn pass each."""

    def __init__(self, dev: WebGPUDevice) -> None:
        self.sink = wgpu_device(dev).create_buffer(size=16, usage=wgpu.BufferUsage.STORAGE)
        self.params = _webgpu_params(dev, BURN_ITERS)
        kernel = WebGPUKernel(dev, "burn", [(self.sink, self.params)], BURN_WORKGROUPS)
        self.encode = kernel.encoder(0)

    def rounds(self, passes: int) -> list[list[Encoder]]:
        """`passes` rounds of one burn dispatch each."""
        return [[self.encode] for _ in range(passes)]

    def close(self) -> None:
        """Free the buffers."""
        self.sink.destroy()
        self.params.destroy()


def _timed_reads(
    time_rounds: Callable[..., list[list[float]]],
    handle: Any,
    read: Any,
    burn: Any,
    *,
    repeats: int,
    warmup: int,
    burn_passes: int,
    batch: int,
) -> list[float]:
    """Time `read`'s encoders through one API's `time_rounds`, then free `read` and `burn`.

    `warmup + repeats` rounds of max(batch, 1) reads each, rotating over the encoders, after
    `burn_passes` clock warm-up rounds; a round's time over its number of reads.
    """
    per = max(batch, 1)
    encoders = read.encoders
    try:
        rounds = burn.rounds(burn_passes) if burn else []
        rounds += [
            [encoders[(r * per + i) % len(encoders)] for i in range(per)]
            for r in range(warmup + repeats)
        ]
        timed = time_rounds(
            handle, rounds, timed_from=len(rounds) - repeats, back_to_back=batch > 0
        )
        return [r[0] / per for r in timed]
    finally:
        read.close()
        if burn:
            burn.close()


def webgpu_read_times(
    dev: WebGPUDevice,
    nbytes: int,
    *,
    repeats: int,
    warmup: int,
    copies: int = 1,
    burn_passes: int = 0,
    batch: int = 0,
) -> list[float]:
    """GPU times (ns) of `repeats` reads of `nbytes` through WebGPU, rotating over copies.

    With `batch` > 0: per timed batch of `batch` back-to-back reads, its time over `batch`.
    """
    return _timed_reads(
        wg_profiling.time_rounds,
        dev,
        WebGPURead(dev, nbytes, copies, batch),
        WebGPUBurn(dev) if burn_passes else None,
        repeats=repeats,
        warmup=warmup,
        burn_passes=burn_passes,
        batch=batch,
    )


# ---------------------------------------------------------------------------------- Vulkan


def compile_kernel(name: str) -> bytes:
    """SPIR-V of shaders/<name>.comp (glslc, as the Vulkan runtime compiles its own)."""
    exe = shutil.which("glslc")
    if exe is None:
        raise BackendUnavailable("vulkan: glslc not found on PATH; install Debian's 'glslc'")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.spv"
        source = str(SHADER_DIR / f"{name}.comp")
        proc = subprocess.run(
            [exe, "-fshader-stage=compute", "--target-env=vulkan1.1", "-O", source, "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"glslc failed on {name}.comp:\n{proc.stderr}")
        return out.read_bytes()


class VulkanKernel:
    """A benchmark kernel on Vulkan: storage buffers only, one 4-byte push constant."""

    def __init__(
        self,
        ctx: VulkanContext,
        shader: str,
        buffer_sets: Sequence[Sequence[Buffer]],
        push_value: int,
        groups: int,
    ) -> None:
        self.ctx = ctx
        device = ctx.device
        code = compile_kernel(shader)
        n_bindings = len(buffer_sets[0])
        self._created: list[tuple[Any, Any]] = []  # (destroy function, handle)
        module = vk.vkCreateShaderModule(
            device, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None
        )
        self._created.append((vk.vkDestroyShaderModule, module))
        bindings = [
            vk.VkDescriptorSetLayoutBinding(
                binding=i,
                descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            )
            for i in range(n_bindings)
        ]
        set_layout = vk.vkCreateDescriptorSetLayout(
            device,
            vk.VkDescriptorSetLayoutCreateInfo(bindingCount=n_bindings, pBindings=bindings),
            None,
        )
        self._created.append((vk.vkDestroyDescriptorSetLayout, set_layout))
        push_range = vk.VkPushConstantRange(
            stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=4
        )
        self.layout = vk.vkCreatePipelineLayout(
            device,
            vk.VkPipelineLayoutCreateInfo(
                setLayoutCount=1,
                pSetLayouts=[set_layout],
                pushConstantRangeCount=1,
                pPushConstantRanges=[push_range],
            ),
            None,
        )
        self._created.append((vk.vkDestroyPipelineLayout, self.layout))
        # Keep every struct the create-info points to alive through the call (cffi).
        spec_data = vk.ffi.new("char[]", struct.pack("<I", WORKGROUP))
        entry = vk.VkSpecializationMapEntry(constantID=0, offset=0, size=4)
        spec = vk.VkSpecializationInfo(
            mapEntryCount=1, pMapEntries=[entry], dataSize=4, pData=spec_data
        )
        name = vk.ffi.new("char[]", b"main")
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            module=module,
            pName=name,
            pSpecializationInfo=spec,
        )
        self.pipeline = vk.vkCreateComputePipelines(
            device,
            None,
            1,
            [vk.VkComputePipelineCreateInfo(stage=stage, layout=self.layout)],
            None,
        )[0]
        self._created.append((vk.vkDestroyPipeline, self.pipeline))
        pool_size = vk.VkDescriptorPoolSize(
            type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            descriptorCount=n_bindings * len(buffer_sets),
        )
        pool = vk.vkCreateDescriptorPool(
            device,
            vk.VkDescriptorPoolCreateInfo(
                maxSets=len(buffer_sets), poolSizeCount=1, pPoolSizes=[pool_size]
            ),
            None,
        )
        self._created.append((vk.vkDestroyDescriptorPool, pool))
        self.sets = vk.vkAllocateDescriptorSets(
            device,
            vk.VkDescriptorSetAllocateInfo(
                descriptorPool=pool,
                descriptorSetCount=len(buffer_sets),
                pSetLayouts=[set_layout] * len(buffer_sets),
            ),
        )
        for descriptor_set, buffers in zip(self.sets, buffer_sets, strict=True):
            infos = [
                vk.VkDescriptorBufferInfo(buffer=b.handle, offset=0, range=b.size) for b in buffers
            ]
            writes = [
                vk.VkWriteDescriptorSet(
                    dstSet=descriptor_set,
                    dstBinding=i,
                    descriptorCount=1,
                    descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                    pBufferInfo=[info],
                )
                for i, info in enumerate(infos)
            ]
            vk.vkUpdateDescriptorSets(device, len(writes), writes, 0, None)
        self.push = vk.ffi.new("char[]", struct.pack("<I", push_value))
        self.groups = groups

    def recorder(self, index: int) -> Encoder:
        """Records one dispatch with descriptor set `index`."""
        descriptor_set = self.sets[index]

        def record(cb: Any) -> None:
            vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline)
            vk.vkCmdBindDescriptorSets(
                cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.layout, 0, 1, [descriptor_set], 0, None
            )
            vk.vkCmdPushConstants(cb, self.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, self.push)
            vk.vkCmdDispatch(cb, self.groups, 1, 1)

        return record

    def close(self) -> None:
        """Destroy the pipeline and its objects (after the device is idle)."""
        vk.vkDeviceWaitIdle(self.ctx.device)
        for destroy, handle in reversed(self._created):
            destroy(self.ctx.device, handle, None)
        self._created = []


class VulkanRead:
    """The read kernel over `copies` buffers of `nbytes` each.

    `encoders[i]` (i < `slots`, at least `copies`) reads copy i % copies into sink i.
    """

    def __init__(self, ctx: VulkanContext, nbytes: int, copies: int = 1, slots: int = 0) -> None:
        n_vec4 = max(1, nbytes // 16)
        slots = max(slots, copies)
        self.buffers = [
            Buffer.create(ctx, n_vec4 * 16, STORAGE_USAGE, False) for _ in range(copies)
        ]
        self.sinks = [Buffer.create(ctx, 16, STORAGE_USAGE, False) for _ in range(slots)]
        self.kernel = VulkanKernel(
            ctx,
            "read_bandwidth",
            [(self.sinks[i], self.buffers[i % copies]) for i in range(slots)],
            n_vec4,
            _workgroups(n_vec4),
        )
        self.encoders = [self.kernel.recorder(i) for i in range(slots)]

    def close(self) -> None:
        """Free the pipeline and the buffers."""
        self.kernel.close()
        for buffer in (*self.buffers, *self.sinks):
            buffer.destroy()


class VulkanBurn:
    """The clock warm-up kernel; `rounds(n)` gives n untimed rounds of one burn pass each."""

    def __init__(self, ctx: VulkanContext) -> None:
        self.sink = Buffer.create(ctx, 16, STORAGE_USAGE, False)
        self.kernel = VulkanKernel(ctx, "burn", [(self.sink,)], BURN_ITERS, BURN_WORKGROUPS)
        self.encode = self.kernel.recorder(0)

    def rounds(self, passes: int) -> list[list[Encoder]]:
        """`passes` rounds of one burn dispatch each."""
        return [[self.encode] for _ in range(passes)]

    def close(self) -> None:
        """Free the pipeline and the buffer."""
        self.kernel.close()
        self.sink.destroy()


def vulkan_read_times(
    ctx: VulkanContext,
    nbytes: int,
    *,
    repeats: int,
    warmup: int,
    copies: int = 1,
    burn_passes: int = 0,
    batch: int = 0,
) -> list[float]:
    """GPU times (ns) of `repeats` reads of `nbytes` through Vulkan, rotating over copies.

    With `batch` > 0: per timed batch of `batch` back-to-back reads, its time over `batch`.
    """
    return _timed_reads(
        vk_profiling.time_rounds,
        ctx,
        VulkanRead(ctx, nbytes, copies, batch),
        VulkanBurn(ctx) if burn_passes else None,
        repeats=repeats,
        warmup=warmup,
        burn_passes=burn_passes,
        batch=batch,
    )

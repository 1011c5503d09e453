"""The memory-read ceiling of each API: a plain grid-stride read kernel over one large buffer.

The kernel (`shaders/read_bandwidth.{wgsl,comp}`) is the best case for a memory-bound
kernel such as the q4 GEMV: every byte is read once, in 16-byte loads, four in flight per
invocation, with nothing else to do. Its bandwidth, measured in the same run through the same
API and timestamps, is what the GEMV's bandwidth is compared with. These shaders belong to
the benchmark, not to an op, so they live here and not in wgsl/ and glsl/.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
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

SHADER_DIR = Path(__file__).resolve().parent / "shaders"
WORKGROUP = 256
MAX_WORKGROUPS = 8192  # 2M invocations: enough to fill any current GPU


def _workgroups(n_vec4: int) -> int:
    """Enough workgroups that each invocation reads at least 4 vec4."""
    return max(1, min(MAX_WORKGROUPS, n_vec4 // (WORKGROUP * 4)))


def webgpu_read_times(dev: WebGPUDevice, nbytes: int, *, repeats: int, warmup: int) -> list[float]:
    """GPU times (ns) of `repeats` reads of an `nbytes` buffer through WebGPU."""
    device = dev.device
    n_vec4 = nbytes // 16
    groups = _workgroups(n_vec4)
    module = device.create_shader_module(
        label="read_bandwidth", code=(SHADER_DIR / "read_bandwidth.wgsl").read_text()
    )
    pipeline = device.create_compute_pipeline(
        label="read_bandwidth",
        layout="auto",
        compute={"module": module, "entry_point": "main", "constants": {"wg_size": WORKGROUP}},
    )
    storage = wgpu.BufferUsage.STORAGE
    data = device.create_buffer(size=n_vec4 * 16, usage=storage | wgpu.BufferUsage.COPY_DST)
    sink = device.create_buffer(size=16, usage=storage)
    params = device.create_buffer(
        size=16, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
    )
    device.queue.write_buffer(params, 0, struct.pack("<4I", n_vec4, 0, 0, 0))
    bind_group = device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[
            {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
            for i, b in enumerate((sink, data, params))
        ],
    )

    def encode(cpass: Any) -> None:
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, bind_group)
        cpass.dispatch_workgroups(groups, 1, 1)

    try:
        rounds = [[encode]] * (warmup + repeats)
        return [r[0] for r in wg_profiling.time_rounds(dev, rounds, timed_from=warmup)]
    finally:
        for buffer in (data, sink, params):
            buffer.destroy()


def compile_read_kernel() -> bytes:
    """SPIR-V of shaders/read_bandwidth.comp (glslc, as the Vulkan runtime compiles its own)."""
    exe = shutil.which("glslc")
    if exe is None:
        raise BackendUnavailable("vulkan: glslc not found on PATH; install Debian's 'glslc'")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "read.spv"
        source = str(SHADER_DIR / "read_bandwidth.comp")
        proc = subprocess.run(
            [exe, "-fshader-stage=compute", "--target-env=vulkan1.1", "-O", source, "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"glslc failed on read_bandwidth.comp:\n{proc.stderr}")
        return out.read_bytes()


def vulkan_read_times(ctx: VulkanContext, nbytes: int, *, repeats: int, warmup: int) -> list[float]:
    """GPU times (ns) of `repeats` reads of an `nbytes` buffer through Vulkan."""
    device = ctx.device
    n_vec4 = nbytes // 16
    groups = _workgroups(n_vec4)
    code = compile_read_kernel()
    created: list[tuple[Any, Any]] = []  # (destroy function, handle), destroyed in reverse
    data = Buffer.create(ctx, n_vec4 * 16, STORAGE_USAGE, False)
    sink = Buffer.create(ctx, 16, STORAGE_USAGE, False)
    try:
        module = vk.vkCreateShaderModule(
            device, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None
        )
        created.append((vk.vkDestroyShaderModule, module))
        bindings = [
            vk.VkDescriptorSetLayoutBinding(
                binding=i,
                descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            )
            for i in range(2)
        ]
        set_layout = vk.vkCreateDescriptorSetLayout(
            device, vk.VkDescriptorSetLayoutCreateInfo(bindingCount=2, pBindings=bindings), None
        )
        created.append((vk.vkDestroyDescriptorSetLayout, set_layout))
        push_range = vk.VkPushConstantRange(
            stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=4
        )
        layout = vk.vkCreatePipelineLayout(
            device,
            vk.VkPipelineLayoutCreateInfo(
                setLayoutCount=1,
                pSetLayouts=[set_layout],
                pushConstantRangeCount=1,
                pPushConstantRanges=[push_range],
            ),
            None,
        )
        created.append((vk.vkDestroyPipelineLayout, layout))
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
        pipeline = vk.vkCreateComputePipelines(
            device, None, 1, [vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)], None
        )[0]
        created.append((vk.vkDestroyPipeline, pipeline))
        pool_size = vk.VkDescriptorPoolSize(
            type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=2
        )
        pool = vk.vkCreateDescriptorPool(
            device,
            vk.VkDescriptorPoolCreateInfo(maxSets=1, poolSizeCount=1, pPoolSizes=[pool_size]),
            None,
        )
        created.append((vk.vkDestroyDescriptorPool, pool))
        descriptor_set = vk.vkAllocateDescriptorSets(
            device,
            vk.VkDescriptorSetAllocateInfo(
                descriptorPool=pool, descriptorSetCount=1, pSetLayouts=[set_layout]
            ),
        )[0]
        infos = [
            vk.VkDescriptorBufferInfo(buffer=b.handle, offset=0, range=b.size) for b in (sink, data)
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
        push = vk.ffi.new("char[]", struct.pack("<I", n_vec4))

        def record(cb: Any) -> None:
            vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
            vk.vkCmdBindDescriptorSets(
                cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, [descriptor_set], 0, None
            )
            vk.vkCmdPushConstants(cb, layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, push)
            vk.vkCmdDispatch(cb, groups, 1, 1)

        rounds = [[record]] * (warmup + repeats)
        return [r[0] for r in vk_profiling.time_rounds(ctx, rounds, timed_from=warmup)]
    finally:
        vk.vkDeviceWaitIdle(device)
        for destroy, handle in reversed(created):
            destroy(device, handle, None)
        data.destroy()
        sink.destroy()

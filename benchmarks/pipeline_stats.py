"""The driver's statistics of the GEMV variants' Vulkan pipelines (registers, spills, ...).

    python -m benchmarks.pipeline_stats --variants "shipped;v10:words=8" [--lanes 64]

Builds each variant's `q4gsw_gemv.comp` (see `benchmarks.gemv_sweep` for the variant syntax)
into a compute pipeline on a device of its own created with
VK_KHR_pipeline_executable_properties, and prints what the driver reports for it (NVIDIA:
register count, shared and local memory and the like). Costs no GPU time; needs a driver
that offers the extension (NVIDIA does; lavapipe 22.3 does not, and the script says so).
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXTENSION = "VK_KHR_pipeline_executable_properties"


def _value(stat: Any) -> Any:
    import vulkan as vk

    fmt = stat.format
    if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
        return bool(stat.value.b32)
    if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
        return int(stat.value.i64)
    if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        return int(stat.value.u64)
    return float(stat.value.f64)


def _text(value: Any) -> str:
    import vulkan as vk

    if isinstance(value, str):
        return value
    try:
        return vk.ffi.string(value).decode()
    except Exception:  # diagnostics only
        return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    import vulkan as vk

    from benchmarks.gemv_sweep import parse_variant, shader_folders
    from vulkan_ref.spirv import compile_glsl

    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_stats")
    parser.add_argument("--variants", required=True)
    parser.add_argument("--group-size", type=int, default=128)
    args = parser.parse_args(argv)

    app = vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 1, 0))
    instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
    physical = None
    for pd in vk.vkEnumeratePhysicalDevices(instance):
        names = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)}
        if EXTENSION in names:
            physical = pd
            break
    if physical is None:
        print(f"stats: no device offers {EXTENSION}; nothing to report")
        return 0
    props = vk.vkGetPhysicalDeviceProperties(physical)
    print(f"stats: {props.deviceName}")
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
    family = next(i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
    priorities = vk.ffi.new("float[]", [1.0])
    queue_info = vk.VkDeviceQueueCreateInfo(
        queueFamilyIndex=family, queueCount=1, pQueuePriorities=priorities
    )
    feature = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
        pipelineExecutableInfo=vk.VK_TRUE
    )
    device = vk.vkCreateDevice(
        physical,
        vk.VkDeviceCreateInfo(
            pNext=feature,
            queueCreateInfoCount=1,
            pQueueCreateInfos=[queue_info],
            enabledExtensionCount=1,
            ppEnabledExtensionNames=[EXTENSION],
        ),
        None,
    )
    get_props = vk.vkGetDeviceProcAddr(device, "vkGetPipelineExecutablePropertiesKHR")
    get_stats = vk.vkGetDeviceProcAddr(device, "vkGetPipelineExecutableStatisticsKHR")
    # Bindings of q4gsw_gemv.comp: 5 storage buffers, then 2 uniform buffers.
    kinds = [vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER] * 5 + [vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER] * 2
    bindings = [
        vk.VkDescriptorSetLayoutBinding(
            binding=i,
            descriptorType=kind,
            descriptorCount=1,
            stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
        )
        for i, kind in enumerate(kinds)
    ]
    set_layout = vk.vkCreateDescriptorSetLayout(
        device, vk.VkDescriptorSetLayoutCreateInfo(bindingCount=7, pBindings=bindings), None
    )
    layout = vk.vkCreatePipelineLayout(
        device, vk.VkPipelineLayoutCreateInfo(setLayoutCount=1, pSetLayouts=[set_layout]), None
    )
    tmp = Path(tempfile.mkdtemp(prefix="gemv-stats-"))
    for i, spec in enumerate(v for v in args.variants.split(";") if v):
        variant = parse_variant(spec)
        _, glsl_dir = shader_folders(variant, tmp / f"v{i}", args.group_size)
        code = compile_glsl("q4gsw_gemv", {}, glsl_dir)
        module = vk.vkCreateShaderModule(
            device, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None
        )
        lanes = variant.get("lanes", 64)
        values = (lanes, 1, 1, args.group_size, 0, variant.get("cap", 8192))
        data = vk.ffi.new("char[]", b"".join(struct.pack("<I", v) for v in values))
        entries = [
            vk.VkSpecializationMapEntry(constantID=j, offset=4 * j, size=4)
            for j in range(len(values))
        ]
        spec_info = vk.VkSpecializationInfo(
            mapEntryCount=len(entries), pMapEntries=entries, dataSize=4 * len(values), pData=data
        )
        entry_name = vk.ffi.new("char[]", b"main")
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            module=module,
            pName=entry_name,
            pSpecializationInfo=spec_info,
        )
        flags = vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
        pipeline = vk.vkCreateComputePipelines(
            device,
            None,
            1,
            [vk.VkComputePipelineCreateInfo(flags=flags, stage=stage, layout=layout)],
            None,
        )[0]
        try:
            executables = list(get_props(device, vk.VkPipelineInfoKHR(pipeline=pipeline)))
            for index, executable in enumerate(executables):
                info = vk.VkPipelineExecutableInfoKHR(pipeline=pipeline, executableIndex=index)
                stats = list(get_stats(device, info))
                described = ", ".join(f"{_text(s.name)}={_value(s)}" for s in stats)
                print(f"stats: {spec} [{_text(executable.name)}]: {described}")
        except Exception as err:  # diagnostics only
            print(f"stats: {spec}: {type(err).__name__}: {err}")
        vk.vkDestroyPipeline(device, pipeline, None)
        vk.vkDestroyShaderModule(device, module, None)
    vk.vkDestroyPipelineLayout(device, layout, None)
    vk.vkDestroyDescriptorSetLayout(device, set_layout, None)
    vk.vkDestroyDevice(device, None)
    vk.vkDestroyInstance(instance, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

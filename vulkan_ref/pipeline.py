"""Compute pipelines for the Vulkan reference runtime, cached per runtime.

Everything a pipeline is made of comes from the kernel itself, reflected from its SPIR-V
(`vulkan_ref.binding`): the descriptor set 0 layout (each binding's number and kind, as the
module declares them; numbers may have gaps where the compiler dropped an unused binding),
the push-constant range, and the specialization constants by id (the local size's ids
among them). A pipeline is cached by the module's sha256, its entry point, that layout, the
push-constant size and the specialization values.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import vulkan as vk

from vulkan_ref.cdata import CData
from vulkan_ref.instance import VulkanContext

DescriptorKind = str  # "storage" | "uniform"
# (binding number, kind) of every descriptor of set 0, by binding number.
DescriptorLayout = tuple[tuple[int, DescriptorKind], ...]
# (constant id, struct format of its value: "I" uint, "i" int, "f" float, "?" bool, value)
SpecValue = tuple[int, str, int | float]

_DESCRIPTOR_TYPES = {
    "storage": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
    "uniform": vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
}


@dataclass(frozen=True)
class ShaderKey:
    """Everything that identifies one pipeline."""

    module: str  # sha256 of the SPIR-V
    entry: str
    descriptors: DescriptorLayout
    push_constant_size: int
    spec_constants: tuple[SpecValue, ...]  # by id


def spec_bytes(value: SpecValue) -> bytes:
    """A specialization constant's data: 4 bytes (a bool is a VkBool32)."""
    _, kind, number = value
    if kind == "f":
        return struct.pack("<f", number)
    if kind == "?":
        return struct.pack("<I", 1 if number else 0)
    return struct.pack(f"<{kind}", number)


@dataclass
class ComputePipeline:
    """A pipeline with the layouts a dispatch needs to bind and push to it.

    `messages` are what the validation layer said while its shader module and pipeline were
    created (a layout that does not match the shader, say): a pipeline with any is not
    fit to run, and the graph refuses it (`KernelBuildError`) every time it is asked for.
    """

    key: ShaderKey
    handle: CData
    layout: CData
    set_layout: CData
    messages: tuple[str, ...] = ()


class PipelineCache:
    """Shader modules, set layouts and pipelines of one runtime on its context, created once
    each, and destroyed by `close`.

    A runtime owns one (`VulkanRuntime.pipelines`) and hands it to every graph it loads, so
    that two runtimes in one process share no Vulkan object and no compiled kernel, and
    closing a runtime destroys what it created. `kernels` is where `vulkan_ref.binding`
    keeps the project kernels' entries, the compiled and reflected kernels and their
    resolutions for this runtime (cleared with the pipelines).
    """

    def __init__(self, ctx: VulkanContext) -> None:
        self.ctx = ctx
        self._modules: dict[str, CData] = {}  # by sha256 of the SPIR-V
        self._set_layouts: dict[DescriptorLayout, CData] = {}
        self._pipelines: dict[ShaderKey, ComputePipeline] = {}
        self._push: dict[bytes, CData] = {}
        self.kernels: dict[object, object] = {}

    def __len__(self) -> int:
        """How many pipelines it holds."""
        return len(self._pipelines)

    def push_data(self, data: bytes) -> CData:
        """Push-constant bytes as a cffi array, made once per content (the set is small:
        bounded all the same)."""
        found = self._push.get(data)
        if found is None:
            if len(self._push) > 4096:
                self._push.clear()
            found = self._push[data] = vk.ffi.new("char[]", data)
        return found

    def close(self) -> None:
        """Destroy every pipeline, pipeline layout, set layout and shader module, and forget
        the kernels (idempotent). Close the graphs that use them first."""
        device = self.ctx.device
        for pipeline in self._pipelines.values():
            vk.vkDestroyPipeline(device, pipeline.handle, None)
            vk.vkDestroyPipelineLayout(device, pipeline.layout, None)
        for set_layout in self._set_layouts.values():
            vk.vkDestroyDescriptorSetLayout(device, set_layout, None)
        for module in self._modules.values():
            vk.vkDestroyShaderModule(device, module, None)
        self._pipelines.clear()
        self._set_layouts.clear()
        self._modules.clear()
        self._push.clear()
        self.kernels.clear()

    def set_layout(self, descriptors: DescriptorLayout) -> CData:
        """The descriptor set layout for these (binding, kind) descriptors."""
        if descriptors not in self._set_layouts:
            bindings = [
                vk.VkDescriptorSetLayoutBinding(
                    binding=binding,
                    descriptorType=_DESCRIPTOR_TYPES[kind],
                    descriptorCount=1,
                    stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
                )
                for binding, kind in descriptors
            ]
            info = vk.VkDescriptorSetLayoutCreateInfo(
                bindingCount=len(bindings), pBindings=bindings
            )
            self._set_layouts[descriptors] = vk.vkCreateDescriptorSetLayout(
                self.ctx.device, info, None
            )
        return self._set_layouts[descriptors]

    def _module(self, code: bytes) -> CData:
        # Keyed by the binary: graphs built from another shader folder (a repro bundle's
        # copies, a user's kernels) share the cache without picking up each other's modules.
        key = hashlib.sha256(code).hexdigest()
        if key not in self._modules:
            info = vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code)
            self._modules[key] = vk.vkCreateShaderModule(self.ctx.device, info, None)
        return self._modules[key]

    def get(self, key: ShaderKey, code: bytes) -> ComputePipeline:
        """The pipeline for `key` (whose module is `code`), created on first use."""
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        # Messages of earlier calls are handed back untouched; those of this creation are
        # the pipeline's own.
        held = self.ctx.drain_messages()
        try:
            pipeline = self._create(key, code)
        finally:
            emitted = tuple(self.ctx.drain_messages())
            self.ctx.messages[:0] = held
        pipeline.messages = emitted
        self._pipelines[key] = pipeline
        return pipeline

    def _create(self, key: ShaderKey, code: bytes) -> ComputePipeline:
        set_layout = self.set_layout(key.descriptors)
        ranges = (
            [
                vk.VkPushConstantRange(
                    stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
                    offset=0,
                    size=key.push_constant_size,
                )
            ]
            if key.push_constant_size
            else []
        )
        layout_info = vk.VkPipelineLayoutCreateInfo(
            setLayoutCount=1,
            pSetLayouts=[set_layout],
            pushConstantRangeCount=len(ranges),
            pPushConstantRanges=ranges or None,
        )
        layout = vk.vkCreatePipelineLayout(self.ctx.device, layout_info, None)

        # Every struct and array the create-info points to is held in a local for the
        # duration of the call: cffi frees unreferenced temporaries at once (notes/gpu-machines).
        data = b"".join(spec_bytes(v) for v in key.spec_constants)
        spec_data = vk.ffi.new("char[]", data or b"\0")
        entries = [
            vk.VkSpecializationMapEntry(constantID=spec_id, offset=4 * i, size=4)
            for i, (spec_id, _, _) in enumerate(key.spec_constants)
        ]
        spec_info = (
            vk.VkSpecializationInfo(
                mapEntryCount=len(entries), pMapEntries=entries, dataSize=len(data), pData=spec_data
            )
            if entries
            else None
        )
        entry_name = vk.ffi.new("char[]", key.entry.encode())
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            module=self._module(code),
            pName=entry_name,
            pSpecializationInfo=spec_info,
        )
        create_info = vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)
        handle = vk.vkCreateComputePipelines(self.ctx.device, None, 1, [create_info], None)[0]
        return ComputePipeline(key, handle, layout, set_layout)

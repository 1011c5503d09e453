"""Compute pipelines for the Vulkan reference runtime, cached per context.

Conventions (as ExecuTorch's Vulkan backend binds its kernels): descriptor set 0,
bindings numbered in declaration order (tensors first, outputs before inputs, then UBOs);
specialization constants 0-2 are the local workgroup size and an op's own constants start at
id 3; scalars that change per execute travel as push constants.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import vulkan as vk

from vulkan_ref.cdata import CData
from vulkan_ref.instance import VulkanContext
from vulkan_ref.spirv import compile_glsl

DescriptorKind = str  # "storage" | "uniform"

_DESCRIPTOR_TYPES = {
    "storage": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
    "uniform": vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
}


@dataclass(frozen=True)
class ShaderKey:
    """Everything that identifies one pipeline."""

    kernel: str
    defines: tuple[tuple[str, int], ...]
    descriptors: tuple[DescriptorKind, ...]
    push_constant_size: int
    local_size: tuple[int, int, int]
    spec_constants: tuple[int | float, ...]
    glsl_dir: str | None = None  # another folder laid out like glsl/; None: the repo's


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
    """Shader modules, set layouts and pipelines of one context, created once each."""

    def __init__(self, ctx: VulkanContext) -> None:
        self.ctx = ctx
        self._modules: dict[str, CData] = {}  # by sha256 of the SPIR-V
        self._set_layouts: dict[tuple[DescriptorKind, ...], CData] = {}
        self._pipelines: dict[ShaderKey, ComputePipeline] = {}

    def set_layout(self, descriptors: tuple[DescriptorKind, ...]) -> CData:
        """The descriptor set layout for bindings of these kinds."""
        if descriptors not in self._set_layouts:
            bindings = [
                vk.VkDescriptorSetLayoutBinding(
                    binding=i,
                    descriptorType=_DESCRIPTOR_TYPES[kind],
                    descriptorCount=1,
                    stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT,
                )
                for i, kind in enumerate(descriptors)
            ]
            info = vk.VkDescriptorSetLayoutCreateInfo(
                bindingCount=len(bindings), pBindings=bindings
            )
            self._set_layouts[descriptors] = vk.vkCreateDescriptorSetLayout(
                self.ctx.device, info, None
            )
        return self._set_layouts[descriptors]

    def _module(
        self, kernel: str, defines: tuple[tuple[str, int], ...], glsl_dir: str | None = None
    ) -> CData:
        # Keyed by the binary, not the kernel name: graphs built from another shader folder
        # (a repro bundle's copies) share the cache without picking up each other's modules.
        code = compile_glsl(kernel, dict(defines), Path(glsl_dir) if glsl_dir else None)
        key = hashlib.sha256(code).hexdigest()
        if key not in self._modules:
            info = vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code)
            self._modules[key] = vk.vkCreateShaderModule(self.ctx.device, info, None)
        return self._modules[key]

    def get(self, key: ShaderKey) -> ComputePipeline:
        """The pipeline for `key`, created on first use."""
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        # Messages of earlier calls are handed back untouched; those of this creation are
        # the pipeline's own.
        held = self.ctx.drain_messages()
        try:
            pipeline = self._create(key)
        finally:
            emitted = tuple(self.ctx.drain_messages())
            self.ctx.messages[:0] = held
        pipeline.messages = emitted
        self._pipelines[key] = pipeline
        return pipeline

    def _create(self, key: ShaderKey) -> ComputePipeline:
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
        values: Sequence[int | float] = (*key.local_size, *key.spec_constants)
        data = b"".join(
            struct.pack("<f", v) if isinstance(v, float) else struct.pack("<I", v) for v in values
        )
        spec_data = vk.ffi.new("char[]", data)
        entries = [
            vk.VkSpecializationMapEntry(constantID=i, offset=4 * i, size=4)
            for i in range(len(values))
        ]
        spec_info = vk.VkSpecializationInfo(
            mapEntryCount=len(entries), pMapEntries=entries, dataSize=len(data), pData=spec_data
        )
        entry_name = vk.ffi.new("char[]", b"main")
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            module=self._module(key.kernel, key.defines, key.glsl_dir),
            pName=entry_name,
            pSpecializationInfo=spec_info,
        )
        create_info = vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)
        handle = vk.vkCreateComputePipelines(self.ctx.device, None, 1, [create_info], None)[0]
        return ComputePipeline(key, handle, layout, set_layout)

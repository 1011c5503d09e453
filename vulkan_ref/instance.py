"""Vulkan instance, device and queue for the reference runtime, with validation-layer capture.

One `VulkanContext` per process and validation setting. With validation on, the Khronos
validation layer reports through a `VK_EXT_debug_utils` messenger into `messages`, which each
execute drains into its `StepResult`, so that any message fails a parity check.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import vulkan as vk

from graph_format import BackendUnavailable, pick_adapter
from vulkan_ref.cdata import CData
from vulkan_ref.spirv import SPIRV_OF_VULKAN, VULKAN_API

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
# Fence waits are bounded so a hung dispatch fails a test instead of freezing it.
FENCE_TIMEOUT_NS = 60 * 1_000_000_000


def validation_requested() -> bool:
    """Whether `VULKAN_PARITY_VALIDATION` asks for the validation layer (default: on)."""
    return os.environ.get("VULKAN_PARITY_VALIDATION", "1") not in ("0", "false", "no", "")


@dataclass
class VulkanContext:
    """Instance, physical and logical device, a compute queue and its command pool."""

    instance: CData
    physical_device: CData
    device: CData
    queue: CData
    queue_family: int
    command_pool: CData
    properties: CData
    memory_properties: CData
    validation: bool
    # robust buffer access features enabled on the device (opt-in, `get_context(robust=True)`)
    robustness: tuple[str, ...] = ()
    # Why float16 graphs cannot run here ("" when shaderFloat16 and 16-bit storage-buffer
    # access are enabled).
    f16_unavailable: str = ""
    messages: list[str] = field(default_factory=list)
    _keepalive: list[object] = field(default_factory=list)  # cffi objects the driver holds

    @property
    def max_workgroup_count(self) -> tuple[int, int, int]:
        """maxComputeWorkGroupCount (x, y, z)."""
        x, y, z = self.properties.limits.maxComputeWorkGroupCount
        return (int(x), int(y), int(z))

    @property
    def max_invocations(self) -> int:
        """maxComputeWorkGroupInvocations."""
        return int(self.properties.limits.maxComputeWorkGroupInvocations)

    @property
    def device_api_version(self) -> tuple[int, int, int]:
        """The newest Vulkan version the device supports (major, minor, patch: its
        `VkPhysicalDeviceProperties.apiVersion`; lavapipe of Mesa 22.3 says 1.3.230)."""
        api = int(self.properties.apiVersion)
        return (api >> 22) & 0x7F, (api >> 12) & 0x3FF, api & 0xFFF

    @property
    def api_version(self) -> tuple[int, int]:
        """The Vulkan version the runtime uses the device at: the one it requests
        (`vulkan_ref.spirv.VULKAN_API`), or the device's own when that is older."""
        return min(VULKAN_API, self.device_api_version[:2])

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports. `api` names the version the runtime uses, then the
        device's newest (what its driver supports, not what runs), and the SPIR-V versions
        kernels may be built for."""
        p = self.properties
        used, device = self.api_version, self.device_api_version
        spirv = SPIRV_OF_VULKAN.get(used, max(SPIRV_OF_VULKAN.values()))
        return {
            "backend": "vulkan",
            "api": f"Vulkan {used[0]}.{used[1]} (device supports "
            f"{'.'.join(map(str, device))}; SPIR-V 1.0 to {spirv[0]}.{spirv[1]}) via vulkan "
            f"(python) {getattr(vk, '__version__', '1.3.275.1')}",
            "adapter": str(p.deviceName),
            "vendor": f"0x{p.vendorID:04x}",
            "driver": f"0x{p.driverVersion:x}",
            "adapter_type": _DEVICE_TYPES.get(p.deviceType, str(p.deviceType)),
            "max_workgroups_per_dim": self.max_workgroup_count[0],
            "validation": self.validation,
            "robustness": "+".join(self.robustness) or "off",
            "shader_f16": not self.f16_unavailable,
            **self.driver_properties(),
        }

    def driver_properties(self) -> dict[str, str]:
        """Driver name and version string (VkPhysicalDeviceDriverProperties, Vulkan 1.2).

        `driverVersion` alone is vendor-encoded (lavapipe reports 0x1), so reports need these
        strings to say which driver ran; empty when the device cannot report them.
        """
        try:
            driver = vk.VkPhysicalDeviceDriverProperties()
            props2 = vk.VkPhysicalDeviceProperties2(pNext=driver)
            vk.vkGetPhysicalDeviceProperties2(self.physical_device, props2)
            return {
                "driver_name": vk.ffi.string(driver.driverName).decode(errors="replace"),
                "driver_info": vk.ffi.string(driver.driverInfo).decode(errors="replace"),
            }
        except Exception:  # an old loader or device: the report shows driverVersion only
            return {}

    def drain_messages(self) -> list[str]:
        """Validation messages received since the last call."""
        out, self.messages[:] = list(self.messages), []
        return out

    def memory_type(self, type_bits: int, flags: int) -> int:
        """Index of a memory type allowed by `type_bits` that has all of `flags`."""
        props = self.memory_properties
        for i in range(props.memoryTypeCount):
            if type_bits & (1 << i) and props.memoryTypes[i].propertyFlags & flags == flags:
                return i
        raise BackendUnavailable(f"vulkan: no memory type with flags 0x{flags:x}")


_DEVICE_TYPES = {
    vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "CPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "DiscreteGPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "IntegratedGPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "VirtualGPU",
}
# Discrete GPUs first, CPU (lavapipe) last: the same preference wgpu's "high-performance" has.
_PREFERENCE = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}


# The process's contexts, one per pair of settings: a context is the device every runtime
# shares, and holds nothing a runtime made (docs/design.md §2.2).
@functools.cache
def get_context(validation: bool | None = None, robust: bool = False) -> VulkanContext:
    """The process-wide Vulkan context (created on first use), one per pair of settings.

    Args:
        validation: enable VK_LAYER_KHRONOS_validation; None reads VULKAN_PARITY_VALIDATION.
        robust: enable the robust buffer access features the device offers
            (`robustBufferAccess`, and VK_EXT_robustness2's `robustBufferAccess2`), as
            wgpu does for every WebGPU device; for benchmarks that compare like with like.
            Parity runs keep the default (off), as a native Vulkan backend would.

    Raises:
        BackendUnavailable: no loader, no device, or validation asked for but not installed.
    """
    if validation is None:
        validation = validation_requested()
    instance, messages, keepalive = _create_instance(validation)

    physical = _pick_physical_device(instance)
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
    family = next(
        (i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT), None
    )
    if family is None:
        raise BackendUnavailable("vulkan: the device has no compute queue")
    priorities = vk.ffi.new("float[]", [1.0])
    queue_info = vk.VkDeviceQueueCreateInfo(
        queueFamilyIndex=family, queueCount=1, pQueuePriorities=priorities
    )
    robustness: tuple[str, ...] = ()
    device_exts: list[str] = []
    core = vk.VkPhysicalDeviceFeatures()
    chain: CData = None
    if robust:
        core, robustness, device_exts, chain = _robustness(physical)
    half, f16_unavailable, half_exts = _half_precision(physical, chain)
    device_exts += half_exts
    features = vk.VkPhysicalDeviceFeatures2(pNext=half[0] if half else chain, features=core)
    # cffi frees unreferenced structs, and vkCreateDevice reads the whole chain.
    keepalive += [features, chain, core, *half]
    device_info = vk.VkDeviceCreateInfo(
        pNext=features,
        queueCreateInfoCount=1,
        pQueueCreateInfos=[queue_info],
        enabledExtensionCount=len(device_exts),
        ppEnabledExtensionNames=device_exts,
    )
    device = vk.vkCreateDevice(physical, device_info, None)
    queue = vk.vkGetDeviceQueue(device, family, 0)
    pool_info = vk.VkCommandPoolCreateInfo(
        flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=family
    )
    pool = vk.vkCreateCommandPool(device, pool_info, None)
    return VulkanContext(
        instance=instance,
        physical_device=physical,
        device=device,
        queue=queue,
        queue_family=family,
        command_pool=pool,
        properties=vk.vkGetPhysicalDeviceProperties(physical),
        memory_properties=vk.vkGetPhysicalDeviceMemoryProperties(physical),
        validation=validation,
        robustness=robustness,
        f16_unavailable=f16_unavailable,
        messages=messages,
        _keepalive=keepalive,
    )


def _create_instance(validation: bool) -> tuple[CData, list[str], list[object]]:
    """A Vulkan instance (with the validation layer and its messenger when asked for), the
    list the messenger appends to, and the objects that must outlive the context.

    Raises:
        BackendUnavailable: no loader, no driver, or validation asked for but not installed.
    """
    try:
        layers = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
    except (OSError, vk.VkError) as err:
        raise BackendUnavailable(
            f"vulkan: the Vulkan loader is not usable ({err}); install 'libvulkan1' and a "
            "driver such as 'mesa-vulkan-drivers'"
        ) from None
    if validation and VALIDATION_LAYER not in layers:
        raise BackendUnavailable(
            f"vulkan: {VALIDATION_LAYER} was requested but is not installed; install "
            "'vulkan-validationlayers' or set VULKAN_PARITY_VALIDATION=0"
        )
    messages: list[str] = []
    keepalive: list[object] = []
    app = vk.VkApplicationInfo(
        pApplicationName="vulkan-parity",
        pEngineName="vulkan_ref",
        apiVersion=vk.VK_MAKE_VERSION(*VULKAN_API, 0),
    )
    layer_names = [VALIDATION_LAYER] if validation else []
    ext_names = ["VK_EXT_debug_utils"] if validation else []
    instance_info = vk.VkInstanceCreateInfo(
        pApplicationInfo=app,
        enabledLayerCount=len(layer_names),
        ppEnabledLayerNames=layer_names,
        enabledExtensionCount=len(ext_names),
        ppEnabledExtensionNames=ext_names,
    )
    try:
        instance = vk.vkCreateInstance(instance_info, None)
    except vk.VkError as err:
        raise BackendUnavailable(
            f"vulkan: the Vulkan loader found no usable driver (vkCreateInstance: "
            f"{type(err).__name__}){_driver_env()}; install 'mesa-vulkan-drivers' for "
            "lavapipe, or your GPU's Vulkan driver"
        ) from None
    if validation:
        keepalive.append(_install_messenger(instance, messages))
    return instance, messages, keepalive


def _driver_env() -> str:
    """The loader's driver-selection variables when set (they can hide every driver)."""
    names = ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES")
    set_ = [f"{n}={os.environ[n]}" for n in names if os.environ.get(n)]
    return f" with {', '.join(set_)}" if set_ else ""


def _robustness(physical: CData) -> tuple[CData, tuple[str, ...], list[str], CData]:
    """(VkPhysicalDeviceFeatures to enable, names enabled, device extensions needed, the
    feature chain to enable with it: VkPhysicalDeviceRobustness2FeaturesEXT or None).

    Only what the device supports is asked for: robustBufferAccess (core), then
    robustBufferAccess2 where VK_EXT_robustness2 is offered and supports it.
    """
    supported = vk.vkGetPhysicalDeviceFeatures(physical)
    exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(physical, None)}
    names: list[str] = []
    device_exts: list[str] = []
    chain = None
    if "VK_EXT_robustness2" in exts:
        query = vk.VkPhysicalDeviceRobustness2FeaturesEXT()
        vk.vkGetPhysicalDeviceFeatures2(physical, vk.VkPhysicalDeviceFeatures2(pNext=query))
        if query.robustBufferAccess2:
            chain = vk.VkPhysicalDeviceRobustness2FeaturesEXT(robustBufferAccess2=vk.VK_TRUE)
            device_exts.append("VK_EXT_robustness2")
            names.append("robustBufferAccess2")
    core = vk.VkPhysicalDeviceFeatures(robustBufferAccess=supported.robustBufferAccess)
    if supported.robustBufferAccess:
        names.insert(0, "robustBufferAccess")
    return core, tuple(names), device_exts, chain


# Device extensions that carry the half-precision features on a Vulkan 1.1 device (both are
# core in Vulkan 1.2; enabling a promoted extension the device lists is still valid).
_HALF_EXTENSIONS = ("VK_KHR_16bit_storage", "VK_KHR_shader_float16_int8")


def _half_precision(physical: CData, chain: CData) -> tuple[list[CData], str, list[str]]:
    """The half-precision features to enable, chained in front of `chain`: (the
    VkPhysicalDevice16BitStorageFeatures -> VkPhysicalDeviceShaderFloat16Int8Features
    structs, the head first, or []; why float16 graphs cannot run, "" when they can; the
    device extensions needed).

    An f16 kernel needs `shaderFloat16` (f16 arithmetic) and `storageBuffer16BitAccess`
    (f16 loads and stores in storage buffers); `uniformAndStorageBuffer16BitAccess` is
    enabled too where offered. A device without both gets none of them.
    """
    exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(physical, None)}
    missing = [e for e in _HALF_EXTENSIONS if e not in exts]
    if missing:
        return [], f"the device does not offer {' and '.join(missing)}", []
    arithmetic = vk.VkPhysicalDeviceShaderFloat16Int8Features()
    storage = vk.VkPhysicalDevice16BitStorageFeatures(pNext=arithmetic)
    vk.vkGetPhysicalDeviceFeatures2(physical, vk.VkPhysicalDeviceFeatures2(pNext=storage))
    lacking = [
        name
        for name, offered in (
            ("shaderFloat16", arithmetic.shaderFloat16),
            ("storageBuffer16BitAccess", storage.storageBuffer16BitAccess),
        )
        if not offered
    ]
    if lacking:
        return [], f"the device does not support {' and '.join(lacking)}", []
    enable_arithmetic = vk.VkPhysicalDeviceShaderFloat16Int8Features(
        pNext=chain, shaderFloat16=vk.VK_TRUE
    )
    enable_storage = vk.VkPhysicalDevice16BitStorageFeatures(
        pNext=enable_arithmetic,
        storageBuffer16BitAccess=vk.VK_TRUE,
        uniformAndStorageBuffer16BitAccess=storage.uniformAndStorageBuffer16BitAccess,
    )
    return [enable_storage, enable_arithmetic], "", list(_HALF_EXTENSIONS)


def _pick_physical_device(instance: CData) -> CData:
    """The preferred device, or the one VULKAN_PARITY_ADAPTER names (graph_format's
    `pick_adapter`: devices ranked by kind, in the loader's order within a kind)."""
    devices = vk.vkEnumeratePhysicalDevices(instance)
    if not devices:
        raise BackendUnavailable(
            "vulkan: no Vulkan device found; install 'mesa-vulkan-drivers' for lavapipe"
        )

    def rank(pd: CData) -> int:
        kind = _DEVICE_TYPES.get(vk.vkGetPhysicalDeviceProperties(pd).deviceType, "")
        return _PREFERENCE.get(kind, 4)

    ranked = sorted(devices, key=rank)
    best = sum(1 for pd in ranked if rank(pd) == rank(ranked[0]))
    return pick_adapter(
        "vulkan",
        ranked,
        best,
        lambda pd: str(vk.vkGetPhysicalDeviceProperties(pd).deviceName),
    )


def _route_message(severity: int, types: int, data: CData, user: CData) -> int:
    """The process's one debug-messenger callback: the `vulkan` package keeps a single Python
    callback per callback type (the last one installed wins), so each context's messages
    find their list through pUserData, not through a closure."""
    vk.ffi.from_handle(user).append(vk.ffi.string(data.pMessage).decode(errors="replace"))
    return 0  # VK_FALSE: never abort the call


def _install_messenger(instance: CData, messages: list[str]) -> object:
    """Route validation-layer warnings and errors into `messages`; returns what must stay alive."""
    handle = vk.ffi.new_handle(messages)
    create = vk.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT")
    info = vk.VkDebugUtilsMessengerCreateInfoEXT(
        messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
        | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
        | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
        | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        pfnUserCallback=_route_message,
        pUserData=handle,
    )
    messenger = create(instance, info, None)
    return (messenger, handle, info)

"""The one type this backend gives the objects of the `vulkan` package.

`vulkan` is a cffi binding generated when it is imported: it ships no type information, and
every handle it returns (VkInstance, VkDevice, VkBuffer, VkPipeline, command buffers...) and
every struct (VkPhysicalDeviceProperties, create-infos, mapped memory) is a cffi `CData`
object whose C type a type checker cannot see. They are typed `Any` here, and only here
(pyproject's `[tool.mypy]` lets the `vulkan` import go unchecked for the same reason); the
rest of the backend annotates such objects as `CData`, never as a bare `Any`, so that what
the type checker cannot see is named, and found, in one place.
"""

from typing import Any, TypeAlias

CData: TypeAlias = Any

"""Two Vulkan contexts with the validation layer in one process (a parity run's and a
benchmark's robust one) each receive their own validation messages."""

from __future__ import annotations

import pytest
import vulkan as vk

from graph_format import BackendUnavailable, Runtime
from vulkan_ref.instance import get_context

pytestmark = pytest.mark.gpu


def test_each_validation_context_keeps_its_own_messages(vulkan: Runtime) -> None:
    try:
        first, second = get_context(True), get_context(True, robust=True)
    except BackendUnavailable as err:
        pytest.skip(f"no validation layer: {err}")
    first.drain_messages()
    second.drain_messages()
    zero_size = vk.VkBufferCreateInfo(
        size=0,  # VUID-VkBufferCreateInfo-size-00912
        usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
        sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE,
    )
    buffer = vk.vkCreateBuffer(first.device, zero_size, None)
    vk.vkDestroyBuffer(first.device, buffer, None)
    assert any("VUID-VkBufferCreateInfo-size-00912" in m for m in first.drain_messages())
    assert second.drain_messages() == []

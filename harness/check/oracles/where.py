"""Where a tensor comes from and goes: the ops that produce, write and read it."""

from __future__ import annotations

from graph_format import (
    Graph,
)
from harness.ops import model_for


def producer(graph: Graph, tensor: str) -> str | None:
    """Name of the op that writes `tensor`, if any."""
    node = graph.producer(tensor)
    return node.name if node else None


def writer(graph: Graph, tensor: str) -> str | None:
    """Name of the op whose write `tensor` holds after a step: its producer, or for a state
    tensor the last op (in graph order) that updates it in place, that is binds it
    read-write in a kernel of its model (`update_cache`'s cache, `sdpa_with_kv_cache`'s)."""
    made = producer(graph, tensor)
    if made is not None:
        return made
    last = None
    for node in graph.ops:
        slots = {slot for slot, arg in node.args.items() if arg == tensor}
        if slots and any(
            b.name in slots and b.access == "read_write"
            for spec in model_for(node.op).kernels.values()
            for b in spec.tensors
        ):
            last = node.name
    return last


def consumer(graph: Graph, value: str) -> str | None:
    """Name of the first op (in graph order) that reads `value`, if any."""
    for node in graph.ops:
        for arg in node.args.values():
            if value == arg or (isinstance(arg, tuple) and value in arg):
                return node.name
    return None

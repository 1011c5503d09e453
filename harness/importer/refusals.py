"""What `parity import` refuses, and the one-line error that says so.

A `.pte` the importer cannot turn into the graph the model really computes is refused,
never approximated: importing only the first of two delegates, or dropping an op it does
not know, would check a different graph than the one the user ships. Each refusal is an
`ImportRefused` naming the file and what is wrong; the command prints it as its one line
(exit status 2) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.importer.program import Method

# The backend id both of ExecuTorch's GPU runtimes register (the WebGPU runtime registers
# under the Vulkan name, so both load the same blob).
VULKAN_BACKEND = "VulkanBackend"
WHOLE_METHOD = "only a single delegate holding the whole method can be checked"


class ImportRefused(ValueError):
    """A model the importer refuses: `<file>: <what is wrong>` (one line)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def computing_methods(methods: Sequence[Method]) -> list[Method]:
    """The methods that compute something (not the exporter's constant metadata methods,
    such as `get_max_context_len`, which hold no instruction)."""
    return [m for m in methods if m.instructions]


def the_method(methods: Sequence[Method]) -> Method | str:
    """The one method to import, or why there is none to choose."""
    computing = computing_methods(methods)
    if len(computing) == 1:
        return computing[0]
    if not computing:
        return "no method holds any op"
    names = ", ".join(m.name for m in computing)
    return f"{len(computing)} methods hold ops ({names}): only a single method can be checked"


def delegation_problem(method: Method) -> str | None:
    """Why `method` is not one Vulkan delegate holding the whole method, or None."""
    others = sorted({d.backend_id for d in method.delegates} - {VULKAN_BACKEND})
    if others:
        return f"delegates of {', '.join(others)}: only {VULKAN_BACKEND} delegates can be checked"
    cpu_ops = _unique(i.operator or "" for i in method.instructions if i.kind == "KernelCall")
    count = len(method.delegates)
    if count == 1 and not cpu_ops:
        return None
    if count == 0:
        return f"no {VULKAN_BACKEND} delegate (the method runs on the CPU): nothing to check"
    if count == 1:
        return f"1 delegate and CPU ops {', '.join(cpu_ops)} beside it: {WHOLE_METHOD}"
    where = f" and CPU ops {', '.join(cpu_ops)} between them" if cpu_ops else ""
    return f"{count} delegates{where}: {WHOLE_METHOD}"


def _unique(names: Iterable[str]) -> list[str]:
    """`names` without repeats, in first-seen order."""
    return list(dict.fromkeys(names))

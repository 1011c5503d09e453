"""The bytes of every constant of a Vulkan delegate, found and checked.

A `VkBytes` constant lies either in the delegate's own bytes section (`offset`, `length`)
or, as executorch 1.5.1 writes every non-empty constant, in the program's named data:
`offset` is UINT64_MAX and `named_key` is the sha256 (hex) of the tensor's bytes, which
`Program.named_data` maps to a segment. The key is checked against the bytes it finds, so a
corrupted weight is refused as a damaged file instead of being checked as the model. A key
the program does not hold lives in external data (a `.ptd` file beside the `.pte`), which
the importer refuses: the model it would check is not in the file it was given.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from harness.importer.flatbuf import DamagedBuffer
from harness.importer.values import Refusal
from harness.importer.vkgraph import VkGraph

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def resolve_constants(graph: VkGraph, named_data: Mapping[str, bytes]) -> list[bytes | None]:
    """The bytes of each of `graph.constants`, in order (None for an empty constant).

    Raises:
        DamagedBuffer: bytes outside the section or segment, or a sha256 that differs.
        Refusal: a constant in external data, or a named key that is not a sha256.
    """
    resolved: list[bytes | None] = []
    for index, constant in enumerate(graph.constants):
        where = f"VkGraph.constants[{index}]"
        if not constant.is_named:
            end = constant.offset + constant.length
            if end > len(graph.data):
                raise DamagedBuffer(
                    f"{where}: bytes [{constant.offset}, {end}) lie outside the delegate's "
                    f"{len(graph.data)}-byte section"
                )
            resolved.append(graph.data[constant.offset : end] if constant.length else None)
            continue
        key = constant.named_key or ""
        if key not in named_data:
            raise Refusal(
                f"constant {index} (named data {key!r}) is not in the file: it lives in "
                "external data (a .ptd file), which the importer does not read; export "
                "with the weights inside the .pte"
            )
        if not _SHA256_HEX.fullmatch(key):
            raise Refusal(
                f"constant {index}: named key {key!r} is not the sha256 of its bytes, as "
                "executorch 1.5.1 (ExecuTorch cff6f4dd) writes every key"
            )
        segment = named_data[key]
        if len(segment) < constant.length:
            raise DamagedBuffer(
                f"{where}: {constant.length} bytes, its segment holds {len(segment)}"
            )
        data = segment[: constant.length]
        if hashlib.sha256(data).hexdigest() != key:
            raise DamagedBuffer(
                f"{where}: the sha256 of its {constant.length} bytes is not its key {key}"
            )
        resolved.append(data)
    return resolved

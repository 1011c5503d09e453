"""Scratch sized by the manifest and the causal attention's masked columns
(graph_format/kernels/): parsing, sharing between the slots of one op, sizing, and the
one-line errors naming the file and what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomli_w

from graph_format.kernels import (
    MANIFEST_NAME,
    KernelInterfaceError,
    KernelManifestError,
    parse_manifest,
    scratch_sizes,
)

# A split-K pair keeping 128 chunks a head, and a three-kernel attention whose softmax is
# out of place: it reads `scores` and writes `probs`, a role the manifest adds to the op.
SAMPLE = """\
format = "parity-kernels/1"

[webgpu.sdpa_fd_split]
file = "split.wgsl"
scratch.part_o = "q_heads * 128 * head_dim * 4"
scratch.part_ml = "q_heads * 128 * 2 * 4"
dispatch = "q_heads * div_up(context, 32)"

[webgpu.sdpa_fd_reduce]
file = "reduce.wgsl"
dispatch = "q_heads"

[webgpu.sdpa_qk]
file = "qk.wgsl"
masked_columns = "written"
scratch.scores = "q_heads * max_seq * cache_rows * 4"

[webgpu.sdpa_qk_f16]
file = "qk_f16.wgsl"
masked_columns = "written"

[webgpu.sdpa_softmax]
file = "softmax.wgsl"
masked_columns = "read"
bindings = { src = "scores", dst = "probs" }
scratch.probs = "q_heads * max_seq * cache_rows * 4"

[webgpu.sdpa_av]
file = "av.wgsl"
bindings = { p = "probs" }
"""

STATIC = {
    "q_heads": 4,
    "kv_heads": 2,
    "head_dim": 16,
    "max_seq": 3,
    "cache_rows": 100,
    "scale": 0.25,
    "workgroup_size": 64,
    "max_workgroups_per_dim": 65535,
}


def _parse(text: str, folder: Path) -> object:
    return parse_manifest(text, folder / MANIFEST_NAME, check_files=False)


def test_scratch_roles_are_shared_by_the_slots_of_one_op(tmp_path: Path) -> None:
    manifest = parse_manifest(SAMPLE, tmp_path / MANIFEST_NAME, check_files=False)
    split = manifest.entry("webgpu", "sdpa_fd_split")
    reduce = manifest.entry("webgpu", "sdpa_fd_reduce")
    av = manifest.entry("webgpu", "sdpa_av")
    assert split is not None and reduce is not None and av is not None
    # The reduce declares nothing, yet sizes the same buffers as the split that writes them.
    assert set(reduce.op_scratch) == {"part_o", "part_ml", "scores", "probs"}
    assert (
        scratch_sizes(reduce, STATIC)
        == scratch_sizes(split, STATIC)
        == {
            "part_o": 4 * 128 * 16 * 4,
            "part_ml": 4 * 128 * 2 * 4,
            "scores": 4 * 3 * 100 * 4,
            "probs": 4 * 3 * 100 * 4,
        }
    )
    # A new role binds like the slot's own in every section of the op; the op's own
    # roles (part_o) stay the slot's.
    assert av.shared_roles == ("probs",)
    assert av.dispatches[0].bindings == {"p": "probs"}
    assert av.resolve_bindings([(0, "out"), (1, "p"), (2, "v_cache")]) == {
        0: "out",
        1: "probs",
        2: "v_cache",
    }
    assert split.shared_roles == ("probs",)
    # Written back as it was read (a bundle's manifest).
    again = parse_manifest(_toml(manifest.to_doc()), tmp_path / MANIFEST_NAME, check_files=False)
    assert again.entries == manifest.entries
    assert again.entries[("webgpu", "sdpa_softmax")].masked_columns == "read"


def _toml(doc: dict[str, object]) -> str:
    return tomli_w.dumps(doc)


def test_the_largest_declared_size_of_a_role_wins(tmp_path: Path) -> None:
    text = SAMPLE.replace(
        'dispatch = "q_heads"\n', 'dispatch = "q_heads"\nscratch.part_o = "q_heads * 256 * 4"\n'
    )
    manifest = parse_manifest(text, tmp_path / MANIFEST_NAME, check_files=False)
    reduce = manifest.entry("webgpu", "sdpa_fd_reduce")
    assert reduce is not None
    assert scratch_sizes(reduce, STATIC)["part_o"] == 4 * 128 * 16 * 4  # 32768 > 4096


def _edit(old: str, new: str) -> str:
    assert SAMPLE.count(old) == 1, old
    return SAMPLE.replace(old, new)


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (
            _edit('scratch.part_ml = "q_heads * 128 * 2 * 4"', 'scratch.q = "64"'),
            "webgpu.sdpa_fd_split.scratch.q",
            "'q' is a tensor of op sdpa_with_kv_cache, which the graph sizes; expected a "
            "scratch role of the op (part_ml, part_o, scores) or a new name",
        ),
        (
            _edit('scratch.part_ml = "q_heads * 128 * 2 * 4"', 'scratch.scores = "64"'),
            "webgpu.sdpa_fd_split.scratch.scores",
            "'scores' is a scratch role of other slots of sdpa_with_kv_cache, not of "
            "sdpa_fd_split (its roles: part_o, part_ml, q, k_cache, v_cache); size it in the "
            "section of a slot that binds it",
        ),
        (
            _edit('"q_heads * 128 * 2 * 4"', '"n_heads * 128 * 2 * 4"'),
            "webgpu.sdpa_fd_split.scratch.part_ml",
            "'n_heads * 128 * 2 * 4' reads 'n_heads' (did you mean 'q_heads'?), which slot "
            "sdpa_fd_split does not offer",
        ),
        (
            _edit('"q_heads * 128 * 2 * 4"', '"q_heads * 128 // (2 - 2)"'),
            "webgpu.sdpa_fd_split.scratch.part_ml",
            "division by zero in // (in 'q_heads * 128 // (2 - 2)', whatever the values)",
        ),
        (
            _edit('"q_heads * 128 * 2 * 4"', '"q_heads & 1023"'),
            "webgpu.sdpa_fd_split.scratch.part_ml",
            "is not allowed",
        ),
        (
            _edit('bindings = { p = "probs" }', 'bindings = { p = "prob" }'),
            "webgpu.sdpa_av.bindings.p",
            "expected a role of slot sdpa_av (out, scores, v_cache, probs) or 'params', got "
            "string 'prob'",
        ),
        (
            _edit('dispatch = "q_heads"\n', 'dispatch = "q_heads"\nmasked_columns = "written"\n'),
            "webgpu.sdpa_fd_reduce.masked_columns",
            "slot sdpa_fd_reduce has no masked columns; the key belongs to the causal "
            "attention's qk (sdpa_qk, sdpa_qk_f16) and softmax (sdpa_softmax) sections",
        ),
        (
            _edit('masked_columns = "read"', 'masked_columns = "written"'),
            "webgpu.sdpa_softmax.masked_columns",
            "expected 'read' or 'ignored', got string 'written'",
        ),
        (
            _edit('file = "qk_f16.wgsl"\nmasked_columns = "written"\n', 'file = "qk_f16.wgsl"\n'),
            "webgpu.sdpa_softmax.masked_columns",
            "'read': the softmax reads the masked columns of each scores row, which "
            "webgpu.sdpa_qk_f16 does not write",
        ),
        (
            _edit('[webgpu.sdpa_qk_f16]\nfile = "qk_f16.wgsl"\nmasked_columns = "written"\n', "")
            .replace('[webgpu.sdpa_qk]\nfile = "qk.wgsl"\nmasked_columns = "written"\n', "")
            .replace('scratch.scores = "q_heads * max_seq * cache_rows * 4"\n', ""),
            "webgpu.sdpa_softmax.masked_columns",
            "which the project's sdpa_qk kernel does not write (only its masked_columns = "
            '"written" does); replace sdpa_qk on webgpu with a kernel that writes them',
        ),
    ],
)
def test_a_bad_scratch_or_mask_entry_names_file_field_and_fix(
    tmp_path: Path, text: str, where: str, what: str
) -> None:
    with pytest.raises(KernelManifestError) as info:
        _parse(text, tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / MANIFEST_NAME}: {where}: "), message
    assert what in message, message


@pytest.mark.parametrize(
    ("size", "what"),
    [
        (
            "q_heads * context * 4",
            "webgpu.sdpa_fd_split.scratch.part_o: 'q_heads * context * 4' reads context, which "
            "change with the live sizes; a scratch buffer is allocated once, at load, for the "
            "op's largest shape: size it by values fixed at load (cache_rows, head_dim,",
        ),
        (
            "q_heads - 4",
            "webgpu.sdpa_fd_split.scratch.part_o: 'q_heads - 4' gives 0 bytes (at q_heads=4); "
            "expected a size of at least 1 byte",
        ),
        (
            "q_heads * head_dim / 3",
            "webgpu.sdpa_fd_split.scratch.part_o: expression 'q_heads * head_dim / 3': gave "
            "21.333333333333332, expected an integer",
        ),
    ],
)
def test_a_size_failing_at_load_names_its_key_and_values(
    tmp_path: Path, size: str, what: str
) -> None:
    text = _edit('"q_heads * 128 * head_dim * 4"', f'"{size}"')
    manifest = parse_manifest(text, tmp_path / MANIFEST_NAME, check_files=False)
    reduce = manifest.entry("webgpu", "sdpa_fd_reduce")
    assert reduce is not None
    with pytest.raises(KernelInterfaceError) as info:
        scratch_sizes(reduce, STATIC)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("sdpa_fd_reduce: "), message  # the kernel being built
    assert what in message, message


def test_the_reference_s_scratch_examples_parse() -> None:
    """docs/bring-your-own-kernels.md's Scratch section: its manifests stay valid."""
    page = (Path(__file__).parents[2] / "docs" / "bring-your-own-kernels.md").read_text()
    start = page.index("### Scratch sized by the manifest")
    section = page[start : page.index("\n### ", start + 1)]
    blocks = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    header = 'format = "parity-kernels/1"\n'
    split, attention = (
        parse_manifest(header + b, Path("kernels") / MANIFEST_NAME, check_files=False)
        for b in blocks
    )
    assert split.slots("webgpu") == ("sdpa_fd_split", "sdpa_fd_reduce")
    reduce = split.entry("webgpu", "sdpa_fd_reduce")
    assert reduce is not None and scratch_sizes(reduce, STATIC)["part_o"] == 4 * 128 * 16 * 4
    av = attention.entry("webgpu", "sdpa_av")
    assert av is not None and av.shared_roles == ("probs",)

"""apply_rotary_emb and apply_rotary_emb_hf on WebGPU: one dispatch rotating q and k.

One invocation per rotated pair, q's pairs first: the count covers (numel(xq) + numel(xk)) / 2
live pairs, so q and k may have different head counts, and batch is handled. The hook follows
xq, xk, both tables and (HF) the start_pos SymInt, and reads only live values: the start_pos
check `start_pos + S <= rows` sees the S of this step, not a stale one (docs/design.md §8.2).
The HF kernel reads each half's own table columns (docs/design.md §8.5).
"""

from __future__ import annotations

from collections.abc import Callable

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import Dims, WebGPUTensor

WORKGROUP_SIZE = 64


def _check_dtypes(graph: WebGPUGraph, node: OpNode, tensors: tuple[WebGPUTensor, ...]) -> None:
    """All float32 or all float16 (the `_f16` slot), as xq's (the first's) type says."""
    first = tensors[0]
    dtype = first.dtype if first.dtype in FLOAT_DTYPES else "float32"
    for tensor in tensors:
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"{tensor.name!r} must be {dtype}, got {tensor.dtype}", tensor=tensor.name
            )


def check_qk_build(graph: WebGPUGraph, node: OpNode, xq: WebGPUTensor, xk: WebGPUTensor) -> int:
    """The load-time checks of xq and xk every rope shares: [B, S, H, D] with one even D and
    one B, S; returns D."""
    for tensor in (xq, xk):
        if len(tensor.dims) != 4:
            raise graph.fail(
                node, f"{tensor.name!r} must be [B, S, H, D], got {list(tensor.dims)}", tensor.name
            )
    dim = xq.dims[3]
    if dim % 2:
        raise graph.fail(node, f"the head dim {dim} must be even", tensor=xq.name)
    if xk.dims[3] != dim or xk.dims[:2] != xq.dims[:2]:
        raise graph.fail(
            node, f"xk {list(xk.dims)} must share B, S and D with xq {list(xq.dims)}", xk.name
        )
    return dim


def _check_build(
    graph: WebGPUGraph, node: OpNode, tables: tuple[WebGPUTensor, WebGPUTensor], hf: bool
) -> None:
    """Load-time checks shared by both variants; the tables have D (hf) or D / 2 columns."""
    xq, xk = graph.arg_tensor(node, "xq"), graph.arg_tensor(node, "xk")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    cos, sin = tables
    _check_dtypes(graph, node, (xq, xk, cos, sin, xq_out, xk_out))
    dim = check_qk_build(graph, node, xq, xk)
    width = dim if hf else dim // 2
    if len(cos.dims) != 2 or cos.dims[1] != width:
        raise graph.fail(
            node, f"{cos.name!r} must be [rows, {width}], got {list(cos.dims)}", tensor=cos.name
        )
    if sin.dims != cos.dims:
        raise graph.fail(
            node, f"{sin.name!r} must have {cos.name!r}'s dims {list(cos.dims)}", sin.name
        )
    if xq_out.dims != xq.dims:
        raise graph.fail(node, f"xq_out must be {list(xq.dims)}", tensor=xq_out.name)
    if xk_out.dims != xk.dims:
        raise graph.fail(node, f"xk_out must be {list(xk.dims)}", tensor=xk_out.name)


def _build(
    graph: WebGPUGraph,
    node: OpNode,
    table_slots: tuple[str, str],
    start_pos: Callable[[], int] | None,
) -> None:
    hf = start_pos is not None
    cos = graph.arg_tensor(node, table_slots[0])
    sin = graph.arg_tensor(node, table_slots[1])
    _check_build(graph, node, (cos, sin), hf)
    xq, xk = graph.arg_tensor(node, "xq"), graph.arg_tensor(node, "xk")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    dim = xq.dims[3]
    slot = graph.dtype_slot(node, "rotary_emb_hf" if hf else "rotary_emb", xq.dtype)
    tensors = {"xq_out": xq_out, "xk_out": xk_out, "xq": xq, "xk": xk}
    tensors |= {table_slots[0]: cos, table_slots[1]: sin}
    static: dict[str, Value] = {"half_dim": dim // 2, "workgroup_size": WORKGROUP_SIZE}
    dispatch = graph.add_kernel(node, {slot: slot}, tensors=tensors, static=static)

    def resize() -> None:
        q, k = check_live_qk(node, xq, xk)
        seq = q[1]
        position = _check_tables(node, (cos, sin), seq, start_pos)
        graph.set_cur_dims(xq_out, q)
        graph.set_cur_dims(xk_out, k)
        q_pairs = xq.cur_numel // 2
        total = q_pairs + xk.cur_numel // 2
        values: dict[str, Value] = {
            "q_pairs": q_pairs,
            "total_pairs": total,
            "seq": seq,
            "q_heads": q[2],
            "k_heads": k[2],
            "workgroups": -(-total // WORKGROUP_SIZE),
        }
        if hf:
            values["start_pos"] = position
        dispatch.set(values)

    triggers = [xq.name, xk.name, cos.name, sin.name]
    pos_name = node.arg("start_pos") if hf else None  # apply_rotary_emb has no start_pos
    if pos_name is not None and pos_name in graph.symints:
        triggers.append(pos_name)
    graph.add_resize_hook(node, triggers, resize)


def refusal(node: OpNode, reason: str, message: str) -> InputError:
    """The InputError of a live size the rope refuses (`reason` is its key)."""
    return InputError(node.name, reason, f"webgpu: op {node.name!r}: {message}")


def check_live_qk(node: OpNode, xq: WebGPUTensor, xk: WebGPUTensor) -> tuple[Dims, Dims]:
    """Refuse live q/k dims the kernel cannot rotate; returns them."""
    dim = xq.dims[3]
    q, k = xq.cur_dims, xk.cur_dims
    if q[3] != dim or k[3] != dim:
        raise refusal(node, "head_dim", f"live head dims {q[3]} and {k[3]} must stay {dim}")
    if k[:2] != q[:2]:
        raise refusal(node, "qk_shape", f"live xk {list(k)} must share B and S with xq {list(q)}")
    return q, k


def _check_tables(
    node: OpNode,
    tables: tuple[WebGPUTensor, WebGPUTensor],
    seq: int,
    start_pos: Callable[[], int] | None,
) -> int:
    """Refuse live tables that do not cover the S rows rotated (the Llama freqs [S, D/2];
    the HF tables [rows, D] from start_pos); returns the first row (0 for Llama)."""
    cos, sin = tables
    if start_pos is None:
        half = cos.dims[1]
        if cos.cur_dims != (seq, half) or sin.cur_dims != cos.cur_dims:
            raise refusal(
                node,
                "freqs_shape",
                f"live freqs {list(cos.cur_dims)} and {list(sin.cur_dims)} must be [{seq}, {half}]",
            )
        return 0
    dim = cos.dims[1]
    if sin.cur_dims != cos.cur_dims or cos.cur_dims[1] != dim:
        raise refusal(
            node,
            "table_shape",
            f"live tables {list(cos.cur_dims)} and {list(sin.cur_dims)} must be "
            f"equal with {dim} columns",
        )
    position = start_pos()
    rows = cos.cur_dims[0]
    if position < 0 or position + seq > rows:
        raise refusal(
            node, "start_pos", f"start_pos {position} + S {seq} must lie within {rows} rows"
        )
    return position


@register("apply_rotary_emb")
def build_llama(graph: WebGPUGraph, node: OpNode) -> None:
    """Record apply_rotary_emb (pair-interleaved, freqs [S, D/2])."""
    _build(graph, node, ("freqs_cos", "freqs_sin"), None)


@register("apply_rotary_emb_hf")
def build_hf(graph: WebGPUGraph, node: OpNode) -> None:
    """Record apply_rotary_emb_hf (rotate-half, tables [max_seq, D], start_pos)."""
    _build(graph, node, ("cos", "sin"), graph.int_or_symint(node, "start_pos"))

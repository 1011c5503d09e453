// op: sdpa_with_kv_cache, kernel sdpa_fd_reduce_f16 — contract: harness/ops/sdpa.py
// Half precision: f32 partials, combined in f32 as sdpa_fd_reduce does, each output rounded
// once to f16.
// Decode route (S == 1), step 2. One workgroup per head h; every lane folds the splits'
// (m_i, l_i) itself: M = max m_i, w_i = exp(m_i - M), L = sum w_i l_i; then lanes take
// strided dims d of out[h, d] = sum_i w_i part_o[h, i, d] / L.
enable f16;

struct Params {
    seq: u32,         // live S
    input_pos: u32,   // checked on the host: input_pos + S <= cache rows
    context: u32,     // input_pos + S
    q_heads: u32,     // Hq
    kv_heads: u32,    // Hkv
    head_dim: u32,    // D
    num_splits: u32,  // ceil(context / 64): the decode route's splits
    _pad0: u32,
    scale: f32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> part_o: array<f32>;
@group(0) @binding(2) var<storage, read> part_ml: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

// -FLT_MAX, written exactly: Tint (Dawn, Chrome) rejects -3.4028235e38, which lies above
// the largest f32 before rounding ("cannot be represented as 'f32'"); Naga rounds it.
const LOWEST: f32 = -3.40282346638528859811704183484516925e38;

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let h = wid.x + wid.y * nwg.x;
    if (h >= params.q_heads) {
        return;
    }
    let splits = params.num_splits;
    let base = h * splits;
    var top = LOWEST;
    for (var i = 0u; i < splits; i++) {
        top = max(top, part_ml[2u * (base + i)]);
    }
    var total = 0.0;
    for (var i = 0u; i < splits; i++) {
        total += exp(part_ml[2u * (base + i)] - top) * part_ml[2u * (base + i) + 1u];
    }
    let dim = params.head_dim;
    for (var d = lane; d < dim; d += wg_size) {
        var acc = 0.0;
        for (var i = 0u; i < splits; i++) {
            acc += exp(part_ml[2u * (base + i)] - top) * part_o[(base + i) * dim + d];
        }
        out[h * dim + d] = f16(acc / total);
    }
}

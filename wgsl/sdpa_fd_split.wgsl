// op: sdpa_with_kv_cache, kernel sdpa_fd_split — contract: harness/ops/sdpa.py
// Decode route (S == 1), step 1. One workgroup per (head h, split) of wg_size cache rows;
// lane t scores row split * wg_size + t against q's only token. A tree takes the split's max
// m, another sums p = exp(score - m) into l; then lanes take strided dims d of
// o[d] = sum_t p_t v_cache[row_t, h / group, d]. Partials: part_o[h, split, d] and
// part_ml[h, split] = (m, l), dense over the live num_splits.
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

@group(0) @binding(0) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(1) var<storage, read_write> part_ml: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read> v_cache: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

override wg_size: u32 = 64u;  // = rows per split; a power of two: the trees halve it
var<workgroup> red: array<f32, wg_size>;
var<workgroup> probs: array<f32, wg_size>;

// -FLT_MAX, written exactly: Tint (Dawn, Chrome) rejects -3.4028235e38, which lies above
// the largest f32 before rounding ("cannot be represented as 'f32'"); Naga rounds it.
const LOWEST: f32 = -3.40282346638528859811704183484516925e38;

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let wg_index = wid.x + wid.y * nwg.x;
    if (wg_index >= params.q_heads * params.num_splits) {
        return;
    }
    let h = wg_index / params.num_splits;
    let split = wg_index % params.num_splits;
    let kv_head = h / (params.q_heads / params.kv_heads);
    let dim = params.head_dim;
    let first = split * wg_size;
    let rows = min(wg_size, params.context - first);
    let valid = lane < rows;
    var score = LOWEST;
    if (valid) {
        let k_base = ((first + lane) * params.kv_heads + kv_head) * dim;
        var acc = 0.0;
        for (var d = 0u; d < dim; d++) {
            acc += q[h * dim + d] * k_cache[k_base + d];
        }
        score = acc * params.scale;
    }
    red[lane] = score;
    workgroupBarrier();
    for (var stride = wg_size / 2u; stride > 0u; stride /= 2u) {
        if (lane < stride) {
            red[lane] = max(red[lane], red[lane + stride]);
        }
        workgroupBarrier();
    }
    let top = red[0];
    workgroupBarrier();
    let p = select(0.0, exp(score - top), valid);
    probs[lane] = p;
    red[lane] = p;
    workgroupBarrier();
    for (var stride = wg_size / 2u; stride > 0u; stride /= 2u) {
        if (lane < stride) {
            red[lane] += red[lane + stride];
        }
        workgroupBarrier();
    }
    let part = h * params.num_splits + split;
    for (var d = lane; d < dim; d += wg_size) {
        var acc = 0.0;
        for (var t = 0u; t < rows; t++) {
            acc += probs[t] * v_cache[((first + t) * params.kv_heads + kv_head) * dim + d];
        }
        part_o[part * dim + d] = acc;
    }
    if (lane == 0u) {
        part_ml[2u * part] = top;
        part_ml[2u * part + 1u] = red[0];
    }
}

// op: sdpa_with_kv_cache, kernel sdpa_softmax — contract: harness/ops/sdpa.py
// Materialized route, step 2. One workgroup per score row (h, s), in place over its
// n = input_pos + s + 1 unmasked scores: lanes take strided columns; a shared-memory tree
// finds the max, another sums exp(x - max); then each lane writes exp(x - max) / sum.
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

@group(0) @binding(0) var<storage, read_write> scores: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;

override wg_size: u32 = 64u;  // a power of two: the tree reductions halve it
var<workgroup> red: array<f32, wg_size>;

// -FLT_MAX, written exactly: Tint (Dawn, Chrome) rejects -3.4028235e38, which lies above
// the largest f32 before rounding ("cannot be represented as 'f32'"); Naga rounds it.
const LOWEST: f32 = -3.40282346638528859811704183484516925e38;

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.q_heads * params.seq) {
        return;
    }
    let n = params.input_pos + row % params.seq + 1u;
    let base = row * params.context;
    var top = LOWEST;
    for (var c = lane; c < n; c += wg_size) {
        top = max(top, scores[base + c]);
    }
    red[lane] = top;
    workgroupBarrier();
    for (var stride = wg_size / 2u; stride > 0u; stride /= 2u) {
        if (lane < stride) {
            red[lane] = max(red[lane], red[lane + stride]);
        }
        workgroupBarrier();
    }
    top = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var c = lane; c < n; c += wg_size) {
        sum += exp(scores[base + c] - top);
    }
    red[lane] = sum;
    workgroupBarrier();
    for (var stride = wg_size / 2u; stride > 0u; stride /= 2u) {
        if (lane < stride) {
            red[lane] += red[lane + stride];
        }
        workgroupBarrier();
    }
    let total = red[0];
    for (var c = lane; c < n; c += wg_size) {
        scores[base + c] = exp(scores[base + c] - top) / total;
    }
}

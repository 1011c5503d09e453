// op: sdpa_with_kv_cache, kernel sdpa_qk_f16 — contract: harness/ops/sdpa.py
// Half precision: f16 q and k cache, the dot products in f32, the scores stored f32 (the
// softmax runs on them in f32: sdpa_softmax serves both precisions).
// Materialized route, step 1. One invocation per score of a dense live [Hq, S, ctx] scratch:
// scores[h, s, c] = scale * dot(q[s, h], k_cache[c, h / group]), for c <= input_pos + s.
// Causally masked scores are neither written nor ever read.
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

@group(0) @binding(0) var<storage, read_write> scores: array<f32>;
@group(0) @binding(1) var<storage, read> q: array<f16>;
@group(0) @binding(2) var<storage, read> k_cache: array<f16>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * wg_size;
    if (t >= params.q_heads * params.seq * params.context) {
        return;
    }
    let c = t % params.context;
    let row = t / params.context;
    let s = row % params.seq;
    let h = row / params.seq;
    if (c > params.input_pos + s) {
        return;
    }
    let kv_head = h / (params.q_heads / params.kv_heads);
    let dim = params.head_dim;
    let q_base = (s * params.q_heads + h) * dim;
    let k_base = (c * params.kv_heads + kv_head) * dim;
    var acc = 0.0;
    for (var d = 0u; d < dim; d++) {
        acc += f32(q[q_base + d]) * f32(k_cache[k_base + d]);
    }
    scores[t] = acc * params.scale;
}

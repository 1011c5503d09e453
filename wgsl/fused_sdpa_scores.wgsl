// op: fused_sdpa, kernel fused_sdpa_scores — contract: harness/ops/fused_sdpa.py
// Step 1 (no attn_mask). One invocation per score of a dense live [B*H, S, L] scratch:
// scores[bh, s, l] = scale * dot(q[bh, s], k[bh, l]).
struct Params {
    batch: u32,     // B
    heads: u32,     // H
    q_len: u32,     // live S
    kv_len: u32,    // live L
    head_dim: u32,  // D
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> scores: array<f32>;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Flat index across a grid that may have been folded into 2-D.
    let t = gid.x + gid.y * nwg.x * wg_size;
    let rows = params.batch * params.heads * params.q_len;
    if (t >= rows * params.kv_len) {
        return;
    }
    let l = t % params.kv_len;
    let row = t / params.kv_len;  // bh * S + s
    let bh = row / params.q_len;
    let dim = params.head_dim;
    let q_base = row * dim;
    let k_base = (bh * params.kv_len + l) * dim;
    var acc = 0.0;
    for (var d = 0u; d < dim; d++) {
        acc += q[q_base + d] * k[k_base + d];
    }
    scores[t] = acc * params.scale;
}

// op: fused_sdpa, kernel fused_sdpa_av — contract: harness/ops/fused_sdpa.py
// Step 3. One invocation per output element (bh, s, d) of [B, H, S, D]:
// out = sum over l < L of probs[bh, s, l] * v[bh, l, d].
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

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * wg_size;
    let dim = params.head_dim;
    if (i >= params.batch * params.heads * params.q_len * dim) {
        return;
    }
    let d = i % dim;
    let row = i / dim;  // bh * S + s
    let bh = row / params.q_len;
    let n = params.kv_len;
    var acc = 0.0;
    for (var l = 0u; l < n; l++) {
        acc += scores[row * n + l] * v[(bh * n + l) * dim + d];
    }
    out[i] = acc;
}

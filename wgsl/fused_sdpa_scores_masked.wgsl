// op: fused_sdpa, kernel fused_sdpa_scores_masked — contract: harness/ops/fused_sdpa.py
// Step 1 with an additive attn_mask. One invocation per score of a dense live [B*H, S, L]
// scratch: scores[bh, s, l] = scale * dot(q[bh, s], k[bh, l]) + attn_mask[b, h, s, l], the
// mask read through strides that are 0 along the dims it broadcasts over.
struct Params {
    batch: u32,     // B
    heads: u32,     // H
    q_len: u32,     // live S
    kv_len: u32,    // live L
    head_dim: u32,  // D
    scale: f32,
    _pad0: u32,
    _pad1: u32,
    mask_strides: vec4<u32>,  // along [B, H, S, L]
}

@group(0) @binding(0) var<storage, read_write> scores: array<f32>;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> attn_mask: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * wg_size;
    let rows = params.batch * params.heads * params.q_len;
    if (t >= rows * params.kv_len) {
        return;
    }
    let l = t % params.kv_len;
    let row = t / params.kv_len;  // bh * S + s
    let s = row % params.q_len;
    let bh = row / params.q_len;
    let dim = params.head_dim;
    let q_base = row * dim;
    let k_base = (bh * params.kv_len + l) * dim;
    var acc = 0.0;
    for (var d = 0u; d < dim; d++) {
        acc += q[q_base + d] * k[k_base + d];
    }
    let ms = params.mask_strides;
    let m = (bh / params.heads) * ms.x + (bh % params.heads) * ms.y + s * ms.z + l * ms.w;
    scores[t] = acc * params.scale + attn_mask[m];
}

// op: apply_rotary_emb, kernel rotary_emb_f16 — contract: harness/ops/rotary.py
// Half precision: loads f16, computes in f32 exactly as rotary_emb does, and rounds
// each output once to f16.
// One invocation per rotated pair, q's pairs first, then k's. Pair p of a [B, S, H, D] tensor
// holds elements 2p and 2p+1; it is pair i = p % (D/2) of head row p / (D/2), whose token is
// s = (row / H) % S, and it turns by freqs[s, i]:
//   out[2p] = x[2p] c - x[2p+1] s,  out[2p+1] = x[2p] s + x[2p+1] c.
enable f16;

struct Params {
    q_pairs: u32,      // numel(xq) / 2 (live)
    total_pairs: u32,  // q_pairs + numel(xk) / 2
    half_dim: u32,     // D / 2
    seq: u32,          // live S
    q_heads: u32,      // live Hq
    k_heads: u32,      // live Hkv
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> xq_out: array<f16>;
@group(0) @binding(1) var<storage, read_write> xk_out: array<f16>;
@group(0) @binding(2) var<storage, read> xq: array<f16>;
@group(0) @binding(3) var<storage, read> xk: array<f16>;
@group(0) @binding(4) var<storage, read> freqs_cos: array<f16>;
@group(0) @binding(5) var<storage, read> freqs_sin: array<f16>;
@group(0) @binding(6) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * wg_size;
    if (t >= params.total_pairs) {
        return;
    }
    let is_k = t >= params.q_pairs;
    let p = select(t, t - params.q_pairs, is_k);
    let heads = select(params.q_heads, params.k_heads, is_k);
    let i = p % params.half_dim;
    let s = (p / params.half_dim / heads) % params.seq;
    let c = f32(freqs_cos[s * params.half_dim + i]);
    let sn = f32(freqs_sin[s * params.half_dim + i]);
    if (is_k) {
        let a = f32(xk[2u * p]);
        let b = f32(xk[2u * p + 1u]);
        xk_out[2u * p] = f16(a * c - b * sn);
        xk_out[2u * p + 1u] = f16(a * sn + b * c);
    } else {
        let a = f32(xq[2u * p]);
        let b = f32(xq[2u * p + 1u]);
        xq_out[2u * p] = f16(a * c - b * sn);
        xq_out[2u * p + 1u] = f16(a * sn + b * c);
    }
}

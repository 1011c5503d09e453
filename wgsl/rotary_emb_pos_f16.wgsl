// op: apply_rotary_emb_pos, kernel rotary_emb_pos_f16 — contract: harness/ops/rotary_pos.py
// Half precision: loads f16, computes the angle and rotates in f32 exactly as rotary_emb_pos
// does, and rounds each output once to f16.
// One invocation per rotated pair, q's pairs first, then k's. Pair p of a [B, S, H, D] tensor
// holds elements 2p and 2p+1; it is pair i = p % (D/2) of head row p / (D/2), whose token is
// s = (row / H) % S. Its angle comes from the token's position and theta:
//   angle = f32(positions[s]) * freq_scale * exp2(-(2i / D) * log2(theta_base)) / freq_factors[i]
// reduced into [-pi, pi], where sin and cos have a specified accuracy; then
//   out[2p] = x[2p] c - x[2p+1] s,  out[2p+1] = x[2p] s + x[2p+1] c.
enable f16;

struct Params {
    q_pairs: u32,           // numel(xq) / 2 (live)
    total_pairs: u32,       // q_pairs + numel(xk) / 2
    half_dim: u32,          // D / 2
    head_dim: u32,          // D
    seq: u32,               // live S
    q_heads: u32,           // live Hq
    k_heads: u32,           // live Hkv
    has_freq_factors: u32,  // 1: divide pair i's angle by freq_factors[i]
    theta_base: f32,
    freq_scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> xq_out: array<f16>;
@group(0) @binding(1) var<storage, read_write> xk_out: array<f16>;
@group(0) @binding(2) var<storage, read> xq: array<f16>;
@group(0) @binding(3) var<storage, read> xk: array<f16>;
@group(0) @binding(4) var<storage, read> positions: array<i32>;
@group(0) @binding(5) var<storage, read> freq_factors: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

override wg_size: u32 = 64u;

const TWO_PI: f32 = 6.283185307179586;
const INV_TWO_PI: f32 = 0.15915494309189535;
// The largest f32 below pi (f32(pi) lies above it): WGSL specifies sin and cos in [-pi, pi].
const PI_BELOW: f32 = 3.1415925;

// The angle of pair i of a token at `position`, reduced into [-pi, pi].
fn reduced_angle(position: i32, i: u32) -> f32 {
    let exponent = f32(2u * i) / f32(params.head_dim);
    var freq = params.freq_scale * exp2(-(exponent * log2(params.theta_base)));
    if (params.has_freq_factors != 0u) {
        freq = freq / freq_factors[i];
    }
    let angle = f32(position) * freq;
    let turns = round(angle * INV_TWO_PI);
    return clamp(angle - turns * TWO_PI, -PI_BELOW, PI_BELOW);
}

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
    let r = reduced_angle(positions[s], i);
    let c = cos(r);
    let sn = sin(r);
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

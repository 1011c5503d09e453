// op: apply_rotary_emb_hf, kernel rotary_emb_hf_f16 — contract: harness/ops/rotary.py
// Half precision: loads f16, computes in f32 exactly as rotary_emb_hf does, and rounds
// each output once to f16.
// One invocation per rotated pair (i, i + D/2) of one head row, q's rows first, then k's.
// Pair p is column i = p % (D/2) of head row p / (D/2), whose token is s = (row / H) % S;
// it reads table row r = start_pos + s, each half with its own columns:
//   out[i]     = x[i] cos[r, i]         - x[i + h] sin[r, i]
//   out[i + h] = x[i + h] cos[r, i + h] + x[i] sin[r, i + h]
enable f16;

struct Params {
    q_pairs: u32,      // numel(xq) / 2 (live)
    total_pairs: u32,  // q_pairs + numel(xk) / 2
    half_dim: u32,     // h = D / 2
    seq: u32,          // live S
    q_heads: u32,      // live Hq
    k_heads: u32,      // live Hkv
    start_pos: u32,    // checked on the host: start_pos + S <= the table's rows
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read_write> xq_out: array<f16>;
@group(0) @binding(1) var<storage, read_write> xk_out: array<f16>;
@group(0) @binding(2) var<storage, read> xq: array<f16>;
@group(0) @binding(3) var<storage, read> xk: array<f16>;
@group(0) @binding(4) var<storage, read> cos: array<f16>;
@group(0) @binding(5) var<storage, read> sin: array<f16>;
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
    let h = params.half_dim;
    let i = p % h;
    let row = p / h;
    let s = (row / heads) % params.seq;
    let table = (params.start_pos + s) * 2u * h;
    let c1 = f32(cos[table + i]);
    let s1 = f32(sin[table + i]);
    let c2 = f32(cos[table + i + h]);
    let s2 = f32(sin[table + i + h]);
    let first = row * 2u * h + i;
    if (is_k) {
        let x1 = f32(xk[first]);
        let x2 = f32(xk[first + h]);
        xk_out[first] = f16(x1 * c1 - x2 * s1);
        xk_out[first + h] = f16(x2 * c2 + x1 * s2);
    } else {
        let x1 = f32(xq[first]);
        let x2 = f32(xq[first + h]);
        xq_out[first] = f16(x1 * c1 - x2 * s1);
        xq_out[first + h] = f16(x2 * c2 + x1 * s2);
    }
}

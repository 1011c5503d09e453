// op: apply_rotary_emb_interleaved, kernel rotary_emb_interleaved_f16 — contract: harness/ops/rotary_interleaved.py
// Half precision: loads f16 x and freqs, rotates in f32 exactly as rotary_emb_interleaved
// does, and rounds each output once to f16.
// One invocation per (real, imag) pair of x [B, N, C] (C even, as upstream's WebGPU op
// accepts): pair p = (r, i) of token n = (p / (C/2)) % N, turned by that token's freqs pair
// (c, s) = freqs_cis[n, ...]:  out = (r c - i s, r s + i c).
enable f16;

struct Params {
    pairs: u32,      // numel(x) / 2 (live)
    row_pairs: u32,  // C / 2
    tokens: u32,     // live N
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec2<f16>>;
@group(0) @binding(1) var<storage, read> x: array<vec2<f16>>;
@group(0) @binding(2) var<storage, read> freqs_cis: array<vec2<f16>>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // A folded (x, y) grid: the flat index of this invocation.
    let p = gid.x + gid.y * nwg.x * wg_size;
    if (p >= params.pairs) {
        return;
    }
    let n = (p / params.row_pairs) % params.tokens;
    let f = vec2<f32>(freqs_cis[n * params.row_pairs + p % params.row_pairs]);
    let v = vec2<f32>(x[p]);
    out[p] = vec2<f16>(vec2<f32>(v.x * f.x - v.y * f.y, v.x * f.y + v.y * f.x));
}

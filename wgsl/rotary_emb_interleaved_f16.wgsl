// op: apply_rotary_emb_interleaved, kernel rotary_emb_interleaved_f16 — contract: harness/ops/rotary_interleaved.py
// Half precision: loads f16 x and freqs, rotates in f32 exactly as rotary_emb_interleaved
// does, and rounds each output once to f16.
// One invocation per vec4 texel of x [B, N, C] (C a multiple of 4): two (real, imag) pairs
// (r0, i0, r1, i1) of token n = (t / (C/4)) % N, turned by that token's freqs texel
// (c0, s0, c1, s1) = freqs_cis[n, ...]:  out = (r c - i s, r s + i c) per pair.
enable f16;

struct Params {
    texels: u32,      // numel(x) / 4 (live)
    row_texels: u32,  // C / 4
    tokens: u32,      // live N
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> freqs_cis: array<vec4<f16>>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // A folded (x, y) grid: the flat index of this invocation.
    let t = gid.x + gid.y * nwg.x * wg_size;
    if (t >= params.texels) {
        return;
    }
    let n = (t / params.row_texels) % params.tokens;
    let f = vec4<f32>(freqs_cis[n * params.row_texels + t % params.row_texels]);
    let v = vec4<f32>(x[t]);
    out[t] = vec4<f16>(vec4<f32>(
        v.x * f.x - v.y * f.y,
        v.x * f.y + v.y * f.x,
        v.z * f.z - v.w * f.w,
        v.z * f.w + v.w * f.z
    ));
}

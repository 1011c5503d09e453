// A position rope in ggml's style (its rope_norm: adjacent pairs, angles from int32 positions
// and a frequency base), written for tests/diff/test_foreign_rope.py: ggml's names (src0, src1
// for the positions, src2 for the frequency factors, dst), the frequencies as powers of
// theta_scale = freq_base^(-2/n_dims), no range reduction before sin and cos, and one tensor
// per dispatch (the manifest runs it once for q and once for k).
struct Params {
    n_threads: u32,  // pairs of this tensor (live)
    n_dims: u32,     // the rotated width: the head dim
    ne1: u32,        // heads
    ne2: u32,        // tokens
    has_ff: u32,     // src2 holds one frequency factor per pair
    freq_base: f32,
    freq_scale: f32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> src0: array<f32>;
@group(0) @binding(1) var<storage, read> src1: array<i32>;
@group(0) @binding(2) var<storage, read> src2: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let pair = gid.x;
    if (pair >= params.n_threads) {
        return;
    }
    let half = params.n_dims / 2u;
    let i0 = 2u * (pair % half);
    let token = (pair / half / params.ne1) % params.ne2;
    let theta_scale = pow(params.freq_base, -2.0 / f32(params.n_dims));
    var theta = f32(src1[token]) * pow(theta_scale, f32(i0 / 2u));
    if (params.has_ff != 0u) {
        theta = theta / src2[i0 / 2u];
    }
    theta = theta * params.freq_scale;
    let cos_theta = cos(theta);
    let sin_theta = sin(theta);
    let x0 = src0[2u * pair];
    let x1 = src0[2u * pair + 1u];
    dst[2u * pair] = x0 * cos_theta - x1 * sin_theta;
    dst[2u * pair + 1u] = x0 * sin_theta + x1 * cos_theta;
}

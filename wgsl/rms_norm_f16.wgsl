// op: rms_norm, kernel rms_norm_f16 — contract: harness/ops/rms_norm.py
// Half precision: loads f16 x and weight, computes in f32 (the sum of squares accumulates in
// f32 lanes and an f32 tree), stores f16. One workgroup per row, as rms_norm: lanes
// accumulate x*x over a strided slice of the row, a shared-memory tree reduction sums the
// lanes, then every lane writes x * rstd * weight for its slice, rounded once to f16.
enable f16;

struct Params {
    num_rows: u32,
    row_width: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> x: array<f16>;
@group(0) @binding(2) var<storage, read> weight: array<f16>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;  // a power of two: the tree reduction halves it
var<workgroup> partial: array<f32, wg_size>;

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    // Rows past the live count come from folding a large count into a 2-D grid.
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.num_rows) {
        return;
    }
    let base = row * params.row_width;
    var acc = 0.0;
    for (var i = lane; i < params.row_width; i += wg_size) {
        let v = f32(x[base + i]);
        acc += v * v;
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
    for (var i = lane; i < params.row_width; i += wg_size) {
        out[base + i] = f16(f32(x[base + i]) * rstd * f32(weight[i]));
    }
}

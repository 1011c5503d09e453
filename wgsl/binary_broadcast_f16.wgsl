// op: add | mul, kernels add_broadcast_f16 / mul_broadcast_f16 — contract: harness/ops/binary.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// Elementwise a (op) b with numpy broadcasting. The host right-aligns both shapes to 4 dims
// (outer dims of size 1) and gives each input a stride of 0 where it broadcasts.
enable f16;

struct Params {
    numel: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    out_sizes: vec4<u32>,
    a_strides: vec4<u32>,
    b_strides: vec4<u32>,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(2) var<storage, read> b: array<f16>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;
override op_kind: u32 = 0u;  // 0: add, 1: mul

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * wg_size;
    if (i >= params.numel) {
        return;
    }
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 3; d >= 0; d--) {
        let size = params.out_sizes[d];
        let coord = rest % size;
        rest = rest / size;
        ia += coord * params.a_strides[d];
        ib += coord * params.b_strides[d];
    }
    if (op_kind == 0u) {
        out[i] = f16(f32(a[ia]) + f32(b[ib]));
    } else {
        out[i] = f16(f32(a[ia]) * f32(b[ib]));
    }
}

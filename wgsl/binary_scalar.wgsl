// op: add | mul, kernels add_scalar / mul_scalar — contract: harness/ops/binary.py
// Elementwise a (op) scalar, the scalar a graph literal rounded to f32: one invocation per
// element.
struct Params {
    numel: u32,
    scalar: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

override wg_size: u32 = 64u;
override op_kind: u32 = 0u;  // 0: add, 1: mul

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Flat index across a grid that may have been folded into 2-D.
    let i = gid.x + gid.y * nwg.x * wg_size;
    if (i >= params.numel) {
        return;
    }
    if (op_kind == 0u) {
        out[i] = a[i] + params.scalar;
    } else {
        out[i] = a[i] * params.scalar;
    }
}

// op: add | mul, kernels add_scalar_f16 / mul_scalar_f16 — contract: harness/ops/binary.py
// Half precision: loads f16 a, computes a (op) scalar in f32 with the scalar a graph literal
// rounded to f32 (PyTorch computes a half tensor with a Python float in float), stores f16
// (one rounding of the f32 result). One invocation per element.
enable f16;

struct Params {
    numel: u32,
    scalar: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> a: array<f16>;
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
        out[i] = f16(f32(a[i]) + params.scalar);
    } else {
        out[i] = f16(f32(a[i]) * params.scalar);
    }
}

// op: add | mul, kernels add_flat_f16 / mul_flat_f16 — contract: harness/ops/binary.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// Elementwise a (op) b for inputs of identical live shape: one invocation per element.
enable f16;

struct Params {
    numel: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(2) var<storage, read> b: array<f16>;
@group(0) @binding(3) var<uniform> params: Params;

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
        out[i] = f16(f32(a[i]) + f32(b[i]));
    } else {
        out[i] = f16(f32(a[i]) * f32(b[i]));
    }
}

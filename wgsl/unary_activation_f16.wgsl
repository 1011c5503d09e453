// op: sigmoid | silu, kernels sigmoid_f16 / silu_f16 — contract: harness/ops/activation.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// One invocation per element: sigmoid(x) = 1 / (1 + exp(-x)), silu(x) = x / (1 + exp(-x)).
enable f16;

struct Params {
    numel: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> x: array<f16>;
@group(0) @binding(2) var<uniform> params: Params;

override wg_size: u32 = 64u;
override op_kind: u32 = 0u;  // 0: sigmoid, 1: silu

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Flat index across a grid that may have been folded into 2-D.
    let i = gid.x + gid.y * nwg.x * wg_size;
    if (i >= params.numel) {
        return;
    }
    let v = f32(x[i]);
    let numerator = select(1.0, v, op_kind == 1u);
    out[i] = f16(numerator / (1.0 + exp(-v)));
}

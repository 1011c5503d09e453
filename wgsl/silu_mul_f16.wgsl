// op: silu_mul, kernel silu_mul_f16 — contract: harness/ops/activation.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// One invocation per element: out = (gate / (1 + exp(-gate))) * up, for equal live shapes.
enable f16;

struct Params {
    numel: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> gate: array<f16>;
@group(0) @binding(2) var<storage, read> up: array<f16>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * wg_size;
    if (i >= params.numel) {
        return;
    }
    let g = f32(gate[i]);
    out[i] = f16((g / (1.0 + exp(-g))) * f32(up[i]));
}

// op: view_copy, kernel view_copy_f16 — contract: harness/ops/view.py
// Half precision: one invocation per element, a copy of 16-bit elements (exact: no
// arithmetic, no rounding); the view itself is only a change of live dims, which the host
// resolved from the size list.
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

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * wg_size;
    if (i >= params.numel) {
        return;
    }
    out[i] = x[i];
}

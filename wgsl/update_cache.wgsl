// op: update_cache, kernel update_cache — contract: harness/ops/update_cache.py
// One invocation per element of value ([1, S, H, D]): copies it into cache row
// input_pos + s of the cache ([1, C, H, D]).
struct Params {
    seq: u32,        // live S
    input_pos: u32,  // checked on the host: input_pos + S <= cache rows
    heads: u32,      // H
    head_dim: u32,   // D
}

@group(0) @binding(0) var<storage, read_write> cache: array<f32>;
@group(0) @binding(1) var<storage, read> value: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Flat index across a grid that may have been folded into 2-D.
    let i = gid.x + gid.y * nwg.x * wg_size;
    let width = params.heads * params.head_dim;
    if (i >= params.seq * width) {
        return;
    }
    cache[(params.input_pos + i / width) * width + i % width] = value[i];
}

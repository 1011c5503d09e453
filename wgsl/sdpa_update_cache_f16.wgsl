// op: sdpa_with_kv_cache, kernel sdpa_update_cache_f16 — contract: harness/ops/sdpa.py
// Half precision: copies f16 k and v into the f16 caches (exact).
// One invocation per element of k ([1, S, Hkv, D]): copies k and v into cache row
// input_pos + s of k_cache and v_cache ([1, C, Hkv, D]).
enable f16;

struct Params {
    seq: u32,         // live S
    input_pos: u32,   // checked on the host: input_pos + S <= cache rows
    context: u32,     // input_pos + S
    q_heads: u32,     // Hq
    kv_heads: u32,    // Hkv
    head_dim: u32,    // D
    num_splits: u32,  // ceil(context / 64): the decode route's splits
    _pad0: u32,
    scale: f32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<storage, read_write> k_cache: array<f16>;
@group(0) @binding(1) var<storage, read_write> v_cache: array<f16>;
@group(0) @binding(2) var<storage, read> k: array<f16>;
@group(0) @binding(3) var<storage, read> v: array<f16>;
@group(0) @binding(4) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * wg_size;
    let width = params.kv_heads * params.head_dim;
    if (i >= params.seq * width) {
        return;
    }
    let s = i / width;
    let row = params.input_pos + s;
    let dst = row * width + i % width;
    k_cache[dst] = f16(f32(k[i]));
    v_cache[dst] = f16(f32(v[i]));
}

// op: sdpa_with_kv_cache, kernel sdpa_av_f16 — contract: harness/ops/sdpa.py
// Half precision: f32 probabilities, f16 v cache, f32 weighted sums, each output rounded
// once to f16.
// Materialized route, step 3. One invocation per output element (s, h, d) of [1, S, Hq, D]:
// out = sum over c <= input_pos + s of probs[h, s, c] * v_cache[c, h / group, d].
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

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f16>;
@group(0) @binding(3) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * wg_size;
    let dim = params.head_dim;
    if (t >= params.seq * params.q_heads * dim) {
        return;
    }
    let d = t % dim;
    let h = (t / dim) % params.q_heads;
    let s = t / dim / params.q_heads;
    let kv_head = h / (params.q_heads / params.kv_heads);
    let n = params.input_pos + s + 1u;
    let base = (h * params.seq + s) * params.context;
    var acc = 0.0;
    for (var c = 0u; c < n; c++) {
        acc += scores[base + c] * f32(v_cache[(c * params.kv_heads + kv_head) * dim + d]);
    }
    out[t] = f16(acc);
}

// Step 3: out[s, h, d] = sum over every column c < ctx of probs[h, s, c] v_cache[c, h / g, d]
// (the masked columns' probabilities are 0). One invocation an output element.
struct Cfg {
    heads: u32,
    kv: u32,
    dim: u32,
    seq: u32,
    ctx: u32,
    row_stride: u32,
    rows_a_head: u32,
}

@group(0) @binding(0) var<uniform> cfg: Cfg;
@group(0) @binding(1) var<storage, read> p: array<f32>;
@group(0) @binding(2) var<storage, read> vc: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 64u;
    if (t >= cfg.seq * cfg.heads * cfg.dim) {
        return;
    }
    let d = t % cfg.dim;
    let h = (t / cfg.dim) % cfg.heads;
    let s = t / (cfg.dim * cfg.heads);
    let kv = h / (cfg.heads / cfg.kv);
    let base = (h * cfg.rows_a_head + s) * cfg.row_stride;
    var acc = 0.0;
    for (var c = 0u; c < cfg.ctx; c++) {
        acc += p[base + c] * vc[(c * cfg.kv + kv) * cfg.dim + d];
    }
    o[t] = acc;
}

// Three-kernel causal attention from elsewhere, step 1: scores at its OWN layout, rows of
// cache_rows columns (not the live context), h-major over max_seq rows a head; the masked
// columns c > pos + s of each live row are WRITTEN, as -1e30, for a softmax over whole rows.
struct Cfg {
    heads: u32,
    kv: u32,
    dim: u32,
    seq: u32,
    pos: u32,
    ctx: u32,
    row_stride: u32,  // columns a scores row: the cache's rows
    rows_a_head: u32, // scores rows a head: the largest S
    scale: f32,
}

@group(0) @binding(0) var<uniform> cfg: Cfg;
@group(0) @binding(1) var<storage, read> qv: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read_write> sc: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 64u;
    if (t >= cfg.heads * cfg.seq * cfg.ctx) {
        return;
    }
    let c = t % cfg.ctx;
    let s = (t / cfg.ctx) % cfg.seq;
    let h = t / (cfg.ctx * cfg.seq);
    let at = (h * cfg.rows_a_head + s) * cfg.row_stride + c;
    if (c > cfg.pos + s) {
        sc[at] = -1.0e30;
        return;
    }
    let kv = h / (cfg.heads / cfg.kv);
    var dot = 0.0;
    for (var d = 0u; d < cfg.dim; d++) {
        dot += qv[(s * cfg.heads + h) * cfg.dim + d] * kc[(c * cfg.kv + kv) * cfg.dim + d];
    }
    sc[at] = dot * cfg.scale;
}

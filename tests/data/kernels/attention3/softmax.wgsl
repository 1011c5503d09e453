// Step 2, OUT OF PLACE: probs = softmax(scores) over every column of a live row (the
// masked ones hold -1e30 and come out 0), into a buffer of its own. A workgroup a row.
struct Cfg {
    heads: u32,
    seq: u32,
    ctx: u32,
    row_stride: u32,
    rows_a_head: u32,
}

@group(0) @binding(0) var<uniform> cfg: Cfg;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

var<workgroup> tree: array<f32, 64>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= cfg.heads * cfg.seq) {
        return;
    }
    let base = ((row / cfg.seq) * cfg.rows_a_head + row % cfg.seq) * cfg.row_stride;
    var m = -3.0e38;
    for (var c = lane; c < cfg.ctx; c += 64u) {
        m = max(m, src[base + c]);
    }
    tree[lane] = m;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half /= 2u) {
        if (lane < half) {
            tree[lane] = max(tree[lane], tree[lane + half]);
        }
        workgroupBarrier();
    }
    let top = tree[0];
    workgroupBarrier();
    var l = 0.0;
    for (var c = lane; c < cfg.ctx; c += 64u) {
        l += exp(src[base + c] - top);
    }
    tree[lane] = l;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half /= 2u) {
        if (lane < half) {
            tree[lane] += tree[lane + half];
        }
        workgroupBarrier();
    }
    let total = tree[0];
    for (var c = lane; c < cfg.ctx; c += 64u) {
        dst[base + c] = exp(src[base + c] - top) / total;
    }
}

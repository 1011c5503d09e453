// Split-K decode attention, step 1, in another code base's style: partials at a FIXED 128
// chunks per head (their stride never follows the live context), 32 cache rows a chunk.
// One workgroup of 32 lanes per (head, chunk): lane t scores row chunk * 32 + t, then the
// chunk's max m, sum l = sum exp(s - m) and o[d] = sum_t exp(s_t - m) v[row_t, d].
//   acc_o[(head * 128 + chunk) * dim + d] = o[d],  acc_ml[(head * 128 + chunk) * 2] = (m, l)
struct SplitArgs {
    n_heads: u32,   // query heads
    n_kv: u32,      // kv heads
    dim: u32,       // elements per head
    kv_len: u32,    // attended cache rows
    n_chunks: u32,  // chunks of 32 rows: ceil(kv_len / 32), at most 128
    qk_scale: f32,
}

const CHUNK: u32 = 32u;
const MAX_CHUNKS: u32 = 128u;

@group(0) @binding(0) var<uniform> args: SplitArgs;
@group(0) @binding(1) var<storage, read> query: array<f32>;
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read> values: array<f32>;
@group(0) @binding(4) var<storage, read_write> acc_o: array<f32>;
@group(0) @binding(5) var<storage, read_write> acc_ml: array<f32>;

var<workgroup> tree: array<f32, 32>;
var<workgroup> weight: array<f32, 32>;

@compute @workgroup_size(32)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let job = wid.x + wid.y * nwg.x;
    if (job >= args.n_heads * args.n_chunks) {
        return;
    }
    let head = job / args.n_chunks;
    let chunk = job % args.n_chunks;
    let kv = head / (args.n_heads / args.n_kv);
    let row = chunk * CHUNK + t;
    let live = row < args.kv_len;
    var s = -1.0e30;
    if (live) {
        var dot = 0.0;
        for (var d = 0u; d < args.dim; d++) {
            dot += query[head * args.dim + d] * keys[(row * args.n_kv + kv) * args.dim + d];
        }
        s = dot * args.qk_scale;
    }
    tree[t] = s;
    workgroupBarrier();
    for (var half = 16u; half > 0u; half /= 2u) {
        if (t < half) {
            tree[t] = max(tree[t], tree[t + half]);
        }
        workgroupBarrier();
    }
    let m = tree[0];
    workgroupBarrier();
    let p = select(0.0, exp(s - m), live);
    weight[t] = p;
    tree[t] = p;
    workgroupBarrier();
    for (var half = 16u; half > 0u; half /= 2u) {
        if (t < half) {
            tree[t] += tree[t + half];
        }
        workgroupBarrier();
    }
    let slot = head * MAX_CHUNKS + chunk;
    let rows = min(CHUNK, args.kv_len - chunk * CHUNK);
    for (var d = t; d < args.dim; d += CHUNK) {
        var o = 0.0;
        for (var r = 0u; r < rows; r++) {
            o += weight[r] * values[((chunk * CHUNK + r) * args.n_kv + kv) * args.dim + d];
        }
        acc_o[slot * args.dim + d] = o;
    }
    if (t == 0u) {
        acc_ml[slot * 2u] = m;
        acc_ml[slot * 2u + 1u] = tree[0];
    }
}

// Split-K decode attention, step 2: folds a head's chunks, read at the fixed stride of 128
// chunks per head that flash_split.wgsl writes. One workgroup of 32 lanes per head.
struct ReduceArgs {
    n_heads: u32,
    dim: u32,
    n_chunks: u32,
}

const MAX_CHUNKS: u32 = 128u;

@group(0) @binding(0) var<uniform> args: ReduceArgs;
@group(0) @binding(1) var<storage, read> acc_o: array<f32>;
@group(0) @binding(2) var<storage, read> acc_ml: array<f32>;
@group(0) @binding(3) var<storage, read_write> result: array<f32>;

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let head = wid.x;
    if (head >= args.n_heads) {
        return;
    }
    let first = head * MAX_CHUNKS;
    var m = -1.0e30;
    for (var c = 0u; c < args.n_chunks; c++) {
        m = max(m, acc_ml[(first + c) * 2u]);
    }
    var l = 0.0;
    for (var c = 0u; c < args.n_chunks; c++) {
        l += exp(acc_ml[(first + c) * 2u] - m) * acc_ml[(first + c) * 2u + 1u];
    }
    for (var d = t; d < args.dim; d += 32u) {
        var o = 0.0;
        for (var c = 0u; c < args.n_chunks; c++) {
            o += exp(acc_ml[(first + c) * 2u] - m) * acc_o[(first + c) * args.dim + d];
        }
        result[head * args.dim + d] = o / l;
    }
}

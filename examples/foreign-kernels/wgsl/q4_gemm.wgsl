// 4-bit grouped-scale linear (GEMM route) in a foreign style: one invocation per output
// element, the weight addressed byte by byte with K given in BYTES per packed row, the
// activations and the result bound after the weight.
//
// Weight: N rows of row_bytes bytes, element k of row n in byte n * row_bytes + k / 2, the low
// nibble for even k; value = (nibble - 8) * scale[k / group_len][n]. The padded tail of a
// row (k >= K) is never read.
struct LinearArgs {
    rows: u32,          // M: live rows of the activations
    cols: u32,          // N: output features
    depth: u32,         // K: input features
    row_bytes: u32,     // bytes per packed weight row
    group_len: u32,     // inputs per scale group
    scale_stride: u32,  // floats per scale row (N rounded up to 4)
    add_bias: u32,
    unused: u32,
}

@group(0) @binding(0) var<uniform> args: LinearArgs;
@group(0) @binding(1) var<storage, read> packed_w: array<u32>;
@group(0) @binding(2) var<storage, read> w_scales: array<f32>;
@group(0) @binding(3) var<storage, read> activations: array<f32>;
@group(0) @binding(4) var<storage, read> bias_vec: array<f32>;
@group(0) @binding(5) var<storage, read_write> result: array<f32>;

fn weight_nibble(col: u32, k: u32) -> f32 {
    let byte_at = col * args.row_bytes + k / 2u;
    let word = packed_w[byte_at / 4u];
    let shift = 8u * (byte_at % 4u) + 4u * (k % 2u);
    return f32(i32((word >> shift) & 0xFu) - 8);
}

@compute @workgroup_size(8, 8)
fn main(
    @builtin(workgroup_id) group_id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let item = (group_id.x + group_id.y * groups.x) * 64u + lane;
    if (item >= args.rows * args.cols) {
        return;
    }
    let row = item / args.cols;
    let col = item % args.cols;
    var acc = 0.0;
    for (var k = 0u; k < args.depth; k++) {
        let scale = w_scales[(k / args.group_len) * args.scale_stride + col];
        acc = fma(activations[row * args.depth + k], weight_nibble(col, k) * scale, acc);
    }
    if (args.add_bias != 0u) {
        acc += bias_vec[col];
    }
    result[item] = acc;
}

// op: linear_q4gsw, kernel q4gsw_gemm_f16acc — contract: harness/ops/linear_q4gsw.py
// Half precision with f16 ACCUMULATION in blocks (the graph's accumulate_bits = 16): as
// q4gsw_gemm_f16 (f16 x, bias and out, f32 scales), but each group scale is rounded to f16,
// each dequantized weight (nibble - 8) * scale is an f16 product, and the products are
// accumulated by f16 fused multiply-adds within blocks of BLOCK_WORDS weight words (32 k);
// each block's f16 sum is then added to an f32 accumulator, the bias in f32, and each output
// rounded once to f16. (Upstream's q4gsw_linear_gemm_steel_half_pwdq_f16acc accumulates in
// f16 over all of K; blocking keeps the error bound defined for any K: gamma_n of f16 is
// undefined for n >= 2048.) The bound, per block and across blocks, is derived in
// LinearQ4gswModel.half_budget.
// Register-tiled GEMM: each invocation computes a 4×4 tile of out (4 rows × 4 columns),
// walking k ascending one packed weight word (8 nibbles) per column at a time. Tiles are
// numbered column-tile fastest; a flat index past the live tiles (a folded grid, or the last
// workgroup) returns. Loads clamp rows to M-1 and columns to N-1; stores are guarded.
enable f16;

struct Params {
    m: u32,           // live rows: numel(x) / K
    n: u32,           // output columns
    k: u32,           // x's last dim
    k_words: u32,     // u32 words per weight row: K_pad / 8
    group_size: u32,
    n_padded: u32,    // columns of the scales: N rounded up to 4
    has_bias: u32,
    gemv_workgroups: u32,  // used by q4gsw_gemv only
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> x: array<f16>;
@group(0) @binding(2) var<storage, read> weight: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f16>;
@group(0) @binding(5) var<uniform> params: Params;

override wg_size: u32 = 64u;
const BLOCK_WORDS: u32 = 4u;  // weight words (8 k each) per f16 accumulation block

fn group_scales(group: u32, cols: vec4<u32>) -> vec4<f32> {
    let row = group * params.n_padded;
    return vec4<f32>(scales[row + cols.x], scales[row + cols.y], scales[row + cols.z], scales[row + cols.w]);
}

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let n_tiles = (params.n + 3u) / 4u;
    let tile = (wid.x + wid.y * nwg.x) * wg_size + lane;
    if (tile >= n_tiles * ((params.m + 3u) / 4u)) {
        return;
    }
    let n0 = (tile % n_tiles) * 4u;
    let m0 = (tile / n_tiles) * 4u;
    let lanes = vec4<u32>(0u, 1u, 2u, 3u);
    let cols = min(vec4<u32>(n0) + lanes, vec4<u32>(params.n - 1u));
    let x_rows = min(vec4<u32>(m0) + lanes, vec4<u32>(params.m - 1u)) * params.k;
    let w_rows = cols * params.k_words;

    // acc_i[j]: output row m0+i, column n0+j.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    // The current block's f16 sums.
    var blk0 = vec4<f16>(0.0h);
    var blk1 = vec4<f16>(0.0h);
    var blk2 = vec4<f16>(0.0h);
    var blk3 = vec4<f16>(0.0h);
    var group = 0u;
    var next_group_k = params.group_size;
    var s = vec4<f16>(group_scales(0u, cols));
    for (var word = 0u; word < params.k_words; word++) {
        let w = vec4<u32>(
            weight[w_rows.x + word], weight[w_rows.y + word],
            weight[w_rows.z + word], weight[w_rows.w + word],
        );
        let k0 = word * 8u;
        // The padded tail of the last word holds zero nibbles; k >= K is skipped, not
        // multiplied, because x[k] would be the next row's (possibly non-finite) value.
        let k_end = min(k0 + 8u, params.k);
        for (var k = k0; k < k_end; k++) {
            if (k == next_group_k) {
                group += 1u;
                next_group_k += params.group_size;
                s = vec4<f16>(group_scales(group, cols));
            }
            let nib = (w >> vec4<u32>((k - k0) * 4u)) & vec4<u32>(0xFu);
            let dq = (vec4<f16>(nib) - 8.0h) * s;
            blk0 = fma(vec4<f16>(x[x_rows.x + k]), dq, blk0);
            blk1 = fma(vec4<f16>(x[x_rows.y + k]), dq, blk1);
            blk2 = fma(vec4<f16>(x[x_rows.z + k]), dq, blk2);
            blk3 = fma(vec4<f16>(x[x_rows.w + k]), dq, blk3);
        }
        if (word % BLOCK_WORDS == BLOCK_WORDS - 1u || word + 1u == params.k_words) {
            acc0 += vec4<f32>(blk0);
            acc1 += vec4<f32>(blk1);
            acc2 += vec4<f32>(blk2);
            acc3 += vec4<f32>(blk3);
            blk0 = vec4<f16>(0.0h);
            blk1 = vec4<f16>(0.0h);
            blk2 = vec4<f16>(0.0h);
            blk3 = vec4<f16>(0.0h);
        }
    }

    var b = vec4<f32>(0.0);
    if (params.has_bias != 0u) {
        b = vec4<f32>(vec4<f16>(bias[cols.x], bias[cols.y], bias[cols.z], bias[cols.w]));
    }
    var accs = array<vec4<f32>, 4>(acc0 + b, acc1 + b, acc2 + b, acc3 + b);
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + i;
        if (m >= params.m) {
            break;
        }
        for (var j = 0u; j < 4u; j++) {
            if (n0 + j < params.n) {
                out[m * params.n + n0 + j] = f16(accs[i][j]);
            }
        }
    }
}

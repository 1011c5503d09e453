// op: linear_q4gsw, kernel q4gsw_gemm_f16 — contract: harness/ops/linear_q4gsw.py
// Half precision: loads f16 activations and bias (scales stay f32), dequantizes, multiplies
// and accumulates in f32 exactly as q4gsw_gemm does, and rounds each output once to f16.
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
    var group = 0u;
    var next_group_k = params.group_size;
    var s = group_scales(0u, cols);
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
                s = group_scales(group, cols);
            }
            let nib = (w >> vec4<u32>((k - k0) * 4u)) & vec4<u32>(0xFu);
            let dq = (vec4<f32>(nib) - 8.0) * s;
            acc0 = fma(vec4<f32>(f32(x[x_rows.x + k])), dq, acc0);
            acc1 = fma(vec4<f32>(f32(x[x_rows.y + k])), dq, acc1);
            acc2 = fma(vec4<f32>(f32(x[x_rows.z + k])), dq, acc2);
            acc3 = fma(vec4<f32>(f32(x[x_rows.w + k])), dq, acc3);
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

// 4-bit grouped-scale linear (GEMV route, one activation row) in a foreign style: one
// workgroup per output feature, its lanes striding over the row's packed words; it declares
// only the workgroup-size override (the group length comes through the params block, in
// words). Runs only where K % 8 == 0 and the group length is a multiple of 8, so a word never
// straddles two scale groups.
struct MatVecArgs {
    k_bytes: u32,       // bytes per packed weight row (= K / 2)
    out_features: u32,  // N
    group_words: u32,   // packed words per scale group (group length / 8)
    scale_stride: u32,  // floats per scale row (N rounded up to 4)
    with_bias: u32,
    spare0: u32,
    spare1: u32,
    spare2: u32,
}

@group(0) @binding(0) var<storage, read> vec_in: array<f32>;
@group(0) @binding(1) var<storage, read> w_words: array<u32>;
@group(0) @binding(2) var<storage, read> w_scales: array<f32>;
@group(0) @binding(3) var<storage, read> bias_vec: array<f32>;
@group(0) @binding(4) var<storage, read_write> vec_out: array<f32>;
@group(0) @binding(5) var<uniform> mv: MatVecArgs;

override wg_size: u32 = 32u;  // a power of two: the tree reduction halves it
var<workgroup> lane_acc: array<f32, wg_size>;

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) group_id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let feature = group_id.x + group_id.y * groups.x;
    if (feature >= mv.out_features) {
        return;  // uniform per workgroup
    }
    let words = mv.k_bytes / 4u;
    let row_start = feature * words;
    var acc = 0.0;
    for (var w = lane; w < words; w += wg_size) {
        let packed = w_words[row_start + w];
        var dot = 0.0;
        for (var j = 0u; j < 8u; j++) {
            let q = f32(i32((packed >> (4u * j)) & 0xFu) - 8);
            dot = fma(q, vec_in[w * 8u + j], dot);
        }
        acc = fma(dot, w_scales[(w / mv.group_words) * mv.scale_stride + feature], acc);
    }
    lane_acc[lane] = acc;
    workgroupBarrier();
    for (var half = wg_size / 2u; half > 0u; half /= 2u) {
        if (lane < half) {
            lane_acc[lane] += lane_acc[lane + half];
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        var total = lane_acc[0];
        if (mv.with_bias != 0u) {
            total += bias_vec[feature];
        }
        vec_out[feature] = total;
    }
}

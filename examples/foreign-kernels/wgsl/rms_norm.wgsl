// RMS norm in a foreign style: the settings block first, the output last, a width in bytes,
// a fixed 128-lane workgroup, and an entry point of its own name.
// One workgroup per row; the row index is recovered from a (possibly folded) 2-D grid.
struct NormSettings {
    epsilon: f32,
    row_count: u32,
    row_bytes: u32,  // bytes per row: 4 * the row's width
    reserved: u32,
}

@group(0) @binding(0) var<uniform> settings: NormSettings;
@group(0) @binding(1) var<storage, read> scale_vec: array<f32>;
@group(0) @binding(2) var<storage, read> src_rows: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst_rows: array<f32>;

const LANES: u32 = 128u;
var<workgroup> lane_sums: array<f32, LANES>;

@compute @workgroup_size(LANES)
fn normalize_rows(
    @builtin(workgroup_id) group_id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = group_id.x + group_id.y * groups.x;
    if (row >= settings.row_count) {
        return;  // uniform per workgroup: the waste of a folded grid
    }
    let width = settings.row_bytes / 4u;
    let first = row * width;
    var sum_sq = 0.0;
    for (var col = lane; col < width; col += LANES) {
        let v = src_rows[first + col];
        sum_sq += v * v;
    }
    lane_sums[lane] = sum_sq;
    workgroupBarrier();
    for (var half = LANES / 2u; half > 0u; half /= 2u) {
        if (lane < half) {
            lane_sums[lane] += lane_sums[lane + half];
        }
        workgroupBarrier();
    }
    let inv_rms = inverseSqrt(lane_sums[0] / f32(width) + settings.epsilon);
    for (var col = lane; col < width; col += LANES) {
        dst_rows[first + col] = src_rows[first + col] * inv_rms * scale_vec[col];
    }
}

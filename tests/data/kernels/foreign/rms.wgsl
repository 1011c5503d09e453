struct Config {
    epsilon: f32,
    row_bytes: u32,
    n_rows: u32,
    reserved: u32,
}

@group(0) @binding(0) var<uniform> cfg: Config;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> input_data: array<f32>;
@group(0) @binding(3) var<storage, read_write> output_data: array<f32>;

override block_size: u32 = 128u;
var<workgroup> sums: array<f32, block_size>;

@compute @workgroup_size(block_size)
fn rms_main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= cfg.n_rows) {
        return;
    }
    let width = cfg.row_bytes / 4u;
    let base = row * width;
    var acc = 0.0;
    for (var i = lane; i < width; i += block_size) {
        acc += input_data[base + i] * input_data[base + i];
    }
    sums[lane] = acc;
    workgroupBarrier();
    for (var half = block_size / 2u; half > 0u; half /= 2u) {
        if (lane < half) {
            sums[lane] += sums[lane + half];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(sums[0] / f32(width) + cfg.epsilon);
    for (var i = lane; i < width; i += block_size) {
        output_data[base + i] = input_data[base + i] * scale * gamma[i];
    }
}

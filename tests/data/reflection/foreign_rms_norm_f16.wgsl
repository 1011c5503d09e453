// A foreign-style kernel for reflection tests (not a project kernel): RMS norm over f16 rows,
// with the uniform first, other binding names and order, a padded params struct, an override
// with an @id and one without a default.
enable f16;

struct NormConfig {
  rows: u32,
  cols: u32,
  _pad0: vec2<u32>,
  epsilon: f32,
  gain: f16,
  // 6 bytes of padding: the next vec4 aligns to 16
  scale4: vec4<f32>,
}

@group(0) @binding(0) var<uniform> cfg: NormConfig;
@group(0) @binding(1) var<storage, read> src_rows: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> gamma: array<f16>;
@group(1) @binding(0) var<storage, read_write> dst_rows: array<vec4<f16>>;

@id(1000) override threads: u32 = 128u;
override rows_per_group: u32;

var<workgroup> partial_sums: array<f32, threads>;

@compute @workgroup_size(threads, rows_per_group)
fn norm_rows(@builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(workgroup_id) wid: vec3<u32>) {
  let row = wid.x * rows_per_group + lid.y;
  if (row >= cfg.rows) {
    return;
  }
  let quads = cfg.cols / 4u;
  var acc = 0.0;
  for (var q = lid.x; q < quads; q += threads) {
    let v = vec4<f32>(src_rows[row * quads + q]);
    acc += dot(v, v);
  }
  partial_sums[lid.x] = acc;
  workgroupBarrier();
  let rstd = inverseSqrt(partial_sums[0] / f32(cfg.cols) + cfg.epsilon);
  for (var q = lid.x; q < quads; q += threads) {
    let g = vec4<f32>(vec4<f16>(gamma[4u * q], gamma[4u * q + 1u], gamma[4u * q + 2u],
                                gamma[4u * q + 3u]));
    let v = vec4<f32>(src_rows[row * quads + q]) * rstd * g * f32(cfg.gain) * cfg.scale4;
    dst_rows[row * quads + q] = vec4<f16>(v);
  }
}

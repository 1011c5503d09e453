// Reflection test kernel: one struct with every layout rule that moves an offset (vec3 and
// matrix alignment, f16, fixed-size arrays, a nested struct, @align, @size). The kernel copies
// every scalar of it, in declaration order, to `flat`; tests pack the struct at the reflected
// offsets and check what the GPU read back.
enable f16;

struct Inner {
  a: vec3<f32>,
  b: f32,
}

struct Probe {
  s: f32,
  v3: vec3<f32>,
  u: u32,
  h: f16,
  v2h: vec2<f16>,
  m: mat3x3<f32>,
  arr: array<vec4<f32>, 2>,
  inner: Inner,
  @align(16) tail: u32,
  @size(8) sized: u32,
  last: vec2<f32>,
}

@group(0) @binding(0) var<storage, read> probe: Probe;
@group(0) @binding(1) var<storage, read_write> flat: array<f32>;

@compute @workgroup_size(1)
fn main() {
  var i = 0u;
  flat[i] = probe.s; i += 1u;
  for (var c = 0u; c < 3u; c += 1u) { flat[i] = probe.v3[c]; i += 1u; }
  flat[i] = f32(probe.u); i += 1u;
  flat[i] = f32(probe.h); i += 1u;
  for (var c = 0u; c < 2u; c += 1u) { flat[i] = f32(probe.v2h[c]); i += 1u; }
  for (var col = 0u; col < 3u; col += 1u) {
    for (var r = 0u; r < 3u; r += 1u) { flat[i] = probe.m[col][r]; i += 1u; }
  }
  for (var e = 0u; e < 2u; e += 1u) {
    for (var c = 0u; c < 4u; c += 1u) { flat[i] = probe.arr[e][c]; i += 1u; }
  }
  for (var c = 0u; c < 3u; c += 1u) { flat[i] = probe.inner.a[c]; i += 1u; }
  flat[i] = probe.inner.b; i += 1u;
  flat[i] = f32(probe.tail); i += 1u;
  flat[i] = f32(probe.sized); i += 1u;
  for (var c = 0u; c < 2u; c += 1u) { flat[i] = probe.last[c]; i += 1u; }
}

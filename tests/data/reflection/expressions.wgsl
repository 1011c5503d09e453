// Reflection test kernel for what wgsl_reflect 1.6.0 gets wrong on its own: expressions as
// attribute arguments, a suffixed literal workgroup size, `block` as a name, derived
// override defaults.
const TILE: u32 = 8u;
const PARAMS_SLOT = 3;
override width: u32 = 16u;
override height = width / 4u;
override gain: f32 = 0.5;
override enabled = true;

struct Wide {
  a: u32,
  @align(4 * 8) b: u32,
}

@group(0) @binding(PARAMS_SLOT - 1) var<uniform> wide: Wide;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(width, height * 2u, TILE / 4u,)
fn tiled(@builtin(global_invocation_id) gid: vec3<u32>) {
  let block = gid.x + wide.b;
  if (enabled) {
    out[block] = gain;
  }
}

@compute @workgroup_size(64u)
fn flat_copy(@builtin(global_invocation_id) gid: vec3<u32>) {
  out[gid.x] = f32(wide.a);
}

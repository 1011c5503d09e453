#version 450
// A foreign-style kernel for SPIR-V reflection tests (not a project kernel): a std140 UBO with
// every rule that moves an offset, std430 buffers, push constants, specialization constants
// of each type, a local size from two spec ids (one shared with a named constant), float16.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x_id = 7, local_size_y = 4, local_size_z_id = 9) in;
layout(constant_id = 7) const uint BLOCK = 32;
layout(constant_id = 9) const int DEPTH = 1;
layout(constant_id = 3) const float SCALE = 0.25;
layout(constant_id = 4) const bool FAST = true;

struct Inner {
  vec3 a;
  float b;
};
layout(std140, set = 1, binding = 2) uniform Meta {
  uvec4 sizes;
  vec3 v3;
  float s;
  float arr[3];
  Inner inner;
  mat3 m;
  uint tail;
} meta_u;
layout(std430, set = 0, binding = 0) buffer restrict writeonly Out { float16_t data[]; } t_out;
layout(std430, set = 0, binding = 1) buffer readonly In { uint count; vec3 pts[]; } t_in;
layout(std430, set = 0, binding = 3) buffer Both { float arr[3]; vec2 pairs[]; } t_both;
layout(push_constant) uniform PC { uint numel; float alpha; ivec2 shape; } pc;

void main() {
  uint i = gl_GlobalInvocationID.x;
  float v = t_in.pts[i].x * SCALE + meta_u.s + meta_u.arr[1] + meta_u.inner.b
      + meta_u.m[1][1] + float(meta_u.tail) + pc.alpha + t_both.arr[0] + t_both.pairs[i].y;
  if (FAST) {
    v += float(BLOCK + uint(DEPTH));
  }
  t_both.pairs[i] = vec2(v);
  t_out.data[i] = float16_t(v + float(t_in.count) + float(pc.numel + uint(pc.shape.x))
      + float(meta_u.sizes.x) + meta_u.v3.y);
}

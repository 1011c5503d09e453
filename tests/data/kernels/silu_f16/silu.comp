#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// silu in half precision, in another code base's style: it loads, computes AND stores in
// float16_t (no widening to float), so exp(-v) overflows f16's 65504 below v ~ -11.09 and
// the result is -0 there (v / inf). Own names: data_a/data_d, the count as a push constant.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer A { float16_t data_a[]; };
layout(set = 0, binding = 1) writeonly buffer D { float16_t data_d[]; };
layout(push_constant) uniform Push { uint ne; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.ne) {
    return;
  }
  const float16_t v = data_a[i];
  data_d[i] = v / (float16_t(1.0) + exp(-v));
}

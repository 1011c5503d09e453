#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: apply_rotary_emb_interleaved, kernel rotary_emb_interleaved_f16 — contract: harness/ops/rotary_interleaved.py
// Half precision: loads f16 x and freqs, rotates in f32 exactly as rotary_emb_interleaved
// does, and rounds each output once to f16.
// One invocation per vec4 texel of x [B, N, C] (C a multiple of 4): two (real, imag) pairs
// (r0, i0, r1, i1) of token n = (t / (C/4)) % N, turned by that token's freqs texel
// (c0, s0, c1, s1) = freqs_cis[n, ...]:  out = (r c - i s, r s + i c) per pair.
// Live sizes come from x's metadata (WHCN: x = C, y = N, z = B).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { f16vec4 t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { f16vec4 t_x[]; };
layout(set = 0, binding = 2) readonly buffer FreqsBuffer { f16vec4 t_freqs_cis[]; };
layout(set = 0, binding = 3) uniform XMeta { TensorMeta x_meta; };

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (t >= x_meta.numel / 4) {
    return;
  }
  const uint row_texels = x_meta.sizes.x / 4;
  const uint n = (t / row_texels) % x_meta.sizes.y;
  const vec4 f = vec4(t_freqs_cis[n * row_texels + t % row_texels]);
  const vec4 v = vec4(t_x[t]);
  t_out[t] = f16vec4(v.x * f.x - v.y * f.y, v.x * f.y + v.y * f.x,
                  v.z * f.z - v.w * f.w, v.z * f.w + v.w * f.z);
}

#version 450
#extension GL_GOOGLE_include_directive : require
// op: apply_rotary_emb_interleaved, kernel rotary_emb_interleaved — contract: harness/ops/rotary_interleaved.py
// One invocation per (real, imag) pair of x [B, N, C] (C even; upstream's Vulkan shader takes
// vec4 texels and refuses C % 4 != 0, its WebGPU op accepts any even C): pair p = (r, i) of
// token n = (p / (C/2)) % N, turned by that token's freqs pair (c, s) = freqs_cis[n, ...]:
// out = (r c - i s, r s + i c).
// Live sizes come from x's metadata (WHCN: x = C, y = N, z = B).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { vec2 t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { vec2 t_x[]; };
layout(set = 0, binding = 2) readonly buffer FreqsBuffer { vec2 t_freqs_cis[]; };
layout(set = 0, binding = 3) uniform XMeta { TensorMeta x_meta; };

void main() {
  const uint p = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (p >= x_meta.numel / 2) {
    return;
  }
  const uint row_pairs = x_meta.sizes.x / 2;
  const uint n = (p / row_pairs) % x_meta.sizes.y;
  const vec2 f = t_freqs_cis[n * row_pairs + p % row_pairs];
  const vec2 v = t_x[p];
  t_out[p] = vec2(v.x * f.x - v.y * f.y, v.x * f.y + v.y * f.x);
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: rms_norm, kernel rms_norm_f16 — contract: harness/ops/rms_norm.py
// Half precision: loads f16 x and weight, computes in f32 (the sum of squares accumulates in
// f32 lanes and an f32 tree), stores f16. One workgroup per row, as rms_norm: lanes
// accumulate x*x over a strided slice, a shared-memory tree reduction sums them, then each
// lane writes x * rstd * weight for its slice, rounded once to f16.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reduction halves it

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { float16_t t_x[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { float16_t t_weight[]; };
layout(set = 0, binding = 3) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 4) uniform XMeta { TensorMeta x_meta; };

layout(push_constant) uniform PushConstants { float eps; } pc;

shared float partial[gl_WorkGroupSize.x];

void main() {
  const uint width = x_meta.sizes.x;
  const uint row = flat_workgroup_id();
  if (row >= x_meta.numel / width) {
    return;
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint base = row * width;
  float acc = 0.0;
  for (uint i = lane; i < width; i += gl_WorkGroupSize.x) {
    const float v = float(t_x[base + i]);
    acc += v * v;
  }
  partial[lane] = acc;
  memoryBarrierShared();
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2; stride > 0; stride >>= 1) {
    if (lane < stride) {
      partial[lane] += partial[lane + stride];
    }
    memoryBarrierShared();
    barrier();
  }
  const float rstd = inversesqrt(partial[0] / float(width) + pc.eps);
  for (uint i = lane; i < width; i += gl_WorkGroupSize.x) {
    t_out[base + i] = float16_t(float(t_x[base + i]) * rstd * float(t_weight[i]));
  }
}

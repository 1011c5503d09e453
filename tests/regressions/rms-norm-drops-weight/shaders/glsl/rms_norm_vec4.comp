#version 450
#extension GL_GOOGLE_include_directive : require
// op: rms_norm, kernel rms_norm_vec4 — contract: harness/ops/rms_norm.py
// The rms_norm kernel for rows whose width is a multiple of 4: lanes read vec4 texels.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reduction halves it

layout(set = 0, binding = 0) writeonly buffer OutBuffer { vec4 t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { vec4 t_x[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { vec4 t_weight[]; };
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
  const uint texels = width / 4;
  const uint base = row * texels;
  float acc = 0.0;
  for (uint i = lane; i < texels; i += gl_WorkGroupSize.x) {
    const vec4 v = t_x[base + i];
    acc += dot(v, v);
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
  for (uint i = lane; i < texels; i += gl_WorkGroupSize.x) {
    t_out[base + i] = t_x[base + i] * rstd * t_weight[i];
  }
}

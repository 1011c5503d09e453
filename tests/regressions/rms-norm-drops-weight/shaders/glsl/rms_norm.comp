#version 450
#extension GL_GOOGLE_include_directive : require
// op: rms_norm, kernel rms_norm — contract: harness/ops/rms_norm.py
// One workgroup per row: lanes accumulate x*x over a strided slice, a shared-memory tree
// reduction sums them, then each lane writes x * rstd * weight for its slice.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reduction halves it

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { float t_x[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { float t_weight[]; };
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
    const float v = t_x[base + i];
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
    t_out[base + i] = t_x[base + i] * rstd * t_weight[i];
  }
}

#version 450
#extension GL_GOOGLE_include_directive : require
// op: fused_sdpa, kernel fused_sdpa_softmax — contract: harness/ops/fused_sdpa.py
// Step 2. One workgroup per score row (bh, s), in place over its L scores (nothing is
// masked out: an additive mask is already in them): lanes take strided columns; a
// shared-memory tree finds the max, another sums exp(x - max); then each lane writes
// exp(x - max) / sum.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reductions halve it

layout(set = 0, binding = 0) buffer ScoresBuffer { float t_scores[]; };
layout(set = 0, binding = 1) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 2) uniform KMeta { TensorMeta k_meta; };

shared float red[gl_WorkGroupSize.x];

const float LOWEST = -3.4028235e38;

void main() {
  const uint row = flat_workgroup_id();
  if (row >= q_meta.numel / q_meta.sizes.x) {
    return;
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint n = k_meta.sizes.y;
  const uint base = row * n;
  float top = LOWEST;
  for (uint c = lane; c < n; c += gl_WorkGroupSize.x) {
    top = max(top, t_scores[base + c]);
  }
  red[lane] = top;
  memoryBarrierShared();
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2; stride > 0; stride >>= 1) {
    if (lane < stride) {
      red[lane] = max(red[lane], red[lane + stride]);
    }
    memoryBarrierShared();
    barrier();
  }
  top = red[0];
  barrier();
  float sum = 0.0;
  for (uint c = lane; c < n; c += gl_WorkGroupSize.x) {
    sum += exp(t_scores[base + c] - top);
  }
  red[lane] = sum;
  memoryBarrierShared();
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2; stride > 0; stride >>= 1) {
    if (lane < stride) {
      red[lane] += red[lane + stride];
    }
    memoryBarrierShared();
    barrier();
  }
  const float total = red[0];
  for (uint c = lane; c < n; c += gl_WorkGroupSize.x) {
    t_scores[base + c] = exp(t_scores[base + c] - top) / total;
  }
}

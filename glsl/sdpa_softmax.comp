#version 450
#extension GL_GOOGLE_include_directive : require
// op: sdpa_with_kv_cache, kernel sdpa_softmax — contract: harness/ops/sdpa.py
// Materialized route, step 2. One workgroup per score row (h, s), in place over its
// n = input_pos + s + 1 unmasked scores: lanes take strided columns; a shared-memory tree
// finds the max, another sums exp(x - max); then each lane writes exp(x - max) / sum.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reductions halve it

layout(set = 0, binding = 0) buffer ScoresBuffer { float t_scores[]; };
layout(set = 0, binding = 1) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 2) uniform InputPos { int input_pos; };

shared float red[gl_WorkGroupSize.x];

const float LOWEST = -3.4028235e38;

void main() {
  const uint seq = q_meta.sizes.z;
  const uint row = flat_workgroup_id();
  if (row >= q_meta.sizes.y * seq) {
    return;
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint n = uint(input_pos) + row % seq + 1;
  const uint base = row * (uint(input_pos) + seq);
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

#version 450
#extension GL_GOOGLE_include_directive : require
// op: fused_sdpa, kernel fused_sdpa_av — contract: harness/ops/fused_sdpa.py
// Step 3. One invocation per output element (bh, s, d) of [B, H, S, D]:
// out = sum over l < L of probs[bh, s, l] * v[bh, l, d].
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer ScoresBuffer { float t_scores[]; };
layout(set = 0, binding = 2) readonly buffer VBuffer { float t_v[]; };
layout(set = 0, binding = 3) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 4) uniform VMeta { TensorMeta v_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= q_meta.numel) {
    return;
  }
  const uint dim = q_meta.sizes.x;
  const uint q_len = q_meta.sizes.y;
  const uint n = v_meta.sizes.y;
  const uint d = i % dim;
  const uint row = i / dim;  // bh * S + s
  const uint bh = row / q_len;
  float acc = 0.0;
  for (uint l = 0; l < n; ++l) {
    acc += t_scores[row * n + l] * t_v[(bh * n + l) * dim + d];
  }
  t_out[i] = acc;
}

#version 450
#extension GL_GOOGLE_include_directive : require
// op: fused_sdpa, kernel fused_sdpa_scores — contract: harness/ops/fused_sdpa.py
// Step 1 (no attn_mask). One invocation per score of a dense live [B*H, S, L] scratch:
// scores[bh, s, l] = scale * dot(q[bh, s], k[bh, l]).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const float SCALE = 1.0;

layout(set = 0, binding = 0) writeonly buffer ScoresBuffer { float t_scores[]; };
layout(set = 0, binding = 1) readonly buffer QBuffer { float t_q[]; };
layout(set = 0, binding = 2) readonly buffer KBuffer { float t_k[]; };
layout(set = 0, binding = 3) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 4) uniform KMeta { TensorMeta k_meta; };

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint dim = q_meta.sizes.x;
  const uint q_len = q_meta.sizes.y;
  const uint kv_len = k_meta.sizes.y;
  if (t >= (q_meta.numel / dim) * kv_len) {
    return;
  }
  const uint l = t % kv_len;
  const uint row = t / kv_len;  // bh * S + s
  const uint bh = row / q_len;
  const uint q_base = row * dim;
  const uint k_base = (bh * kv_len + l) * dim;
  float acc = 0.0;
  for (uint d = 0; d < dim; ++d) {
    acc += t_q[q_base + d] * t_k[k_base + d];
  }
  t_scores[t] = acc * SCALE;
}

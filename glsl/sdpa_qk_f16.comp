#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: sdpa_with_kv_cache, kernel sdpa_qk_f16 — contract: harness/ops/sdpa.py
// Half precision: f16 q and k cache, the dot products in f32, the scores stored f32 (the
// softmax runs on them in f32: sdpa_softmax serves both precisions).
// Materialized route, step 1. One invocation per score of a dense live [Hq, S, ctx] scratch:
// scores[h, s, c] = scale * dot(q[s, h], k_cache[c, h / group]), for c <= input_pos + s.
// Causally masked scores are neither written nor ever read.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const float SCALE = 1.0;

layout(set = 0, binding = 0) writeonly buffer ScoresBuffer { float t_scores[]; };
layout(set = 0, binding = 1) readonly buffer QBuffer { float16_t t_q[]; };
layout(set = 0, binding = 2) readonly buffer KCacheBuffer { float16_t t_k_cache[]; };
layout(set = 0, binding = 3) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 4) uniform KCacheMeta { TensorMeta k_cache_meta; };
layout(set = 0, binding = 5) uniform InputPos { int input_pos; };

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint dim = q_meta.sizes.x;
  const uint q_heads = q_meta.sizes.y;
  const uint seq = q_meta.sizes.z;
  const uint kv_heads = k_cache_meta.sizes.y;
  const uint pos = uint(input_pos);
  const uint context = pos + seq;
  if (t >= q_heads * seq * context) {
    return;
  }
  const uint c = t % context;
  const uint s = (t / context) % seq;
  const uint h = t / context / seq;
  if (c > pos + s) {
    return;
  }
  const uint kv_head = h / (q_heads / kv_heads);
  const uint q_base = (s * q_heads + h) * dim;
  const uint k_base = (c * kv_heads + kv_head) * dim;
  float acc = 0.0;
  for (uint d = 0; d < dim; ++d) {
    acc += float(t_q[q_base + d]) * float(t_k_cache[k_base + d]);
  }
  t_scores[t] = acc * SCALE;
}

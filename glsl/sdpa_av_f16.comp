#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: sdpa_with_kv_cache, kernel sdpa_av_f16 — contract: harness/ops/sdpa.py
// Half precision: f32 probabilities, f16 v cache, f32 weighted sums, each output rounded
// once to f16.
// Materialized route, step 3. One invocation per output element (s, h, d) of [1, S, Hq, D]:
// out = sum over c <= input_pos + s of probs[h, s, c] * v_cache[c, h / group, d].
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer ScoresBuffer { float t_scores[]; };
layout(set = 0, binding = 2) readonly buffer VCacheBuffer { float16_t t_v_cache[]; };
layout(set = 0, binding = 3) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 4) uniform VCacheMeta { TensorMeta v_cache_meta; };
layout(set = 0, binding = 5) uniform InputPos { int input_pos; };

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (t >= q_meta.numel) {
    return;
  }
  const uint dim = q_meta.sizes.x;
  const uint q_heads = q_meta.sizes.y;
  const uint seq = q_meta.sizes.z;
  const uint kv_heads = v_cache_meta.sizes.y;
  const uint d = t % dim;
  const uint h = (t / dim) % q_heads;
  const uint s = t / dim / q_heads;
  const uint kv_head = h / (q_heads / kv_heads);
  const uint n = uint(input_pos) + s + 1;
  const uint base = (h * seq + s) * (uint(input_pos) + seq);
  float acc = 0.0;
  for (uint c = 0; c < n; ++c) {
    acc += t_scores[base + c] * float(t_v_cache[(c * kv_heads + kv_head) * dim + d]);
  }
  t_out[t] = float16_t(acc);
}

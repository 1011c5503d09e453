#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: sdpa_with_kv_cache, kernel sdpa_fd_split_f16 — contract: harness/ops/sdpa.py
// Half precision: f16 q and caches, everything else in f32 as sdpa_fd_split does: the
// partials (m, l, o) stay f32.
// Decode route (S == 1), step 1. One workgroup per (head h, split) of local-size cache rows;
// lane t scores row split * 64 + t against q's only token. A tree takes the split's max m,
// another sums p = exp(score - m) into l; then lanes take strided dims d of
// o[d] = sum_t p_t v_cache[row_t, h / group, d]. Partials: part_o[h, split, d] and
// part_ml[h, split] = (m, l), dense over the live number of splits ceil(ctx / 64).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // = rows per split; a power of two: the trees halve it
layout(constant_id = 3) const float SCALE = 1.0;

layout(set = 0, binding = 0) writeonly buffer PartOBuffer { float t_part_o[]; };
layout(set = 0, binding = 1) writeonly buffer PartMlBuffer { float t_part_ml[]; };
layout(set = 0, binding = 2) readonly buffer QBuffer { float16_t t_q[]; };
layout(set = 0, binding = 3) readonly buffer KCacheBuffer { float16_t t_k_cache[]; };
layout(set = 0, binding = 4) readonly buffer VCacheBuffer { float16_t t_v_cache[]; };
layout(set = 0, binding = 5) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 6) uniform KCacheMeta { TensorMeta k_cache_meta; };
layout(set = 0, binding = 7) uniform InputPos { int input_pos; };

shared float red[gl_WorkGroupSize.x];
shared float probs[gl_WorkGroupSize.x];

const float LOWEST = -3.4028235e38;

void main() {
  const uint split_rows = gl_WorkGroupSize.x;
  const uint dim = q_meta.sizes.x;
  const uint q_heads = q_meta.sizes.y;
  const uint kv_heads = k_cache_meta.sizes.y;
  const uint context = uint(input_pos) + q_meta.sizes.z;
  const uint num_splits = (context + split_rows - 1) / split_rows;
  const uint wg_index = flat_workgroup_id();
  if (wg_index >= q_heads * num_splits) {
    return;
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint h = wg_index / num_splits;
  const uint split = wg_index % num_splits;
  const uint kv_head = h / (q_heads / kv_heads);
  const uint first = split * split_rows;
  const uint rows = min(split_rows, context - first);
  const bool valid = lane < rows;
  float score = LOWEST;
  if (valid) {
    const uint k_base = ((first + lane) * kv_heads + kv_head) * dim;
    float acc = 0.0;
    for (uint d = 0; d < dim; ++d) {
      acc += float(t_q[h * dim + d]) * float(t_k_cache[k_base + d]);
    }
    score = acc * SCALE;
  }
  red[lane] = score;
  memoryBarrierShared();
  barrier();
  for (uint stride = split_rows / 2; stride > 0; stride >>= 1) {
    if (lane < stride) {
      red[lane] = max(red[lane], red[lane + stride]);
    }
    memoryBarrierShared();
    barrier();
  }
  const float top = red[0];
  barrier();
  const float p = valid ? exp(score - top) : 0.0;
  probs[lane] = p;
  red[lane] = p;
  memoryBarrierShared();
  barrier();
  for (uint stride = split_rows / 2; stride > 0; stride >>= 1) {
    if (lane < stride) {
      red[lane] += red[lane + stride];
    }
    memoryBarrierShared();
    barrier();
  }
  const uint part = h * num_splits + split;
  for (uint d = lane; d < dim; d += split_rows) {
    float acc = 0.0;
    for (uint t = 0; t < rows; ++t) {
      acc += probs[t] * float(t_v_cache[((first + t) * kv_heads + kv_head) * dim + d]);
    }
    t_part_o[part * dim + d] = acc;
  }
  if (lane == 0) {
    t_part_ml[2 * part] = top;
    t_part_ml[2 * part + 1] = red[0];
  }
}

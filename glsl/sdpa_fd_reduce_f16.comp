#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: sdpa_with_kv_cache, kernel sdpa_fd_reduce_f16 — contract: harness/ops/sdpa.py
// Half precision: f32 partials, combined in f32 as sdpa_fd_reduce does, each output rounded
// once to f16.
// Decode route (S == 1), step 2. One workgroup per head h; every lane folds the splits'
// (m_i, l_i) itself: M = max m_i, w_i = exp(m_i - M), L = sum w_i l_i; then lanes take
// strided dims d of out[h, d] = sum_i w_i part_o[h, i, d] / L.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer PartOBuffer { float t_part_o[]; };
layout(set = 0, binding = 2) readonly buffer PartMlBuffer { float t_part_ml[]; };
layout(set = 0, binding = 3) uniform QMeta { TensorMeta q_meta; };
layout(set = 0, binding = 4) uniform InputPos { int input_pos; };

const uint SPLIT_ROWS = 64;  // the rows per split of sdpa_fd_split (its local size)
const float LOWEST = -3.4028235e38;

void main() {
  const uint h = flat_workgroup_id();
  if (h >= q_meta.sizes.y) {
    return;
  }
  const uint dim = q_meta.sizes.x;
  const uint context = uint(input_pos) + q_meta.sizes.z;
  const uint splits = (context + SPLIT_ROWS - 1) / SPLIT_ROWS;
  const uint base = h * splits;
  float top = LOWEST;
  for (uint i = 0; i < splits; ++i) {
    top = max(top, t_part_ml[2 * (base + i)]);
  }
  float total = 0.0;
  for (uint i = 0; i < splits; ++i) {
    total += exp(t_part_ml[2 * (base + i)] - top) * t_part_ml[2 * (base + i) + 1];
  }
  for (uint d = gl_LocalInvocationID.x; d < dim; d += gl_WorkGroupSize.x) {
    float acc = 0.0;
    for (uint i = 0; i < splits; ++i) {
      acc += exp(t_part_ml[2 * (base + i)] - top) * t_part_o[(base + i) * dim + d];
    }
    t_out[h * dim + d] = float16_t(acc / total);
  }
}

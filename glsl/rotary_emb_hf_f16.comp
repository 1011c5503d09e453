#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: apply_rotary_emb_hf, kernel rotary_emb_hf_f16 — contract: harness/ops/rotary.py
// Half precision: loads f16, computes in f32 exactly as rotary_emb_hf does, and rounds
// each output once to f16.
// One invocation per rotated pair (i, i + D/2) of one head row, q's rows first, then k's.
// Pair p is column i = p % (D/2) of head row p / (D/2), whose token is s = (row / H) % S;
// it reads table row r = start_pos + s, each half with its own columns (upstream's shader
// reads column i for both halves):
//   out[i]     = x[i] cos[r, i]         - x[i + h] sin[r, i]
//   out[i + h] = x[i + h] cos[r, i + h] + x[i] sin[r, i + h]
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer XqOutBuffer { float16_t t_xq_out[]; };
layout(set = 0, binding = 1) writeonly buffer XkOutBuffer { float16_t t_xk_out[]; };
layout(set = 0, binding = 2) readonly buffer XqBuffer { float16_t t_xq[]; };
layout(set = 0, binding = 3) readonly buffer XkBuffer { float16_t t_xk[]; };
layout(set = 0, binding = 4) readonly buffer CosBuffer { float16_t t_cos[]; };
layout(set = 0, binding = 5) readonly buffer SinBuffer { float16_t t_sin[]; };
layout(set = 0, binding = 6) uniform XqMeta { TensorMeta xq_meta; };
layout(set = 0, binding = 7) uniform XkMeta { TensorMeta xk_meta; };
// The start_pos SymInt's UBO (or a constant one for an int literal); checked on the host:
// start_pos >= 0 and start_pos + S <= the table's rows.
layout(set = 0, binding = 8) uniform StartPos { int start_pos; };

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint q_pairs = xq_meta.numel / 2;
  if (t >= q_pairs + xk_meta.numel / 2) {
    return;
  }
  const bool is_k = t >= q_pairs;
  const uint p = is_k ? t - q_pairs : t;
  const uint heads = is_k ? xk_meta.sizes.y : xq_meta.sizes.y;
  const uint h = xq_meta.sizes.x / 2;
  const uint i = p % h;
  const uint row = p / h;
  const uint s = (row / heads) % xq_meta.sizes.z;
  const uint table = (uint(start_pos) + s) * 2 * h;
  const float c1 = float(t_cos[table + i]);
  const float s1 = float(t_sin[table + i]);
  const float c2 = float(t_cos[table + i + h]);
  const float s2 = float(t_sin[table + i + h]);
  const uint first = row * 2 * h + i;
  if (is_k) {
    const float x1 = float(t_xk[first]);
    const float x2 = float(t_xk[first + h]);
    t_xk_out[first] = float16_t(x1 * c1 - x2 * s1);
    t_xk_out[first + h] = float16_t(x2 * c2 + x1 * s2);
  } else {
    const float x1 = float(t_xq[first]);
    const float x2 = float(t_xq[first + h]);
    t_xq_out[first] = float16_t(x1 * c1 - x2 * s1);
    t_xq_out[first + h] = float16_t(x2 * c2 + x1 * s2);
  }
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: apply_rotary_emb, kernel rotary_emb_f16 — contract: harness/ops/rotary.py
// Half precision: loads f16, computes in f32 exactly as rotary_emb does, and rounds
// each output once to f16.
// One invocation per rotated pair, q's pairs first, then k's. Pair p of a [B, S, H, D] tensor
// holds elements 2p and 2p+1; it is pair i = p % (D/2) of head row p / (D/2), whose token is
// s = (row / H) % S, and it turns by freqs[s, i]:
//   out[2p] = x[2p] c - x[2p+1] s,  out[2p+1] = x[2p] s + x[2p+1] c.
// Live sizes come from the metadata of xq and xk (WHCN: x = D, y = H, z = S, w = B).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer XqOutBuffer { float16_t t_xq_out[]; };
layout(set = 0, binding = 1) writeonly buffer XkOutBuffer { float16_t t_xk_out[]; };
layout(set = 0, binding = 2) readonly buffer XqBuffer { float16_t t_xq[]; };
layout(set = 0, binding = 3) readonly buffer XkBuffer { float16_t t_xk[]; };
layout(set = 0, binding = 4) readonly buffer CosBuffer { float16_t t_freqs_cos[]; };
layout(set = 0, binding = 5) readonly buffer SinBuffer { float16_t t_freqs_sin[]; };
layout(set = 0, binding = 6) uniform XqMeta { TensorMeta xq_meta; };
layout(set = 0, binding = 7) uniform XkMeta { TensorMeta xk_meta; };

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint q_pairs = xq_meta.numel / 2;
  if (t >= q_pairs + xk_meta.numel / 2) {
    return;
  }
  const bool is_k = t >= q_pairs;
  const uint p = is_k ? t - q_pairs : t;
  const uint heads = is_k ? xk_meta.sizes.y : xq_meta.sizes.y;
  const uint half_dim = xq_meta.sizes.x / 2;
  const uint i = p % half_dim;
  const uint s = (p / half_dim / heads) % xq_meta.sizes.z;
  const float c = float(t_freqs_cos[s * half_dim + i]);
  const float sn = float(t_freqs_sin[s * half_dim + i]);
  if (is_k) {
    const float a = float(t_xk[2 * p]);
    const float b = float(t_xk[2 * p + 1]);
    t_xk_out[2 * p] = float16_t(a * c - b * sn);
    t_xk_out[2 * p + 1] = float16_t(a * sn + b * c);
  } else {
    const float a = float(t_xq[2 * p]);
    const float b = float(t_xq[2 * p + 1]);
    t_xq_out[2 * p] = float16_t(a * c - b * sn);
    t_xq_out[2 * p + 1] = float16_t(a * sn + b * c);
  }
}

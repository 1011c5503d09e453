#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: apply_rotary_emb_pos, kernel rotary_emb_pos_f16 — contract: harness/ops/rotary_pos.py
// Half precision: loads f16, computes the angle and rotates in f32 exactly as rotary_emb_pos
// does, and rounds each output once to f16.
// One invocation per rotated pair, q's pairs first, then k's. Pair p of a [B, S, H, D] tensor
// holds elements 2p and 2p+1; it is pair i = p % (D/2) of head row p / (D/2), whose token is
// s = (row / H) % S. Its angle comes from the token's position and theta:
//   angle = float(positions[s]) * freq_scale * exp2(-(2i / D) * log2(theta_base)) / freq_factors[i]
// reduced into [-pi, pi], where sin and cos have a specified accuracy; then
//   out[2p] = x[2p] c - x[2p+1] s,  out[2p+1] = x[2p] s + x[2p+1] c.
// Live sizes come from the metadata of xq and xk (WHCN: x = D, y = H, z = S, w = B).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer XqOutBuffer { float16_t t_xq_out[]; };
layout(set = 0, binding = 1) writeonly buffer XkOutBuffer { float16_t t_xk_out[]; };
layout(set = 0, binding = 2) readonly buffer XqBuffer { float16_t t_xq[]; };
layout(set = 0, binding = 3) readonly buffer XkBuffer { float16_t t_xk[]; };
layout(set = 0, binding = 4) readonly buffer PositionsBuffer { int t_positions[]; };
layout(set = 0, binding = 5) readonly buffer FreqFactorsBuffer { float t_freq_factors[]; };
layout(set = 0, binding = 6) uniform XqMeta { TensorMeta xq_meta; };
layout(set = 0, binding = 7) uniform XkMeta { TensorMeta xk_meta; };

layout(push_constant) uniform PushConstants {
  float theta_base;
  float freq_scale;
  uint has_freq_factors;  // 1: divide pair i's angle by freq_factors[i]
} pc;

const float TWO_PI = 6.283185307179586;
const float INV_TWO_PI = 0.15915494309189535;
// The largest f32 below pi (f32(pi) lies above it): Vulkan specifies sin and cos in [-pi, pi].
const float PI_BELOW = 3.1415925;

// The angle of pair i (of D / 2) of a token at `position`, reduced into [-pi, pi].
float reduced_angle(int position, uint i, uint head_dim) {
  const float exponent = float(2 * i) / float(head_dim);
  float freq = pc.freq_scale * exp2(-(exponent * log2(pc.theta_base)));
  if (pc.has_freq_factors != 0) {
    freq = freq / t_freq_factors[i];
  }
  const float angle = float(position) * freq;
  const float turns = roundEven(angle * INV_TWO_PI);
  return clamp(angle - turns * TWO_PI, -PI_BELOW, PI_BELOW);
}

void main() {
  const uint t = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint q_pairs = xq_meta.numel / 2;
  if (t >= q_pairs + xk_meta.numel / 2) {
    return;
  }
  const bool is_k = t >= q_pairs;
  const uint p = is_k ? t - q_pairs : t;
  const uint heads = is_k ? xk_meta.sizes.y : xq_meta.sizes.y;
  const uint head_dim = xq_meta.sizes.x;
  const uint half_dim = head_dim / 2;
  const uint i = p % half_dim;
  const uint s = (p / half_dim / heads) % xq_meta.sizes.z;
  const float r = reduced_angle(t_positions[s], i, head_dim);
  const float c = cos(r);
  const float sn = sin(r);
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

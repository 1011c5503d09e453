#version 450
#extension GL_GOOGLE_include_directive : require
// op: linear_q4gsw, kernel q4gsw_gemv — contract: harness/ops/linear_q4gsw.py
// Sweep variant v8 = the shipped kernel with the decode of word_dot changed (see nibbles).
// Cooperative GEMV for M == 1 (K % 8 == 0, group_size % 8 == 0). A workgroup computes the two
// adjacent columns 2p and 2p+1 and grid-strides over column pairs. Lane l takes weight words
// l, l + local size, ... of both rows, WORDS_PER_STEP words per step with every load of a
// step issued before any use; each word is dotted with its 8 activations (two vec4 loads)
// and scaled by its group's scale. A shared-memory tree reduction combines the lanes and
// lane 0 adds the bias and writes. docs/benchmarks.md explains the choices.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reduction halves it
layout(constant_id = 3) const uint group_size = 8;
layout(constant_id = 4) const uint has_bias = 0;
layout(constant_id = 5) const uint max_workgroups = 8192;  // grid cap (contract)

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { vec4 t_x[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { uint t_weight[]; };
layout(set = 0, binding = 3) readonly buffer ScalesBuffer { vec2 t_scales[]; };
layout(set = 0, binding = 4) readonly buffer BiasBuffer { float t_bias[]; };
layout(set = 0, binding = 5) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 6) uniform XMeta { TensorMeta x_meta; };

const uint WORDS_PER_STEP = 4;  // independent weight words in flight per lane and row

shared vec2 partial[gl_WorkGroupSize.x];

// Nibble j of a half-word sits at bits 4j. OR-ing it into the mantissa of 2^23 gives
// 2^23 + q * 16^j; one fused multiply-add by 16^-j (exact: a power of two) minus
// (2^23 * 16^-j + 8) gives q - 8 exactly, unscaled: the decode costs what the shipped kernel's does (one
// LOP3 and one FADD per nibble) but the 8 products then chain into one sum without its
// vec4 multiply and 16^-j fold (25 instead of 28 operations per word and row).
const uvec4 MAGIC = uvec4(0x4B000000u);
const uvec4 NIBBLE_MASKS = uvec4(0xFu, 0xF0u, 0xF00u, 0xF000u);
const vec4 UNSCALE = vec4(1.0, 0.0625, 0.00390625, 0.000244140625);  // 16^-j, exact
const vec4 OFFSET = vec4(-8388616.0, -524296.0, -32776.0, -2056.0);  // -(2^23 16^-j + 8)

vec4 nibbles(uint h) {
  return fma(uintBitsToFloat((uvec4(h) & NIBBLE_MASKS) | MAGIC), UNSCALE, OFFSET);
}

// sum_p (nibble_p - 8) * x_p over the 8 nibbles of word w; lo holds x for nibbles 0-3, hi
// for 4-7: one multiply and seven fused multiply-adds in a chain.
float word_dot(uint w, vec4 lo, vec4 hi) {
  const vec4 a = nibbles(w);
  const vec4 b = nibbles(w >> 16);
  float d = a.x * lo.x;
  d = fma(a.y, lo.y, d);
  d = fma(a.z, lo.z, d);
  d = fma(a.w, lo.w, d);
  d = fma(b.x, hi.x, d);
  d = fma(b.y, hi.y, d);
  d = fma(b.z, hi.z, d);
  return fma(b.w, hi.w, d);
}

void main() {
  const uint N = out_meta.sizes.x;
  const uint kw = x_meta.sizes.x / 8;  // words per weight row
  const uint stride = min((N + 1) / 2, max_workgroups);
  const uint first = flat_workgroup_id();
  if (first >= stride) {
    return;  // the waste of a folded grid; uniform per workgroup
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint wg_size = gl_WorkGroupSize.x;
  const uint scale_row = (N + 3) / 4 * 2;  // vec2 per scales row
  // The scale group of the lane's first word, and how a step of wg_size words advances it
  // (a division once per lane instead of once per word).
  const uint group_words = group_size / 8;
  const uint g_first = lane / group_words;
  const uint r_first = lane % group_words;
  const uint g_step = wg_size / group_words;
  const uint r_step = wg_size % group_words;

  for (uint pair = first; pair < (N + 1) / 2; pair += stride) {
    const uint col = 2 * pair;
    const bool has_second = col + 1 < N;
    const uint row0 = col * kw;
    const uint row1 = has_second ? row0 + kw : row0;  // odd N: recompute col, never stored
    vec2 acc = vec2(0);
    uint g = g_first;
    uint r = r_first;
    for (uint base = lane; base < kw; base += wg_size * WORDS_PER_STEP) {
      uint w0[WORDS_PER_STEP];
      uint w1[WORDS_PER_STEP];
      for (uint u = 0; u < WORDS_PER_STEP; ++u) {
        const uint word = base + u * wg_size;
        if (word < kw) {
          w0[u] = t_weight[row0 + word];
          w1[u] = t_weight[row1 + word];
        }
      }
      for (uint u = 0; u < WORDS_PER_STEP; ++u) {
        const uint word = base + u * wg_size;
        if (word < kw) {
          const vec4 lo = t_x[2 * word];
          const vec4 hi = t_x[2 * word + 1];
          const vec2 s = t_scales[g * scale_row + pair];
          const vec2 dots = vec2(word_dot(w0[u], lo, hi), word_dot(w1[u], lo, hi));
          acc = fma(dots, s, acc);
        }
        g += g_step;
        r += r_step;
        if (r >= group_words) {
          r -= group_words;
          g += 1;
        }
      }
    }
    partial[lane] = acc;
    memoryBarrierShared();
    barrier();
    for (uint half_size = wg_size / 2; half_size > 0; half_size >>= 1) {
      if (lane < half_size) {
        partial[lane] += partial[lane + half_size];
      }
      memoryBarrierShared();
      barrier();
    }
    if (lane == 0) {
      vec2 result = partial[0];
      if (has_bias != 0) {
        result.x += t_bias[col];
        if (has_second) {
          result.y += t_bias[col + 1];
        }
      }
      t_out[col] = result.x;
      if (has_second) {
        t_out[col + 1] = result.y;
      }
    }
    memoryBarrierShared();
    barrier();  // partial is rewritten for the next pair
  }
}

#version 450
#extension GL_GOOGLE_include_directive : require
// op: linear_q4gsw, kernel q4gsw_gemv — contract: harness/ops/linear_q4gsw.py
// Sweep variant v9 = v1 with word_dot decoding through a 256-entry byte table.
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
shared vec2 table[256];  // byte -> (low nibble - 8, high nibble - 8)

// Byte b of a word holds nibbles 2b (low) and 2b + 1 (high). table[byte] = (low - 8,
// high - 8), built once per workgroup: per byte one extract, one shared load and two fused
// multiply-adds (17 instead of 28 operations per word and row), at the price of 4 shared
// loads per word and row with bank conflicts.
float word_dot(uint w, vec4 lo, vec4 hi) {
  const vec2 e0 = table[w & 0xFFu];
  const vec2 e1 = table[(w >> 8) & 0xFFu];
  const vec2 e2 = table[(w >> 16) & 0xFFu];
  const vec2 e3 = table[w >> 24];
  float d = e0.x * lo.x;
  d = fma(e0.y, lo.y, d);
  d = fma(e1.x, lo.z, d);
  d = fma(e1.y, lo.w, d);
  d = fma(e2.x, hi.x, d);
  d = fma(e2.y, hi.y, d);
  d = fma(e3.x, hi.z, d);
  return fma(e3.y, hi.w, d);
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
  for (uint b = lane; b < 256; b += wg_size) {
    table[b] = vec2(float(b & 15u) - 8.0, float(b >> 4) - 8.0);
  }
  memoryBarrierShared();
  barrier();
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

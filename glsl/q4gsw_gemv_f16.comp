#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: linear_q4gsw, kernel q4gsw_gemv_f16 — contract: harness/ops/linear_q4gsw.py
// Half precision: loads f16 activations and bias (scales stay f32), dequantizes, multiplies
// and accumulates in f32 exactly as q4gsw_gemv does, and rounds each output once to f16.
// The weight stream is q4gsw_gemv's; the activations are half its bytes.
// Cooperative GEMV for M == 1 (K % 8 == 0, group_size % 8 == 0). A workgroup computes the two
// adjacent columns 2p and 2p+1 and grid-strides over column pairs. Lane l takes weight words
// l, l + local size, ... of both rows, STEP_WORDS words per step with every load of a step
// issued before any use; each word is dotted with its 8 activations (two vec4 loads) and
// scaled by its group's scale. Steps whose words are all in range run without bounds checks
// and hold their words in named values (as the WGSL does, where naga's local arrays are
// costly); when the local size is a multiple of the words per scale group the scale index
// advances by a constant; the last, partial step goes word by word. A shared-memory tree
// reduction combines the lanes and lane 0 adds the bias and writes. docs/benchmarks.md
// explains the choices.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;  // a power of two: the tree reduction halves it
layout(constant_id = 3) const uint group_size = 8;
layout(constant_id = 4) const uint has_bias = 0;
layout(constant_id = 5) const uint max_workgroups = 8192;  // grid cap (contract)

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { f16vec4 t_x[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { uint t_weight[]; };
layout(set = 0, binding = 3) readonly buffer ScalesBuffer { vec2 t_scales[]; };
layout(set = 0, binding = 4) readonly buffer BiasBuffer { float16_t t_bias[]; };
layout(set = 0, binding = 5) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 6) uniform XMeta { TensorMeta x_meta; };

const uint STEP_WORDS = 4;  // words per lane and row in flight; the full step is written for 4

shared vec2 partial[gl_WorkGroupSize.x];

// Nibble j of a half-word sits at bits 4j. OR-ing it into the mantissa of 2^23 gives
// 2^23 + q * 16^j; one fused multiply-add by 16^-j (exact: a power of two) minus
// (2^23 * 16^-j + 8) gives q - 8 exactly: one LOP3 and one FFMA per nibble, no int-to-float
// conversion, and the 8 products chain into one sum (25 operations per word and row).
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

// The dots of word `word` of both rows (weight words a, b) with its 8 activations.
vec2 pair_dot(uint a, uint b, uint word) {
  const vec4 lo = vec4(t_x[2 * word]);
  const vec4 hi = vec4(t_x[2 * word + 1]);
  return vec2(word_dot(a, lo, hi), word_dot(b, lo, hi));
}

// (scale index, place in the group) of a lane's next word.
uvec2 next_scale(uvec2 sr, bool aligned, uint index_step, uint r_step, uint group_words,
                 uint scale_row) {
  uint s = sr.x + index_step;
  uint r = sr.y;
  if (!aligned) {
    r += r_step;
    if (r >= group_words) {
      r -= group_words;
      s += scale_row;
    }
  }
  return uvec2(s, r);
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
  // The scale group of the lane's first word, and how wg_size words advance it (a division
  // once per lane instead of once per word), as an index into the scales. When the local
  // size is a multiple of the group's words (`aligned`), every word of a lane advances the
  // index by index_step; otherwise r tracks the word's place in its group.
  const uint group_words = group_size / 8;
  const bool aligned = wg_size % group_words == 0;
  const uint g_first = lane / group_words;
  const uint r_first = lane % group_words;
  const uint index_step = (wg_size / group_words) * scale_row;
  const uint r_step = wg_size % group_words;
  const uint step_words = wg_size * STEP_WORDS;
  // A step starting at base < full_end has all its words in range.
  const uint span = (STEP_WORDS - 1) * wg_size;
  const uint full_end = kw > span ? kw - span : 0;

  for (uint pair = first; pair < (N + 1) / 2; pair += stride) {
    const uint col = 2 * pair;
    const bool has_second = col + 1 < N;
    const uint row0 = col * kw;
    const uint row1 = has_second ? row0 + kw : row0;  // odd N: recompute col, never stored
    vec2 acc = vec2(0);
    uvec2 sr = uvec2(g_first * scale_row + pair, r_first);  // (scale index, r)
    uint base = lane;
    for (; base < full_end; base += step_words) {
      const uint i0 = base;
      const uint i1 = i0 + wg_size;
      const uint i2 = i1 + wg_size;
      const uint i3 = i2 + wg_size;
      const uint a0 = t_weight[row0 + i0];
      const uint a1 = t_weight[row0 + i1];
      const uint a2 = t_weight[row0 + i2];
      const uint a3 = t_weight[row0 + i3];
      const uint b0 = t_weight[row1 + i0];
      const uint b1 = t_weight[row1 + i1];
      const uint b2 = t_weight[row1 + i2];
      const uint b3 = t_weight[row1 + i3];
      acc = fma(pair_dot(a0, b0, i0), t_scales[sr.x], acc);
      sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
      acc = fma(pair_dot(a1, b1, i1), t_scales[sr.x], acc);
      sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
      acc = fma(pair_dot(a2, b2, i2), t_scales[sr.x], acc);
      sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
      acc = fma(pair_dot(a3, b3, i3), t_scales[sr.x], acc);
      sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
    }
    // The last, partial step: word by word (it holds at most STEP_WORDS - 1 words).
    for (uint word = base; word < kw; word += wg_size) {
      const vec2 dots = pair_dot(t_weight[row0 + word], t_weight[row1 + word], word);
      acc = fma(dots, t_scales[sr.x], acc);
      sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
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
        result.x += float(t_bias[col]);
        if (has_second) {
          result.y += float(t_bias[col + 1]);
        }
      }
      t_out[col] = float16_t(result.x);
      if (has_second) {
        t_out[col + 1] = float16_t(result.y);
      }
    }
    memoryBarrierShared();
    barrier();  // partial is rewritten for the next pair
  }
}

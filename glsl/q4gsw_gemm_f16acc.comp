#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: linear_q4gsw, kernel q4gsw_gemm_f16acc — contract: harness/ops/linear_q4gsw.py
// Half precision with f16 ACCUMULATION in blocks (the graph's accumulate_bits = 16): as
// q4gsw_gemm_f16 (f16 x, bias and out, f32 scales), but each group scale is rounded to f16,
// each dequantized weight (nibble - 8) * scale is an f16 product, and the products are
// accumulated by f16 fused multiply-adds within blocks of BLOCK_WORDS weight words (32 k);
// each block's f16 sum is then added to an f32 accumulator, the bias in f32, and each output
// rounded once to f16. (Upstream's q4gsw_linear_gemm_steel_half_pwdq_f16acc accumulates in
// f16 over all of K; blocking keeps the error bound defined for any K: gamma_n of f16 is
// undefined for n >= 2048.) The bound, per block and across blocks, is derived in
// LinearQ4gswModel.half_budget.
// Register-tiled GEMM: each invocation computes a 4×4 tile of out (4 rows × 4 columns),
// walking k ascending one packed weight word (8 nibbles) per column at a time. Tiles are
// numbered column-tile fastest; a flat index past the live tiles (a folded grid, or the last
// workgroup) returns. Loads clamp rows to M-1 and columns to N-1; stores are guarded.
// Live M, N and K come from the metadata UBOs; M = numel(x) / K over all leading dims.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint group_size = 1;
layout(constant_id = 4) const uint has_bias = 0;
const uint BLOCK_WORDS = 4;  // weight words (8 k each) per f16 accumulation block

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { float16_t t_x[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { uint t_weight[]; };
layout(set = 0, binding = 3) readonly buffer ScalesBuffer { float t_scales[]; };
layout(set = 0, binding = 4) readonly buffer BiasBuffer { float16_t t_bias[]; };
layout(set = 0, binding = 5) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 6) uniform XMeta { TensorMeta x_meta; };

vec4 group_scales(uint group, uvec4 cols, uint n_padded) {
  const uint row = group * n_padded;
  return vec4(t_scales[row + cols.x], t_scales[row + cols.y], t_scales[row + cols.z],
              t_scales[row + cols.w]);
}

void main() {
  const uint K = x_meta.sizes.x;
  const uint M = x_meta.numel / K;
  const uint N = out_meta.sizes.x;
  const uint k_words = (K + 7) / 8;  // words per weight row: K_pad / 8
  const uint n_padded = (N + 3) / 4 * 4;
  const uint n_tiles = (N + 3) / 4;
  const uint tile = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (tile >= n_tiles * ((M + 3) / 4)) {
    return;
  }
  const uint n0 = (tile % n_tiles) * 4;
  const uint m0 = (tile / n_tiles) * 4;
  const uvec4 lanes = uvec4(0, 1, 2, 3);
  const uvec4 cols = min(uvec4(n0) + lanes, uvec4(N - 1));
  const uvec4 x_rows = min(uvec4(m0) + lanes, uvec4(M - 1)) * K;
  const uvec4 w_rows = cols * k_words;

  // acc[i][j]: output row m0+i, column n0+j.
  vec4 acc[4] = vec4[4](vec4(0), vec4(0), vec4(0), vec4(0));
  // The current block's f16 sums.
  f16vec4 blk[4] = f16vec4[4](f16vec4(0), f16vec4(0), f16vec4(0), f16vec4(0));
  uint group = 0;
  uint next_group_k = group_size;
  f16vec4 s = f16vec4(group_scales(0, cols, n_padded));
  for (uint word = 0; word < k_words; ++word) {
    const uvec4 w = uvec4(t_weight[w_rows.x + word], t_weight[w_rows.y + word],
                          t_weight[w_rows.z + word], t_weight[w_rows.w + word]);
    const uint k0 = word * 8;
    // The padded tail of the last word holds zero nibbles; k >= K is skipped, not
    // multiplied, because x[k] would be the next row's (possibly non-finite) value.
    const uint k_end = min(k0 + 8, K);
    for (uint k = k0; k < k_end; ++k) {
      if (k == next_group_k) {
        group += 1;
        next_group_k += group_size;
        s = f16vec4(group_scales(group, cols, n_padded));
      }
      const uvec4 nib = (w >> uvec4((k - k0) * 4)) & uvec4(0xF);
      const f16vec4 dq = (f16vec4(nib) - float16_t(8.0)) * s;
      blk[0] = fma(f16vec4(t_x[x_rows.x + k]), dq, blk[0]);
      blk[1] = fma(f16vec4(t_x[x_rows.y + k]), dq, blk[1]);
      blk[2] = fma(f16vec4(t_x[x_rows.z + k]), dq, blk[2]);
      blk[3] = fma(f16vec4(t_x[x_rows.w + k]), dq, blk[3]);
    }
    if (word % BLOCK_WORDS == BLOCK_WORDS - 1 || word + 1 == k_words) {
      for (uint i = 0; i < 4; ++i) {
        acc[i] += vec4(blk[i]);
        blk[i] = f16vec4(0);
      }
    }
  }

  vec4 b = vec4(0);
  if (has_bias != 0) {
    b = vec4(f16vec4(t_bias[cols.x], t_bias[cols.y], t_bias[cols.z], t_bias[cols.w]));
  }
  for (uint i = 0; i < 4 && m0 + i < M; ++i) {
    const vec4 row = acc[i] + b;
    for (uint j = 0; j < 4; ++j) {
      if (n0 + j < N) {
        t_out[(m0 + i) * N + n0 + j] = float16_t(row[j]);
      }
    }
  }
}

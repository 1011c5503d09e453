#version 450
// 4-bit grouped-scale linear (GEMM route) as another Vulkan backend writes it: push
// constants (N first, K in bytes per packed weight row), the weight and scales bound first and
// the output last, one invocation per output element.
// Element k of weight row n is in byte n * k_bytes + k / 2, the low nibble for even k;
// value = (nibble - 8) * scales[k / group][n]; the padded tail (k >= K) is never read.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer WBuf { uint w_packed[]; };
layout(set = 0, binding = 1) readonly buffer SBuf { float w_scale[]; };
layout(set = 0, binding = 2) readonly buffer ABuf { float act[]; };
layout(set = 0, binding = 3) readonly buffer BBuf { float bias_values[]; };
layout(set = 0, binding = 4) writeonly buffer OBuf { float result[]; };
layout(push_constant) uniform Dims {
  uint n_cols;
  uint m_rows;
  uint k_len;
  uint k_bytes;
  uint group;
  uint scale_cols;
  uint biased;
} dims;

float weight_at(uint col, uint k) {
  const uint byte_at = col * dims.k_bytes + k / 2;
  const uint shift = 8 * (byte_at % 4) + 4 * (k % 2);
  return float(int((w_packed[byte_at / 4] >> shift) & 0xFu) - 8);
}

void main() {
  const uint item =
      (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64 + gl_LocalInvocationID.x;
  if (item >= dims.m_rows * dims.n_cols) {
    return;
  }
  const uint row = item / dims.n_cols;
  const uint col = item % dims.n_cols;
  float acc = 0.0;
  for (uint k = 0; k < dims.k_len; ++k) {
    const float scale = w_scale[(k / dims.group) * dims.scale_cols + col];
    acc = fma(act[row * dims.k_len + k], weight_at(col, k) * scale, acc);
  }
  if (dims.biased != 0) {
    acc += bias_values[col];
  }
  result[item] = acc;
}

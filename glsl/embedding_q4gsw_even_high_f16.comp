#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: embedding_q4gsw, kernel embedding_q4gsw_even_high_f16 — contract: harness/ops/embedding_q4gsw.py
// Half precision: loads f16, computes in f32 exactly as embedding_q4gsw_even_high does, and rounds
// each output once to f16.
// One invocation per output element (token row, dim d): the q4 byte of (token, d) holds d in
// its HIGH nibble when d is even, in its low nibble when odd (is_linear_weight = 0, upstream's
// default); value = (nibble - 8) * scale.
// The weight [vocab, D/2] bytes are read as 32-bit words, so any even D works.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint GROUP_SIZE = 32;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer IndicesBuffer { int t_indices[]; };
layout(set = 0, binding = 2) readonly buffer WeightBuffer { uint t_weight[]; };
layout(set = 0, binding = 3) readonly buffer ScalesBuffer { float t_scales[]; };
layout(set = 0, binding = 4) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 5) uniform WeightMeta { TensorMeta weight_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  const uint row_bytes = weight_meta.sizes.x;  // D / 2
  const uint vocab = weight_meta.sizes.y;
  const uint embed_dim = out_meta.sizes.x;
  const uint d = i % embed_dim;
  const int token = t_indices[i / embed_dim];
  // The host refuses ids outside the vocabulary before submitting; should one get here
  // anyway, the element is left unwritten (slack poison shows it), never read out of range.
  if (token < 0 || uint(token) >= vocab) {
    return;
  }
  const uint row = uint(token);
  const uint byte_index = row * row_bytes + d / 2;
  const uint byte_value = (t_weight[byte_index / 4] >> (8 * (byte_index % 4))) & 0xFFu;
  const uint nibble = d % 2 == 0 ? byte_value >> 4 : byte_value & 0xFu;
  const float scale = t_scales[row * (embed_dim / GROUP_SIZE) + d / GROUP_SIZE];
  t_out[i] = float16_t(float(int(nibble) - 8) * scale);
}

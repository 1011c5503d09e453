#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: add | mul, kernels add_broadcast_f16 / mul_broadcast_f16 — contract: harness/ops/binary.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// Elementwise a (op) b with broadcasting. In WHCN order shapes align at dim 0 (the innermost),
// and an input dim of size 1 (or one past its rank, padded with 1) contributes no offset.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint OP_KIND = 0;  // 0: add, 1: mul

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer ABuffer { float16_t t_a[]; };
layout(set = 0, binding = 2) readonly buffer BBuffer { float16_t t_b[]; };
layout(set = 0, binding = 3) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 4) uniform AMeta { TensorMeta a_meta; };
layout(set = 0, binding = 5) uniform BMeta { TensorMeta b_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  uint ia = 0;
  uint ib = 0;
  for (int d = 0; d < 4; ++d) {
    const uint coord = (i / out_meta.strides[d]) % out_meta.sizes[d];
    ia += a_meta.sizes[d] == 1 ? 0 : coord * a_meta.strides[d];
    ib += b_meta.sizes[d] == 1 ? 0 : coord * b_meta.strides[d];
  }
  const float a = float(t_a[ia]);
  const float b = float(t_b[ib]);
  t_out[i] = float16_t(OP_KIND == 0 ? a + b : a * b);
}

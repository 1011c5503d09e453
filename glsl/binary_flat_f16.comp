#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: add | mul, kernels add_flat_f16 / mul_flat_f16 — contract: harness/ops/binary.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// Elementwise a (op) b for inputs of identical live sizes: one invocation per element.
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
  const float a = float(t_a[i]);
  const float b = float(t_b[i]);
  t_out[i] = float16_t(OP_KIND == 0 ? a + b : a * b);
}

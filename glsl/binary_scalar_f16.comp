#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: add | mul, kernels add_scalar_f16 / mul_scalar_f16 — contract: harness/ops/binary.py
// Half precision: loads f16 a, computes a (op) scalar in f32 with the scalar a graph literal
// rounded to float (PyTorch computes a half tensor with a Python float in float), stores f16
// (one rounding of the f32 result). One invocation per element.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint OP_KIND = 0;  // 0: add, 1: mul
layout(constant_id = 4) const float SCALAR = 0.0;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer ABuffer { float16_t t_a[]; };
layout(set = 0, binding = 2) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  const float a = float(t_a[i]);
  t_out[i] = float16_t(OP_KIND == 0 ? a + SCALAR : a * SCALAR);
}

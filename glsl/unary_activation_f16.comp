#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: sigmoid | silu, kernels sigmoid_f16 / silu_f16 — contract: harness/ops/activation.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// One invocation per element: sigmoid(x) = 1 / (1 + exp(-x)), silu(x) = x / (1 + exp(-x)).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint OP_KIND = 0;  // 0: sigmoid, 1: silu

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { float16_t t_x[]; };
layout(set = 0, binding = 2) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  const float v = float(t_x[i]);
  const float numerator = OP_KIND == 1 ? v : 1.0;
  t_out[i] = float16_t(numerator / (1.0 + exp(-v)));
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: silu_mul, kernel silu_mul_f16 — contract: harness/ops/activation.py
// Half precision: loads f16, computes in f32, stores f16 (one rounding of the f32 result).
// One invocation per element: out = (gate / (1 + exp(-gate))) * up, for equal live sizes.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer GateBuffer { float16_t t_gate[]; };
layout(set = 0, binding = 2) readonly buffer UpBuffer { float16_t t_up[]; };
layout(set = 0, binding = 3) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  const float g = float(t_gate[i]);
  t_out[i] = float16_t((g / (1.0 + exp(-g))) * float(t_up[i]));
}

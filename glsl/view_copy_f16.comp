#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: view_copy, kernel view_copy_f16 — contract: harness/ops/view.py
// Half precision: one invocation per element, a copy of 16-bit elements (exact: no
// arithmetic, no rounding); the view is only a change of live sizes, resolved from the size
// list by the resize function.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float16_t t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { float16_t t_x[]; };
layout(set = 0, binding = 2) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  t_out[i] = t_x[i];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// op: add | mul, kernels add_scalar / mul_scalar — contract: harness/ops/binary.py
// Elementwise a (op) scalar, the scalar a graph literal rounded to float: one invocation per
// element.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint OP_KIND = 0;  // 0: add, 1: mul
layout(constant_id = 4) const float SCALAR = 0.0;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer ABuffer { float t_a[]; };
layout(set = 0, binding = 2) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  t_out[i] = OP_KIND == 0 ? t_a[i] + SCALAR : t_a[i] * SCALAR;
}

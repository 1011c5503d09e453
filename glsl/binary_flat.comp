#version 450
#extension GL_GOOGLE_include_directive : require
// op: add | mul, kernels add_flat / mul_flat — contract: harness/ops/binary.py
// Elementwise a (op) b for inputs of identical live sizes: one invocation per element.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint OP_KIND = 0;  // 0: add, 1: mul

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer ABuffer { float t_a[]; };
layout(set = 0, binding = 2) readonly buffer BBuffer { float t_b[]; };
layout(set = 0, binding = 3) uniform OutMeta { TensorMeta out_meta; };
layout(set = 0, binding = 4) uniform AMeta { TensorMeta a_meta; };
layout(set = 0, binding = 5) uniform BMeta { TensorMeta b_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  t_out[i] = OP_KIND == 0 ? t_a[i] + t_b[i] : t_a[i] * t_b[i];
}

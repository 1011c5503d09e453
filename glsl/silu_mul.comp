#version 450
#extension GL_GOOGLE_include_directive : require
// op: silu_mul, kernel silu_mul — contract: harness/ops/activation.py
// One invocation per element: out = (gate / (1 + exp(-gate))) * up, for equal live sizes.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer GateBuffer { float t_gate[]; };
layout(set = 0, binding = 2) readonly buffer UpBuffer { float t_up[]; };
layout(set = 0, binding = 3) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  const float g = t_gate[i];
  t_out[i] = (g / (1.0 + exp(-g))) * t_up[i];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// op: view_copy, kernel view_copy — contract: harness/ops/view.py
// One invocation per element: a bitwise copy of 32-bit words (float32 or int32 alike); the
// view is only a change of live sizes, resolved from the size list by the resize function.
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer OutBuffer { uint t_out[]; };
layout(set = 0, binding = 1) readonly buffer XBuffer { uint t_x[]; };
layout(set = 0, binding = 2) uniform OutMeta { TensorMeta out_meta; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= out_meta.numel) {
    return;
  }
  t_out[i] = t_x[i];
}

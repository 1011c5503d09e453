#version 450
#extension GL_GOOGLE_include_directive : require
// op: update_cache, kernel update_cache — contract: harness/ops/update_cache.py
// One invocation per element of value ([1, S, H, D]): copies it into cache row
// input_pos + s of the cache ([1, C, H, D]).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer CacheBuffer { float t_cache[]; };
layout(set = 0, binding = 1) readonly buffer ValueBuffer { float t_value[]; };
layout(set = 0, binding = 2) uniform ValueMeta { TensorMeta value_meta; };
// The input_pos SymInt's UBO (or a constant one); checked on the host: pos + S <= C.
layout(set = 0, binding = 3) uniform InputPos { int input_pos; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= value_meta.numel) {
    return;
  }
  const uint width = value_meta.sizes.x * value_meta.sizes.y;  // H * D
  t_cache[(uint(input_pos) + i / width) * width + i % width] = t_value[i];
}

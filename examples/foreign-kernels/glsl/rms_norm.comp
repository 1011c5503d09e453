#version 450
// RMS norm as another code base's Vulkan backend writes it: push constants instead of a
// uniform (the width first), the weight bound first and the output before the input, the
// local size a specialization constant (id 7). Shipped precompiled, without debug names
// (spirv/rms_norm.spv; README.md gives the command): the manifest binds it by index.
// One workgroup per row, the row recovered from a (possibly folded) 2-D grid.

layout(local_size_x_id = 7) in;  // a power of two: the tree reduction halves it

layout(set = 0, binding = 0) readonly buffer GammaBuf { float gamma_w[]; };
layout(set = 0, binding = 1) writeonly buffer DstBuf { float dst[]; };
layout(set = 0, binding = 2) readonly buffer SrcBuf { float src[]; };
layout(push_constant) uniform Shape {
  uint width;
  uint rows;
  float eps;
} shape;

shared float sums[gl_WorkGroupSize.x];

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= shape.rows) {
    return;  // uniform per workgroup
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint lanes = gl_WorkGroupSize.x;
  const uint first = row * shape.width;
  float acc = 0.0;
  for (uint c = lane; c < shape.width; c += lanes) {
    const float v = src[first + c];
    acc += v * v;
  }
  sums[lane] = acc;
  barrier();
  for (uint half_lanes = lanes / 2; half_lanes > 0; half_lanes /= 2) {
    if (lane < half_lanes) {
      sums[lane] += sums[lane + half_lanes];
    }
    barrier();
  }
  const float inv_rms = inversesqrt(sums[0] / float(shape.width) + shape.eps);
  for (uint c = lane; c < shape.width; c += lanes) {
    dst[first + c] = src[first + c] * inv_rms * gamma_w[c];
  }
}

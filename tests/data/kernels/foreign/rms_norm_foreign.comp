#version 450
// rms_norm written the way another code base might: a params block of its own (other
// member names and order) instead of the project's TensorMeta, the output bound last, 32
// lanes per row set through specialization constants with ids and names of its own.

layout(local_size_x_id = 4) in;
layout(constant_id = 2) const uint LANES = 64;  // must equal the local size

layout(std140, set = 0, binding = 0) uniform Shape {
  uint rows;
  float epsilon;
  uint cols;
} shape;
layout(set = 0, binding = 1) readonly buffer Src { float data[]; } src;
layout(set = 0, binding = 2) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 3) writeonly buffer Dst { float data[]; } dst;

shared float partial[LANES];

void main() {
  // A 1-D count the runtime may fold into rows of the grid.
  uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= shape.rows) {
    return;  // uniform per workgroup
  }
  uint lane = gl_LocalInvocationID.x;
  uint base = row * shape.cols;
  float acc = 0.0;
  for (uint i = lane; i < shape.cols; i += LANES) {
    float v = src.data[base + i];
    acc += v * v;
  }
  partial[lane] = acc;
  barrier();
  for (uint s = LANES / 2; s > 0; s >>= 1) {
    if (lane < s) {
      partial[lane] += partial[lane + s];
    }
    barrier();
  }
  float scale = inversesqrt(partial[0] / float(shape.cols) + shape.epsilon);
  for (uint i = lane; i < shape.cols; i += LANES) {
    dst.data[base + i] = src.data[base + i] * scale * gamma[i];
  }
}

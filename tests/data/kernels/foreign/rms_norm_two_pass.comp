#version 450
// rms_norm in two passes of one module, selected by a push constant: pass 0 copies the
// weight into a scratch buffer, pass 1 normalizes each row with it, multiplying by the
// reciprocal of the row width. The manifest's adapter gives both: the scratch buffer
// (role "gamma") and the value inv_width.

layout(local_size_x = 32) in;

layout(set = 0, binding = 0) writeonly buffer Out { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer X { float t_x[]; };
layout(set = 0, binding = 2) readonly buffer W { float t_weight[]; };
layout(set = 0, binding = 3) buffer Gamma { float t_gamma[]; };
layout(std140, set = 0, binding = 4) uniform Params {
  uint num_rows;
  uint row_width;
  float inv_width;
  float eps;
} params;
layout(push_constant) uniform Pass { uint pass_index; } pc;

shared float partial[32];

void main() {
  if (pc.pass_index == 0u) {
    uint i = gl_GlobalInvocationID.x;
    if (i < params.row_width) {
      t_gamma[i] = t_weight[i];
    }
    return;
  }
  uint row = gl_WorkGroupID.x;
  if (row >= params.num_rows) {
    return;
  }
  uint lane = gl_LocalInvocationID.x;
  uint base = row * params.row_width;
  float acc = 0.0;
  for (uint i = lane; i < params.row_width; i += 32u) {
    float v = t_x[base + i];
    acc += v * v;
  }
  partial[lane] = acc;
  barrier();
  for (uint s = 16u; s > 0u; s >>= 1) {
    if (lane < s) {
      partial[lane] += partial[lane + s];
    }
    barrier();
  }
  float scale = inversesqrt(partial[0] * params.inv_width + params.eps);
  for (uint i = lane; i < params.row_width; i += 32u) {
    t_out[base + i] = t_x[base + i] * scale * t_gamma[i];
  }
}

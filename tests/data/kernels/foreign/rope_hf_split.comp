#version 450
// HF rotary embedding over one tensor per dispatch, as upstream ExecuTorch binds it: the
// runtime dispatches it for q, then for k. out = x * cos + rotate_half(x) * sin, with the
// table rows start_pos .. start_pos + S - 1 and each half's own columns.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) writeonly buffer Out { float t_out[]; };
layout(set = 0, binding = 1) readonly buffer In { float t_in[]; };
layout(set = 0, binding = 2) readonly buffer Cos { float t_cos[]; };
layout(set = 0, binding = 3) readonly buffer Sin { float t_sin[]; };
layout(std140, set = 0, binding = 4) uniform Params {
  uint seq;
  uint half_dim;
  int start_pos;
} params;
layout(push_constant) uniform Push {
  uint pairs;    // rotation pairs of this dispatch's tensor
  uint n_heads;  // its heads
} pc;

void main() {
  uint p = gl_GlobalInvocationID.x;
  if (p >= pc.pairs) {
    return;
  }
  uint half_dim = params.half_dim;
  uint j = p % half_dim;
  uint head_row = p / half_dim;           // (b, s, h) flattened
  uint token = head_row / pc.n_heads;     // b * S + s
  uint row = uint(params.start_pos) + token % params.seq;
  uint base = head_row * 2u * half_dim;
  uint table = row * 2u * half_dim;
  float x1 = t_in[base + j];
  float x2 = t_in[base + j + half_dim];
  t_out[base + j] = x1 * t_cos[table + j] - x2 * t_sin[table + j];
  t_out[base + j + half_dim] = x2 * t_cos[table + j + half_dim] + x1 * t_sin[table + j + half_dim];
}

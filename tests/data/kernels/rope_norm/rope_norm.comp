#version 450
// A position rope in the style of ggml's Vulkan rope_norm (adjacent pairs, angles from int32
// positions and a frequency base), written for tests/diff/test_foreign_rope.py: its buffer
// names (data_a, data_pos, data_ff, data_d), a push-constant block, a fixed local size, the
// frequencies as powers of theta_scale = freq_base^(-2/n_dims), no range reduction before
// sin and cos, and one tensor per dispatch (the manifest runs it for q, then for k).

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(binding = 0) readonly buffer A { float data_a[]; };
layout(binding = 1) readonly buffer Pos { int data_pos[]; };
layout(binding = 2) readonly buffer FF { float data_ff[]; };
layout(binding = 3) writeonly buffer D { float data_d[]; };

layout(push_constant) uniform parameter {
  uint n_pairs;
  uint n_dims;
  uint n_heads;
  uint n_tokens;
  uint has_ff;
  float freq_base;
  float freq_scale;
} p;

void main() {
  const uint pair = gl_GlobalInvocationID.x;
  if (pair >= p.n_pairs) {
    return;
  }
  const uint half_dims = p.n_dims / 2;
  const uint i0 = 2 * (pair % half_dims);
  const uint token = (pair / half_dims / p.n_heads) % p.n_tokens;
  const float theta_scale = pow(p.freq_base, -2.0 / float(p.n_dims));
  const float ff = p.has_ff != 0 ? data_ff[i0 / 2] : 1.0;
  const float theta = float(data_pos[token]) * pow(theta_scale, float(i0 / 2)) / ff * p.freq_scale;
  const float c = cos(theta);
  const float s = sin(theta);
  const float x0 = data_a[2 * pair];
  const float x1 = data_a[2 * pair + 1];
  data_d[2 * pair] = x0 * c - x1 * s;
  data_d[2 * pair + 1] = x0 * s + x1 * c;
}

#version 450
// Memory-read ceiling (benchmarks/ceiling.py): every invocation grid-strides over the buffer
// reading uvec4, four independent loads in flight, and folds what it read into one value that
// is stored only if it matches a constant, so the reads cannot be optimized away.
layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer SinkBuffer { uint t_sink[]; };
layout(set = 0, binding = 1) readonly buffer DataBuffer { uvec4 t_data[]; };

layout(push_constant) uniform PushConstants { uint n_vec4; } pc;

void main() {
  const uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint n = pc.n_vec4;
  uvec4 acc = uvec4(0);
  uint i = gl_GlobalInvocationID.x;
  while (i + 3 * threads < n) {
    const uvec4 a = t_data[i];
    const uvec4 b = t_data[i + threads];
    const uvec4 c = t_data[i + 2 * threads];
    const uvec4 d = t_data[i + 3 * threads];
    acc ^= (a ^ b) ^ (c ^ d);
    i += 4 * threads;
  }
  while (i < n) {
    acc ^= t_data[i];
    i += threads;
  }
  if (all(equal(acc, uvec4(0x9E3779B9u)))) {
    t_sink[0] = acc.x;
  }
}

#version 450
// Clock warm-up (benchmarks/ceiling.py): a long dependent chain of fused multiply-adds per
// invocation that keeps every SM busy, so the GPU has left its idle clocks before the
// timed dispatches that follow it in the same submit. The result is stored only if it
// matches a constant, so the chain cannot be optimized away.
layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer SinkBuffer { uint t_sink[]; };

layout(push_constant) uniform PushConstants { uint iters; } pc;

void main() {
  float a = float(gl_GlobalInvocationID.x & 255u) * 0.001;
  float b = 1.0 - a;
  for (uint i = 0; i < pc.iters; ++i) {
    a = fma(a, 0.999, 0.001);
    b = fma(b, 0.998, 0.002);
  }
  if (a + b == 12345.0) {
    t_sink[0] = gl_GlobalInvocationID.x;
  }
}

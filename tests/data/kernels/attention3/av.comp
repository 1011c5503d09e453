#version 450
// Step 3 (see av.wgsl): out[s, h, d] = sum over every column c < ctx of
// probs[h, s, c] v_cache[c, h / g, d]. One invocation an output element.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer PBuf { float p[]; };
layout(set = 0, binding = 1) readonly buffer VBuf { float vc[]; };
layout(set = 0, binding = 2) writeonly buffer OBuf { float o[]; };
layout(push_constant) uniform Cfg {
  uint heads;
  uint kv;
  uint dim;
  uint seq;
  uint ctx;
  uint row_stride;
  uint rows_a_head;
} cfg;

void main() {
  const uint t = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64;
  if (t >= cfg.seq * cfg.heads * cfg.dim) {
    return;
  }
  const uint d = t % cfg.dim;
  const uint h = (t / cfg.dim) % cfg.heads;
  const uint s = t / (cfg.dim * cfg.heads);
  const uint kvh = h / (cfg.heads / cfg.kv);
  const uint base = (h * cfg.rows_a_head + s) * cfg.row_stride;
  float acc = 0.0;
  for (uint c = 0; c < cfg.ctx; c++) {
    acc += p[base + c] * vc[(c * cfg.kv + kvh) * cfg.dim + d];
  }
  o[t] = acc;
}

#version 450
// Three-kernel causal attention, step 1 (see qk.wgsl): scores in rows of cache_rows columns,
// the masked columns of each live row WRITTEN as -1e30. One invocation a score.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer QBuf { float qv[]; };
layout(set = 0, binding = 1) readonly buffer KBuf { float kc[]; };
layout(set = 0, binding = 2) writeonly buffer SBuf { float sc[]; };
layout(push_constant) uniform Cfg {
  uint heads;
  uint kv;
  uint dim;
  uint seq;
  uint pos;
  uint ctx;
  uint row_stride;
  uint rows_a_head;
  float scale;
} cfg;

void main() {
  const uint t = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64;
  if (t >= cfg.heads * cfg.seq * cfg.ctx) {
    return;
  }
  const uint c = t % cfg.ctx;
  const uint s = (t / cfg.ctx) % cfg.seq;
  const uint h = t / (cfg.ctx * cfg.seq);
  const uint at = (h * cfg.rows_a_head + s) * cfg.row_stride + c;
  if (c > cfg.pos + s) {
    sc[at] = -1.0e30;
    return;
  }
  const uint kvh = h / (cfg.heads / cfg.kv);
  float acc = 0.0;
  for (uint d = 0; d < cfg.dim; d++) {
    acc += qv[(s * cfg.heads + h) * cfg.dim + d] * kc[(c * cfg.kv + kvh) * cfg.dim + d];
  }
  sc[at] = acc * cfg.scale;
}

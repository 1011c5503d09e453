#version 450
// Step 2, OUT OF PLACE (see softmax.wgsl): probs = softmax(scores) over every column of a
// live row, into a buffer of its own. A workgroup a row.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer SrcBuf { float src[]; };
layout(set = 0, binding = 1) writeonly buffer DstBuf { float dst[]; };
layout(push_constant) uniform Cfg {
  uint heads;
  uint seq;
  uint ctx;
  uint row_stride;
  uint rows_a_head;
} cfg;

shared float tree[64];

void main() {
  const uint lane = gl_LocalInvocationIndex;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= cfg.heads * cfg.seq) {
    return;
  }
  const uint base = ((row / cfg.seq) * cfg.rows_a_head + row % cfg.seq) * cfg.row_stride;
  float m = -3.0e38;
  for (uint c = lane; c < cfg.ctx; c += 64) {
    m = max(m, src[base + c]);
  }
  tree[lane] = m;
  barrier();
  for (uint half_n = 32; half_n > 0; half_n /= 2) {
    if (lane < half_n) {
      tree[lane] = max(tree[lane], tree[lane + half_n]);
    }
    barrier();
  }
  const float top = tree[0];
  barrier();
  float l = 0.0;
  for (uint c = lane; c < cfg.ctx; c += 64) {
    l += exp(src[base + c] - top);
  }
  tree[lane] = l;
  barrier();
  for (uint half_n = 32; half_n > 0; half_n /= 2) {
    if (lane < half_n) {
      tree[lane] += tree[lane + half_n];
    }
    barrier();
  }
  const float total = tree[0];
  for (uint c = lane; c < cfg.ctx; c += 64) {
    dst[base + c] = exp(src[base + c] - top) / total;
  }
}

#version 450
// Split-K decode attention, step 1, as another Vulkan code base writes it: partials at a
// FIXED 128 chunks per head, 32 cache rows a chunk, sizes in push constants. One workgroup
// of 32 lanes per (head, chunk); see flash_split.wgsl for the arithmetic.

layout(local_size_x = 32) in;

layout(set = 0, binding = 0) readonly buffer QBuf { float query[]; };
layout(set = 0, binding = 1) readonly buffer KBuf { float keys[]; };
layout(set = 0, binding = 2) readonly buffer VBuf { float vals[]; };
layout(set = 0, binding = 3) writeonly buffer OBuf { float acc_o[]; };
layout(set = 0, binding = 4) writeonly buffer MLBuf { float acc_ml[]; };
layout(push_constant) uniform Split {
  uint n_heads;
  uint n_kv;
  uint dim;
  uint kv_len;
  uint n_chunks;
  float qk_scale;
} pc;

const uint CHUNK = 32;
const uint MAX_CHUNKS = 128;

shared float tree[32];
shared float weight[32];

void main() {
  const uint t = gl_LocalInvocationIndex;
  const uint job = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (job >= pc.n_heads * pc.n_chunks) {
    return;
  }
  const uint head = job / pc.n_chunks;
  const uint chunk = job % pc.n_chunks;
  const uint kv = head / (pc.n_heads / pc.n_kv);
  const uint row = chunk * CHUNK + t;
  const bool live = row < pc.kv_len;
  float s = -1.0e30;
  if (live) {
    float dot_qk = 0.0;
    for (uint d = 0; d < pc.dim; d++) {
      dot_qk += query[head * pc.dim + d] * keys[(row * pc.n_kv + kv) * pc.dim + d];
    }
    s = dot_qk * pc.qk_scale;
  }
  tree[t] = s;
  barrier();
  for (uint half_n = 16; half_n > 0; half_n /= 2) {
    if (t < half_n) {
      tree[t] = max(tree[t], tree[t + half_n]);
    }
    barrier();
  }
  const float m = tree[0];
  barrier();
  const float p = live ? exp(s - m) : 0.0;
  weight[t] = p;
  tree[t] = p;
  barrier();
  for (uint half_n = 16; half_n > 0; half_n /= 2) {
    if (t < half_n) {
      tree[t] += tree[t + half_n];
    }
    barrier();
  }
  const uint slot = head * MAX_CHUNKS + chunk;
  const uint rows = min(CHUNK, pc.kv_len - chunk * CHUNK);
  for (uint d = t; d < pc.dim; d += CHUNK) {
    float o = 0.0;
    for (uint r = 0; r < rows; r++) {
      o += weight[r] * vals[((chunk * CHUNK + r) * pc.n_kv + kv) * pc.dim + d];
    }
    acc_o[slot * pc.dim + d] = o;
  }
  if (t == 0) {
    acc_ml[slot * 2] = m;
    acc_ml[slot * 2 + 1] = tree[0];
  }
}

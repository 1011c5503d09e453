#version 450
// Split-K decode attention, step 2: folds a head's chunks, read at the fixed stride of 128
// chunks per head that flash_split.comp writes. One workgroup of 32 lanes per head.

layout(local_size_x = 32) in;

layout(set = 0, binding = 0) readonly buffer OBuf { float acc_o[]; };
layout(set = 0, binding = 1) readonly buffer MLBuf { float acc_ml[]; };
layout(set = 0, binding = 2) writeonly buffer ResBuf { float result[]; };
layout(push_constant) uniform Reduce {
  uint n_heads;
  uint dim;
  uint n_chunks;
} pc;

const uint MAX_CHUNKS = 128;

void main() {
  const uint t = gl_LocalInvocationIndex;
  const uint head = gl_WorkGroupID.x;
  if (head >= pc.n_heads) {
    return;
  }
  const uint first = head * MAX_CHUNKS;
  float m = -1.0e30;
  for (uint c = 0; c < pc.n_chunks; c++) {
    m = max(m, acc_ml[(first + c) * 2]);
  }
  float l = 0.0;
  for (uint c = 0; c < pc.n_chunks; c++) {
    l += exp(acc_ml[(first + c) * 2] - m) * acc_ml[(first + c) * 2 + 1];
  }
  for (uint d = t; d < pc.dim; d += 32) {
    float o = 0.0;
    for (uint c = 0; c < pc.n_chunks; c++) {
      o += exp(acc_ml[(first + c) * 2] - m) * acc_o[(first + c) * pc.dim + d];
    }
    result[head * pc.dim + d] = o / l;
  }
}

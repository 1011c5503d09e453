#version 450
// HF-style rotary embedding over ONE tensor per dispatch (q, then k), as another Vulkan
// backend writes it: everything in push constants, the tables bound between input and
// output. out = x * cos + rotate_half(x) * sin over table rows start .. start + S - 1, each
// half of the head with its own table columns.

layout(local_size_x = 16) in;

layout(set = 0, binding = 0) readonly buffer SrcBuf { float src[]; };
layout(set = 0, binding = 1) readonly buffer CosBuf { float cos_table[]; };
layout(set = 0, binding = 2) readonly buffer SinBuf { float sin_table[]; };
layout(set = 0, binding = 3) writeonly buffer DstBuf { float dst[]; };
layout(push_constant) uniform Rope {
  uint pair_count;  // rotated pairs of this tensor
  uint head_count;  // its heads
  uint seq_len;     // S
  uint half_dim;    // head_dim / 2
  uint start;       // the table row of token 0
} rope;

void main() {
  const uint pair = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 16;
  if (pair >= rope.pair_count) {
    return;
  }
  const uint h = rope.half_dim;
  const uint col = pair % h;
  const uint head_row = pair / h;
  const uint token = (head_row / rope.head_count) % rope.seq_len;
  const uint table = (rope.start + token) * 2 * h;
  const uint at = head_row * 2 * h + col;
  const float lo = src[at];
  const float hi = src[at + h];
  dst[at] = lo * cos_table[table + col] - hi * sin_table[table + col];
  dst[at + h] = hi * cos_table[table + col + h] + lo * sin_table[table + col + h];
}

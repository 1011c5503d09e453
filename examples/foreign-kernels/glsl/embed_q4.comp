#version 450
// 4-bit grouped-scale embedding lookup as another Vulkan backend writes it: one invocation
// per 32-wide block of an output row (the embedding width must be a multiple of 32: the
// manifest declares it), a params block of its own bound last.

layout(local_size_x = 1) in;

layout(set = 0, binding = 0) writeonly buffer OutBuf { float rows_out[]; };
layout(set = 0, binding = 1) readonly buffer WBuf { uint w_packed[]; };
layout(set = 0, binding = 2) readonly buffer SBuf { float w_scale[]; };
layout(set = 0, binding = 3) readonly buffer IdBuf { int ids[]; };
layout(std140, set = 0, binding = 4) uniform Lookup {
  uint dim;         // embedding width
  uint blocks;      // live 32-wide blocks of the output
  uint vocab_rows;
  uint group;       // elements per scale group
  uint group_count; // scale groups per vocabulary row
} info;

void main() {
  const uint blk = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x;
  if (blk >= info.blocks) {
    return;
  }
  const uint per_row = info.dim / 32;
  const uint slot = blk / per_row;
  const uint first_dim = (blk % per_row) * 32;
  const int token = ids[slot];
  if (token < 0 || uint(token) >= info.vocab_rows) {
    return;  // refused on the host; never read out of range anyway
  }
  const uint vocab_row = uint(token);
  const uint first_word = (vocab_row * info.dim / 2 + first_dim / 2) / 4;
  for (uint w = 0; w < 4; ++w) {
    const uint packed = w_packed[first_word + w];
    for (uint j = 0; j < 8; ++j) {
      const uint d = first_dim + w * 8 + j;
      const float scale = w_scale[vocab_row * info.group_count + d / info.group];
      rows_out[slot * info.dim + d] = float(int((packed >> (4 * j)) & 0xFu) - 8) * scale;
    }
  }
}

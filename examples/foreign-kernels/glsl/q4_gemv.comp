#version 450
// 4-bit grouped-scale linear (GEMV route, one activation row) as another Vulkan backend
// writes it: one workgroup per output feature, its lanes striding over the row's packed words,
// the local size a specialization constant (id 1) and a params block of its own bound first.
// Runs only where K % 8 == 0 and the group length is a multiple of 8.

layout(local_size_x_id = 1) in;  // a power of two: the tree reduction halves it

layout(std140, set = 0, binding = 0) uniform MatVec {
  uint features;     // N
  uint row_words;    // packed words per weight row (K / 8)
  uint group_words;  // packed words per scale group
  uint scale_cols;   // floats per scale row (N rounded up to 4)
  uint use_bias;
} mv;
layout(set = 0, binding = 1) readonly buffer WBuf { uint w_packed[]; };
layout(set = 0, binding = 2) readonly buffer SBuf { float w_scale[]; };
layout(set = 0, binding = 3) readonly buffer XBuf { float x_vec[]; };
layout(set = 0, binding = 4) readonly buffer BBuf { float bias_values[]; };
layout(set = 0, binding = 5) writeonly buffer OBuf { float y_vec[]; };

shared float lane_acc[gl_WorkGroupSize.x];

void main() {
  const uint feature = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (feature >= mv.features) {
    return;  // uniform per workgroup
  }
  const uint lane = gl_LocalInvocationID.x;
  const uint lanes = gl_WorkGroupSize.x;
  const uint row_start = feature * mv.row_words;
  float acc = 0.0;
  for (uint w = lane; w < mv.row_words; w += lanes) {
    const uint packed = w_packed[row_start + w];
    float dot_w = 0.0;
    for (uint j = 0; j < 8; ++j) {
      const float q = float(int((packed >> (4 * j)) & 0xFu) - 8);
      dot_w = fma(q, x_vec[w * 8 + j], dot_w);
    }
    acc = fma(dot_w, w_scale[(w / mv.group_words) * mv.scale_cols + feature], acc);
  }
  lane_acc[lane] = acc;
  barrier();
  for (uint half_lanes = lanes / 2; half_lanes > 0; half_lanes /= 2) {
    if (lane < half_lanes) {
      lane_acc[lane] += lane_acc[lane + half_lanes];
    }
    barrier();
  }
  if (lane == 0) {
    float total = lane_acc[0];
    if (mv.use_bias != 0) {
      total += bias_values[feature];
    }
    y_vec[feature] = total;
  }
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// op: sdpa_with_kv_cache, kernel sdpa_update_cache_f16 — contract: harness/ops/sdpa.py
// Half precision: copies f16 k and v into the f16 caches (exact).
// One invocation per element of k ([1, S, Hkv, D]): copies k and v into cache row
// input_pos + s of k_cache and v_cache ([1, C, Hkv, D]).
#include "tensor_meta.glslh"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer KCacheBuffer { float16_t t_k_cache[]; };
layout(set = 0, binding = 1) writeonly buffer VCacheBuffer { float16_t t_v_cache[]; };
layout(set = 0, binding = 2) readonly buffer KBuffer { float16_t t_k[]; };
layout(set = 0, binding = 3) readonly buffer VBuffer { float16_t t_v[]; };
layout(set = 0, binding = 4) uniform KMeta { TensorMeta k_meta; };
// The input_pos SymInt's UBO (or a constant one); checked on the host: pos + S <= C.
layout(set = 0, binding = 5) uniform InputPos { int input_pos; };

void main() {
  const uint i = flat_workgroup_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= k_meta.numel) {
    return;
  }
  const uint width = k_meta.sizes.x * k_meta.sizes.y;  // Hkv * D
  const uint s = i / width;
  const uint row = uint(input_pos) + s;
  const uint dst = row * width + i % width;
  t_k_cache[dst] = float16_t(float(t_k[i]));
  t_v_cache[dst] = float16_t(float(t_v[i]));
}

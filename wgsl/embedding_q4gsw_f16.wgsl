// op: embedding_q4gsw, kernel embedding_q4gsw_f16 — contract: harness/ops/embedding_q4gsw.py
// Half precision: loads f16, computes in f32 exactly as embedding_q4gsw does, and rounds
// each output once to f16.
// One invocation per output element (token row, dim d): the q4 byte of (token, d) holds d in
// its low nibble when d is even, in its high nibble when odd; value = (nibble - 8) * scale.
// The weight is read as u32 words (4 bytes each), so any even D works.
enable f16;

struct Params {
    numel: u32,         // live elements of out
    embed_dim: u32,     // D
    group_size: u32,
    groups_per_row: u32,
    vocab: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> indices: array<i32>;
@group(0) @binding(2) var<storage, read> weight: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

override wg_size: u32 = 64u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * wg_size;
    if (i >= params.numel) {
        return;
    }
    let d = i % params.embed_dim;
    let token = indices[i / params.embed_dim];
    // The host refuses ids outside the vocabulary before dispatching; should one get here
    // anyway, the element is left unwritten (slack poison shows it), never read out of range.
    if (token < 0 || u32(token) >= params.vocab) {
        return;
    }
    let row = u32(token);
    let byte_index = row * (params.embed_dim / 2u) + d / 2u;
    let byte = (weight[byte_index / 4u] >> (8u * (byte_index % 4u))) & 0xFFu;
    let nibble = select(byte >> 4u, byte & 0xFu, d % 2u == 0u);
    let scale = scales[row * params.groups_per_row + d / params.group_size];
    out[i] = f16(f32(i32(nibble) - 8) * scale);
}

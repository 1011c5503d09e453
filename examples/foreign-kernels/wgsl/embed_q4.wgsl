// 4-bit grouped-scale embedding lookup in a foreign style: one invocation per 32-wide block of
// an output row (so the embedding width must be a multiple of 32: the manifest declares it),
// reading the block's 16 packed bytes as 4 aligned words.
struct LookupArgs {
    total_blocks: u32,    // live output elements / 32
    blocks_per_row: u32,  // embedding width / 32
    row_bytes: u32,       // packed bytes per vocabulary row (width / 2)
    group_len: u32,
    groups_per_row: u32,
    vocab_size: u32,
    pad_a: u32,
    pad_b: u32,
}

@group(0) @binding(0) var<storage, read> token_ids: array<i32>;
@group(0) @binding(1) var<storage, read> packed_rows: array<u32>;
@group(0) @binding(2) var<storage, read> row_scales: array<f32>;
@group(0) @binding(3) var<uniform> lookup: LookupArgs;
@group(0) @binding(4) var<storage, read_write> embedded: array<f32>;

@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let blk = gid.x + gid.y * groups.x;
    if (blk >= lookup.total_blocks) {
        return;
    }
    let slot = blk / lookup.blocks_per_row;
    let blk_in_row = blk % lookup.blocks_per_row;
    let token = token_ids[slot];
    // The host refuses ids outside the vocabulary; never read out of range anyway.
    if (token < 0 || u32(token) >= lookup.vocab_size) {
        return;
    }
    let vocab_row = u32(token);
    let first_word = (vocab_row * lookup.row_bytes + blk_in_row * 16u) / 4u;
    let width = lookup.blocks_per_row * 32u;
    for (var w = 0u; w < 4u; w++) {
        let packed = packed_rows[first_word + w];
        for (var j = 0u; j < 8u; j++) {
            let d = blk_in_row * 32u + w * 8u + j;  // nibble j of the word: dim d, low first
            let scale = row_scales[vocab_row * lookup.groups_per_row + d / lookup.group_len];
            embedded[slot * width + d] = f32(i32((packed >> (4u * j)) & 0xFu) - 8) * scale;
        }
    }
}

// HF-style rotary embedding over ONE tensor per dispatch: the runtime dispatches it for q,
// then for k, each with its own output, input and params (the slot's single dispatch over
// q and k is split in two). out = x * cos + rotate_half(x) * sin over the table rows
// first_row .. first_row + S - 1, each half of the head with its own table columns.
struct RotaryArgs {
    pairs: u32,      // rotated pairs of this tensor: numel / 2
    heads: u32,      // its heads
    tokens: u32,     // S
    half: u32,       // head_dim / 2
    first_row: u32,  // the table row of token 0 (start_pos)
    reserved0: u32,
    reserved1: u32,
    reserved2: u32,
}

@group(0) @binding(0) var<storage, read_write> t_out: array<f32>;
@group(0) @binding(1) var<storage, read> t_in: array<f32>;
@group(0) @binding(2) var<storage, read> t_cos: array<f32>;
@group(0) @binding(3) var<storage, read> t_sin: array<f32>;
@group(0) @binding(4) var<uniform> rope: RotaryArgs;

@compute @workgroup_size(8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let pair = gid.x + gid.y * groups.x * 8u;
    if (pair >= rope.pairs) {
        return;
    }
    let h = rope.half;
    let col = pair % h;
    let head_row = pair / h;  // (batch, token, head) flattened
    let token = (head_row / rope.heads) % rope.tokens;
    let table = (rope.first_row + token) * 2u * h;
    let at = head_row * 2u * h + col;
    let lo = t_in[at];
    let hi = t_in[at + h];
    t_out[at] = lo * t_cos[table + col] - hi * t_sin[table + col];
    t_out[at + h] = hi * t_cos[table + col + h] + lo * t_sin[table + col + h];
}

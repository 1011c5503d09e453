struct RopeArgs {
    pairs: u32,
    heads: u32,
    seq_len: u32,
    half: u32,
    start: u32,
}

@group(0) @binding(0) var<storage, read> t_in: array<f32>;
@group(0) @binding(1) var<storage, read> t_cos: array<f32>;
@group(0) @binding(2) var<storage, read> t_sin: array<f32>;
@group(0) @binding(3) var<storage, read_write> t_out: array<f32>;
@group(0) @binding(4) var<uniform> args: RopeArgs;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let p = gid.x;
    if (p >= args.pairs) {
        return;
    }
    let h = args.half;
    let i = p % h;
    let row = p / h;
    let s = (row / args.heads) % args.seq_len;
    let table = (args.start + s) * 2u * h;
    let first = row * 2u * h + i;
    let x1 = t_in[first];
    let x2 = t_in[first + h];
    t_out[first] = x1 * t_cos[table + i] - x2 * t_sin[table + i];
    t_out[first + h] = x2 * t_cos[table + i + h] + x1 * t_sin[table + i + h];
}

// silu in half precision, in another code base's style: it loads, computes AND stores in f16
// (no widening to f32), so exp(-v) overflows f16's 65504 below v ~ -11.09 and the result is
// -0 there (v / inf). Own names: src/dst, a params block with the count first.
enable f16;

struct Args {
    n: u32,
    _a: u32,
    _b: u32,
    _c: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read_write> dst: array<f16>;
@group(0) @binding(2) var<uniform> args: Args;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= args.n) {
        return;
    }
    let v = src[i];
    dst[i] = v / (1.0h + exp(-v));
}

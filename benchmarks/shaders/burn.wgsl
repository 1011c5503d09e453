// Clock warm-up (benchmarks/ceiling.py): a long dependent chain of fused multiply-adds per
// invocation that keeps every SM busy, so the GPU has left its idle clocks before the
// timed dispatches that follow it in the same submit. The result is stored only if it
// matches a constant, so the chain cannot be optimized away.
struct Params {
    iters: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> sink: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;

override wg_size: u32 = 256u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var a = f32(gid.x & 255u) * 0.001;
    var b = 1.0 - a;
    for (var i = 0u; i < params.iters; i++) {
        a = fma(a, 0.999, 0.001);
        b = fma(b, 0.998, 0.002);
    }
    if (a + b == 12345.0) {
        sink[0] = gid.x;
    }
}

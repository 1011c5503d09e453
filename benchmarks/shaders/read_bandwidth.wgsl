// Memory-read ceiling (benchmarks/ceiling.py): every invocation grid-strides over the buffer
// reading vec4<u32>, four independent loads in flight, and folds what it read into one value
// that is stored only if it matches a constant, so the reads cannot be optimized away.
struct Params {
    n_vec4: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> sink: array<u32>;
@group(0) @binding(1) var<storage, read> data: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> params: Params;

override wg_size: u32 = 256u;

@compute @workgroup_size(wg_size)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let threads = nwg.x * wg_size;
    let n = params.n_vec4;
    var acc = vec4<u32>(0u);
    var i = gid.x;
    while (i + 3u * threads < n) {
        let a = data[i];
        let b = data[i + threads];
        let c = data[i + 2u * threads];
        let d = data[i + 3u * threads];
        acc ^= (a ^ b) ^ (c ^ d);
        i += 4u * threads;
    }
    while (i < n) {
        acc ^= data[i];
        i += threads;
    }
    if (all(acc == vec4<u32>(0x9E3779B9u))) {
        sink[0] = acc.x;
    }
}

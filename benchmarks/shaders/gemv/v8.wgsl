// op: linear_q4gsw, kernel q4gsw_gemv — contract: harness/ops/linear_q4gsw.py
// Sweep variant v8 = the shipped kernel with the decode of word_dot changed (see nibbles).
// Cooperative GEMV for M == 1 (K % 8 == 0, group_size % 8 == 0). A workgroup computes the two
// adjacent columns 2p and 2p+1 and grid-strides over column pairs. Lane l takes weight words
// l, l + wg_size, ... of both rows, WORDS_PER_STEP words per step with every load of a step
// issued before any use; each word is dotted with its 8 activations (two vec4 loads) and
// scaled by its group's scale. A shared-memory tree reduction combines the lanes and lane 0
// adds the bias and writes. docs/benchmarks.md explains the choices.
struct Params {
    m: u32,
    n: u32,
    k: u32,
    k_words: u32,          // u32 words per weight row: K / 8
    group_size: u32,
    n_padded: u32,         // columns of the scales: N rounded up to 4
    has_bias: u32,
    gemv_workgroups: u32,  // the logical workgroup count: the grid stride over column pairs
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> weight: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

override wg_size: u32 = 64u;  // a power of two: the tree reduction halves it
override group_size: u32 = 128u;  // passed by the host; this variant reads params.group_size
const WORDS_PER_STEP: u32 = 4u;  // independent weight words in flight per lane and row

var<workgroup> partial: array<vec2<f32>, wg_size>;

// Nibble j of a half-word sits at bits 4j. OR-ing it into the mantissa of 2^23 gives
// 2^23 + q * 16^j; one fused multiply-add by 16^-j (exact: a power of two) minus
// (2^23 * 16^-j + 8) gives q - 8 exactly, unscaled: the decode costs what the shipped kernel's does (one
// LOP3 and one FADD per nibble) but the 8 products then chain into one sum without its
// vec4 multiply and 16^-j fold (25 instead of 28 operations per word and row).
// (Vector constants are function-scope: naga 0.32 fails to apply pipeline overrides to a
// module that has a module-scope vector const and an override-sized array.)
fn nibbles(h: u32) -> vec4<f32> {
    const MAGIC = vec4<u32>(0x4B000000u);
    const NIBBLE_MASKS = vec4<u32>(0xFu, 0xF0u, 0xF00u, 0xF000u);
    const UNSCALE = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);  // 16^-j, exact
    const OFFSET = vec4<f32>(-8388616.0, -524296.0, -32776.0, -2056.0);  // -(2^23 16^-j + 8)
    return fma(bitcast<vec4<f32>>((vec4<u32>(h) & NIBBLE_MASKS) | MAGIC), UNSCALE, OFFSET);
}

// sum_p (nibble_p - 8) * x_p over the 8 nibbles of word w; lo holds x for nibbles 0-3, hi
// for 4-7: one multiply and seven fused multiply-adds in a chain.
fn word_dot(w: u32, lo: vec4<f32>, hi: vec4<f32>) -> f32 {
    let a = nibbles(w);
    let b = nibbles(w >> 16u);
    var d = a.x * lo.x;
    d = fma(a.y, lo.y, d);
    d = fma(a.z, lo.z, d);
    d = fma(a.w, lo.w, d);
    d = fma(b.x, hi.x, d);
    d = fma(b.y, hi.y, d);
    d = fma(b.z, hi.z, d);
    return fma(b.w, hi.w, d);
}

@compute @workgroup_size(wg_size)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let first = wid.x + wid.y * nwg.x;
    let stride = params.gemv_workgroups;
    if (first >= stride) {
        return;  // the waste of a folded grid; uniform per workgroup
    }
    let n = params.n;
    let kw = params.k_words;
    let scale_row = params.n_padded / 2u;  // vec2 per scales row
    // The scale group of the lane's first word, and how a step of wg_size words advances
    // it (a division once per lane instead of once per word).
    let group_words = params.group_size / 8u;
    let g_first = lane / group_words;
    let r_first = lane % group_words;
    let g_step = wg_size / group_words;
    let r_step = wg_size % group_words;

    for (var pair = first; pair < (n + 1u) / 2u; pair += stride) {
        let col = 2u * pair;
        let has_second = col + 1u < n;
        let row0 = col * kw;
        let row1 = select(row0, row0 + kw, has_second);  // odd N: recompute col, never stored
        var acc = vec2<f32>(0.0);
        var g = g_first;
        var r = r_first;
        for (var base = lane; base < kw; base += wg_size * WORDS_PER_STEP) {
            var w0: array<u32, WORDS_PER_STEP>;
            var w1: array<u32, WORDS_PER_STEP>;
            for (var u = 0u; u < WORDS_PER_STEP; u++) {
                let word = base + u * wg_size;
                if (word < kw) {
                    w0[u] = weight[row0 + word];
                    w1[u] = weight[row1 + word];
                }
            }
            for (var u = 0u; u < WORDS_PER_STEP; u++) {
                let word = base + u * wg_size;
                if (word < kw) {
                    let lo = x[2u * word];
                    let hi = x[2u * word + 1u];
                    let s = scales[g * scale_row + pair];
                    let dots = vec2<f32>(word_dot(w0[u], lo, hi), word_dot(w1[u], lo, hi));
                    acc = fma(dots, s, acc);
                }
                g += g_step;
                r += r_step;
                if (r >= group_words) {
                    r -= group_words;
                    g += 1u;
                }
            }
        }
        partial[lane] = acc;
        workgroupBarrier();
        for (var half = wg_size / 2u; half > 0u; half /= 2u) {
            if (lane < half) {
                partial[lane] += partial[lane + half];
            }
            workgroupBarrier();
        }
        if (lane == 0u) {
            var result = partial[0];
            if (params.has_bias != 0u) {
                result.x += bias[col];
                if (has_second) {
                    result.y += bias[col + 1u];
                }
            }
            out[col] = result.x;
            if (has_second) {
                out[col + 1u] = result.y;
            }
        }
        workgroupBarrier();  // partial is rewritten for the next pair
    }
}

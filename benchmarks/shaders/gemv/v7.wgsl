// op: linear_q4gsw, kernel q4gsw_gemv — contract: harness/ops/linear_q4gsw.py
// Sweep variant v7 = the shipped kernel with unchecked full steps and a constant scale-index step.
// Cooperative GEMV for M == 1 (K % 8 == 0, group_size % 8 == 0). A workgroup computes the two
// adjacent columns 2p and 2p+1 and grid-strides over column pairs. Lane l takes weight words
// l, l + wg_size, ... of both rows, WORDS_PER_STEP words per step with every load of a step
// issued before any use; each word is dotted with its 8 activations (two vec4 loads) and
// scaled by its group's scale. Steps whose words are all in range run without bounds checks,
// and when wg_size is a multiple of the words per scale group the scale index advances by a
// constant; the last, partial step is checked word by word. A shared-memory tree reduction
// combines the lanes and lane 0 adds the bias and writes. docs/benchmarks.md explains the
// choices.
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

// Nibble j of a half-word sits at bits 4j. OR-ing it into the mantissa of 2^23 and
// subtracting 2^23 + 8 * 16^j gives (nibble - 8) * 16^j exactly: no int-to-float conversion.
// (Vector constants are function-scope: naga 0.32 fails to apply pipeline overrides to a
// module that has a module-scope vector const and an override-sized array.)
fn nibbles(h: u32) -> vec4<f32> {
    const MAGIC = vec4<u32>(0x4B000000u);
    const NIBBLE_MASKS = vec4<u32>(0xFu, 0xF0u, 0xF00u, 0xF000u);
    const NIBBLE_BIAS = vec4<f32>(8388616.0, 8388736.0, 8390656.0, 8421376.0);
    return bitcast<vec4<f32>>((vec4<u32>(h) & NIBBLE_MASKS) | MAGIC) - NIBBLE_BIAS;
}

// sum_p (nibble_p - 8) * x_p over the 8 nibbles of word w; lo holds x for nibbles 0-3, hi
// for 4-7. Component j of t carries the exact factor 16^j, removed exactly by UNSCALE.
fn word_dot(w: u32, lo: vec4<f32>, hi: vec4<f32>) -> f32 {
    const UNSCALE = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);  // 16^-j, exact
    let t = fma(nibbles(w >> 16u), hi, nibbles(w) * lo);
    return fma(t.w, UNSCALE.w, fma(t.z, UNSCALE.z, fma(t.y, UNSCALE.y, t.x)));
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
    // The scale group of the lane's first word, and how wg_size words advance it (a division
    // once per lane instead of once per word), as an index into scales. When wg_size is a
    // multiple of the group's words (`aligned`), every word of a lane advances the index by
    // index_step; otherwise r tracks the word's place in its group.
    let group_words = params.group_size / 8u;
    let aligned = wg_size % group_words == 0u;
    let g_first = lane / group_words;
    let r_first = lane % group_words;
    let index_step = (wg_size / group_words) * scale_row;
    let r_step = wg_size % group_words;
    let step_words = wg_size * WORDS_PER_STEP;
    // A step starting at base < full_end has all its words in range.
    let span = (WORDS_PER_STEP - 1u) * wg_size;
    let full_end = select(0u, kw - span, kw > span);

    for (var pair = first; pair < (n + 1u) / 2u; pair += stride) {
        let col = 2u * pair;
        let has_second = col + 1u < n;
        let row0 = col * kw;
        let row1 = select(row0, row0 + kw, has_second);  // odd N: recompute col, never stored
        var acc = vec2<f32>(0.0);
        var s_index = g_first * scale_row + pair;
        var r = r_first;
        var base = lane;
        for (; base < full_end; base += step_words) {
            var w0: array<u32, WORDS_PER_STEP>;
            var w1: array<u32, WORDS_PER_STEP>;
            for (var u = 0u; u < WORDS_PER_STEP; u++) {
                w0[u] = weight[row0 + base + u * wg_size];
                w1[u] = weight[row1 + base + u * wg_size];
            }
            for (var u = 0u; u < WORDS_PER_STEP; u++) {
                let word = base + u * wg_size;
                let lo = x[2u * word];
                let hi = x[2u * word + 1u];
                let s = scales[s_index];
                let dots = vec2<f32>(word_dot(w0[u], lo, hi), word_dot(w1[u], lo, hi));
                acc = fma(dots, s, acc);
                s_index += index_step;
                if (!aligned) {
                    r += r_step;
                    if (r >= group_words) {
                        r -= group_words;
                        s_index += scale_row;
                    }
                }
            }
        }
        if (base < kw) {  // the last, partial step
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
                    let s = scales[s_index];
                    let dots = vec2<f32>(word_dot(w0[u], lo, hi), word_dot(w1[u], lo, hi));
                    acc = fma(dots, s, acc);
                }
                s_index += index_step;
                r += r_step;
                if (r >= group_words) {
                    r -= group_words;
                    s_index += scale_row;
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

// op: linear_q4gsw, kernel q4gsw_gemv_f16 — contract: harness/ops/linear_q4gsw.py
// Half precision: loads f16 activations and bias (scales stay f32), dequantizes, multiplies
// and accumulates in f32 exactly as q4gsw_gemv does, and rounds each output once to f16.
// The weight stream is q4gsw_gemv's; the activations are half its bytes (one vec4<f16>
// load per 4 nibbles, widened to f32).
// Cooperative GEMV for M == 1 (K % 8 == 0, group_size % 8 == 0). A workgroup computes the two
// adjacent columns 2p and 2p+1 and grid-strides over column pairs. Lane l takes weight words
// l, l + wg_size, ... of both rows, STEP_WORDS words per step with every load of a step
// issued before any use; each word is dotted with its 8 activations (two vec4 loads) and
// scaled by its group's scale. Steps whose words are all in range run without bounds checks
// and hold their words in named values, not a function-local array (naga's arrays cost
// WebGPU 1.5x on an NVIDIA H200: docs/benchmarks.md); when wg_size is a multiple of the
// words per scale group the scale index advances by a constant; the last, partial step goes
// word by word. A shared-memory tree reduction combines the lanes and lane 0 adds the bias
// and writes. docs/benchmarks.md explains the choices.
enable f16;

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

@group(0) @binding(0) var<storage, read_write> out: array<f16>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> weight: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> bias: array<f16>;
@group(0) @binding(5) var<uniform> params: Params;

override wg_size: u32 = 64u;  // a power of two: the tree reduction halves it
// The graph's group size (the host passes it, as the GLSL gets it through a specialization
// constant): the scale-index arithmetic below then folds at pipeline creation (2-5 % on an
// H200 back to back, docs/benchmarks.md); params.group_size serves the GEMM.
override group_size: u32 = 128u;
const STEP_WORDS: u32 = 4u;  // words per lane and row in flight; the full step is written for 4

var<workgroup> partial: array<vec2<f32>, wg_size>;

// Nibble j of a half-word sits at bits 4j. OR-ing it into the mantissa of 2^23 gives
// 2^23 + q * 16^j; one fused multiply-add by 16^-j (exact: a power of two) minus
// (2^23 * 16^-j + 8) gives q - 8 exactly: one LOP3 and one FFMA per nibble, no int-to-float
// conversion, and the 8 products chain into one sum (25 operations per word and row).
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

// The dots of word `word` of both rows (weight words a, b) with its 8 activations.
fn pair_dot(a: u32, b: u32, word: u32) -> vec2<f32> {
    let lo = vec4<f32>(x[2u * word]);
    let hi = vec4<f32>(x[2u * word + 1u]);
    return vec2<f32>(word_dot(a, lo, hi), word_dot(b, lo, hi));
}

// (scale index, place in the group) of a lane's next word.
fn next_scale(
    sr: vec2<u32>, aligned: bool, index_step: u32, r_step: u32, group_words: u32, scale_row: u32
) -> vec2<u32> {
    var s = sr.x + index_step;
    var r = sr.y;
    if (!aligned) {
        r += r_step;
        if (r >= group_words) {
            r -= group_words;
            s += scale_row;
        }
    }
    return vec2<u32>(s, r);
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
    let group_words = group_size / 8u;
    let aligned = wg_size % group_words == 0u;
    let g_first = lane / group_words;
    let r_first = lane % group_words;
    let index_step = (wg_size / group_words) * scale_row;
    let r_step = wg_size % group_words;
    let step_words = wg_size * STEP_WORDS;
    // A step starting at base < full_end has all its words in range.
    let span = (STEP_WORDS - 1u) * wg_size;
    let full_end = select(0u, kw - span, kw > span);

    for (var pair = first; pair < (n + 1u) / 2u; pair += stride) {
        let col = 2u * pair;
        let has_second = col + 1u < n;
        let row0 = col * kw;
        let row1 = select(row0, row0 + kw, has_second);  // odd N: recompute col, never stored
        var acc = vec2<f32>(0.0);
        var sr = vec2<u32>(g_first * scale_row + pair, r_first);  // (scale index, r)
        var base = lane;
        for (; base < full_end; base += step_words) {
            let i0 = base;
            let i1 = i0 + wg_size;
            let i2 = i1 + wg_size;
            let i3 = i2 + wg_size;
            let a0 = weight[row0 + i0];
            let a1 = weight[row0 + i1];
            let a2 = weight[row0 + i2];
            let a3 = weight[row0 + i3];
            let b0 = weight[row1 + i0];
            let b1 = weight[row1 + i1];
            let b2 = weight[row1 + i2];
            let b3 = weight[row1 + i3];
            acc = fma(pair_dot(a0, b0, i0), scales[sr.x], acc);
            sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
            acc = fma(pair_dot(a1, b1, i1), scales[sr.x], acc);
            sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
            acc = fma(pair_dot(a2, b2, i2), scales[sr.x], acc);
            sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
            acc = fma(pair_dot(a3, b3, i3), scales[sr.x], acc);
            sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
        }
        // The last, partial step: word by word (it holds at most STEP_WORDS - 1 words).
        for (var word = base; word < kw; word += wg_size) {
            let dots = pair_dot(weight[row0 + word], weight[row1 + word], word);
            acc = fma(dots, scales[sr.x], acc);
            sr = next_scale(sr, aligned, index_step, r_step, group_words, scale_row);
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
                result.x += f32(bias[col]);
                if (has_second) {
                    result.y += f32(bias[col + 1u]);
                }
            }
            out[col] = f16(result.x);
            if (has_second) {
                out[col + 1u] = f16(result.y);
            }
        }
        workgroupBarrier();  // partial is rewritten for the next pair
    }
}

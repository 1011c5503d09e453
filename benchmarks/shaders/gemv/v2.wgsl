// op: linear_q4gsw, kernel q4gsw_gemv — contract: harness/ops/linear_q4gsw.py
// Cooperative GEMV for M == 1 (K % 8 == 0, group_size % 8 == 0). A workgroup computes the two
// adjacent columns 2p and 2p+1 and grid-strides over column pairs. Lane l takes weight words
// l, l + wg_size, ... of both rows, WORDS_PER_STEP words per step; with PREFETCH the loads of
// the next step are issued before the words of this step are decoded, so a lane always has
// a step of loads in flight. Each word is dotted with its 8 activations (two vec4 loads) and
// scaled by its group's scale. A shared-memory tree reduction of fan-in FAN combines the lanes
// (double-buffered, so a pass needs no barrier after its last read) and lane 0 adds the bias
// and writes. docs/benchmarks.md explains the choices.
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

override wg_size: u32 = 64u;  // a power of two: the tree reduction divides it
const WORDS_PER_STEP: u32 = 4u;  // independent weight words in flight per lane and row
const PREFETCH: bool = true;  // issue the next step's loads before decoding this step
const FAN: u32 = 8u;  // lanes summed per lane and level of the reduction tree (power of two)

var<workgroup> partial: array<vec2<f32>, wg_size * 2u>;  // two buffers of wg_size

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
    // The scale group of the lane's first word, and how a step of wg_size words advances
    // it (a division once per lane instead of once per word), as an index into scales.
    let group_words = params.group_size / 8u;
    let g_first = lane / group_words;
    let r_first = lane % group_words;
    let index_step = (wg_size / group_words) * scale_row;
    let r_step = wg_size % group_words;
    let step_words = wg_size * WORDS_PER_STEP;
    var buffer = 0u;

    for (var pair = first; pair < (n + 1u) / 2u; pair += stride) {
        let col = 2u * pair;
        let has_second = col + 1u < n;
        let row0 = col * kw;
        let row1 = select(row0, row0 + kw, has_second);  // odd N: recompute col, never stored
        var acc = vec2<f32>(0.0);
        var s_index = g_first * scale_row + pair;
        var r = r_first;
        var w0: array<u32, WORDS_PER_STEP>;
        var w1: array<u32, WORDS_PER_STEP>;
        if (PREFETCH) {
            for (var u = 0u; u < WORDS_PER_STEP; u++) {
                let word = lane + u * wg_size;
                if (word < kw) {
                    w0[u] = weight[row0 + word];
                    w1[u] = weight[row1 + word];
                }
            }
        }
        for (var base = lane; base < kw; base += step_words) {
            // With PREFETCH the next step's words, else this step's.
            let load_base = select(base, base + step_words, PREFETCH);
            var n0: array<u32, WORDS_PER_STEP>;
            var n1: array<u32, WORDS_PER_STEP>;
            for (var u = 0u; u < WORDS_PER_STEP; u++) {
                let word = load_base + u * wg_size;
                if (word < kw) {
                    n0[u] = weight[row0 + word];
                    n1[u] = weight[row1 + word];
                }
            }
            if (!PREFETCH) {
                w0 = n0;
                w1 = n1;
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
            if (PREFETCH) {
                w0 = n0;
                w1 = n1;
            }
        }
        // Tree reduction: at each level the first size / fan lanes each add fan partials
        // lane + j * (size / fan); the last level ends in lane 0's registers.
        let b = buffer * wg_size;
        partial[b + lane] = acc;
        workgroupBarrier();
        var size = wg_size;
        loop {
            let fan = min(size, FAN);
            let next = size / fan;
            if (lane < next) {
                var sum = partial[b + lane];
                for (var j = 1u; j < fan; j++) {
                    sum += partial[b + lane + j * next];
                }
                if (next > 1u) {
                    partial[b + lane] = sum;
                } else {
                    if (params.has_bias != 0u) {
                        sum.x += bias[col];
                        if (has_second) {
                            sum.y += bias[col + 1u];
                        }
                    }
                    out[col] = sum.x;
                    if (has_second) {
                        out[col + 1u] = sum.y;
                    }
                }
            }
            if (next == 1u) {
                break;
            }
            workgroupBarrier();
            size = next;
        }
        buffer ^= 1u;  // the next pair writes the other buffer: no barrier needed here
    }
}

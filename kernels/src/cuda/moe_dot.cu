// Per-slot int4 expert kernel with integer dot products (dp4a), compiled at run time with NVRTC
// as its own module, so a compile failure here leaves the f32 kernels of moe.cu usable.
// Same expert layout, work list and arguments as `moe_matvec_t1` in moe.cu (read its header).
//
// Why: the f32 kernel spends ~3.3 instructions per weight (mask, subtract, FMA), about the
// H200's issue rate at HBM speed, so it stalls in the multiprocessors at ~37% of the streaming
// read. Here the activations of the block's slot are quantized once per block to 16-bit
// integers x = 256 h + l (h, l signed bytes), one scale per 32-column chunk (the span of one
// 16-byte weight load), and a 32-bit weight word (8 nibbles) costs 3 logic ops and 4 dp4a:
// ~0.9 instructions per weight, exact integer arithmetic up to one f32 conversion, multiply and
// FMA per 32 weights.
//
// Weights enter dp4a as signed bytes 16 (n - 8): for a nibble n in the high half of a byte,
// (byte ^ 0x88) & 0xF0 read as s8 is 16 (n ^ 8) - 256 [n < 8] = 16 (n - 8); the low nibble is
// first shifted up 4 bits. Per 16-byte chunk (32 weights, one scale group), the sums stay below
// 32 x 128 x 128 x 257 < 2^31. The only rounding besides f32 sums is the activation
// quantization: |x - x_int * step| <= step / 2 with step = (largest |x| of the chunk) / 32639.
// CPU model of this arithmetic: `reference::expert_ffn_dot`. (This header describes moe_dot,
// the register-ring kernel `moe_dot_a_r2b3`; the unsigned-nibble kernels below compute the
// same per-chunk integer sums with fewer instructions: read their header.)

#define BLOCK 256
// Largest |x_int|: keeps h = (x_int + 128) >> 8 within a signed byte (h <= 127).
#define QMAX 32639.0f

__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

// 16-byte weight load that skips L1 (weights are read once per item).
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// Asks the L2 to fetch the `bytes` at `p`, holding no registers while the bytes
// are in flight. On sm_90+ with a 16-byte aligned range of whole 16-byte words: one bulk
// prefetch (cp.async.bulk.prefetch.L2, issued by thread 0 of the block); else one
// prefetch.global.L2 per 128-byte line, spread over the block's threads, each address clamped
// into the range (so no byte outside it is named).
__device__ __forceinline__ void prefetch_l2(const unsigned char* p, unsigned int bytes) {
    if (bytes == 0) return;
#if __CUDA_ARCH__ >= 900
    if (((unsigned long long)p % 16) == 0 && bytes % 16 == 0) {
        if (threadIdx.x == 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes)
                         : "memory");
        return;
    }
#endif
    const unsigned long long first = (unsigned long long)p & ~127ull;
    const unsigned long long end = (unsigned long long)p + bytes;
    for (unsigned long long a = first + 128ull * threadIdx.x; a < end; a += 128ull * BLOCK) {
        const unsigned long long q = a < (unsigned long long)p ? (unsigned long long)p : a;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
    }
}

__device__ __forceinline__ unsigned int word_of(const uint4& w, int i) {
    return i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w;
}

// c + sum of the 4 signed byte products of a and b.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// 16 bytes of activations. COHERENT: through the L2 only (ld.global.cg), for rows another
// block of the same launch wrote (the fused kernels); else the compiler's choice.
template <bool COHERENT>
__device__ __forceinline__ float4 load4(const float* p) {
    if (COHERENT) return __ldcg((const float4*)p);
    return *(const float4*)p;
}

// Activations 8u..8u+7 of slot s: mode 0 the token row x[slot_input[s]], mode 1
// silu(gate) * up of the slot's gate+up row.
template <bool COHERENT>
__device__ __forceinline__ void activation8(const float* __restrict__ input,
                                            const unsigned int* __restrict__ slot_input,
                                            unsigned int s, unsigned int k, int mode,
                                            unsigned int u, float* v) {
    if (mode == 0) {
        const float* p = input + (size_t)slot_input[s] * k + 8 * u;
        const float4 a = load4<COHERENT>(p), b = load4<COHERENT>(p + 4);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        const float* g = input + (size_t)s * 2 * k + 8 * u;
        const float4 a0 = load4<COHERENT>(g), a1 = load4<COHERENT>(g + 4);
        const float4 b0 = load4<COHERENT>(g + k), b1 = load4<COHERENT>(g + k + 4);
        v[0] = silu(a0.x) * b0.x; v[1] = silu(a0.y) * b0.y;
        v[2] = silu(a0.z) * b0.z; v[3] = silu(a0.w) * b0.w;
        v[4] = silu(a1.x) * b1.x; v[5] = silu(a1.y) * b1.y;
        v[6] = silu(a1.z) * b1.z; v[7] = silu(a1.w) * b1.w;
    }
}

// Bytes of the 4 ints, low byte first.
__device__ __forceinline__ int pack4(int a, int b, int c, int d) {
    return (int)((a & 0xFF) | ((b & 0xFF) << 8) | ((c & 0xFF) << 16) | ((unsigned int)(d & 0xFF) << 24));
}

// Quantizes the k activations of slot s into qs (4 C uint4, word i of chunk c at qs[i C + c])
// and step (C floats); the caller synchronizes the block before reading them.
template <bool COHERENT>
__device__ __forceinline__ void quantize_slot(const float* __restrict__ input,
                                              const unsigned int* __restrict__ slot_input,
                                              unsigned int s, unsigned int k, int mode,
                                              uint4* qs, float* step) {
    const unsigned int C = k / 32;
    // Quantize the slot's activations: thread u takes the 8 columns of word u (word u % 4 of
    // chunk u / 4), so the 4 words of a chunk sit in 4 consecutive lanes, which share their
    // maximum by shuffles. The trip count is the same for the whole warp (k / 8 is a multiple
    // of 4 and BLOCK of 32), as the shuffles need.
    for (unsigned int u0 = 0; u0 < k / 8; u0 += BLOCK) {
        const unsigned int u = u0 + threadIdx.x;
        const bool in = u < k / 8;
        float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (in) activation8<COHERENT>(input, slot_input, s, k, mode, u, v);
        float m = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; ++q) m = fmaxf(m, fabsf(v[q]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        if (in) {
            const float inv = m > 0.0f ? QMAX / m : 0.0f;
            int h[8], l[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const int x = __float2int_rn(v[q] * inv);  // |x| <= QMAX
                h[q] = (x + 128) >> 8;                     // arithmetic shift: floor
                l[q] = x - (h[q] << 8);                    // in -128..127
            }
            qs[(u % 4) * C + u / 4] =
                make_uint4(pack4(h[0], h[2], h[4], h[6]), pack4(l[0], l[2], l[4], l[6]),
                           pack4(h[1], h[3], h[5], h[7]), pack4(l[1], l[3], l[5], l[7]));
            // The step, and the weights' factor 16 undone.
            if (u % 4 == 0) step[u / 4] = m / (QMAX * 16.0f);
        }
    }
}

// One slot per item (the per-slot variant). Shared memory: the quantized activations, one uint4
// per 8 columns (h of the even columns, l of the even, h of the odd, l of the odd; byte b of each
// is column 2b or 2b+1), word i of chunk c at qs[i * C + c] so lanes reading consecutive chunks
// hit consecutive 16-byte words; then each chunk's step / 16 (f32, C of them): 2 k + k / 8 bytes.
// P (lanes per row group) is a power of two in 1..BLOCK.
// Weights stream through a ring of NB register batches of J chunks x R rows: NB - 1 batches are
// in flight while one is used (J = 2, NB = 2: the ring of `moe_dot_a_r2b3`; deeper rings keep
// more independent 16-byte loads in flight per thread, which long rows per lane need).
// Walks a lane's 16-byte chunks kl, kl + P, kl + 2P, ... (< C) through a ring of NB register
// batches of J chunks: before using batch n it fetches batch n + NB - 1 into the buffer batch
// n - 1 has just freed (`fetch(buf, first chunk)`; the caller fetched batches 0..NB-2 first),
// then calls `use(buf, j, c)` for the J chunks of the batch. The loops are unrolled by NB and J,
// so after inlining `buf` and `j` index the register buffers as constants. At the tail of a
// batch `c` may be >= C: `use` must check.
template <int NB, int J, class Fetch, class Use>
__device__ __forceinline__ void ring_walk(unsigned int kl, unsigned int C, unsigned int P,
                                          Fetch& fetch, Use use) {
    for (unsigned int c0 = kl; c0 < C; c0 += NB * J * P) {
#pragma unroll
        for (int buf = 0; buf < NB; ++buf) {
            const unsigned int cb = c0 + buf * J * P;
            if (cb < C) {
                if (cb + (NB - 1) * J * P < C) fetch((buf + NB - 1) % NB, cb + (NB - 1) * J * P);
#pragma unroll
                for (int j = 0; j < J; ++j) use(buf, j, cb + j * P);
            }
        }
    }
}

// Sums the P partial sums of each of a lane group's R rows (shuffles inside a warp, then
// shared memory `red`, (BLOCK / 32) x R floats, across warps); lane 0 of the group (kl == 0)
// writes the rows of slot s that exist. Every thread of the block must call it (barrier).
template <int R>
__device__ __forceinline__ void store_rows(float (&acc)[R], float* red, unsigned int P,
                                           unsigned int kl, unsigned int row0, unsigned int rows,
                                           float* __restrict__ output, unsigned int s) {
    const unsigned int span = P < 32 ? P : 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
        for (unsigned int off = span / 2; off > 0; off >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (P > 32) {
        const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r) red[warp * R + r] = acc[r];
        }
        __syncthreads();
        if (kl == 0) {
            for (unsigned int w2 = 1; w2 < P / 32; ++w2) {
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += red[(warp + w2) * R + r];
            }
        }
    }
    if (kl == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (row0 + r < rows) output[(size_t)s * rows + row0 + r] = acc[r];
    }
}

template <int R, int J, int NB>
__device__ void moe_dot(const unsigned int* __restrict__ work,
                        const unsigned int* __restrict__ slot_list,
                        const unsigned int* __restrict__ slot_input,
                        const float* __restrict__ input, float* __restrict__ output,
                        unsigned int rows, unsigned int k, unsigned int group,
                        unsigned long long weight_offset, unsigned long long scale_offset,
                        int mode, unsigned int P) {
    extern __shared__ uint4 qs[];
    __shared__ float red[(BLOCK / 32) * R];
    const unsigned int* item = work + 4 * blockIdx.y;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int s = slot_list[item[2]];
    const unsigned int C = k / 32;  // 16-byte chunks per row
    float* step = (float*)(qs + 4 * C);

    const unsigned int kl = threadIdx.x % P;
    const unsigned int row0 = (blockIdx.x * (BLOCK / P) + threadIdx.x / P) * R;
    const unsigned int groups_per_row = k / group;
    const unsigned char* wbase = (const unsigned char*)(base + weight_offset);
    const float* sbase = (const float*)(base + scale_offset);

    // NB batches of J chunks x R rows in registers, NB - 1 fetched ahead of the one in use.
    uint4 w[NB][J][R];
    float sc[NB][J][R];
    auto fetch = [&](int buf, unsigned int c0) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const unsigned int c = c0 + j * P;
            const unsigned int g = (c * 32) / group;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned int row = row0 + r;
                if (c < C && row < rows) {
                    w[buf][j][r] = load_weights((const uint4*)(wbase + (size_t)row * (k / 2)) + c);
                    sc[buf][j][r] = __ldg(sbase + (size_t)row * groups_per_row + g);
                } else {  // nibbles 8 with scale 0: contributes exactly 0
                    w[buf][j][r] = make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);
                    sc[buf][j][r] = 0.0f;
                }
            }
        }
    };
    // The first weights do not depend on the activations: start them before quantizing.
#pragma unroll
    for (int b = 0; b + 1 < NB; ++b) fetch(b, kl + b * J * P);

    quantize_slot<false>(input, slot_input, s, k, mode, qs, step);
    __syncthreads();

    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;

    // Batch n sits in register buffer n % NB (see `ring_walk`).
    ring_walk<NB, J>(kl, C, P, fetch, [&](int buf, int j, unsigned int c) {
        if (c < C) {
            const float st = step[c];
            int ah[R], al[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                ah[r] = 0;
                al[r] = 0;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint4 a = qs[i * C + c];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const unsigned int wv = word_of(w[buf][j][r], i);
                    const int hi = (int)((wv ^ 0x88888888u) & 0xF0F0F0F0u);
                    const int lo = (int)(((wv << 4) ^ 0x88888888u) & 0xF0F0F0F0u);
                    ah[r] = dp4a(lo, (int)a.x, ah[r]);
                    ah[r] = dp4a(hi, (int)a.z, ah[r]);
                    al[r] = dp4a(lo, (int)a.y, al[r]);
                    al[r] = dp4a(hi, (int)a.w, al[r]);
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r)
                acc[r] = fmaf(sc[buf][j][r] * st, (float)(ah[r] * 256 + al[r]), acc[r]);
        }
    });

    store_rows<R>(acc, red, P, kl, row0, rows, output, s);
}

// ---- Unsigned nibbles, a shift for the group, activations quantized once ----
// Same integer sums as moe_dot (so the same tolerance, and reference::expert_ffn_dot stays
// exact), fewer instructions per weight:
// - Nibbles enter dp4a unsigned (dp4a.u32.s32: a unsigned bytes, b signed bytes): the low
//   nibbles as w & 0x0F0F0F0F (values n), the high ones as w & 0xF0F0F0F0 (values 16 n), one
//   LOP3 each (2 instructions per 32-bit word of 8 weights, was 5), into separate accumulators
//   combined once per chunk: 16 sum n x = 256 (16 h_lo + h_hi) + 16 l_lo + l_hi. The zero point
//   8 is removed once per chunk with the chunk's integer activation sum X: 16 sum (n - 8) x =
//   16 sum n x - 128 X, the value moe_dot computes (its weights are 16 (n - 8)), so the f32
//   steps after it are identical. Bounds per chunk: |16 sum n x| <= 16 x 15 x 32639 x 32 <
//   2^28, |128 X| <= 128 x 32 x 32639 < 2^28: no int32 overflow.
// - The scale group of chunk c is c >> log2(group / 32): groups are powers of two (the host
//   runs DOT_FALLBACK_KERNEL otherwise), which removes moe_dot's runtime division.
// - PRE kernels read activations a pre-pass (moe_dot_prep2 / moe_dot_prep1, one block per
//   token for gate+up, per slot for down, SiLU included) quantized once into a scratch buffer,
//   and only copy their row to shared memory; the NIB kernels still quantize per block (the
//   unpacking change alone).
// Activation row (global scratch and shared memory): LIMBS = 2: 4 C uint4 as in moe_dot
// (h even, l even, h odd, l odd of each 8 columns, word i of chunk c at [i C + c]); LIMBS = 1
// (single int8 limb, |x| <= 127, llama.cpp q8_1 style; a REPORTED variant: it cannot hold the
// stated tolerance): 2 C uint4, uint4 [i2 C + c] = (even, odd of word 2 i2, even, odd of word
// 2 i2 + 1); then C f32 steps (max / (QMAX 16)), then C int32 sums X; padded to 16 bytes.

template <int LIMBS>
__device__ __forceinline__ unsigned int act_words(unsigned int C) {
    return (LIMBS == 2 ? 4u : 2u) * C;
}
template <int LIMBS>
__device__ __forceinline__ unsigned int act_row_u4(unsigned int C) {
    return act_words<LIMBS>(C) + (2 * C + 3) / 4;
}

// c + sum of the 4 products of a's unsigned bytes and b's signed bytes.
__device__ __forceinline__ int dp4a_us(unsigned int a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Quantizes one activation row of k values into `qs` (layout above; generic pointer: global
// scratch or shared memory) with `nthreads` threads (`tid` in 0..nthreads; a multiple of 32,
// whole warps: the shuffles need a uniform trip count). `load8(u, v)` fills v[0..8] with
// activations 8u..8u+7. Thread u takes the 8 columns of word u (word u % 4 of chunk u / 4), so
// a chunk's 4 words sit in 4 consecutive lanes that share their maximum and integer sum by
// shuffles (k / 8 is a multiple of 4).
template <int LIMBS, class Load8>
__device__ __forceinline__ void quantize_row_with(Load8 load8, unsigned int k, uint4* qs,
                                                  unsigned int tid, unsigned int nthreads) {
    const unsigned int C = k / 32;
    float* step = (float*)(qs + act_words<LIMBS>(C));
    int* sums = (int*)(step + C);
    const float qmax = LIMBS == 2 ? QMAX : 127.0f;
    for (unsigned int u0 = 0; u0 < k / 8; u0 += nthreads) {
        const unsigned int u = u0 + tid;
        const bool in = u < k / 8;
        float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (in) load8(u, v);
        float m = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; ++q) m = fmaxf(m, fabsf(v[q]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float inv = m > 0.0f ? qmax / m : 0.0f;
        int x[8];
        int xs = 0;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            x[q] = __float2int_rn(v[q] * inv);  // |x| <= qmax; 0 where !in
            xs += x[q];
        }
        xs += __shfl_xor_sync(0xffffffffu, xs, 1);
        xs += __shfl_xor_sync(0xffffffffu, xs, 2);
        if (in) {
            if (LIMBS == 2) {
                int h[8], l[8];
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    h[q] = (x[q] + 128) >> 8;  // arithmetic shift: floor
                    l[q] = x[q] - (h[q] << 8);  // in -128..127
                }
                qs[(u % 4) * C + u / 4] =
                    make_uint4(pack4(h[0], h[2], h[4], h[6]), pack4(l[0], l[2], l[4], l[6]),
                               pack4(h[1], h[3], h[5], h[7]), pack4(l[1], l[3], l[5], l[7]));
            } else {
                uint2* dst = (uint2*)(qs + ((u % 4) / 2) * C + u / 4) + (u % 2);
                *dst = make_uint2(pack4(x[0], x[2], x[4], x[6]), pack4(x[1], x[3], x[5], x[7]));
            }
            if (u % 4 == 0) {
                step[u / 4] = m / (qmax * 16.0f);  // the step, and the weights' 16 undone
                sums[u / 4] = xs;
            }
        }
    }
}

// quantize_row_with over the block's BLOCK threads. `src`: mode 0 the k activations, mode 1 a
// gate+up row (gate, then up: 2 k values) whose silu(gate) * up is quantized.
template <int LIMBS>
__device__ __forceinline__ void quantize_row(const float* __restrict__ src, unsigned int k,
                                             int mode, uint4* qs) {
    quantize_row_with<LIMBS>(
        [&](unsigned int u, float* v) {
            const float* p = src + 8 * u;
            const float4 a = *(const float4*)p, b = *(const float4*)(p + 4);
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
            v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
            if (mode == 1) {
                const float4 c = *(const float4*)(p + k), d = *(const float4*)(p + k + 4);
                v[0] = silu(v[0]) * c.x; v[1] = silu(v[1]) * c.y;
                v[2] = silu(v[2]) * c.z; v[3] = silu(v[3]) * c.w;
                v[4] = silu(v[4]) * d.x; v[5] = silu(v[5]) * d.y;
                v[6] = silu(v[6]) * d.z; v[7] = silu(v[7]) * d.w;
            }
        },
        k, qs, threadIdx.x, BLOCK);
}

// Programmatic dependent launch (sm_90+; no-ops before, where the host launches normally):
// a grid launched with the programmatic-serialization attribute may start before the
// previous grid in the stream has finished; grid_dependency_wait() blocks until that grid
// has completed and its writes are visible, and allow_dependents() lets the next such grid
// launch now rather than when every block of this one has exited.
__device__ __forceinline__ void grid_dependency_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The pre-pass: block r quantizes row r of `input` (mode 0: token rows of k values; mode 1:
// slot rows of the gate+up output, 2 k values) into row r of `out` (act_row_u4 uint4 per row).
template <int LIMBS>
__device__ __forceinline__ void dot_prep(const float* __restrict__ input, unsigned int k,
                                         int mode, uint4* __restrict__ out) {
    const unsigned int r = blockIdx.x;
    // Under programmatic launch: the weight kernel after this one may start prefetching its
    // weights at once (it waits for this grid before reading the scratch rows); this grid
    // waits for the one before it (the gate+up output, for the down pre-pass).
    allow_dependents();
    grid_dependency_wait();
    quantize_row<LIMBS>(input + (size_t)r * (mode == 0 ? k : 2 * k), k, mode,
                        out + (size_t)r * act_row_u4<LIMBS>(k / 32));
}
extern "C" __global__ void __launch_bounds__(BLOCK) moe_dot_prep2(const float* input,
                                                                  unsigned int k, int mode,
                                                                  uint4* out) {
    dot_prep<2>(input, k, mode, out);
}
extern "C" __global__ void __launch_bounds__(BLOCK) moe_dot_prep1(const float* input,
                                                                  unsigned int k, int mode,
                                                                  uint4* out) {
    dot_prep<1>(input, k, mode, out);
}

// moe_dot with the unsigned-nibble arithmetic. PRE: `input` is the pre-pass's scratch (row
// slot_input[s] in mode 0, row s in mode 1), copied to shared memory as is; else the block
// quantizes its slot's row itself (as moe_dot, plus the chunk sums).
// One row tile (`tile` of the item, BLOCK / P row groups of R rows) of work item `item_index`.
// PF_DOWN = true asks the L2, in the down launch (mode 1), for the block's whole
// tile (its weight rows and their scales, each a contiguous range) as the block starts
// (prefetch_l2); LOADONLY = true is a diagnostic twin: the same grid, activation copy and
// weight and scale loads, but no dot products (each thread XORs the words it loads and stores
// the bits as its outputs, so no load is optimised away): its outputs are NOT the expert FFN.
// (The same prefetch in the gate+up launch, a rolling line-by-line prefetch ahead of the
// register ring, the L2::256B load hint and wider row groups were slower:
// docs/history/kernels.md, "Access pattern and L2 prefetches".)
template <int R, int J, int NB, bool PRE, int LIMBS, bool PDL, bool PF_DOWN = false,
          bool LOADONLY = false>
__device__ __forceinline__ void dot6_tile(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P,
    unsigned int tile, unsigned int item_index) {
    extern __shared__ uint4 qs[];
    __shared__ float red[(BLOCK / 32) * R];
    const unsigned int* item = work + 4 * item_index;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int s = slot_list[item[2]];
    const unsigned int C = k / 32;
    const float* step = (const float*)(qs + act_words<LIMBS>(C));
    const int* sums = (const int*)(step + C);
    const unsigned int gshift = __ffs(group) - 6;  // log2(group / 32): group a power of two

    const unsigned int kl = threadIdx.x % P;
    const unsigned int row0 = (tile * (BLOCK / P) + threadIdx.x / P) * R;
    const unsigned int groups_per_row = k / group;
    const unsigned char* wbase = (const unsigned char*)(base + weight_offset);
    const float* sbase = (const float*)(base + scale_offset);
    if (PF_DOWN && mode == 1) {
        const unsigned int first = tile * (BLOCK / P) * R;
        const unsigned int n = first < rows ? min((BLOCK / P) * R, rows - first) : 0u;
        prefetch_l2(wbase + (size_t)first * (k / 2), n * (k / 2));
        prefetch_l2((const unsigned char*)(sbase + (size_t)first * groups_per_row),
                    n * groups_per_row * 4);
    }

    uint4 w[NB][J][R];
    float sc[NB][J][R];
    auto fetch = [&](int buf, unsigned int c0) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const unsigned int c = c0 + j * P;
            const unsigned int g = c >> gshift;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned int row = row0 + r;
                if (c < C && row < rows) {
                    w[buf][j][r] = load_weights((const uint4*)(wbase + (size_t)row * (k / 2)) + c);
                    sc[buf][j][r] = __ldg(sbase + (size_t)row * groups_per_row + g);
                } else {  // scale 0: contributes exactly 0
                    w[buf][j][r] = make_uint4(0u, 0u, 0u, 0u);
                    sc[buf][j][r] = 0.0f;
                }
            }
        }
    };
#pragma unroll
    for (int b = 0; b + 1 < NB; ++b) fetch(b, kl + b * J * P);

    // Launched programmatically (PDL kernels): the weights above are already requested; the
    // activations come from the grid before (the pre-pass, or the gate+up launch).
    if (PDL) grid_dependency_wait();
    if (PRE) {
        const unsigned int n = act_row_u4<LIMBS>(C);
        const uint4* src = (const uint4*)input + (size_t)(mode == 0 ? slot_input[s] : s) * n;
        for (unsigned int i = threadIdx.x; i < n; i += BLOCK) qs[i] = __ldg(src + i);
    } else {
        quantize_row<LIMBS>(input + (mode == 0 ? (size_t)slot_input[s] * k : (size_t)s * 2 * k),
                            k, mode, qs);
    }
    __syncthreads();

    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    unsigned int bits[R];  // LOADONLY: XOR of every word loaded
#pragma unroll
    for (int r = 0; r < R; ++r) bits[r] = 0u;

    ring_walk<NB, J>(kl, C, P, fetch, [&](int buf, int j, unsigned int c) {
        if (LOADONLY) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint4 v = w[buf][j][r];
                bits[r] ^= v.x ^ v.y ^ v.z ^ v.w ^ __float_as_uint(sc[buf][j][r]);
            }
            return;
        }
        if (c < C) {
            const float st = step[c];
            const int zero = -128 * sums[c];
            int dot[R];
            if (LIMBS == 2) {
                int hl[R], hh[R], ll[R], lh[R];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    hl[r] = 0;
                    hh[r] = 0;
                    ll[r] = 0;
                    lh[r] = zero;
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint4 a = qs[i * C + c];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned int wv = word_of(w[buf][j][r], i);
                        const unsigned int lo = wv & 0x0F0F0F0Fu;
                        const unsigned int hi = wv & 0xF0F0F0F0u;
                        hl[r] = dp4a_us(lo, (int)a.x, hl[r]);
                        ll[r] = dp4a_us(lo, (int)a.y, ll[r]);
                        hh[r] = dp4a_us(hi, (int)a.z, hh[r]);
                        lh[r] = dp4a_us(hi, (int)a.w, lh[r]);
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r)
                    dot[r] = (hl[r] * 16 + hh[r]) * 256 + ll[r] * 16 + lh[r];
            } else {
                int el[R], oh[R];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    el[r] = 0;
                    oh[r] = zero;
                }
#pragma unroll
                for (int i2 = 0; i2 < 2; ++i2) {
                    const uint4 a = qs[i2 * C + c];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned int w0 = word_of(w[buf][j][r], 2 * i2);
                        const unsigned int w1 = word_of(w[buf][j][r], 2 * i2 + 1);
                        el[r] = dp4a_us(w0 & 0x0F0F0F0Fu, (int)a.x, el[r]);
                        oh[r] = dp4a_us(w0 & 0xF0F0F0F0u, (int)a.y, oh[r]);
                        el[r] = dp4a_us(w1 & 0x0F0F0F0Fu, (int)a.z, el[r]);
                        oh[r] = dp4a_us(w1 & 0xF0F0F0F0u, (int)a.w, oh[r]);
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) dot[r] = el[r] * 16 + oh[r];
            }
#pragma unroll
            for (int r = 0; r < R; ++r)
                acc[r] = fmaf(sc[buf][j][r] * st, (float)dot[r], acc[r]);
        }
    });

    if (LOADONLY) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = __uint_as_float(bits[r] & 0x7F7FFFFFu);  // finite
    }
    store_rows<R>(acc, red, P, kl, row0, rows, output, s);
}

// One tile per block: grid (tiles per item, items).
template <int R, int J, int NB, bool PRE, int LIMBS, bool PDL, bool PF_DOWN, bool LOADONLY>
__device__ __forceinline__ void moe_dot6(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P) {
    dot6_tile<R, J, NB, PRE, LIMBS, PDL, PF_DOWN, LOADONLY>(
        work, slot_list, slot_input, input, output, rows, k, group, weight_offset, scale_offset,
        mode, P, blockIdx.x, blockIdx.y);
}

#define DOT7_ENTRY(NAME, R, J, NB, MIN_BLOCKS, PRE, LIMBS, PDL, PF_DOWN, LOADONLY)               \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row) {                                                   \
        moe_dot6<R, J, NB, PRE, LIMBS, PDL, PF_DOWN, LOADONLY>(                                   \
            work, slot_list, slot_input, input, output, rows, k, group, weight_offset,           \
            scale_offset, mode, lanes_per_row);                                                   \
    }
#define DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, PRE, LIMBS, PDL) \
    DOT7_ENTRY(NAME, R, J, NB, MIN_BLOCKS, PRE, LIMBS, PDL, false, false)
// In-block quantization, unsigned nibbles, the down launch started programmatically
// (prefetches its first weights before the gate+up launch ends).
#define NIBP_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, false, 2, true)
// Pre-pass activations (two limbs), unsigned nibbles, every launch after the layer's first
// started programmatically (hides the pre-passes).
#define PREQP_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 2, true)
// Pre-pass activations, one int8 limb (reported only: outside the stated tolerance).
#define PREQ8_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 1, false)
// PREQP_ENTRY with the down launch's row tiles prefetched into the L2.
#define PREQPD_ENTRY(NAME, R, J, NB, MIN_BLOCKS) \
    DOT7_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 2, true, true, false)
// Diagnostic only (wrong outputs by design, skipped by the correctness tests):
// a load-only twin of a PREQP_ENTRY kernel.
#define LOADQP_ENTRY(NAME, R, J, NB, MIN_BLOCKS) \
    DOT7_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 2, true, false, true)

#define DOT_ENTRY(NAME, R, J, NB, MIN_BLOCKS)                                                     \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row) {                                                   \
        moe_dot<R, J, NB>(work, slot_list, slot_input, input, output, rows, k, group,            \
                          weight_offset, scale_offset, mode, lanes_per_row);                      \
    }

// Rows per row group, chunks per batch, batches in the ring, and minimum resident blocks per
// multiprocessor; keep in step with `DOT_KERNELS` in launch.rs (which also says how each one's
// grid is sized). Variants that were slower than a kept kernel on every measured geometry were
// dropped; their figures are in docs/history/kernels.md.
// Signed nibbles and the register ring (DotGrid::Adaptive grid), kept for comparison and as the
// fallback where a scale group is not a power of two.
DOT_ENTRY(moe_dot_a_r2b3, 2, 2, 2, 3)
// In-block quantization with unsigned nibbles and a programmatic down launch (the
// default's choice where the gate+up launch fits in one wave).
NIBP_ENTRY(moe_dot_up_r2b3, 2, 2, 2, 3)
// Pre-pass activations and programmatic launches (moe_dot_xp_r2j1n3b4, the persistent kernel's
// fallback, is this code with a ring of 3 single-chunk batches and 4 resident blocks for launches
// of several waves, moe_dot_up_r2b3 for one-wave launches: DotKernel::one_wave_partner).
PREQP_ENTRY(moe_dot_qp_r2b3, 2, 2, 2, 3)
PREQP_ENTRY(moe_dot_xp_r2j1n3b4, 2, 1, 3, 4)
// Reported only: one int8 activation limb (outside the stated tolerance).
PREQ8_ENTRY(moe_dot_q8_r2b3, 2, 2, 2, 3)
// moe_dot_xp_r2j1n3b4's code with the down launch's row tiles prefetched into the L2
// (55.5 vs 57.2 µs at 60 slots of 2560x640; its one-wave partner is moe_dot_xp_r2j1n3b4's), and
// the load-only twin of moe_dot_xp_r2j1n3b4's several-wave code (diagnostic: same grid and
// loads, no dot products). The other access-pattern variants were dropped
// (docs/history/kernels.md, "Access pattern and L2 prefetches").
PREQPD_ENTRY(moe_dot_xd_r2j1n3b4, 2, 1, 3, 4)
LOADQP_ENTRY(moe_dot_lo_r2j1n3b4, 2, 1, 3, 4)

// ---- One persistent launch per layer, weights staged by bulk copies ----
// The two-launch kernels above pay each launch's ramp and tail (a plain read of the layer's
// 156.7 MB runs at 87% of the streaming read in one launch, 76% split as gate+up then down:
// docs/history/kernels.md, "Access pattern and L2 prefetches"). Here one grid of one block per
// multiprocessor walks the layer's tiles, gate+up tiles of every work item first, then down tiles:
// block b takes tiles b, b + G, ..., b + (STAGES - 1) G (G = gridDim.x), then the tiles of the
// tickets it draws from a counter (fused_produce), so a multiprocessor that runs ahead takes more
// tiles. Every block must be resident at once (a down tile waits for the gate+up tiles of other
// blocks): the host launches at most one block per multiprocessor, whose shared memory admits no
// second. Warp roles:
// - the producer warp: lane 0 looks up each tile's item (and for a down tile whether the item's
//   activations are published), writes the tile's descriptor (phase, first row, rows, slot) and
//   bulk-copies (cp.async.bulk, sm_90+) its weight rows, their scales and its quantized
//   activation row into one of STAGES shared-memory stages, completing the stage's `full`
//   mbarrier;
// - CW consumer warps: each thread computes R rows of the tile from shared memory with the
//   unsigned-nibble integer arithmetic (same sums as dot6_tile: same tolerance, same CPU model),
//   frees the stage (`empty` mbarrier) and stores its rows. The lanes per row are a template
//   argument (fused_consume, one instance per power of two): with runtime lanes the consumers
//   spent half their time outside the dot loop on runtime divisions (tile decoding, row split)
//   and the runtime-length shuffle reduction (ncu; 47.3 -> 36.9 µs for the consumers alone);
// - the quantizing warp: for each item whose last gate+up tile this block takes, it waits until
//   every gate+up row of the item carries this launch's epoch, quantizes silu(gate) * up into
//   act_d and publishes flag[item] = epoch; the producer waits for that flag before copying a
//   down tile's activations (its weights are requested first).
// Gate+up rows are stored as (epoch << 32 | f32 bits), one single-copy-atomic 64-bit store, so the
// consumers never fence: a gpu-scope fence per tile (as in the dropped fused kernels and a draft of
// this one: 142 µs per layer, docs/history/kernels.md) waits out the loaded memory system's write
// acknowledgements, ~2-3 µs per tile on the H200. Epochs and flags need no reset between launches
// (the host passes a new epoch each launch, never 0).

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
    return (unsigned int)__cvta_generic_to_shared(p);
}

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives and announces `bytes` of bulk copies that will complete the current phase.
__device__ __forceinline__ void mbar_arrive_tx(unsigned long long* bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned int parity) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to
// shared `dst`, completing `bytes` transactions of `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned int bytes,
                                          unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_release(unsigned int* p, unsigned int v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
#endif

// The launch's shape: `items` work items of `hidden` x `ffn` experts with scale groups of
// `group`; lanes per row group and rows per tile of each phase; tiles per item.
struct FusedShape {
    unsigned int items, hidden, ffn, group;
    unsigned int p_gu, p_d, t_gu, t_d, nt_gu, nt_d;
};

// Tile t (0 .. items x (nt_gu + nt_d)): its phase (0 gate+up, 1 down), work item and rows.
struct FusedTile {
    unsigned int mode, item, row0, nrows;
};

__device__ __forceinline__ FusedTile fused_tile(const FusedShape& sh, unsigned int t) {
    FusedTile f;
    const unsigned int ngu = sh.items * sh.nt_gu;
    unsigned int rows, tile, tr;
    if (t < ngu) {
        f.mode = 0;
        f.item = t / sh.nt_gu;
        tile = t % sh.nt_gu;
        rows = 2 * sh.ffn;
        tr = sh.t_gu;
    } else {
        t -= ngu;
        f.mode = 1;
        f.item = t / sh.nt_d;
        tile = t % sh.nt_d;
        rows = sh.hidden;
        tr = sh.t_d;
    }
    f.row0 = tile * tr;
    f.nrows = min(tr, rows - f.row0);
    return f;
}

// Where a tile's rows go: gate+up rows (epoch-tagged) or down outputs, from the tile's first row.
struct FusedOut {
    unsigned long long* gu;  // null for a down tile
    float* y;
    unsigned int nrows;
    unsigned long long tag;  // epoch << 32
};

// The consumer warps' work on one staged tile: CW warps, P lanes per row, R rows per thread (the
// tile has CW * 32 * R / P rows); `C` 16-byte chunks per row, `gpr` scale groups per row.
// Arrives on `empty` once this warp has read the stage, then reduces and stores its rows.
template <int R, int P, int CW>
__device__ __forceinline__ void fused_consume(const unsigned char* base, unsigned int stage_w,
                                              unsigned int stage_s, unsigned int C,
                                              unsigned int gpr, unsigned int gshift,
                                              unsigned long long* empty, const FusedOut& out) {
#if __CUDA_ARCH__ >= 900
    constexpr unsigned int T = CW * 32 * R / P;
    const uint4* sw = (const uint4*)base;
    const float* ss = (const float*)(base + stage_w);
    const uint4* qa = (const uint4*)(base + stage_w + stage_s);
    const float* step = (const float*)(qa + 4 * C);
    const int* sums = (const int*)(step + C);
    const unsigned int pair = threadIdx.x / P, kl = threadIdx.x % P;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 2
    for (unsigned int c = kl; c < C; c += P) {
        const float stp = step[c];
        const int zero = -128 * sums[c];
        const uint4 a[4] = {qa[c], qa[C + c], qa[2 * C + c], qa[3 * C + c]};
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const unsigned int lr = pair + r * (T / R);
            const uint4 w = sw[lr * C + c];
            const float sc = ss[lr * gpr + (c >> gshift)];
            int hl = 0, hh = 0, ll = 0, lh = zero;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const unsigned int wv = word_of(w, i);
                const unsigned int lo = wv & 0x0F0F0F0Fu;
                const unsigned int hi = wv & 0xF0F0F0F0u;
                hl = dp4a_us(lo, (int)a[i].x, hl);
                ll = dp4a_us(lo, (int)a[i].y, ll);
                hh = dp4a_us(hi, (int)a[i].z, hh);
                lh = dp4a_us(hi, (int)a[i].w, lh);
            }
            const int dot = (hl * 16 + hh) * 256 + ll * 16 + lh;
            acc[r] = fmaf(sc * stp, (float)dot, acc[r]);
        }
    }
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(empty);  // this warp is done with the stage
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (unsigned int off = P / 2; off > 0; off >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (kl == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const unsigned int lr = pair + r * (T / R);
            if (lr >= out.nrows) continue;
            if (out.gu != nullptr) {
                __stcg(out.gu + lr, out.tag | __float_as_uint(acc[r]));
            } else {
                out.y[lr] = acc[r];
            }
        }
    }
#endif
}

// One tile's copy job: its phase, rows, work item, slot and token, the expert's address, and
// whether its item's down activations were already published when it was looked up.
struct FusedJob {
    unsigned int mode, row0, nrows, item, slot, tok, ready;
    unsigned long long base;
};

// Tile t's job, read from the work list, the items' (slot, token) and (down tiles) the flags.
__device__ __forceinline__ FusedJob fused_lookup(const FusedShape& sh, const unsigned int* work,
                                                 const uint2* item_st, const unsigned int* flags,
                                                 unsigned int epoch, unsigned int t) {
    FusedJob j;
#if __CUDA_ARCH__ >= 900
    const FusedTile f = fused_tile(sh, t);
    const uint4 wi = __ldg((const uint4*)work + f.item);
    const uint2 ist = __ldg(item_st + f.item);
    j.mode = f.mode;
    j.row0 = f.row0;
    j.nrows = f.nrows;
    j.item = f.item;
    j.slot = ist.x;
    j.tok = ist.y;
    j.base = (unsigned long long)wi.x | ((unsigned long long)wi.y << 32);
    j.ready = f.mode == 1 ? load_acquire(flags + f.item) == epoch : 0u;
#endif
    return j;
}

// The layer's buffers and shape as the producer needs them (see fused_layer).
struct FusedSrc {
    const unsigned int* work;
    const uint2* item_st;
    const uint4* act_gu;
    const uint4* act_d;
    unsigned int* flags;
    unsigned long long off_dw, off_gus, off_ds;
    unsigned int stage_w, stage_s, stage_bytes, row_gu, row_d, epoch;
};

// The producer (lane 0 of the producer warp). Block b stages tiles b + i G (G = gridDim.x) for
// i < STAGES, then, by DRAW:
// - FUSED_DRAW_DUE: tile STAGES G + n for each ticket n it draws from the counter flags[items]
//   (one atomicAdd per tile, drawn as the tile is due), until a ticket falls past the last tile;
// - FUSED_DRAW_STATIC: the static walk, tiles b + STAGES G, b + (STAGES + 1) G, ... (no counter).
// On 60 slots of 2560x640 (H200) the counter beats the static walk (block b takes b, b + G, ...
// to the end, 28 or 27 tiles of 3600) where the slots name distinct experts (48.3-49.8 vs
// 49.8-51.2 µs) and loses where they repeat experts (41.2-41.8 vs 39.3-40.7 µs at 6 distinct),
// so the host picks one per launch (launch.rs, DotKernel::for_repeats). Drawing 1 to 4 tickets
// ahead of the tile, or staging only the first tile statically, gained nothing
// (docs/history/kernels.md, "Tiles handed out by a counter", "Counter or static walk").
// With tickets, each block draws exactly one ticket past the last tile; the last block to count
// itself done (flags[items + 1]) resets both words to 0. A launch on the same buffers draws only
// after its griddepcontrol.wait, which waits for its pre-pass, which waits for the grid before
// it: it sees both words reset.
#define FUSED_DRAW_STATIC 0
#define FUSED_DRAW_DUE 1
template <int STAGES, int DRAW>
__device__ __forceinline__ void fused_produce(const FusedShape& sh, const FusedSrc& src,
                                              unsigned long long* full, unsigned long long* empty,
                                              uint4* desc, unsigned char* smem) {
#if __CUDA_ARCH__ >= 900
    const unsigned int G = gridDim.x;
    const unsigned int total = sh.items * (sh.nt_gu + sh.nt_d);
    unsigned int* ctr = src.flags + sh.items;
    bool waited = false;
    unsigned int it = 0;
    auto stage = [&](const FusedJob& j) {
        const unsigned int st = it % STAGES;
        if (it >= STAGES) mbar_wait(&empty[st], ((it / STAGES) - 1) & 1);
        desc[st] = make_uint4(j.mode, j.row0, j.nrows, j.slot);
        const unsigned int k = j.mode == 0 ? sh.hidden : sh.ffn;
        const unsigned int gpr = k / sh.group;
        const unsigned int wb = j.nrows * (k / 2), sb = j.nrows * gpr * 4;
        const unsigned int ab = 16 * (j.mode == 0 ? src.row_gu : src.row_d);
        unsigned char* dst = smem + st * src.stage_bytes;
        mbar_arrive_tx(&full[st], wb + sb + ab);
        const unsigned long long woff = j.mode == 0 ? 0ull : src.off_dw;
        const unsigned long long soff = j.mode == 0 ? src.off_gus : src.off_ds;
        bulk_copy(dst, (const void*)(j.base + woff + (unsigned long long)j.row0 * (k / 2)), wb,
                  &full[st]);
        bulk_copy(dst + src.stage_w,
                  (const void*)(j.base + soff + (unsigned long long)j.row0 * gpr * 4), sb,
                  &full[st]);
        if (j.mode == 0) {
            if (!waited) {
                grid_dependency_wait();  // the pre-pass's activation rows
                waited = true;
            }
            bulk_copy(dst + src.stage_w + src.stage_s, src.act_gu + (size_t)j.tok * src.row_gu,
                      ab, &full[st]);
        } else {
            if (!j.ready)
                while (load_acquire(src.flags + j.item) != src.epoch) {
                }
            // The flag's acquire orders act_d's generic-proxy writes before the bulk copy's
            // async-proxy read.
            asm volatile("fence.proxy.async;" ::: "memory");
            bulk_copy(dst + src.stage_w + src.stage_s, src.act_d + (size_t)j.slot * src.row_d,
                      ab, &full[st]);
        }
        ++it;
    };
    // The first tiles' lookups at once, then their copies (the first one's weights before the
    // wait for the pre-pass, so layers back to back overlap).
    FusedJob first[STAGES];
#pragma unroll
    for (int i = 0; i < STAGES; ++i)
        if (blockIdx.x + i * G < total)
            first[i] = fused_lookup(sh, src.work, src.item_st, src.flags, src.epoch,
                                    blockIdx.x + i * G);
#pragma unroll
    for (int i = 0; i < STAGES; ++i)
        if (blockIdx.x + i * G < total) stage(first[i]);
    if (!waited) grid_dependency_wait();  // before the first draw (see above)
    if (DRAW == FUSED_DRAW_STATIC) {
        for (unsigned int t = blockIdx.x + STAGES * G; t < total; t += G)
            stage(fused_lookup(sh, src.work, src.item_st, src.flags, src.epoch, t));
    } else {
        for (;;) {
            const unsigned int t = STAGES * G + atomicAdd(ctr, 1u);
            if (t >= total) break;
            stage(fused_lookup(sh, src.work, src.item_st, src.flags, src.epoch, t));
        }
        // The last draw (its value was read) is ordered before this block counts itself done.
        __threadfence();
        if (atomicAdd(ctr + 1, 1u) == G - 1) {
            atomicExch(ctr, 0u);
            atomicExch(ctr + 1, 0u);
        }
    }
    // Tells the consumers there is no more tile.
    const unsigned int st = it % STAGES;
    if (it >= STAGES) mbar_wait(&empty[st], ((it / STAGES) - 1) & 1);
    desc[st] = make_uint4(0xFFFFFFFFu, 0u, 0u, 0u);
    mbar_arrive(&full[st]);
#endif
}

// One layer (see the header above). `work`: the launch's work items (4 u32 each: expert
// pointer low, high, unused here); `item_st`: each item's (slot, token); `act_gu`: the
// pre-pass's quantized token rows; `gu`: slots x 2 ffn tagged gate+up rows; `act_d`: slots x
// quantized down rows; `y`: slots x hidden outputs; `flags`: one per item, then the producers'
// ticket counter and count of finished blocks (2 words, zero between launches). Offsets: down
// weights, gate+up scales, down scales within an expert. Stage layout (bytes): stage_w of
// weights, stage_s of scales, stage_a of activations; STAGES of them in dynamic shared memory.
template <int STAGES, int CW, int R, int DRAW>
__device__ __forceinline__ void fused_layer(
    const unsigned int* __restrict__ work, const uint2* __restrict__ item_st,
    const uint4* __restrict__ act_gu, unsigned long long* __restrict__ gu,
    uint4* __restrict__ act_d, float* __restrict__ y, unsigned int* __restrict__ flags,
    const FusedShape sh, unsigned long long off_dw, unsigned long long off_gus,
    unsigned long long off_ds, unsigned int stage_w, unsigned int stage_s, unsigned int stage_a,
    unsigned int epoch) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    __shared__ uint4 desc[STAGES];  // (phase, first row, rows, slot) of each stage's tile
    // The next layer's pre-pass (a programmatic launch that waits for this grid before it
    // reads anything) may launch now, and then the next persistent grid, whose blocks start
    // their first weight copies on each multiprocessor this grid's block leaves: layers
    // enqueued back to back overlap one's tail with the next one's ramp (47.6-47.7 vs
    // 49.3-49.7 µs per layer of 60 slots of 2560x640: BENCHMARKS.md at commit 225ec1c).
    allow_dependents();
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int stage_bytes = stage_w + stage_s + stage_a;
    const unsigned int row_gu = act_row_u4<2>(sh.hidden / 32), row_d = act_row_u4<2>(sh.ffn / 32);
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], CW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CW + 1) {  // the quantizing warp
        for (unsigned int i = 0; i < sh.items; ++i) {
            if ((i * sh.nt_gu + sh.nt_gu - 1) % gridDim.x != blockIdx.x) continue;
            const unsigned int s = __ldg(item_st + i).x;
            const unsigned long long* g = gu + (size_t)s * 2 * sh.ffn;
            const unsigned int ffn = sh.ffn;
            quantize_row_with<2>(
                [&](unsigned int u, float* v) {
                    // 8 gate and 8 up rows, re-read until all carry this launch's epoch.
                    ulonglong2 a[4], b[4];
                    for (;;) {
                        bool ok = true;
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            a[q] = __ldcg((const ulonglong2*)(g + 8 * u) + q);
                            b[q] = __ldcg((const ulonglong2*)(g + ffn + 8 * u) + q);
                            ok = ok && (a[q].x >> 32) == epoch && (a[q].y >> 32) == epoch &&
                                 (b[q].x >> 32) == epoch && (b[q].y >> 32) == epoch;
                        }
                        if (ok) break;
                        __nanosleep(200);
                    }
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        v[2 * q] = silu(__uint_as_float((unsigned int)a[q].x)) *
                                   __uint_as_float((unsigned int)b[q].x);
                        v[2 * q + 1] = silu(__uint_as_float((unsigned int)a[q].y)) *
                                       __uint_as_float((unsigned int)b[q].y);
                    }
                },
                ffn, act_d + (size_t)s * row_d, lane, 32);
            __threadfence();
            __syncwarp();
            if (lane == 0) store_release(flags + i, epoch);
        }
        return;
    }

    if (warp == CW) {  // the producer warp
        if (lane == 0) {
            const FusedSrc src{work,   item_st, act_gu,  act_d,   flags,  off_dw,
                               off_gus, off_ds, stage_w, stage_s, stage_bytes, row_gu,
                               row_d,  epoch};
            fused_produce<STAGES, DRAW>(sh, src, full, empty, desc, smem);
        }
        return;
    }

    // The consumer warps: thread (pair, kl) takes rows pair + r T / R of the tile, and its
    // 16-byte chunks kl, kl + P, ...; P is a template argument (fused_consume), so the row
    // split, the loop and the warp reduction need no runtime division.
    const unsigned int gshift = __ffs(sh.group) - 6;  // log2(group / 32)
    const unsigned int glog = __ffs(sh.group) - 1;    // log2(group)
    for (unsigned int it = 0;; ++it) {
        const unsigned int st = it % STAGES;
        mbar_wait(&full[st], (it / STAGES) & 1);
        const uint4 d = desc[st];
        if (d.x == 0xFFFFFFFFu) break;
        const unsigned int k = d.x == 0 ? sh.hidden : sh.ffn;
        const unsigned int P = d.x == 0 ? sh.p_gu : sh.p_d;
        const unsigned char* base = smem + st * stage_bytes;
        FusedOut out;
        out.gu = d.x == 0 ? gu + (size_t)d.w * 2 * sh.ffn + d.y : nullptr;
        out.y = y + (size_t)d.w * sh.hidden + d.y;
        out.nrows = d.z;
        out.tag = (unsigned long long)epoch << 32;
        switch (P) {
#define FUSED_P(PP)                                                                            \
    case PP:                                                                                   \
        fused_consume<R, PP, CW>(base, stage_w, stage_s, k >> 5, k >> glog, gshift,     \
                                       &empty[st], out);                                      \
        break;
            FUSED_P(1)
            FUSED_P(2)
            FUSED_P(4)
            FUSED_P(8)
            FUSED_P(16)
            FUSED_P(32)
#undef FUSED_P
        }
    }
#endif
}

// Rows per thread R, chunks per lane step J (always 1: a lane takes one chunk at a time from
// shared memory), STAGES shared-memory stages, one resident block per multiprocessor; CW = 8
// consumer warps, plus the producer and the quantizing warp: FUSED_THREADS in launch.rs.
#define FUSED_CONSUMER_WARPS 8
#define FUSED_ENTRY(NAME, R, J, STAGES, MIN_BLOCKS, DRAW)                                      \
    extern "C" __global__ void __launch_bounds__((FUSED_CONSUMER_WARPS + 2) * 32, MIN_BLOCKS)  \
        NAME(const unsigned int* work, const uint2* item_st, const uint4* act_gu,              \
             unsigned long long* gu, uint4* act_d, float* y, unsigned int* flags,             \
             unsigned int items, unsigned int hidden, unsigned int ffn, unsigned int group,    \
             unsigned int p_gu, unsigned int p_d, unsigned long long off_dw,                  \
             unsigned long long off_gus, unsigned long long off_ds, unsigned int stage_w,     \
             unsigned int stage_s, unsigned int stage_a, unsigned int epoch) {                \
        FusedShape sh;                                                                         \
        sh.items = items;                                                                      \
        sh.hidden = hidden;                                                                    \
        sh.ffn = ffn;                                                                          \
        sh.group = group;                                                                      \
        sh.p_gu = p_gu;                                                                        \
        sh.p_d = p_d;                                                                          \
        sh.t_gu = FUSED_CONSUMER_WARPS * 32 * R / p_gu;                                        \
        sh.t_d = FUSED_CONSUMER_WARPS * 32 * R / p_d;                                          \
        sh.nt_gu = (2 * ffn + sh.t_gu - 1) / sh.t_gu;                                          \
        sh.nt_d = (hidden + sh.t_d - 1) / sh.t_d;                                              \
        fused_layer<STAGES, FUSED_CONSUMER_WARPS, R, DRAW>(work, item_st, act_gu, gu, act_d, y,\
                                                     flags, sh, off_dw, off_gus, off_ds,       \
                                                     stage_w, stage_s, stage_a, epoch);        \
    }
// The default: 60 slots of 2560x640 in 48.6-50.2 µs vs 55.3-57.2 for moe_dot_xp_r2j1n3b4
// (the ranges: BENCHMARKS.md at commit 225ec1c; the current figure: BENCHMARKS.md, "Expert
// kernels"); launches of one wave run the one-wave partner instead.
FUSED_ENTRY(moe_dot_fd_r2j1s3b1, 2, 1, 3, 1, FUSED_DRAW_DUE)
// The same with the static walk: the default's launches whose slots repeat experts run it
// (DotKernel::for_repeats in launch.rs).
FUSED_ENTRY(moe_dot_fz_r2j1s3b1, 2, 1, 3, 1, FUSED_DRAW_STATIC)

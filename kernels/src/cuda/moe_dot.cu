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
// CPU model of this arithmetic: `reference::expert_ffn_dot`.

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
// in flight while one is used (J = 2, NB = 2: the kernels of the third pass; deeper rings keep
// more independent 16-byte loads in flight per thread, which long rows per lane need).
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

    // Unrolled by NB so the register buffers are indexed by constants: batch n sits in buffer
    // n % NB, and batch n + NB - 1 is fetched into the buffer batch n - 1 has just freed.
    for (unsigned int c0 = kl; c0 < C; c0 += NB * J * P) {
#pragma unroll
        for (int buf = 0; buf < NB; ++buf) {
            const unsigned int cb = c0 + buf * J * P;
            if (cb < C) {
                if (cb + (NB - 1) * J * P < C) fetch((buf + NB - 1) % NB, cb + (NB - 1) * J * P);
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const unsigned int c = cb + j * P;
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
                }
            }
        }
    }

    // Sum the P partial sums of each row: shuffles inside a warp, then shared memory across warps.
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

// ---- Shared-memory staged kernels (fifth pass) ----
// Same arithmetic, but the weights and their scales stream through a ring of S stages in shared
// memory filled by cp.async (sm_80+; a plain copy before), so S - 1 batches of J chunks x R
// rows are in flight per thread without holding registers. Each thread copies and reads back
// only its own slots of the ring (slot q of stage t at [(t J R + q) BLOCK + thread], so a warp's
// 16-byte accesses are consecutive), which needs no barrier, only cp.async.wait_group.
// Dynamic shared memory: the ring (S J R BLOCK x 16 B of weights, then x 4 B of scales), then
// the quantized activations as in moe_dot (2 k + k / 8 bytes).

__device__ __forceinline__ unsigned int shared_address(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

// 16 bytes global -> shared, cached in the L2 only (weights are read once per item).
__device__ __forceinline__ void copy16_async(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(dst)), "l"(src)
                 : "memory");
#else
    *(uint4*)dst = *(const uint4*)src;
#endif
}

__device__ __forceinline__ void copy4_async(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(shared_address(dst)), "l"(src)
                 : "memory");
#else
    *(float*)dst = *(const float*)src;
#endif
}

__device__ __forceinline__ void copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed copy groups are still pending.
template <int N>
__device__ __forceinline__ void copy_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
#if __CUDA_ARCH__ >= 700
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
#else
    const unsigned int v = *(const volatile unsigned int*)p;
    __threadfence();
    return v;
#endif
}

// One row tile (BLOCK / P row groups of R rows) of one slot. With `ready` set (the down tiles of
// the fused kernels), the weights of the first S - 1 stages are requested first, then the block
// waits until *ready reaches ready_count (every gate+up tile of the slot has published its
// rows), then reads its activations through the L2.
template <int R, int J, int S, bool COHERENT>
__device__ __forceinline__ void dot_tile_staged(
    unsigned long long base, unsigned int s, const unsigned int* __restrict__ slot_input,
    const float* input, float* output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P,
    unsigned int tile, const unsigned int* ready, unsigned int ready_count) {
    extern __shared__ uint4 dyn[];
    __shared__ float red[(BLOCK / 32) * R];
    constexpr int Q = J * R;  // ring slots per stage and thread
    uint4* ring = dyn;
    float* ring_scale = (float*)(dyn + S * Q * BLOCK);
    uint4* qs = (uint4*)(ring_scale + S * Q * BLOCK);
    const unsigned int C = k / 32;
    float* step = (float*)(qs + 4 * C);

    const unsigned int t = threadIdx.x;
    const unsigned int kl = t % P;
    const unsigned int row0 = (tile * (BLOCK / P) + t / P) * R;
    const unsigned int groups_per_row = k / group;
    const unsigned char* wbase = (const unsigned char*)(base + weight_offset);
    const float* sbase = (const float*)(base + scale_offset);
    const unsigned int advance = J * P;  // chunks per stage

    // Requests stage `c0` (chunks c0 + j P of rows row0..row0+R-1) into ring stage `st`; commits
    // a group even when empty, so every thread counts groups the same way.
    auto request = [&](unsigned int st, unsigned int c0) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const unsigned int c = c0 + j * P;
            const unsigned int g = (c * 32) / group;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned int row = row0 + r;
                if (c < C && row < rows) {
                    const unsigned int q = (st * Q + j * R + r) * BLOCK + t;
                    copy16_async(ring + q, (const uint4*)(wbase + (size_t)row * (k / 2)) + c);
                    copy4_async(ring_scale + q, sbase + (size_t)row * groups_per_row + g);
                }
            }
        }
        copy_commit();
    };
#pragma unroll
    for (int st = 0; st + 1 < S; ++st) request(st, kl + st * advance);

    if (ready != nullptr) {
        if (t == 0) {
            while (load_acquire(ready) < ready_count) {
#if __CUDA_ARCH__ >= 700
                __nanosleep(256);
#endif
            }
        }
        __syncthreads();
    }
    quantize_slot<COHERENT>(input, slot_input, s, k, mode, qs, step);
    __syncthreads();

    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    unsigned int st = 0;
    for (unsigned int c0 = kl; c0 < C; c0 += advance) {
        // Refill the stage the previous iteration used, then wait for this one's group.
        request(st == 0 ? S - 1 : st - 1, c0 + (S - 1) * advance);
        copy_wait<S - 1>();
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const unsigned int c = c0 + j * P;
            if (c < C) {
                const float stp = step[c];
                uint4 w[R];
                float sc[R];
                int ah[R], al[R];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const unsigned int q = (st * Q + j * R + r) * BLOCK + t;
                    w[r] = ring[q];
                    sc[r] = ring_scale[q];
                    ah[r] = 0;
                    al[r] = 0;
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint4 a = qs[i * C + c];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned int wv = word_of(w[r], i);
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
                    acc[r] = fmaf(sc[r] * stp, (float)(ah[r] * 256 + al[r]), acc[r]);
            }
        }
        st = st + 1 == S ? 0 : st + 1;
    }

    // Rows of a row group past `rows` read ring slots never filled: their sums are discarded.
    const unsigned int span = P < 32 ? P : 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
        for (unsigned int off = span / 2; off > 0; off >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (P > 32) {
        const unsigned int warp = t / 32, lane = t % 32;
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

#define STAGED_ENTRY(NAME, R, J, S, MIN_BLOCKS)                                                   \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row) {                                                   \
        const unsigned int* item = work + 4 * blockIdx.y;                                         \
        const unsigned long long base =                                                           \
            (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);                    \
        dot_tile_staged<R, J, S, false>(base, slot_list[item[2]], slot_input, input, output,      \
                                        rows, k, group, weight_offset, scale_offset, mode,        \
                                        lanes_per_row, blockIdx.x, nullptr, 0);                   \
    }

// The whole layer (gate+up, then down) in one launch, one slot per item. Blocks take tickets
// in launch order from counters[0]: the first items x tiles0 are the gate+up tiles (item-major),
// the rest the down tiles. A gate+up tile publishes its rows by counting up counters[2 + item];
// a down tile requests its first weights, then waits for all tiles0 of its item. No deadlock:
// a block waits only on tiles whose tickets were taken before its own, by blocks already
// running, which never wait. The last block to finish (counters[1]) zeroes the counters for the
// next launch. counters: items + 2 words, zero before the first launch.
template <int R, int J, int S>
__device__ __forceinline__ void moe_dot_fused(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_token, const float* __restrict__ x, float* gu, float* y,
    unsigned int* counters, unsigned int items, unsigned int hidden, unsigned int ffn,
    unsigned int group, unsigned long long down_weight_offset,
    unsigned long long gate_up_scale_offset, unsigned long long down_scale_offset,
    unsigned int lanes0, unsigned int lanes1, unsigned int tiles0, unsigned int tiles1) {
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(counters, 1u);
    __syncthreads();
    unsigned int tk = ticket;
    const bool down = tk >= items * tiles0;
    if (down) tk -= items * tiles0;
    const unsigned int tiles = down ? tiles1 : tiles0;
    const unsigned int it = tk / tiles, tile = tk % tiles;
    const unsigned int* item = work + 4 * it;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int s = slot_list[item[2]];
    if (!down) {
        dot_tile_staged<R, J, S, false>(base, s, slot_token, x, gu, 2 * ffn, hidden, group, 0,
                                        gate_up_scale_offset, 0, lanes0, tile, nullptr, 0);
        // Publish: every writer's rows reach the GPU scope before the count goes up.
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(counters + 2 + it, 1u);
    } else {
        dot_tile_staged<R, J, S, true>(base, s, slot_token, gu, y, hidden, ffn, group,
                                       down_weight_offset, down_scale_offset, 1, lanes1, tile,
                                       counters + 2 + it, tiles0);
    }
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(counters + 1, 1u) == items * (tiles0 + tiles1) - 1) {
            for (unsigned int i = 0; i < items + 2; ++i) counters[i] = 0;
        }
    }
}

#define FUSED_ENTRY(NAME, R, J, S, MIN_BLOCKS)                                                    \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_token,  \
        const float* x, float* gu, float* y, unsigned int* counters, unsigned int items,         \
        unsigned int hidden, unsigned int ffn, unsigned int group,                                \
        unsigned long long down_weight_offset, unsigned long long gate_up_scale_offset,           \
        unsigned long long down_scale_offset, unsigned int lanes0, unsigned int lanes1,           \
        unsigned int tiles0, unsigned int tiles1) {                                               \
        moe_dot_fused<R, J, S>(work, slot_list, slot_token, x, gu, y, counters, items, hidden,    \
                               ffn, group, down_weight_offset, gate_up_scale_offset,              \
                               down_scale_offset, lanes0, lanes1, tiles0, tiles1);                \
    }

// ---- Bulk-copy kernels (fifth pass) ----
// A block's weights are one contiguous byte range (its rows of one expert matrix), so thread 0
// requests the whole tile with one bulk copy (cp.async.bulk, the TMA engine, sm_90+) that
// completes on a shared-memory barrier, while the block quantizes its activations and copies
// the tile's scales: the tile is in flight during the whole start-up, with no registers and no
// per-load instructions; the dot loop then reads weights from shared memory. Before sm_90 the
// threads copy the tile themselves (same result, no overlap).
// Dynamic shared memory: the tile (rows_per_block x k / 2 bytes), its scales (rows_per_block x
// k / group floats, padded to 16 bytes), then the quantized activations as in moe_dot.

__device__ __forceinline__ void bulk_barrier_init(unsigned long long* bar, unsigned int bytes) {
#if __CUDA_ARCH__ >= 900
    const unsigned int b = shared_address(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes)
                 : "memory");
#endif
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared; on sm_90+
// completes on `bar` (thread 0 only), else every thread of the block takes part.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned int bytes,
                                          unsigned long long* bar) {
#if __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        const unsigned int piece = 1u << 15;  // 32 KiB per request
        for (unsigned int o = 0; o < bytes; o += piece) {
            const unsigned int n = bytes - o < piece ? bytes - o : piece;
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
                "[%3];" ::"r"(shared_address((char*)dst + o)),
                "l"((const char*)src + o), "r"(n), "r"(shared_address(bar))
                : "memory");
        }
    }
#else
    for (unsigned int i = threadIdx.x; i < bytes / 16; i += BLOCK)
        ((uint4*)dst)[i] = load_weights((const uint4*)src + i);
#endif
}

// Waits for phase 0 of `bar` (the bulk copy landed).
__device__ __forceinline__ void bulk_wait(unsigned long long* bar) {
#if __CUDA_ARCH__ >= 900
    const unsigned int b = shared_address(bar);
    unsigned int done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, "
            "p; }"
            : "=r"(done)
            : "r"(b)
            : "memory");
    }
#endif
}

template <int R>
__device__ __forceinline__ void moe_dot_bulk(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P) {
    extern __shared__ uint4 dyn[];
    __shared__ unsigned long long bar;
    __shared__ float red[(BLOCK / 32) * R];
    const unsigned int* item = work + 4 * blockIdx.y;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int t = threadIdx.x;
    const unsigned int C = k / 32;  // 16-byte chunks per row
    const unsigned int rows_per_block = R * (BLOCK / P);
    const unsigned int r0 = blockIdx.x * rows_per_block;
    const unsigned int nrows = rows - r0 < rows_per_block ? rows - r0 : rows_per_block;
    const unsigned int groups_per_row = k / group;
    uint4* tile = dyn;
    float* tile_scale = (float*)(dyn + rows_per_block * C);
    uint4* qs = (uint4*)(tile_scale + ((rows_per_block * groups_per_row + 3) & ~3u));
    float* step = (float*)(qs + 4 * C);

    const unsigned int tile_bytes = nrows * C * 16;
    if (t == 0) bulk_barrier_init(&bar, tile_bytes);
    bulk_copy(tile, (const unsigned char*)(base + weight_offset) + (size_t)r0 * (k / 2), tile_bytes,
              &bar);
    const float* sbase = (const float*)(base + scale_offset) + (size_t)r0 * groups_per_row;
    for (unsigned int i = t; i < nrows * groups_per_row; i += BLOCK) tile_scale[i] = __ldg(sbase + i);
    const unsigned int s = slot_list[item[2]];
    quantize_slot<false>(input, slot_input, s, k, mode, qs, step);
    __syncthreads();
    bulk_wait(&bar);

    const unsigned int kl = t % P;
    const unsigned int lrow0 = (t / P) * R;  // first row of this row group in the tile
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 2
    for (unsigned int c = kl; c < C; c += P) {
        const float stp = step[c];
        const unsigned int g = (c * 32) / group;
        uint4 w[R];
        float sc[R];
        int ah[R], al[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            // Rows past the tile read whatever is there: their sums are discarded.
            const unsigned int lr = lrow0 + r < rows_per_block ? lrow0 + r : 0;
            w[r] = tile[lr * C + c];
            sc[r] = tile_scale[lr * groups_per_row + g];
            ah[r] = 0;
            al[r] = 0;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 a = qs[i * C + c];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned int wv = word_of(w[r], i);
                const int hi = (int)((wv ^ 0x88888888u) & 0xF0F0F0F0u);
                const int lo = (int)(((wv << 4) ^ 0x88888888u) & 0xF0F0F0F0u);
                ah[r] = dp4a(lo, (int)a.x, ah[r]);
                ah[r] = dp4a(hi, (int)a.z, ah[r]);
                al[r] = dp4a(lo, (int)a.y, al[r]);
                al[r] = dp4a(hi, (int)a.w, al[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = fmaf(sc[r] * stp, (float)(ah[r] * 256 + al[r]), acc[r]);
    }

    const unsigned int span = P < 32 ? P : 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
        for (unsigned int off = span / 2; off > 0; off >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (P > 32) {
        const unsigned int warp = t / 32, lane = t % 32;
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
            if (lrow0 + r < nrows) output[(size_t)s * rows + r0 + lrow0 + r] = acc[r];
    }
}

#define BULK_ENTRY(NAME, R, MIN_BLOCKS)                                                           \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row) {                                                   \
        moe_dot_bulk<R>(work, slot_list, slot_input, input, output, rows, k, group,              \
                        weight_offset, scale_offset, mode, lanes_per_row);                        \
    }

// ---- Int8 tensor-core kernels (fifth pass) ----
// Same integer arithmetic as moe_dot (weights 16 (n - 8) as s8, activations x = 256 h + l in
// two s8 limbs, exact integer sums per 32-column chunk, one f32 scaling per chunk and row), but
// the products run on the tensor cores with mma.sync.m16n8k32.s8 (sm_80+), which takes far fewer
// instructions per weight than dp4a. A warp owns a tile of 16 rows; per 128-column super-chunk
// (4 chunks, 64 bytes of a row) lane (g, t) = (lane / 4, lane % 4) loads the 16 bytes of chunk t
// of rows g and g + 8 (one 16-byte load each: a row's 64 bytes come from 4 lanes). Word s of
// those 16 bytes gives the A fragment of k-step s: its low nibbles (even columns) as k-slots
// 4t..4t+3, its high nibbles (odd columns) as 16+4t..16+4t+3, so k-slot 4t + i is column
// 8s + 2i of chunk t. The 8 columns of B are (chunk, limb) pairs: column n holds limb n % 2 of
// chunk n / 2 and zero on the other chunks' k-slots, so D[row][2t] and D[row][2t + 1] are the
// h and l sums of chunk t, and land in lane (g, t), which owns chunk t: the 4 k-steps of a
// super-chunk accumulate in the s32 accumulators, then each lane scales its chunk (its scale
// and the chunk's step). The ks warps of a tile split the super-chunks (split-K, the grid of the
// tensor-core union kernel: launch::warps_per_tile), and their sums meet in shared memory.
// Weights stream through a register ring of NB super-chunks (NB - 1 in flight). Needs k a
// multiple of 128 (the host falls back to moe_dot_a_r2b3 otherwise, and before sm_80).

__device__ __forceinline__ void mma_s8(int* c, int a0, int a1, int a2, int a3, int b0, int b1) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();  // the host never launches these kernels before sm_80
#endif
}

template <int NB>
__device__ __forceinline__ void moe_dot_mma(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode,
    unsigned int ks) {
    extern __shared__ uint4 qs[];
    __shared__ float red[(BLOCK / 32) * 16];
    const unsigned int* item = work + 4 * blockIdx.y;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int s = slot_list[item[2]];
    const unsigned int C = k / 32;    // chunks per row
    const unsigned int SC = k / 128;  // super-chunks per row
    float* step = (float*)(qs + 4 * C);

    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int g = lane / 4, t = lane % 4;
    const unsigned int tile = warp / ks, kw = warp % ks;
    const unsigned int row_a = (blockIdx.x * (BLOCK / 32 / ks) + tile) * 16 + g;
    const unsigned int row_b = row_a + 8;
    const unsigned int groups_per_row = k / group;
    const unsigned char* wbase = (const unsigned char*)(base + weight_offset);
    const float* sbase = (const float*)(base + scale_offset);

    uint4 wa[NB], wb[NB];
    float sa[NB], sb[NB];
    // Super-chunk `sc` of rows row_a and row_b into ring slot `buf` (rows past the matrix:
    // nibbles 8 with scale 0, contributing exactly 0).
    auto fetch = [&](int buf, unsigned int sc) {
        const unsigned int c = 4 * sc + t;
        const unsigned int gi = (c * 32) / group;
        if (sc < SC && row_a < rows) {
            wa[buf] = load_weights((const uint4*)(wbase + (size_t)row_a * (k / 2)) + c);
            sa[buf] = __ldg(sbase + (size_t)row_a * groups_per_row + gi);
        } else {
            wa[buf] = make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);
            sa[buf] = 0.0f;
        }
        if (sc < SC && row_b < rows) {
            wb[buf] = load_weights((const uint4*)(wbase + (size_t)row_b * (k / 2)) + c);
            sb[buf] = __ldg(sbase + (size_t)row_b * groups_per_row + gi);
        } else {
            wb[buf] = make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);
            sb[buf] = 0.0f;
        }
    };
#pragma unroll
    for (int b = 0; b + 1 < NB; ++b) fetch(b, kw + b * ks);

    quantize_slot<false>(input, slot_input, s, k, mode, qs, step);
    __syncthreads();

    // This lane's B column: limb g % 2 of chunk g / 2, nonzero only on chunk t's k-slots.
    const bool b_on = (g / 2) == t;
    const bool b_low = (g % 2) == 1;
    float acc_a = 0.0f, acc_b = 0.0f;
    for (unsigned int sc0 = kw; sc0 < SC; sc0 += NB * ks) {
#pragma unroll
        for (int buf = 0; buf < NB; ++buf) {
            const unsigned int sc = sc0 + buf * ks;
            if (sc < SC) {
                fetch((buf + NB - 1) % NB, sc + (NB - 1) * ks);
                const unsigned int c = 4 * sc + t;
                int d[4] = {0, 0, 0, 0};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint4 q = qs[i * C + c];
                    const int b0 = b_on ? (int)(b_low ? q.y : q.x) : 0;
                    const int b1 = b_on ? (int)(b_low ? q.w : q.z) : 0;
                    const unsigned int x = word_of(wa[buf], i), y = word_of(wb[buf], i);
                    const int a0 = (int)(((x << 4) ^ 0x88888888u) & 0xF0F0F0F0u);
                    const int a2 = (int)((x ^ 0x88888888u) & 0xF0F0F0F0u);
                    const int a1 = (int)(((y << 4) ^ 0x88888888u) & 0xF0F0F0F0u);
                    const int a3 = (int)((y ^ 0x88888888u) & 0xF0F0F0F0u);
                    mma_s8(d, a0, a1, a2, a3, b0, b1);
                }
                const float stp = step[c];
                acc_a = fmaf(sa[buf] * stp, (float)(d[0] * 256 + d[1]), acc_a);
                acc_b = fmaf(sb[buf] * stp, (float)(d[2] * 256 + d[3]), acc_b);
            }
        }
    }

    // Sum the 4 chunks' lanes of each row, then the ks warps of the tile.
    acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 1);
    acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 2);
    acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 1);
    acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 2);
    if (ks > 1) {
        if (t == 0) {
            red[warp * 16 + g] = acc_a;
            red[warp * 16 + g + 8] = acc_b;
        }
        __syncthreads();
        if (kw == 0 && t == 0) {
            for (unsigned int w2 = 1; w2 < ks; ++w2) {
                acc_a += red[(warp + w2) * 16 + g];
                acc_b += red[(warp + w2) * 16 + g + 8];
            }
        }
    }
    if (kw == 0 && t == 0) {
        if (row_a < rows) output[(size_t)s * rows + row_a] = acc_a;
        if (row_b < rows) output[(size_t)s * rows + row_b] = acc_b;
    }
}

#define MMA_ENTRY(NAME, NB, MIN_BLOCKS)                                                           \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int warps_per_tile) {                                                  \
        moe_dot_mma<NB>(work, slot_list, slot_input, input, output, rows, k, group,              \
                        weight_offset, scale_offset, mode, warps_per_tile);                       \
    }

// ---- Sixth pass: unsigned nibbles, a shift for the group, activations quantized once ----
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

// Quantizes one activation row into `qs` (layout above; generic pointer: global scratch or
// shared memory). `src`: mode 0 the k activations, mode 1 a gate+up row (gate, then up: 2 k
// values) whose silu(gate) * up is quantized. Thread u takes the 8 columns of word u (word
// u % 4 of chunk u / 4), so a chunk's 4 words sit in 4 consecutive lanes that share their
// maximum and integer sum by shuffles (k / 8 is a multiple of 4: uniform trip count).
template <int LIMBS>
__device__ __forceinline__ void quantize_row(const float* __restrict__ src, unsigned int k,
                                             int mode, uint4* qs) {
    const unsigned int C = k / 32;
    float* step = (float*)(qs + act_words<LIMBS>(C));
    int* sums = (int*)(step + C);
    const float qmax = LIMBS == 2 ? QMAX : 127.0f;
    for (unsigned int u0 = 0; u0 < k / 8; u0 += BLOCK) {
        const unsigned int u = u0 + threadIdx.x;
        const bool in = u < k / 8;
        float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (in) {
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
        }
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

// moe_dot with the sixth pass's arithmetic. PRE: `input` is the pre-pass's scratch (row
// slot_input[s] in mode 0, row s in mode 1), copied to shared memory as is; else the block
// quantizes its slot's row itself (as moe_dot, plus the chunk sums).
// One row tile (`tile` of the item, BLOCK / P row groups of R rows) of work item `item_index`.
// `reuse`: the block ran a tile before (persistent kernels), so it waits for every thread to
// be done with the shared activations before overwriting them.
template <int R, int J, int NB, bool PRE, int LIMBS, bool PDL>
__device__ __forceinline__ void dot6_tile(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P,
    unsigned int tile, unsigned int item_index, bool reuse) {
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
    if (reuse) __syncthreads();
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

    for (unsigned int c0 = kl; c0 < C; c0 += NB * J * P) {
#pragma unroll
        for (int buf = 0; buf < NB; ++buf) {
            const unsigned int cb = c0 + buf * J * P;
            if (cb < C) {
                if (cb + (NB - 1) * J * P < C) fetch((buf + NB - 1) % NB, cb + (NB - 1) * J * P);
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const unsigned int c = cb + j * P;
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
                }
            }
        }
    }

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

// One tile per block: grid (tiles per item, items).
template <int R, int J, int NB, bool PRE, int LIMBS, bool PDL>
__device__ __forceinline__ void moe_dot6(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P) {
    dot6_tile<R, J, NB, PRE, LIMBS, PDL>(work, slot_list, slot_input, input, output, rows, k,
                                         group, weight_offset, scale_offset, mode, P, blockIdx.x,
                                         blockIdx.y, false);
}

// Persistent blocks (sixth pass): a 1-D grid no larger than the resident capacity, each block
// taking tiles blockIdx.x, + gridDim.x, ... of the items x tiles-per-item tiles (tile-major
// within an item). The host sizes the grid so every block takes the same number of tiles
// (launch::persistent_blocks): no last, partly filled wave of blocks.
template <int R, int J, int NB>
__device__ __forceinline__ void moe_dot6_persistent(
    const unsigned int* __restrict__ work, const unsigned int* __restrict__ slot_list,
    const unsigned int* __restrict__ slot_input, const float* __restrict__ input,
    float* __restrict__ output, unsigned int rows, unsigned int k, unsigned int group,
    unsigned long long weight_offset, unsigned long long scale_offset, int mode, unsigned int P,
    unsigned int items) {
    const unsigned int per_tile = R * (BLOCK / P);
    const unsigned int tiles = (rows + per_tile - 1) / per_tile;
    for (unsigned int t = blockIdx.x; t < items * tiles; t += gridDim.x)
        dot6_tile<R, J, NB, true, 2, true>(work, slot_list, slot_input, input, output, rows, k,
                                           group, weight_offset, scale_offset, mode, P,
                                           t % tiles, t / tiles, t != blockIdx.x);
}

#define PERS_ENTRY(NAME, R, J, NB, MIN_BLOCKS)                                                    \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row, unsigned int items) {                               \
        moe_dot6_persistent<R, J, NB>(work, slot_list, slot_input, input, output, rows, k, group, \
                                      weight_offset, scale_offset, mode, lanes_per_row, items);   \
    }

#define DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, PRE, LIMBS, PDL)                                      \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row) {                                                   \
        moe_dot6<R, J, NB, PRE, LIMBS, PDL>(work, slot_list, slot_input, input, output, rows, k,      \
                                       group, weight_offset, scale_offset, mode, lanes_per_row);  \
    }
// In-block quantization, unsigned nibbles (sixth pass: the unpacking change alone).
#define NIB_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, false, 2, false)
// The same, the down launch started programmatically (prefetches before the gate+up ends).
#define NIBP_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, false, 2, true)
// Pre-pass activations (two limbs), unsigned nibbles: the sixth pass's kernels.
#define PREQ_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 2, false)
// The same, every launch after the first started programmatically (hides the pre-passes).
#define PREQP_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 2, true)
// Pre-pass activations, one int8 limb (reported only: outside the stated tolerance).
#define PREQ8_ENTRY(NAME, R, J, NB, MIN_BLOCKS) DOT6_ENTRY(NAME, R, J, NB, MIN_BLOCKS, true, 1, false)

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
// grid is sized: the `_w` kernels get one wave of blocks, the `_a` kernel one wave when that
// keeps 8 or more lanes per row, else several).
DOT_ENTRY(moe_dot_r2b3, 2, 2, 2, 3)
DOT_ENTRY(moe_dot_r2b4, 2, 2, 2, 4)
DOT_ENTRY(moe_dot_r4b2, 4, 2, 2, 2)
DOT_ENTRY(moe_dot_r1b4, 1, 2, 2, 4)
DOT_ENTRY(moe_dot_w_r2j2n2b3, 2, 2, 2, 3)
DOT_ENTRY(moe_dot_w_r2j2n3b3, 2, 2, 3, 3)
DOT_ENTRY(moe_dot_w_r2j1n4b3, 2, 1, 4, 3)
DOT_ENTRY(moe_dot_w_r2j2n4b2, 2, 2, 4, 2)
// Same code as moe_dot_r2b3, grid chosen per launch (DotGrid::Adaptive): the default.
DOT_ENTRY(moe_dot_a_r2b3, 2, 2, 2, 3)
// Shared-memory staged (fifth pass): rows, chunks per stage, stages, resident blocks; the
// STAGED kernels run the usual two launches, the FUSED ones the whole layer in one launch.
STAGED_ENTRY(moe_dot_s_r2j2s3b3, 2, 2, 3, 3)
FUSED_ENTRY(moe_dot_f_r2j2s3b3, 2, 2, 3, 3)
FUSED_ENTRY(moe_dot_f_r2j1s4b4, 2, 1, 4, 4)
// Bulk copy (fifth pass): rows per row group, resident blocks; the grid (launch.rs) keeps the
// tile within the shared memory of that many blocks.
BULK_ENTRY(moe_dot_t_r2b4, 2, 4)
// Int8 tensor cores (fifth pass): super-chunks in the register ring, resident blocks.
MMA_ENTRY(moe_dot_m_n3b4, 3, 4)
// Sixth pass: unsigned nibbles and a shift (NIB: in-block quantization; PREQ: activations
// quantized once by a pre-pass; PREQ8: the same with one int8 limb, reported only): rows,
// chunks per batch, batches in the ring, resident blocks.
NIB_ENTRY(moe_dot_u_r2b3, 2, 2, 2, 3)
PREQ_ENTRY(moe_dot_q_r2b3, 2, 2, 2, 3)
PREQ_ENTRY(moe_dot_q_r2j1n3b4, 2, 1, 3, 4)
PREQ8_ENTRY(moe_dot_q8_r2b3, 2, 2, 2, 3)
// Sixth pass, programmatic dependent launch (NIBP: the down launch; PREQP: every launch after
// the layer's first).
NIBP_ENTRY(moe_dot_up_r2b3, 2, 2, 2, 3)
PREQP_ENTRY(moe_dot_qp_r2b3, 2, 2, 2, 3)
PREQP_ENTRY(moe_dot_qp_r2j1n3b4, 2, 1, 3, 4)
// Sixth pass, persistent blocks (pre-pass activations, programmatic launches, a grid of
// equal shares of the tiles): rows, chunks per batch, batches in the ring, resident blocks.
PERS_ENTRY(moe_dot_qr_r2b3, 2, 2, 2, 3)
PERS_ENTRY(moe_dot_qr_r2j1n3b4, 2, 1, 3, 4)
PERS_ENTRY(moe_dot_qr_r1j1n3b6, 1, 1, 3, 6)
// Per-launch choice (sixth pass): the code of moe_dot_qp_r2j1n3b4 / moe_dot_qr_r2j1n3b4 for
// launches of several waves, moe_dot_up_r2b3 where the gate+up launch fits in one wave
// (DotKernel::one_wave_partner in launch.rs).
PREQP_ENTRY(moe_dot_xp_r2j1n3b4, 2, 1, 3, 4)
PERS_ENTRY(moe_dot_xr_r2j1n3b4, 2, 1, 3, 4)
PERS_ENTRY(moe_dot_xr_r2b3, 2, 2, 2, 3)
PERS_ENTRY(moe_dot_xr_r1j1n3b6, 1, 1, 3, 6)

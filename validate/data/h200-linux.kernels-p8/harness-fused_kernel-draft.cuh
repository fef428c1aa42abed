// ---- Eighth pass: one persistent launch per layer, weights staged by bulk copies ----
// (draft for the standalone harness; appended to moe_dot.cu once measured)

// quantize_row with `nthreads` threads (tid in 0..nthreads-1, nthreads a multiple of 32: the
// shuffles need whole warps with a uniform trip count).
template <int LIMBS, class Load8>
__device__ __forceinline__ void quantize_row_n(Load8 load8, unsigned int k, uint4* qs,
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
            x[q] = __float2int_rn(v[q] * inv);
            xs += x[q];
        }
        xs += __shfl_xor_sync(0xffffffffu, xs, 1);
        xs += __shfl_xor_sync(0xffffffffu, xs, 2);
        if (in) {
            int h[8], l[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                h[q] = (x[q] + 128) >> 8;
                l[q] = x[q] - (h[q] << 8);
            }
            qs[(u % 4) * C + u / 4] =
                make_uint4(pack4(h[0], h[2], h[4], h[6]), pack4(l[0], l[2], l[4], l[6]),
                           pack4(h[1], h[3], h[5], h[7]), pack4(l[1], l[3], l[5], l[7]));
            if (u % 4 == 0) {
                step[u / 4] = m / (qmax * 16.0f);
                sums[u / 4] = xs;
            }
        }
    }
}

#ifdef FUSED_DEBUG
__device__ unsigned long long g_dbg[200 * 64 * 5];
__device__ unsigned long long g_flagset[256];
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define DBG(IT, K) if ((IT) < 64 && blockIdx.x < 200) g_dbg[(blockIdx.x * 64 + (IT)) * 5 + (K)] = gtime();
#else
#define DBG(IT, K) {}
#endif
__device__ __forceinline__ unsigned int smem_addr(const void* p) {
    return (unsigned int)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(unsigned long long* bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool mbar_test(unsigned long long* bar, unsigned int parity) {
    unsigned int r;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(r)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    return r != 0;
}
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
template <bool POLL>
__device__ __forceinline__ void mbar_wait_t(unsigned long long* bar, unsigned int parity) {
    if (POLL) {
        while (!mbar_test(bar, parity)) {
        }
        return;
    }
    mbar_wait(bar, parity);
}
// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src`
// to shared `dst`, completing `bytes` transactions of `bar`.
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

// One tile of the fused launch: which phase, work item, slot and rows.
struct FusedTile {
    unsigned int mode;   // 0 gate+up, 1 down
    unsigned int item;   // work item
    unsigned int s;      // slot
    unsigned int row0;   // first row of the tile
    unsigned int nrows;  // rows in the tile
};

struct FusedShape {
    unsigned int items, hidden, ffn, group;
    unsigned int p_gu, p_d;      // lanes per row group
    unsigned int t_gu, t_d;      // rows per tile
    unsigned int nt_gu, nt_d;    // tiles per item
};

// Tile t's phase, item and rows (the slot is looked up by the caller).
__device__ __forceinline__ FusedTile fused_tile_nolookup(const FusedShape& sh, unsigned int t) {
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
    f.s = 0;
    f.row0 = tile * tr;
    f.nrows = min(tr, rows - f.row0);
    return f;
}

// Persistent fused per-slot layer: a producer warp's lane 0 takes tiles in ticket order (gate+up
// tiles of every item, then down tiles) and bulk-copies each tile's weight rows, their scales
// and the slot's quantized activation row into one of STAGES shared-memory stages; CW consumer
// warps compute R rows per thread from shared memory. The last warp to finish an item's
// gate+up tiles quantizes silu(gate) * up into act_d and publishes flag[item] = epoch; the
// producer waits for it before copying a down tile's activations (the weights are requested
// first). Counters wrap by atomicInc, so no reset between launches.
template <int STAGES, int CW, int R, bool LOADONLY, int SPLIT, int MAXCH, bool POLL = false, int DIAG = 0>
__device__ __forceinline__ void fused_layer(
    const unsigned int* __restrict__ work, const uint2* __restrict__ item_st,
    const uint4* __restrict__ act_gu, unsigned long long* __restrict__ gu, uint4* __restrict__ act_d, float* __restrict__ y,
    unsigned int* __restrict__ flags, FusedShape sh,
    unsigned long long off_dw, unsigned long long off_gus, unsigned long long off_ds,
    unsigned int stage_w, unsigned int stage_s, unsigned int stage_a, unsigned int epoch) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    __shared__ uint2 desc[STAGES];  // (tile, slot)
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int stage_bytes = stage_w + stage_s + stage_a;
    const unsigned int total = sh.items * (sh.nt_gu + sh.nt_d);
    const unsigned int C_gu = sh.hidden / 32, C_d = sh.ffn / 32;
    const unsigned int row_gu = act_row_u4<2>(C_gu), row_d = act_row_u4<2>(C_d);
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], CW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CW + 1) {  // quantizing warp
        // Items whose last gate+up tile this block computes (static order): wait for every
        // gate+up row of the item to carry this launch's epoch, quantize silu(gate) * up into
        // act_d, then publish flag[item] = epoch (release) for the down tiles' producers.
        for (unsigned int i = 0; i < sh.items; ++i) {
            if ((i * sh.nt_gu + sh.nt_gu - 1) % gridDim.x != blockIdx.x) continue;
            const unsigned int s = __ldg(item_st + i).x;
            const unsigned long long* g = gu + (size_t)s * 2 * sh.ffn;
            const unsigned int ffn = sh.ffn;
            quantize_row_n<2>(
                [&](unsigned int u, float* v) {
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
#ifdef FUSED_DEBUG
            if (lane == 0) g_flagset[i] = gtime();
#endif
        }
        return;
    }

    if (warp == CW) {  // producer warp
        // Static tile order: block b takes tiles b, b + G, b + 2G, ... (G = gridDim.x, every
        // block resident: at most one per multiprocessor). Each lane looks up one of the next
        // 32 tiles' item (one 16-byte work entry, its slot and the slot's token) so the tile
        // metadata costs one memory latency per 32 tiles; lane 0 issues the copies.
        bool waited = false;
        unsigned int it = 0;
        for (unsigned int t0 = blockIdx.x; t0 < total; t0 += 32 * gridDim.x) {
            const unsigned int tl = t0 + lane * gridDim.x;
            unsigned int ml = 0, il = 0, sl = 0, rl = 0, nl = 0, tokl = 0;
            unsigned long long bl = 0;
            if (tl < total) {
                const FusedTile f = fused_tile_nolookup(sh, tl);
                const uint4 wi = __ldg((const uint4*)work + f.item);
                const uint2 ist = __ldg(item_st + f.item);
                ml = f.mode; il = f.item; rl = f.row0; nl = f.nrows;
                bl = (unsigned long long)wi.x | ((unsigned long long)wi.y << 32);
                sl = ist.x;
                tokl = ist.y;
            }
            const unsigned int n = min(32u, (total - t0 + gridDim.x - 1) / gridDim.x);
            for (unsigned int j = 0; j < n; ++j, ++it) {
                const unsigned int st = it % STAGES;
                const unsigned int mode = __shfl_sync(0xffffffffu, ml, j);
                const unsigned int item = __shfl_sync(0xffffffffu, il, j);
                const unsigned int s = __shfl_sync(0xffffffffu, sl, j);
                const unsigned int row0 = __shfl_sync(0xffffffffu, rl, j);
                const unsigned int nrows = __shfl_sync(0xffffffffu, nl, j);
                const unsigned int tok = __shfl_sync(0xffffffffu, tokl, j);
                const unsigned long long base = __shfl_sync(0xffffffffu, bl, j);
                if (lane == 0) {
                    if (it >= STAGES) mbar_wait_t<POLL>(&empty[st], ((it / STAGES) - 1) & 1);
                    DBG(it, 0)
                    desc[st] = make_uint2(t0 + j * gridDim.x, s);
                    const unsigned int k = mode == 0 ? sh.hidden : sh.ffn;
                    const unsigned int gpr = k / sh.group;
                    const unsigned int wb = nrows * (k / 2), sb = (DIAG & 2) ? 0u : nrows * gpr * 4;
                    const unsigned int ab = (DIAG & 1) && mode == 0 ? 0u : 16 * (mode == 0 ? row_gu : row_d);
                    unsigned char* dst = smem + st * stage_bytes;
                    mbar_arrive_tx(&full[st], wb + sb + ab);
                    const unsigned long long woff = mode == 0 ? 0ull : off_dw;
                    const unsigned long long soff = mode == 0 ? off_gus : off_ds;
                    {
                        // SPLIT copies of whole rows each (the last takes the rest).
                        const unsigned int rows_per = (nrows + SPLIT - 1) / SPLIT;
                        for (unsigned int r0 = 0; r0 < nrows; r0 += rows_per) {
                            const unsigned int nr = min(rows_per, nrows - r0);
                            bulk_copy(dst + r0 * (k / 2),
                                      (const void*)(base + woff +
                                                    (unsigned long long)(row0 + r0) * (k / 2)),
                                      nr * (k / 2), &full[st]);
                        }
                    }
                    if (sb)
                    bulk_copy(dst + stage_w,
                              (const void*)(base + soff + (unsigned long long)row0 * gpr * 4), sb,
                              &full[st]);
                    if (mode == 0) {
                        if (!waited) {
                            grid_dependency_wait();  // the pre-pass's activation rows
                            waited = true;
                        }
                        if (ab)
                        bulk_copy(dst + stage_w + stage_s, act_gu + (size_t)tok * row_gu, ab,
                                  &full[st]);
                    } else {
                        while (load_acquire(flags + item) != epoch) {
                        }
                        DBG(it, 3)
                        asm volatile("fence.proxy.async;" ::: "memory");
                        DBG(it, 4)
                        bulk_copy(dst + stage_w + stage_s, act_d + (size_t)s * row_d, ab,
                                  &full[st]);
                    }
                }
                __syncwarp();
            }
        }
        if (lane == 0) {
            const unsigned int st = it % STAGES;
            if (it >= STAGES) mbar_wait_t<POLL>(&empty[st], ((it / STAGES) - 1) & 1);
            desc[st] = make_uint2(0xFFFFFFFFu, 0u);
            mbar_arrive(&full[st]);
        }
        return;
    }

    // Consumers.
    const unsigned int tid = threadIdx.x;
    const unsigned int gshift = __ffs(sh.group) - 6;
    for (unsigned int it = 0;; ++it) {
        const unsigned int st = it % STAGES;
        mbar_wait_t<POLL>(&full[st], (it / STAGES) & 1);
        const uint2 d = desc[st];
        if (d.x == 0xFFFFFFFFu) break;
        if (threadIdx.x == 0) DBG(it, 1)
        FusedTile f = fused_tile_nolookup(sh, d.x);
        f.s = d.y;
        const unsigned int k = f.mode == 0 ? sh.hidden : sh.ffn;
        const unsigned int C = k / 32;
        const unsigned int P = f.mode == 0 ? sh.p_gu : sh.p_d;
        const unsigned int T = f.mode == 0 ? sh.t_gu : sh.t_d;
        const unsigned int gpr = k / sh.group;
        const unsigned char* base = smem + st * stage_bytes;
        const uint4* sw = (const uint4*)base;
        const float* ss = (const float*)(base + stage_w);
        const uint4* qa = (const uint4*)(base + stage_w + stage_s);
        const float* step = (const float*)(qa + 4 * C);
        const int* sums = (const int*)(step + C);
        const unsigned int pair = tid / P, kl = tid % P;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#define FUSED_WORD(WV, A)                                   \
    {                                                       \
        const unsigned int lo = (WV) & 0x0F0F0F0Fu;         \
        const unsigned int hi = (WV) & 0xF0F0F0F0u;         \
        hl = dp4a_us(lo, (int)(A).x, hl);                   \
        ll = dp4a_us(lo, (int)(A).y, ll);                   \
        hh = dp4a_us(hi, (int)(A).z, hh);                   \
        lh = dp4a_us(hi, (int)(A).w, lh);                   \
    }
        if (!LOADONLY && MAXCH > 0) {
            // Early release: the lane's whole share of the stage into registers, the stage
            // handed back, then the dot products.
            uint4 wr[MAXCH > 0 ? MAXCH : 1][R], ar[MAXCH > 0 ? MAXCH : 1][4];
            float sr[MAXCH > 0 ? MAXCH : 1][R], str[MAXCH > 0 ? MAXCH : 1];
            int zr[MAXCH > 0 ? MAXCH : 1];
#pragma unroll
            for (int q = 0; q < MAXCH; ++q) {
                const unsigned int c = kl + q * P;
                if (c < C) {
                    str[q] = step[c];
                    zr[q] = -128 * sums[c];
#pragma unroll
                    for (int i = 0; i < 4; ++i) ar[q][i] = qa[i * C + c];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned int lr = pair + r * (T / R);
                        wr[q][r] = sw[lr * C + c];
                        sr[q][r] = ss[lr * gpr + (c >> gshift)];
                    }
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[st]);
#pragma unroll
            for (int q = 0; q < MAXCH; ++q) {
                const unsigned int c = kl + q * P;
                if (c < C) {
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        int hl = 0, hh = 0, ll = 0, lh = zr[q];
                        FUSED_WORD(wr[q][r].x, ar[q][0])
                        FUSED_WORD(wr[q][r].y, ar[q][1])
                        FUSED_WORD(wr[q][r].z, ar[q][2])
                        FUSED_WORD(wr[q][r].w, ar[q][3])
                        const int dot = (hl * 16 + hh) * 256 + ll * 16 + lh;
                        acc[r] = fmaf(sr[q][r] * str[q], (float)dot, acc[r]);
                    }
                }
            }
        } else {
            if (!LOADONLY) {
#pragma unroll 2
                for (unsigned int c = kl; c < C; c += P) {
                    const float stp = step[c];
                    const int zero = -128 * sums[c];
                    const uint4 a0 = qa[c], a1 = qa[C + c], a2 = qa[2 * C + c], a3 = qa[3 * C + c];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned int lr = pair + r * (T / R);
                        const uint4 w = sw[lr * C + c];
                        const float sc = ss[lr * gpr + (c >> gshift)];
                        int hl = 0, hh = 0, ll = 0, lh = zero;
                        FUSED_WORD(w.x, a0)
                        FUSED_WORD(w.y, a1)
                        FUSED_WORD(w.z, a2)
                        FUSED_WORD(w.w, a3)
                        const int dot = (hl * 16 + hh) * 256 + ll * 16 + lh;
                        acc[r] = fmaf(sc * stp, (float)dot, acc[r]);
                    }
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with the stage
        }
#undef FUSED_WORD
        if (threadIdx.x == 0) DBG(it, 2)
#pragma unroll
        for (int r = 0; r < R; ++r)
            for (unsigned int off = P / 2; off > 0; off >>= 1)
                acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
        if (kl == 0) {
            if (f.mode == 0) {
                // Tagged with the launch's epoch: one single-copy-atomic 64-bit store per
                // row, which the item's quantizing warp polls (no fence on this path).
                unsigned long long* out = gu + (size_t)f.s * 2 * sh.ffn + f.row0;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const unsigned int lr = pair + r * (T / R);
                    if (lr < f.nrows)
                        __stcg(out + lr, ((unsigned long long)epoch << 32) | __float_as_uint(acc[r]));
                }
            } else {
                float* out = y + (size_t)f.s * sh.hidden + f.row0;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const unsigned int lr = pair + r * (T / R);
                    if (lr < f.nrows) out[lr] = acc[r];
                }
            }
        }
    }
}

#define FUSED_ENTRY(NAME, STAGES, CW, R, LOADONLY, SPLIT, MAXCH, POLL, DIAG)                                               \
    extern "C" __global__ void __launch_bounds__((CW + 2) * 32, CW <= 4 ? 2 : 1) NAME(                        \
        const unsigned int* work, const uint2* item_st,  \
        const uint4* act_gu, unsigned long long* gu, uint4* act_d, float* y,          \
        unsigned int* flags, unsigned int items, unsigned int hidden, unsigned int ffn,          \
        unsigned int group, unsigned int p_gu, unsigned int p_d, unsigned long long off_dw,     \
        unsigned long long off_gus, unsigned long long off_ds, unsigned int stage_w,            \
        unsigned int stage_s, unsigned int stage_a, unsigned int epoch) {                       \
        FusedShape sh;                                                                           \
        sh.items = items;                                                                        \
        sh.hidden = hidden;                                                                      \
        sh.ffn = ffn;                                                                            \
        sh.group = group;                                                                        \
        sh.p_gu = p_gu;                                                                          \
        sh.p_d = p_d;                                                                            \
        sh.t_gu = CW * 32 * R / p_gu;                                                            \
        sh.t_d = CW * 32 * R / p_d;                                                              \
        sh.nt_gu = (2 * ffn + sh.t_gu - 1) / sh.t_gu;                                            \
        sh.nt_d = (hidden + sh.t_d - 1) / sh.t_d;                                                \
        fused_layer<STAGES, CW, R, LOADONLY, SPLIT, MAXCH, POLL, DIAG>(work, item_st, act_gu, gu, act_d, y,  \
                                             flags, sh, off_dw, off_gus, off_ds,       \
                                             stage_w, stage_s, stage_a, epoch);                  \
    }

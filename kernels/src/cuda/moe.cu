// Decode-time MoE expert kernels, compiled at run time with NVRTC (no headers needed).
//
// Weights are int4 with one f32 scale per group of `group` consecutive input columns of a row.
// Byte b of a row holds column 2b in its low nibble and column 2b+1 in its high nibble;
// a weight is (nibble - 8) * scale. Each expert is one contiguous block of bytes:
//   [gate_up int4: 2*ffn rows x hidden/2][down int4: hidden rows x ffn/2]
//   [gate_up scales f32: 2*ffn x hidden/group][down scales f32: hidden x ffn/group]
// Rows 0..ffn of gate_up are the gate projection, rows ffn..2*ffn the up projection.
//
// One launch of `moe_matvec_*` covers a whole layer: blockIdx.y walks a work list whose items
// are (expert weight pointer, first index into slot_list, slot count <= T). The per-slot
// variant has one slot per item; the union variant groups the slots naming the same expert in
// one item, so that expert's weights are read once per item and serve all its slots.
//
// Layout of the work inside one item (why: at decode time this is a matrix-vector product
// whose only large operand is the weights, so the kernel must stream them at HBM speed):
// - blockIdx.x picks a tile of `R * blockDim.x / P` consecutive output rows;
// - a "row group" of P consecutive threads owns R consecutive rows; its thread `kl` reads the
//   16-byte chunks (32 weights) kl, kl + P, ... of each of its R rows, two chunks per row at a
//   time, so every thread has 2*R independent 16-byte loads in flight;
// - the P partial sums of a row are reduced with warp shuffles (and shared memory when P > 32);
// - the block stages the activations of its item's slots once, in shared memory, before
//   streaming weights.
// The host picks P (see `lanes_per_row` in launch.rs) so that the launch has enough blocks to
// cover every multiprocessor.

#define BLOCK 256

// Magic-number dequantization (why: int-to-float conversion issues at a quarter of the FMA
// rate on Hopper, and keeping up with HBM means dequantizing ~9e12 weights/s).
// For a nibble n at bits 4p..4p+3 of a word (p <= 4), the float with bits
// 0x3F800000 | (word & (0xF << 4p)) is 1 + n * 2^(4p-23); subtracting BIAS_p = 1 + 8 * 2^(4p-23)
// leaves (n - 8) * 2^(4p-23) exactly (both operands lie in [1, 2), so the subtraction is exact).
// Nibbles 5..7 are first shifted down 12 bits, to positions 2..4. The activations are staged
// pre-multiplied by the matching power of two 2^(23-4p) (X_SCALE below), so the product is
// exactly what (n - 8) * x would give: no extra instruction per weight.
#define ONE_BITS 0x3F800000u
#define BIAS0 1.00000095367431640625f  // 1 + 2^-20
#define BIAS1 1.0000152587890625f      // 1 + 2^-16
#define BIAS2 1.000244140625f          // 1 + 2^-12
#define BIAS3 1.00390625f              // 1 + 2^-8
#define BIAS4 1.0625f                  // 1 + 2^-4

// Pre-scale of the activation of column 8i + p (p = 0..7), the inverse of the nibble's 2^(4p'-23).
__device__ __forceinline__ float4 x_scale(float4 v, bool high_half) {
    if (!high_half) {  // p = 0..3
        v.x *= 8388608.0f;  // 2^23
        v.y *= 524288.0f;   // 2^19
        v.z *= 32768.0f;    // 2^15
        v.w *= 2048.0f;     // 2^11
    } else {  // p = 4..7 (5..7 read at positions 2..4 after the 12-bit shift)
        v.x *= 128.0f;      // 2^7
        v.y *= 32768.0f;    // 2^15
        v.z *= 2048.0f;     // 2^11
        v.w *= 128.0f;      // 2^7
    }
    return v;
}

__device__ __forceinline__ float nib(unsigned int word, unsigned int mask, float bias) {
    return __uint_as_float((word & mask) | ONE_BITS) - bias;
}

// The 8 weights of one word, each scaled by the inverse of its column's X_SCALE.
__device__ __forceinline__ void dequant8(unsigned int w, float* d) {
    const unsigned int v = w >> 12;
    d[0] = nib(w, 0x0000000Fu, BIAS0);
    d[1] = nib(w, 0x000000F0u, BIAS1);
    d[2] = nib(w, 0x00000F00u, BIAS2);
    d[3] = nib(w, 0x0000F000u, BIAS3);
    d[4] = nib(w, 0x000F0000u, BIAS4);
    d[5] = nib(v, 0x00000F00u, BIAS2);
    d[6] = nib(v, 0x0000F000u, BIAS3);
    d[7] = nib(v, 0x000F0000u, BIAS4);
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

// 16-byte weight load that skips L1 (weights are read once per item; L1 holds the activations).
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

// mode 0 (gate_up): input row of slot s is x[slot_input[s]] (k = hidden), output gu[s] (rows = 2*ffn).
// mode 1 (down): input of slot s is silu(gu[s][j]) * gu[s][k + j] (k = ffn), output y[s] (rows = hidden).
// P (lanes per row group) is a power of two in 1..BLOCK.
template <int T, int R>
__device__ void moe_matvec(const unsigned int* __restrict__ work,
                           const unsigned int* __restrict__ slot_list,
                           const unsigned int* __restrict__ slot_input,
                           const float* __restrict__ input,
                           float* __restrict__ output,
                           unsigned int rows, unsigned int k, unsigned int group,
                           unsigned long long weight_offset, unsigned long long scale_offset,
                           int mode, unsigned int P) {
    // Shared memory: the staged activations xs[t][q][c] (float4 q = 0..7 of chunk c of slot t:
    // lanes reading consecutive chunks hit consecutive 16-byte words, no bank conflicts), then
    // (P > 32) one R*T partial sum per warp.
    extern __shared__ float4 xs[];
    const unsigned int* item = work + 4 * blockIdx.y;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int first = item[2];
    const int nt = (int)item[3];
    const unsigned int C = k / 32;  // 16-byte chunks per row

    for (unsigned int i = threadIdx.x; i < (unsigned int)nt * 8 * C; i += BLOCK) {
        const unsigned int t = i / (8 * C);
        const unsigned int col = (i % (8 * C)) * 4;  // source columns are read consecutively
        const unsigned int c = col / 32, q = (col % 32) / 4;
        const unsigned int s = slot_list[first + t];
        float4 v;
        if (mode == 0) {
            v = *(const float4*)(input + (size_t)slot_input[s] * k + col);
        } else {
            const float* g = input + (size_t)s * 2 * k;
            const float4 a = *(const float4*)(g + col);
            const float4 b = *(const float4*)(g + k + col);
            v = make_float4(silu(a.x) * b.x, silu(a.y) * b.y, silu(a.z) * b.z, silu(a.w) * b.w);
        }
        xs[(t * 8 + q) * C + c] = x_scale(v, q & 1);
    }
    __syncthreads();

    const unsigned int kl = threadIdx.x % P;
    const unsigned int row0 = (blockIdx.x * (BLOCK / P) + threadIdx.x / P) * R;
    const unsigned int groups_per_row = k / group;
    const unsigned char* wbase = (const unsigned char*)(base + weight_offset);
    const float* sbase = (const float*)(base + scale_offset);

    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

    for (unsigned int c0 = kl; c0 < C; c0 += 2 * P) {
        uint4 w[2][R];
        float sc[2][R];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const unsigned int c = c0 + j * P;
            const unsigned int g = (c * 32) / group;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned int row = row0 + r;
                if (c < C && row < rows) {
                    w[j][r] = load_weights((const uint4*)(wbase + (size_t)row * (k / 2)) + c);
                    sc[j][r] = __ldg(sbase + (size_t)row * groups_per_row + g);
                } else {  // nibbles 8 with scale 0: contributes exactly 0
                    w[j][r] = make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);
                    sc[j][r] = 0.0f;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const unsigned int c = c0 + j * P;
            if (c < C) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float d[R][8];
#pragma unroll
                    for (int r = 0; r < R; ++r) dequant8(word_of(w[j][r], i), d[r]);
#pragma unroll
                    for (int t = 0; t < T; ++t) {
                        if (t < nt) {
                            const float4 a = xs[(t * 8 + 2 * i) * C + c];
                            const float4 b = xs[(t * 8 + 2 * i + 1) * C + c];
#pragma unroll
                            for (int r = 0; r < R; ++r) {
                                float s = d[r][0] * a.x;
                                s = fmaf(d[r][1], a.y, s);
                                s = fmaf(d[r][2], a.z, s);
                                s = fmaf(d[r][3], a.w, s);
                                s = fmaf(d[r][4], b.x, s);
                                s = fmaf(d[r][5], b.y, s);
                                s = fmaf(d[r][6], b.z, s);
                                s = fmaf(d[r][7], b.w, s);
                                acc[r][t] = fmaf(sc[j][r], s, acc[r][t]);
                            }
                        }
                    }
                }
            }
        }
    }

    // Sum the P partial sums of each row: shuffles inside a warp, then shared memory across warps.
    const unsigned int span = P < 32 ? P : 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t)
            for (unsigned int off = span / 2; off > 0; off >>= 1)
                acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], off);
    if (P > 32) {
        float* red = (float*)(xs + (size_t)nt * 8 * C);
        const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < T; ++t) red[(warp * R + r) * T + t] = acc[r][t];
        }
        __syncthreads();
        if (kl == 0) {
            for (unsigned int w2 = 1; w2 < P / 32; ++w2) {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int t = 0; t < T; ++t) acc[r][t] += red[((warp + w2) * R + r) * T + t];
            }
        }
    }
    if (kl == 0) {
#pragma unroll
        for (int t = 0; t < T; ++t) {
            if (t < nt) {
                const unsigned int s = slot_list[first + t];
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (row0 + r < rows) output[(size_t)s * rows + row0 + r] = acc[r][t];
            }
        }
    }
}

#define MOE_ENTRY(NAME, T, R, MIN_BLOCKS)                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(                        \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode, unsigned int lanes_per_row) {                                                   \
        moe_matvec<T, R>(work, slot_list, slot_input, input, output, rows, k, group,             \
                         weight_offset, scale_offset, mode, lanes_per_row);                       \
    }

// Per-slot: one slot per item, 4 rows per thread (80 registers, 3 blocks per multiprocessor).
// Union: up to 8 slots per item, 2 rows per thread (124 registers, 2 blocks; 4 rows would spill).
// Keep in step with `PER_SLOT_ROWS` / `UNION_ROWS` in launch.rs.
MOE_ENTRY(moe_matvec_t1, 1, 4, 3)
MOE_ENTRY(moe_matvec_t8, 8, 2, 2)

// Reads one byte per page of `bytes` (a fresh managed buffer: each read is a demand fault).
extern "C" __global__ void page_touch(const unsigned char* buf, unsigned long long npages,
                                      unsigned long long page, unsigned int* sink) {
    unsigned int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < npages; i += (unsigned long long)gridDim.x * blockDim.x) {
        acc += ((const volatile unsigned char*)buf)[i * page];
    }
    if (acc == 0xFFFFFFFFu) *sink = acc;  // the loads are volatile; the store only uses acc
}

// Plain streaming read of n 16-byte words: the bandwidth reference for the expert kernels.
extern "C" __global__ void stream_read(const uint4* __restrict__ buf, unsigned long long n,
                                       unsigned int* sink) {
    unsigned int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const uint4 v = __ldg(buf + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;  // data-dependent store so the loads are not removed
}

// Tiny kernel for launch overhead.
extern "C" __global__ void empty_kernel() {}

// Busy-waits `ns` nanoseconds of the GPU's global timer. Timed work enqueued behind it starts
// as soon as it ends, so CUDA events around that work time the GPU, not the host's launch latency.
extern "C" __global__ void spin_wait(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

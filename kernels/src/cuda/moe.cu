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
// are (expert weight pointer, first index into slot_list, slot count <= MAXT). The per-slot
// variant has one slot per item; the union variant groups every slot naming the same expert in
// one item, so that expert's weights are read once per item and serve all its slots.

#define WARPS 8
#define ROWS_PER_WARP 4

__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

__device__ __forceinline__ void dequant8(unsigned int word, float scale, float* out) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        out[i] = (float)((int)((word >> (4 * i)) & 0xFu) - 8) * scale;
    }
}

// mode 0 (gate_up): input row of slot s is x[slot_input[s]] (k = hidden), output gu[s] (rows = 2*ffn).
// mode 1 (down): input of slot s is silu(gu[s][j]) * gu[s][k + j] (k = ffn), output y[s] (rows = hidden).
template <int MAXT>
__device__ void moe_matvec(const unsigned int* __restrict__ work,
                           const unsigned int* __restrict__ slot_list,
                           const unsigned int* __restrict__ slot_input,
                           const float* __restrict__ input,
                           float* __restrict__ output,
                           unsigned int rows, unsigned int k, unsigned int group,
                           unsigned long long weight_offset, unsigned long long scale_offset,
                           int mode) {
    extern __shared__ float xs[];
    const unsigned int* item = work + 4 * blockIdx.y;
    const unsigned long long base =
        (unsigned long long)item[0] | ((unsigned long long)item[1] << 32);
    const unsigned int first = item[2];
    const int nt = (int)item[3];

    for (int t = 0; t < nt; ++t) {
        const unsigned int s = slot_list[first + t];
        for (unsigned int j = threadIdx.x; j < k; j += blockDim.x) {
            float v;
            if (mode == 0) {
                v = input[(size_t)slot_input[s] * k + j];
            } else {
                const float* g = input + (size_t)s * 2 * k;
                v = silu(g[j]) * g[k + j];
            }
            xs[t * k + j] = v;
        }
    }
    __syncthreads();

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const unsigned int chunks = k / 32;           // 16-byte chunks of 32 int4 weights per row
    const unsigned int groups_per_row = k / group;
    const unsigned char* wbase = (const unsigned char*)(base + weight_offset);
    const float* sbase = (const float*)(base + scale_offset);

    // Each warp walks several groups of ROWS_PER_WARP rows, so the activation load above is
    // paid once per block for many rows.
    for (unsigned int row0 = (blockIdx.x * WARPS + warp) * ROWS_PER_WARP; row0 < rows;
         row0 += gridDim.x * WARPS * ROWS_PER_WARP) {
        float acc[ROWS_PER_WARP][MAXT];
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r)
#pragma unroll
            for (int t = 0; t < MAXT; ++t) acc[r][t] = 0.0f;

        for (unsigned int c = lane; c < chunks; c += 32) {
            uint4 w[ROWS_PER_WARP];
            float sc[ROWS_PER_WARP];
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) {
                const unsigned int row = row0 + r;
                if (row < rows) {
                    w[r] = __ldg((const uint4*)(wbase + (size_t)row * (k / 2)) + c);
                    sc[r] = __ldg(sbase + (size_t)row * groups_per_row + (c * 32) / group);
                } else {
                    w[r] = make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);
                    sc[r] = 0.0f;
                }
            }
#pragma unroll
            for (int t = 0; t < MAXT; ++t) {
                if (t < nt) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const float4* xp = (const float4*)(xs + t * k + c * 32 + q * 8);
                        const float4 a = xp[0];
                        const float4 b = xp[1];
#pragma unroll
                        for (int r = 0; r < ROWS_PER_WARP; ++r) {
                            const unsigned int word =
                                q == 0 ? w[r].x : q == 1 ? w[r].y : q == 2 ? w[r].z : w[r].w;
                            float wf[8];
                            dequant8(word, 1.0f, wf);
                            acc[r][t] += sc[r] * (wf[0] * a.x + wf[1] * a.y + wf[2] * a.z +
                                                  wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
                                                  wf[6] * b.z + wf[7] * b.w);
                        }
                    }
                }
            }
        }

#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            if (t < nt) {
                const unsigned int s = slot_list[first + t];
#pragma unroll
                for (int r = 0; r < ROWS_PER_WARP; ++r) {
                    float v = acc[r][t];
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
                    if (lane == 0 && row0 + r < rows) output[(size_t)s * rows + row0 + r] = v;
                }
            }
        }
    }
}

#define MOE_ENTRY(NAME, MAXT)                                                                    \
    extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME(                               \
        const unsigned int* work, const unsigned int* slot_list, const unsigned int* slot_input,  \
        const float* input, float* output, unsigned int rows, unsigned int k,                    \
        unsigned int group, unsigned long long weight_offset, unsigned long long scale_offset,   \
        int mode) {                                                                               \
        moe_matvec<MAXT>(work, slot_list, slot_input, input, output, rows, k, group,             \
                         weight_offset, scale_offset, mode);                                      \
    }

MOE_ENTRY(moe_matvec_t1, 1)
MOE_ENTRY(moe_matvec_t8, 8)

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

// From the project brief's calibration probe (shared/flash/probe.cu, copied unchanged below this line):
// the self-test reads its inner loop as `kernels.py` reads every kernel's (`inner_loop`).
// Calibration probe: one FA2-style forward inner loop, written the way cubecl-cpp 0.11.3 emits
// manual MMA (inline `mma.sync` / `ldmatrix` PTX, `__shfl_xor_sync(__activemask(), ..)`).
// 4 warps x 16 query rows, key blocks of BC = 64, head dim D = 64, f16 in, f32 accumulators.
#include <cuda_fp16.h>
#include <cuda/std/cstdint>
typedef unsigned int u32;

#define BC 64
#define D 64

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared::cta.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ u32 pack(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi); return *reinterpret_cast<u32*>(&h);
}
__device__ __forceinline__ void cp16(void* s, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_addr(s)), "l"(g));
}

extern "C" __global__ void __launch_bounds__(128) probe(const __half* __restrict__ q, const __half* __restrict__ k,
                                                        const __half* __restrict__ v, float* __restrict__ out,
                                                        int nblocks, float scale_log2) {
  __shared__ __align__(16) __half qs[64 * D];
  __shared__ __align__(16) __half ks[BC * D];
  __shared__ __align__(16) __half vs[BC * D];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  for (int r = 0; r < 64 * D / (128 * 8); ++r) { int e = (tid + r * 128) * 8; cp16(qs + e, q + blockIdx.x * 64 * D + e); }
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group 0;");
  __syncthreads();
  u32 qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    int i = lane / 8;
    ldsm_x4(qa[kk], qs + (warp * 16 + (i % 2) * 8 + lane % 8) * D + kk * 16 + (i / 2) * 8);
  }
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) { o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f; }
  float m0 = -__int_as_float(0x7f800000), m1 = -__int_as_float(0x7f800000), l0 = 0.f, l1 = 0.f;

  for (int j = 0; j < nblocks; ++j) {
    __syncthreads();  // everyone is done with the previous block's K and V
#pragma unroll
    for (int r = 0; r < BC * D / (128 * 8); ++r) {
      int e = (tid + r * 128) * 8;
      cp16(ks + e, k + (size_t)j * BC * D + e);
      cp16(vs + e, v + (size_t)j * BC * D + e);
    }
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();

    // S = Q K^T: 16 x 64 per warp, 8 n8 tiles.
    float s[BC / 8][4];
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) { s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f; }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nt = 0; nt < BC / 8; nt += 2) {
        u32 b[4];
        int i = lane / 8;
        ldsm_x4(b, ks + (nt * 8 + (i / 2) * 8 + lane % 8) * D + kk * 16 + (i % 2) * 8);
        mma16816(s[nt], qa[kk], b[0], b[1]);
        mma16816(s[nt + 1], qa[kk], b[2], b[3]);
      }
    }
    // Online softmax in registers: rows g (c0, c1) and g + 8 (c2, c3), a quad per row.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) { mx0 = fmaxf(mx0, fmaxf(s[i][0], s[i][1])); mx1 = fmaxf(mx1, fmaxf(s[i][2], s[i][3])); }
    mx0 = fmaxf(mx0, __shfl_xor_sync(__activemask(), mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(__activemask(), mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(__activemask(), mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(__activemask(), mx1, 2));
    float c0 = ex2((m0 - mx0) * scale_log2), c1 = ex2((m1 - mx1) * scale_log2);
    m0 = mx0; m1 = mx1; l0 *= c0; l1 *= c1;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) { o[i][0] *= c0; o[i][1] *= c0; o[i][2] *= c1; o[i][3] *= c1; }
    float ms0 = mx0 * scale_log2, ms1 = mx1 * scale_log2;
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) {
      s[i][0] = ex2(s[i][0] * scale_log2 - ms0); s[i][1] = ex2(s[i][1] * scale_log2 - ms0);
      s[i][2] = ex2(s[i][2] * scale_log2 - ms1); s[i][3] = ex2(s[i][3] * scale_log2 - ms1);
      l0 += s[i][0] + s[i][1]; l1 += s[i][2] + s[i][3];
    }
    // O += P V: the accumulator of S is the A operand of P V (FA2's register trick).
#pragma unroll
    for (int kb = 0; kb < BC / 16; ++kb) {
      u32 a[4] = {pack(s[2 * kb][0], s[2 * kb][1]), pack(s[2 * kb][2], s[2 * kb][3]),
                  pack(s[2 * kb + 1][0], s[2 * kb + 1][1]), pack(s[2 * kb + 1][2], s[2 * kb + 1][3])};
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        u32 b[4];
        int i = lane / 8;
        ldsm_x4_t(b, vs + (kb * 16 + (i % 2) * 8 + lane % 8) * D + dt * 8 + (i / 2) * 8);
        mma16816(o[dt], a, b[0], b[1]);
        mma16816(o[dt + 1], a, b[2], b[3]);
      }
    }
  }
  l0 += __shfl_xor_sync(__activemask(), l0, 1); l0 += __shfl_xor_sync(__activemask(), l0, 2);
  l1 += __shfl_xor_sync(__activemask(), l1, 1); l1 += __shfl_xor_sync(__activemask(), l1, 2);
  float* row0 = out + (blockIdx.x * 64 + warp * 16 + g) * D, *row1 = row0 + 8 * D;
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    row0[i * 8 + 2 * t] = o[i][0] / l0; row0[i * 8 + 2 * t + 1] = o[i][1] / l0;
    row1[i * 8 + 2 * t] = o[i][2] / l1; row1[i * 8 + 2 * t + 1] = o[i][3] / l1;
  }
}

// The same loop's softmax with CubeCL's `Exp` (C++ `exp`, no fast math) instead of ex2.approx,
// to price the difference.
extern "C" __global__ void __launch_bounds__(128) exp_only(float* x, int n, float m) {
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += 128) acc += exp(x[i] - m);
  x[threadIdx.x] = acc;
}

// Shared device helpers for the conformance kernels.
//
// Every kernel that waits on an mbarrier waits with a bound (bounded_wait) and
// reports a timeout through a status word in global memory, so a TMA that never
// completes becomes a failing test with a message, not a hung GPU. The status
// values match fixtures/status.py.
#pragma once
#include <cuda/ptx>
#include <cuda/std/cstdint>

namespace tmac {
namespace ptx = cuda::ptx;
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;
using s32 = cuda::std::int32_t;

// CUtensorMap: 128 opaque bytes. CUDA 13's cuda.h aligns it to 128 (the driver
// API asks for at least 64), so ours is 128-aligned wherever we place it.
struct alignas(128) TensorMap { u64 opaque[16]; };

enum : u32 { STATUS_OK = 0, STATUS_TIMEOUT = 1, STATUS_BAD = 2 };

__device__ inline u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Wait for the phase with `parity` of the mbarrier at `bar` to complete, for at
// most `timeout_ns` nanoseconds. Returns false on timeout.
__device__ inline bool bounded_wait(u64* bar, u32 parity, u64 timeout_ns) {
  const u64 start = globaltimer();
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
    if (globaltimer() - start > timeout_ns) return false;
  }
  return true;
}

// Initialise a CTA-local mbarrier expecting one arrival, visible to the async proxy.
// Call from one thread, then __syncthreads().
__device__ inline void init_barrier(u64* bar) {
  ptx::mbarrier_init(bar, 1);
  ptx::fence_proxy_async(ptx::space_shared);
}

// Every thread of every CTA of the cluster meets here (barrier.cluster arrive.release /
// wait.acquire).
__device__ inline void cluster_sync() {
  ptx::barrier_cluster_arrive(ptx::sem_release);
  ptx::barrier_cluster_wait(ptx::sem_acquire);
}

// A CTA's mbarrier for a multicast load: thread 0 initialises it, makes the init visible
// to the cluster (fence.mbarrier_init.release.cluster) and tells it to expect `tx_bytes`;
// then the cluster synchronises, so every destination barrier is ready before any
// complete-tx can reach it. Every thread of every CTA calls it.
__device__ inline void init_multicast_barrier(u64* bar, u32 tx_bytes) {
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, bar,
                                   tx_bytes);
  }
  cluster_sync();
}

// Round a shared-memory pointer up to `align` bytes (a power of two); the
// swizzled TMA destinations need 256/512/1024-byte alignment.
template <typename T>
__device__ inline T* align_up(T* p, u32 align) {
  const u32 s = static_cast<u32>(__cvta_generic_to_shared(p));
  const u32 pad = (align - (s & (align - 1))) & (align - 1);
  return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(p) + pad);
}

// One tiled TMA load of `rank` coordinates into `dst`, completing on `bar`.
__device__ inline void tma_load(int rank, void* dst, const void* map, const s32* c, u64* bar) {
  switch (rank) {
    case 1: { const s32 k[1] = {c[0]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar); break; }
    case 2: { const s32 k[2] = {c[0], c[1]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar); break; }
    case 3: { const s32 k[3] = {c[0], c[1], c[2]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar); break; }
    case 4: { const s32 k[4] = {c[0], c[1], c[2], c[3]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar); break; }
    default: { const s32 k[5] = {c[0], c[1], c[2], c[3], c[4]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar); break; }
  }
}

// One im2col TMA load (PTX ISA cp.async.bulk.tensor, .im2col: rank 3..5) of
// `rank` tensor coordinates `c` and rank-2 im2col offsets `o` (16-bit each) into
// `dst`, completing on `bar`; with MULTICAST, to the CTAs of `mask` in the cluster
// ("[dstMem], [tensorMap, tensorCoords], [mbar]{, im2colInfo} {, ctaMask}"), each
// destination CTA's barrier at `bar`'s offset completing. Inline PTX: the CCCL
// cuda::ptx wrappers of this toolchain have no im2col form.
template <bool MULTICAST>
__device__ inline void tma_load_im2col_to(int rank, void* dst, const void* map, const s32* c,
                                          const s32* o, u64* bar, unsigned short mask) {
  const u32 d = static_cast<u32>(__cvta_generic_to_shared(dst));
  const u32 b = static_cast<u32>(__cvta_generic_to_shared(bar));
  const unsigned short o0 = static_cast<unsigned short>(o[0]);
  const unsigned short o1 = static_cast<unsigned short>(o[1]);
  const unsigned short o2 = static_cast<unsigned short>(o[2]);
#define TMAC_IM2COL(DIM, COORDS, OFFS, MASK, ...)                                             \
  if constexpr (MULTICAST)                                                                  \
    asm volatile("cp.async.bulk.tensor." DIM ".shared::cluster.global.im2col"                 \
                 ".mbarrier::complete_tx::bytes.multicast::cluster" COORDS OFFS ", " MASK ";" \
                 :: __VA_ARGS__, "h"(mask) : "memory");                                      \
  else                                                                                      \
    asm volatile("cp.async.bulk.tensor." DIM ".shared::cluster.global.im2col"                 \
                 ".mbarrier::complete_tx::bytes" COORDS OFFS ";" :: __VA_ARGS__ : "memory");
  switch (rank) {
    case 3:
      TMAC_IM2COL("3d", " [%0], [%1, {%2, %3, %4}], [%5]", ", {%6}", "%7",
                  "r"(d), "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(b), "h"(o0))
      break;
    case 4:
      TMAC_IM2COL("4d", " [%0], [%1, {%2, %3, %4, %5}], [%6]", ", {%7, %8}", "%9",
                  "r"(d), "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(b), "h"(o0),
                  "h"(o1))
      break;
    default:
      TMAC_IM2COL("5d", " [%0], [%1, {%2, %3, %4, %5, %6}], [%7]", ", {%8, %9, %10}", "%11",
                  "r"(d), "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(b),
                  "h"(o0), "h"(o1), "h"(o2))
      break;
  }
#undef TMAC_IM2COL
}

__device__ inline void tma_load_im2col(int rank, void* dst, const void* map, const s32* c,
                                      const s32* o, u64* bar) {
  tma_load_im2col_to<false>(rank, dst, map, c, o, bar, 0);
}

__device__ inline void tma_load_im2col_multicast(int rank, void* dst, const void* map,
                                                const s32* c, const s32* o, u64* bar,
                                                unsigned short mask) {
  tma_load_im2col_to<true>(rank, dst, map, c, o, bar, mask);
}

// Copy the 128-byte map `src` (global) to the global slot `dst` on the device: through
// shared memory `stage`, then tensormap.cp_fenceproxy (release, .gpu) to `dst`, so that
// a later fence.proxy.tensormap acquire on `dst` (prepare_global_map_load) sees it.
// Warp 0 of the block runs it (the copy is .sync.aligned); then __syncthreads().
__device__ inline void copy_map_on_device(TensorMap* dst, const TensorMap* src, TensorMap* stage) {
  if (threadIdx.x < 32) {
    if (threadIdx.x < 16) stage->opaque[threadIdx.x] = src->opaque[threadIdx.x];
    __syncwarp();
    ptx::tensormap_cp_fenceproxy(ptx::sem_release, ptx::scope_gpu, dst, stage, ptx::n32_t<128>{});
  }
  __syncthreads();
}

// The load of one block: thread 0 issues it and tells the barrier to expect
// `tx_bytes`; every thread waits with the bound. Returns false on timeout.
// The barrier must be initialised (init_barrier) and published (__syncthreads()).
__device__ inline bool load_and_wait(int rank, void* dst, const void* map, const s32* c,
                                     u64* bar, u32 tx_bytes, u64 timeout_ns) {
  if (threadIdx.x == 0) {
    tma_load(rank, dst, map, c, bar);
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, bar,
                                   tx_bytes);
  }
  return bounded_wait(bar, 0, timeout_ns);
}

// Before a load through a map in global memory: poison the `n` shared bytes at
// `smem` that will be copied out (ordered before the async-proxy writes of TMA),
// then thread 0 acquires the map in the tensor-map proxy (seed 001: "the thread
// that uses the tensor map and the thread that performs the fence must be in the
// same block"; .gpu suffices on the same device) and initialises the barrier.
__device__ inline void prepare_global_map_load(unsigned char* smem, u32 n, unsigned char poison,
                                               const TensorMap* map, u64* bar) {
  for (u32 i = threadIdx.x; i < n; i += blockDim.x) smem[i] = poison;
  ptx::fence_proxy_async(ptx::space_shared);
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::fence_proxy_tensormap_generic(ptx::sem_acquire, ptx::scope_gpu, map, ptx::n32_t<128>{});
    init_barrier(bar);
  }
  __syncthreads();
}

// Copy `n` bytes from shared to global memory with every thread of the block.
__device__ inline void copy_out(unsigned char* out, const unsigned char* src, u32 n) {
  for (u32 i = threadIdx.x; i < n; i += blockDim.x) out[i] = src[i];
}

}  // namespace tmac

// Shared memory around a TMA load's destination (fixtures/tma_load/guard_bytes.py;
// NVIDIA/TransformerEngine#3483: a load overwrote metadata kept beside its destination).
//
// Each block (guarded_load) or cluster of two (guarded_multicast) fills GUARD bytes before
// its destination and GUARD bytes after the box's last byte with GUARD_FILL, the box itself
// with BOX_POISON, loads the box through its map, waits with the bound, and copies out
// the whole region: GUARD + box_bytes + GUARD bytes per CTA, for the host to check that
// only the box's bytes changed.
//
// maps:   [cases] 128-byte CUtensorMaps in global memory (host-encoded), acquired through
//         the tensor-map proxy by the CTA that issues the load.
// coords: [cases][2] int32; box_bytes: [cases]; stride: out's bytes per CTA.
// out:    [cases (x2 for the multicast)][stride]; status: one word per CTA.
#include "common.cuh"

namespace tmac {
constexpr u32 GUARD = 128;
constexpr unsigned char GUARD_FILL = 0x5A;
constexpr unsigned char BOX_POISON = 0xA5;

// The destination: 1024-aligned (every swizzle mode's), GUARD bytes past the start.
__device__ inline unsigned char* guarded_destination(unsigned char* smem_raw) {
  return align_up(smem_raw + GUARD, 1024);
}

__device__ inline void fill_region(unsigned char* dst, u32 box_bytes) {
  for (u32 i = threadIdx.x; i < GUARD + box_bytes + GUARD; i += blockDim.x)
    dst[static_cast<int>(i) - static_cast<int>(GUARD)] =
        (i < GUARD || i >= GUARD + box_bytes) ? GUARD_FILL : BOX_POISON;
  ptx::fence_proxy_async(ptx::space_shared);
  __syncthreads();
}
}  // namespace tmac

extern "C" __global__ void __launch_bounds__(128)
guarded_load(const tmac::TensorMap* maps, const tmac::s32* coords, const tmac::u32* box_bytes,
             unsigned char* out, tmac::u32 stride, tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 bar;
  const u32 b = blockIdx.x;
  unsigned char* dst = guarded_destination(smem_raw);
  fill_region(dst, box_bytes[b]);
  if (threadIdx.x == 0) {
    ptx::fence_proxy_tensormap_generic(ptx::sem_acquire, ptx::scope_gpu, maps + b, ptx::n32_t<128>{});
    init_barrier(&bar);
  }
  __syncthreads();
  const bool done = load_and_wait(2, dst, maps + b, coords + 2 * b, &bar, box_bytes[b], timeout_ns);
  copy_out(out + static_cast<size_t>(b) * stride, dst - GUARD, GUARD + box_bytes[b] + GUARD);
  if (threadIdx.x == 0) status[b] = done ? STATUS_OK : STATUS_TIMEOUT;
}

// Clusters of two: CTA 0 of cluster c multicasts the box of case c to both CTAs (ctaMask
// 0b11); CTA r's region goes to out[(2c + r) * stride], its status to status[2c + r].
extern "C" __global__ void __launch_bounds__(128)
guarded_multicast(const tmac::TensorMap* maps, const tmac::s32* coords, const tmac::u32* box_bytes,
                  unsigned char* out, tmac::u32 stride, tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 bar;
  const u32 r = ptx::get_sreg_cluster_ctarank();
  const u32 c = ptx::get_sreg_clusterid_x();
  unsigned char* dst = guarded_destination(smem_raw);
  fill_region(dst, box_bytes[c]);
  init_multicast_barrier(&bar, box_bytes[c]);
  if (r == 0 && threadIdx.x == 0) {
    const TensorMap* map = maps + c;
    ptx::fence_proxy_tensormap_generic(ptx::sem_acquire, ptx::scope_gpu, map, ptx::n32_t<128>{});
    const s32 k[2] = {coords[2 * c], coords[2 * c + 1]};
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, &bar,
                              static_cast<cuda::std::uint16_t>(0x3));
  }
  const bool done = bounded_wait(&bar, 0, timeout_ns);
  __syncthreads();
  cluster_sync();
  const u32 slot = 2 * c + r;
  copy_out(out + static_cast<size_t>(slot) * stride, dst - GUARD, GUARD + box_bytes[c] + GUARD);
  if (threadIdx.x == 0) status[slot] = done ? STATUS_OK : STATUS_TIMEOUT;
}

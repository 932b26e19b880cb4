// Cluster multicast TMA loads for suites/test_multicast.py: one cluster per case,
// many clusters per launch (a cluster launch: cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, fixtures/cuda_layer/kernel_launch.py), every
// parameter at run time.
//
// PTX ISA, cp.async.bulk.tensor: "The optional qualifier .multicast::cluster allows
// copying of data from global memory to shared memory of multiple CTAs in the
// cluster. Operand ctaMask specifies the destination CTAs in the cluster such that
// each bit position in the 16-bit ctaMask operand corresponds to the
// %cluster_ctarank of the destination CTA. The source data is multicast to the same
// offset as dstMem in the shared memory of each destination CTA." The mbarrier
// signal goes to the same offset as mbar in each destination CTA.
//
// maps:   [cases] 128-byte CUtensorMaps in global memory (host-encoded, or built on
//         the device and copied there), acquired by the issuing CTA through the
//         tensor-map proxy (fence.proxy.tensormap::generic.acquire.gpu).
// params: [cases][MC_NPARAM] int32: coords[5], tx_bytes, copy_bytes, smem_offset,
//         out_offset, ctaMask, issuing rank, tensor rank, mode (0 tile, 1 im2col),
//         im2col offsets[3] (16-bit each; im2col maps, ranks 3..5).
// out:    pre-poisoned by the host; CTA r of case c writes copy_bytes bytes of its
//         shared memory from the destination at out_offset + r * round16(copy_bytes).
// status: [cases * cluster size] status words (fixtures/cuda_layer/status.py): a CTA of
//         the mask OK when its own mbarrier completed within the bound, TIMEOUT
//         otherwise; a CTA outside the mask OK when it finished (it waits on nothing).
//
// Every CTA poisons its destination, initialises its own mbarrier (and, in the mask,
// tells it to expect the box's bytes), then the cluster synchronises
// (barrier.cluster arrive.release / wait.acquire) before the issuer loads: every
// destination barrier is initialised before any complete-tx can reach it. After the
// bounded waits the cluster synchronises again, so no CTA exits or copies out while
// the multicast may still write into a CTA of the cluster.
#include "common.cuh"

namespace tmac { using u16 = cuda::std::uint16_t; }

#define MC_NPARAM 16
#define MC_MODE_TILE 0
#define MC_MODE_IM2COL 1
#define MC_SMEM_POISON 0xA5

namespace mc {
using namespace tmac;

__device__ inline void multicast_load(int rank, void* dst, const void* map, const s32* c,
                                      u64* bar, u16 mask) {
  switch (rank) {
    case 1: { const s32 k[1] = {c[0]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar, mask); break; }
    case 2: { const s32 k[2] = {c[0], c[1]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar, mask); break; }
    case 3: { const s32 k[3] = {c[0], c[1], c[2]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar, mask); break; }
    case 4: { const s32 k[4] = {c[0], c[1], c[2], c[3]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar, mask); break; }
    default: { const s32 k[5] = {c[0], c[1], c[2], c[3], c[4]};
              ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, dst, map, k, bar, mask); break; }
  }
}
}  // namespace mc

extern "C" __global__ void __launch_bounds__(128)
multicast_load_batch(const tmac::TensorMap* maps, const tmac::s32* params, unsigned char* out,
                     tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 bar;
  unsigned char* base = align_up(smem_raw, 1024);
  const u32 r = ptx::get_sreg_cluster_ctarank();
  const u32 n = ptx::get_sreg_cluster_nctarank();
  const u32 c = ptx::get_sreg_clusterid_x();
  const s32* p = params + static_cast<size_t>(c) * MC_NPARAM;
  const u32 tx_bytes = static_cast<u32>(p[5]);
  const u32 copy_bytes = static_cast<u32>(p[6]);
  const u32 smem_offset = static_cast<u32>(p[7]);
  const u32 out_offset = static_cast<u32>(p[8]);
  const u16 mask = static_cast<u16>(p[9] & 0xffff);
  const u32 src = static_cast<u32>(p[10]);
  const int rank = p[11];
  const int mode = p[12];
  const bool in_mask = (mask >> r) & 1u;
  const size_t sid = static_cast<size_t>(c) * n + r;
  unsigned char* dst = base + smem_offset;

  // Parameters are per cluster: every CTA of a bad case leaves here, none waits.
  const bool bad_mode = mode == MC_MODE_IM2COL ? (rank < 3 || rank > 5) : mode != MC_MODE_TILE;
  if (rank < 1 || rank > 5 || bad_mode || (smem_offset & 15u) != 0u || src >= n) {
    if (threadIdx.x == 0) status[sid] = STATUS_BAD;
    return;
  }
  for (u32 i = threadIdx.x; i < smem_offset + copy_bytes; i += blockDim.x) base[i] = MC_SMEM_POISON;
  ptx::fence_proxy_async(ptx::space_shared);
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, 1);
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    if (in_mask)
      ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar,
                                     tx_bytes);
  }
  cluster_sync();
  if (r == src && threadIdx.x == 0) {
    const TensorMap* map = maps + c;
    ptx::fence_proxy_tensormap_generic(ptx::sem_acquire, ptx::scope_gpu, map, ptx::n32_t<128>{});
    if (mode == MC_MODE_IM2COL)
      tma_load_im2col_multicast(rank, dst, map, p, p + 13, &bar, mask);
    else
      mc::multicast_load(rank, dst, map, p, &bar, mask);
  }
  const bool done = in_mask ? bounded_wait(&bar, 0, timeout_ns) : true;
  __syncthreads();
  cluster_sync();
  const u32 stride = (copy_bytes + 15u) & ~15u;
  copy_out(out + out_offset + static_cast<size_t>(r) * stride, dst, copy_bytes);
  if (threadIdx.x == 0) status[sid] = done ? STATUS_OK : STATUS_TIMEOUT;
}

// Batched TMA prefetches through tensor maps for suites/test_tma_prefetch.py: one block
// per case, every parameter at run time.
//
//   mode 0   cp.async.bulk.prefetch.tensor.Nd.L2.global.tile [tensorMap, tensorCoords]
//   mode 1   cp.async.bulk.prefetch.tensor.Nd.L2.global.im2col [tensorMap, tensorCoords],
//            im2colInfo (rank 3..5: the rank-2 16-bit im2col offsets)
//
// maps:   [cases] 128-byte CUtensorMaps in global memory, acquired per block in the
//         tensor-map proxy (fence.proxy.tensormap::generic.acquire.gpu).
// params: [cases][NPARAM] int32: mode, rank, coords[5], offsets[3].
// status: [cases] status words, pre-poisoned UNWRITTEN; thread 0 writes OK after issuing,
//         then waits settle_ns before its block exits.
//
// PTX ISA 9.7.9.25.5.4: "cp.async.bulk.prefetch.tensor is a non-blocking instruction which
// may initiate an asynchronous prefetch of tensor data from the location in .src
// statespace to the L2 cache." It has no completion mechanism: the case completes when
// the kernel does (a trap ends it with the context's sticky error instead).
#include "common.cuh"

#define TMA_PREFETCH_NPARAM 10

namespace {
using tmac::s32;
using tmac::u32;

__device__ inline bool prefetch_tile(int rank, const void* map, const s32* c) {
  switch (rank) {
    case 1: asm volatile("cp.async.bulk.prefetch.tensor.1d.L2.global.tile [%0, {%1}];"
                         :: "l"(map), "r"(c[0]) : "memory"); break;
    case 2: asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
                         :: "l"(map), "r"(c[0]), "r"(c[1]) : "memory"); break;
    case 3: asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];"
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]) : "memory"); break;
    case 4: asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];"
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]) : "memory");
            break;
    case 5: asm volatile("cp.async.bulk.prefetch.tensor.5d.L2.global.tile [%0, {%1, %2, %3, %4, %5}];"
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
                         : "memory"); break;
    default: return false;
  }
  return true;
}

__device__ inline bool prefetch_im2col(int rank, const void* map, const s32* c, const s32* o) {
  const unsigned short o0 = static_cast<unsigned short>(o[0]);
  const unsigned short o1 = static_cast<unsigned short>(o[1]);
  const unsigned short o2 = static_cast<unsigned short>(o[2]);
  switch (rank) {
    case 3: asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.im2col [%0, {%1, %2, %3}], {%4};"
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "h"(o0) : "memory"); break;
    case 4: asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.im2col [%0, {%1, %2, %3, %4}], {%5, %6};"
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "h"(o0), "h"(o1)
                         : "memory"); break;
    case 5: asm volatile("cp.async.bulk.prefetch.tensor.5d.L2.global.im2col [%0, {%1, %2, %3, %4, %5}], {%6, %7, %8};"
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]),
                         "h"(o0), "h"(o1), "h"(o2) : "memory"); break;
    default: return false;
  }
  return true;
}
}  // namespace

extern "C" __global__ void __launch_bounds__(32)
tma_prefetch_batch(const tmac::TensorMap* maps, const s32* params, u32* status,
                   tmac::u64 settle_ns) {
  const int b = blockIdx.x;
  const s32* p = params + static_cast<size_t>(b) * TMA_PREFETCH_NPARAM;
  const tmac::TensorMap* map = maps + b;
  if (threadIdx.x != 0) return;
  tmac::ptx::fence_proxy_tensormap_generic(tmac::ptx::sem_acquire, tmac::ptx::scope_gpu, map,
                                           tmac::ptx::n32_t<128>{});
  const bool ok = p[0] == 0 ? prefetch_tile(p[1], map, p + 2)
                : p[0] == 1 ? prefetch_im2col(p[1], map, p + 2, p + 7) : false;
  status[b] = ok ? tmac::STATUS_OK : tmac::STATUS_BAD;
  // The block stays resident for settle_ns after issuing: a prefetch the TMA unit refuses
  // raises its error while this kernel still runs, so it is this launch's (measured: without
  // the wait, such an error can surface in a later launch of the same context).
  const tmac::u64 t0 = tmac::globaltimer();
  while (tmac::globaltimer() - t0 < settle_ns) {
  }
}

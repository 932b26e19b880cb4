// Batched TMA writes through tensor maps for suites/test_tma_store.py and
// suites/test_tma_reduce.py: one block per case, every parameter at run time.
//
//   op 0      cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group
//             [tensorMap, tensorCoords], [srcMem]                      (a store)
//   op 1..8   cp.reduce.async.bulk.tensor.Nd.global.shared::cta.OP.tile.bulk_group
//             [tensorMap, tensorCoords], [srcMem]   OP = add min max inc dec and or xor
//   op 9..17  the same in .im2col_no_offs mode, through im2col maps (rank 3..5: ptxas
//             refuses the mode with .1d/.2d; fixtures/tma_store/im2col_writes.py)
//
// maps:   [cases] 128-byte CUtensorMaps in global memory, written by the host before
//         the launch; each block acquires its own map in the tensor-map proxy
//         (fence.proxy.tensormap::generic.acquire.gpu, as the load kernels do).
// params: [cases][NPARAM] int32: coords[5], op, src_offset, src_bytes, smem_offset, rank
//         (ranks mix in a launch), load (0 none, 1 after the wait in this kernel, 2 in
//         tma_load_after), tx_bytes, copy_bytes, out_offset.
// out:    the loads' shared-memory images (copy_bytes at out_offset), pre-poisoned.
// load_status: [cases] the loads' status words (OK, TIMEOUT), pre-poisoned UNWRITTEN.
// src:    the shared-memory sources, each case's src_bytes at src_offset.
// status: [cases] status words (fixtures/cuda_layer/status.py), pre-poisoned UNWRITTEN.
//
// Each block copies its source into shared memory at the 1024-byte aligned base plus
// smem_offset, makes those generic-proxy writes visible to the async proxy
// (fence.proxy.async.shared::cta, then a barrier), and thread 0 issues the write,
// commits it to a bulk async-group and waits for the group: PTX ISA 9.7.9.25.6.2,
// "cp.async.bulk.wait_group instruction will cause the executing thread to wait until
// only N or fewer of the most recent bulk async-groups are pending and all the prior
// bulk async-groups committed by the executing threads are complete." The wait has no
// bounded form; the isolated child's deadline bounds it (a hung batch is killed and
// reported, fixtures/cuda_layer/isolation.py).
#include "common.cuh"

#define TMA_WRITE_NPARAM 14
#define TMA_LOAD_POISON 0xA5

namespace {
using tmac::s32;
using tmac::u32;

// One write of `rank` coordinates: PRE ".Nd" POST [map, {coords}], [src]. The cases of
// ranks 3..5, shared by both modes (ptxas refuses .im2col_no_offs with .1d and .2d).
#define TMAC_WRITE_RANKS_3_TO_5(PRE, POST)                                                    \
    case 3: asm volatile(PRE ".3d" POST " [%0, {%1, %2, %3}], [%4];"                           \
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(s) : "memory");    \
            break;                                                                            \
    case 4: asm volatile(PRE ".4d" POST " [%0, {%1, %2, %3, %4}], [%5];"                       \
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(s)      \
                         : "memory"); break;                                                  \
    default: asm volatile(PRE ".5d" POST " [%0, {%1, %2, %3, %4, %5}], [%6];"                  \
                          :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), \
                          "r"(s) : "memory"); break;

#define TMAC_WRITE(PRE, POST)                                                                 \
  switch (rank) {                                                                             \
    case 1: asm volatile(PRE ".1d" POST " [%0, {%1}], [%2];"                                   \
                         :: "l"(map), "r"(c[0]), "r"(s) : "memory"); break;                  \
    case 2: asm volatile(PRE ".2d" POST " [%0, {%1, %2}], [%3];"                               \
                         :: "l"(map), "r"(c[0]), "r"(c[1]), "r"(s) : "memory"); break;       \
    TMAC_WRITE_RANKS_3_TO_5(PRE, POST)                                                        \
  }

#define TMAC_WRITE_I2C(PRE, POST)                                                             \
  switch (rank) {                                                                             \
    TMAC_WRITE_RANKS_3_TO_5(PRE, POST)                                                        \
  }

#define TMAC_REDUCE(OP) \
  TMAC_WRITE("cp.reduce.async.bulk.tensor", ".global.shared::cta." OP ".tile.bulk_group")
#define TMAC_REDUCE_I2C(OP) \
  TMAC_WRITE_I2C("cp.reduce.async.bulk.tensor", ".global.shared::cta." OP ".im2col_no_offs.bulk_group")

// Issue op `op` of `rank` coordinates `c` from shared `src`: 0 store, 1..8 reduce, in .tile
// mode; 9..17 the same in .im2col_no_offs mode (PTX ISA: ".load_mode = { .tile,
// .tile::scatter4, .im2col_no_offs }" for the store, "{ .tile, .im2col_no_offs }" for
// the reduction; rank 3..5).
__device__ inline bool issue_write(int op, int rank, const void* map, const s32* c, const void* src) {
  const u32 s = static_cast<u32>(__cvta_generic_to_shared(src));
  switch (op) {
    case 0: TMAC_WRITE("cp.async.bulk.tensor", ".global.shared::cta.tile.bulk_group") break;
    case 1: TMAC_REDUCE("add") break;
    case 2: TMAC_REDUCE("min") break;
    case 3: TMAC_REDUCE("max") break;
    case 4: TMAC_REDUCE("inc") break;
    case 5: TMAC_REDUCE("dec") break;
    case 6: TMAC_REDUCE("and") break;
    case 7: TMAC_REDUCE("or") break;
    case 8: TMAC_REDUCE("xor") break;
    case 9: TMAC_WRITE_I2C("cp.async.bulk.tensor", ".global.shared::cta.im2col_no_offs.bulk_group") break;
    case 10: TMAC_REDUCE_I2C("add") break;
    case 11: TMAC_REDUCE_I2C("min") break;
    case 12: TMAC_REDUCE_I2C("max") break;
    case 13: TMAC_REDUCE_I2C("inc") break;
    case 14: TMAC_REDUCE_I2C("dec") break;
    case 15: TMAC_REDUCE_I2C("and") break;
    case 16: TMAC_REDUCE_I2C("or") break;
    case 17: TMAC_REDUCE_I2C("xor") break;
    default: return false;
  }
  return true;
}
#undef TMAC_REDUCE_I2C
#undef TMAC_REDUCE
#undef TMAC_WRITE_I2C
#undef TMAC_WRITE
#undef TMAC_WRITE_RANKS_3_TO_5

// The load of a box just written, through the same map, into shared memory at `dst`
// (poisoned first), then copied out: thread 0 issues it, every thread waits with the bound.
__device__ inline void load_back(const tmac::TensorMap* map, const s32* p, unsigned char* dst,
                                 unsigned char* out, u32* load_status, tmac::u64* bar,
                                 tmac::u64 timeout_ns) {
  const u32 tx_bytes = static_cast<u32>(p[11]);
  const u32 copy_bytes = static_cast<u32>(p[12]);
  for (u32 i = threadIdx.x; i < copy_bytes; i += blockDim.x) dst[i] = TMA_LOAD_POISON;
  tmac::ptx::fence_proxy_async(tmac::ptx::space_shared);
  __syncthreads();
  if (threadIdx.x == 0) tmac::init_barrier(bar);
  __syncthreads();
  const bool done = tmac::load_and_wait(p[9], dst, map, p, bar, tx_bytes, timeout_ns);
  __syncthreads();
  tmac::copy_out(out + p[13], dst, copy_bytes);
  if (threadIdx.x == 0) load_status[blockIdx.x] = done ? tmac::STATUS_OK : tmac::STATUS_TIMEOUT;
}

// Where a block's load lands: past its source, at the source's offset from a 1024-byte
// boundary (the alignment a swizzled box needs, and its measured place off the repeat).
__device__ inline unsigned char* load_dst(unsigned char* base, const s32* p) {
  const u32 smem_offset = static_cast<u32>(p[8]);
  const u32 end = smem_offset + static_cast<u32>(p[7]);
  return base + ((end + 1023u) & ~1023u) + smem_offset;
}
}  // namespace

extern "C" __global__ void __launch_bounds__(128)
tma_write_batch(const tmac::TensorMap* maps, const s32* params, const unsigned char* src,
                u32* status, unsigned char* out, u32* load_status, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  unsigned char* base = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  const s32* p = params + static_cast<size_t>(b) * TMA_WRITE_NPARAM;
  const int op = p[5];
  const u32 src_offset = static_cast<u32>(p[6]);
  const u32 src_bytes = static_cast<u32>(p[7]);
  const u32 smem_offset = static_cast<u32>(p[8]);
  const int rank = p[9];
  const tmac::TensorMap* map = maps + b;
  unsigned char* s = base + smem_offset;

  if (rank < 1 || rank > 5 || op < 0 || op > 17 || (op >= 9 && rank < 3) ||
      (smem_offset & 15u) != 0u) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_BAD;
    return;
  }
  for (u32 i = threadIdx.x; i < src_bytes; i += blockDim.x) s[i] = src[src_offset + i];
  // the generic-proxy writes of the source, visible to the async proxy that reads it
  tmac::ptx::fence_proxy_async(tmac::ptx::space_shared);
  __syncthreads();
  if (threadIdx.x == 0) {
    tmac::ptx::fence_proxy_tensormap_generic(tmac::ptx::sem_acquire, tmac::ptx::scope_gpu, map,
                                             tmac::ptx::n32_t<128>{});
    issue_write(op, rank, map, p, s);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    status[b] = tmac::STATUS_OK;
    // PTX ISA, Async Proxy: "Accessing the same memory location across multiple proxies
    // needs a cross-proxy fence. For the async proxy, fence.proxy.async should be used to
    // synchronize memory between generic proxy and the async proxy." The wait made the
    // writes visible to this thread; the fence orders them before the load's async reads.
    if (p[10] == 1) asm volatile("fence.proxy.async.global;" ::: "memory");
  }
  if (p[10] == 1) {
    __syncthreads();
    load_back(map, p, load_dst(base, p), out, load_status, &bar, timeout_ns);
  }
}

// The loads of the boxes written by an earlier launch of tma_write_batch (load mode 2),
// through the same maps: a later kernel sees the written bytes.
extern "C" __global__ void __launch_bounds__(128)
tma_load_after(const tmac::TensorMap* maps, const s32* params, unsigned char* out,
               u32* load_status, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  unsigned char* base = tmac::align_up(smem_raw, 1024);
  const s32* p = params + static_cast<size_t>(blockIdx.x) * TMA_WRITE_NPARAM;
  const tmac::TensorMap* map = maps + blockIdx.x;
  if (p[10] != 2) return;
  if (threadIdx.x == 0)
    tmac::ptx::fence_proxy_tensormap_generic(tmac::ptx::sem_acquire, tmac::ptx::scope_gpu, map,
                                             tmac::ptx::n32_t<128>{});
  load_back(map, p, load_dst(base, p), out, load_status, &bar, timeout_ns);
}

// Batched tiled TMA loads for suites/test_tma_load.py: one block per case,
// every parameter at run time (one build serves every case of every rank).
//
// maps:   [cases] 128-byte CUtensorMaps in global memory, written by the host
//         (cudaMemcpy) before the launch. A map in global memory is consumed
//         through the tensor-map proxy: each block acquires its own map with
//         fence.proxy.tensormap::generic.acquire.gpu (seed 001: "the thread that
//         uses the tensor map and the thread that performs the fence must be in
//         the same block"; .gpu suffices on the same device).
// params: [cases][NPARAM] int32: coords[5], tx_bytes, copy_bytes, smem_offset,
//         out_offset.
// out:    pre-poisoned by the host; each block writes copy_bytes bytes of its
//         shared memory from the destination (box footprint + guard) at
//         out_offset.
// status: [cases] status words (fixtures/status.py), pre-poisoned UNWRITTEN.
//
// Shared memory: the destination is the 1024-byte aligned base plus smem_offset
// (0 normally: the alignment the 128B swizzle needs; a multiple of 128 to put a
// swizzled box off its repeat on purpose). Before the load every byte the block
// copies out is poisoned (TMA_SMEM_POISON), so a byte the load must not write is
// seen unchanged, and a write past the box is seen in the guard.
#include "common.cuh"

#define TMA_NPARAM 9
#define TMA_SMEM_POISON 0xA5

extern "C" __global__ void __launch_bounds__(128)
tma_load_batch(const tmac::TensorMap* maps, const tmac::s32* params, unsigned char* out,
               tmac::u32* status, int rank, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  unsigned char* base = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  const tmac::s32* p = params + static_cast<size_t>(b) * TMA_NPARAM;
  const tmac::u32 tx_bytes = static_cast<tmac::u32>(p[5]);
  const tmac::u32 copy_bytes = static_cast<tmac::u32>(p[6]);
  const tmac::u32 smem_offset = static_cast<tmac::u32>(p[7]);
  const tmac::u32 out_offset = static_cast<tmac::u32>(p[8]);
  const tmac::TensorMap* map = maps + b;
  unsigned char* dst = base + smem_offset;

  if (rank < 1 || rank > 5 || (smem_offset & 15u) != 0u) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_BAD;
    return;
  }
  // Poison what will be copied out (from the aligned base: the bytes before an
  // offset destination too), acquire the map, initialise the barrier.
  tmac::prepare_global_map_load(base, smem_offset + copy_bytes, TMA_SMEM_POISON, map, &bar);
  const bool done = tmac::load_and_wait(rank, dst, map, p, &bar, tx_bytes, timeout_ns);
  __syncthreads();
  // Copied out even after a timeout: the bytes tell what the load did.
  tmac::copy_out(out + out_offset, dst, copy_bytes);
  if (threadIdx.x == 0) status[b] = done ? tmac::STATUS_OK : tmac::STATUS_TIMEOUT;
}

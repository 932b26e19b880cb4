// Batched im2col TMA loads for suites/test_im2col_load.py: one block per case,
// every parameter at run time (one build serves every case of every rank).
//
// maps:   [cases] 128-byte CUtensorMaps (cuTensorMapEncodeIm2col) in global memory,
//         written by the host before the launch.
// slots:  [cases] 128-byte global slots for the device copies.
// params: [cases][IM2COL_NPARAM] int32: rank, coords[5], offsets[3], tx_bytes,
//         copy_bytes, smem_offset, out_offset, device_copy.
// out:    pre-poisoned by the host; each block writes copy_bytes bytes of its shared
//         memory from the destination (the load's footprint + guard) at out_offset.
// status: [cases] status words (fixtures/cuda_layer/status.py), pre-poisoned UNWRITTEN.
//
// device_copy != 0: the block first copies its map on the device (global -> shared
// memory -> tensormap.cp_fenceproxy to its slot) and loads through the slot: an
// im2col map cannot be built by tensormap.replace (its .mode is only .tile), but a
// copy must give the host map's pixels.
//
// Shared memory: the destination is the 1024-byte aligned base plus smem_offset;
// every byte copied out is poisoned first (0xA5), so a byte the load must not write
// is seen unchanged, and a write past the footprint is seen in the guard.
#include "common.cuh"

#define IM2COL_NPARAM 15
#define IM2COL_SMEM_POISON 0xA5

extern "C" __global__ void __launch_bounds__(128)
im2col_load_batch(const tmac::TensorMap* maps, tmac::TensorMap* slots, const tmac::s32* params,
                  unsigned char* out, tmac::u32* status, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  __shared__ tmac::TensorMap stage;
  unsigned char* base = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  const tmac::s32* p = params + static_cast<size_t>(b) * IM2COL_NPARAM;
  const int rank = p[0];
  const tmac::u32 tx_bytes = static_cast<tmac::u32>(p[9]);
  const tmac::u32 copy_bytes = static_cast<tmac::u32>(p[10]);
  const tmac::u32 smem_offset = static_cast<tmac::u32>(p[11]);
  const tmac::u32 out_offset = static_cast<tmac::u32>(p[12]);
  const bool device_copy = p[13] != 0;
  unsigned char* dst = base + smem_offset;

  if (rank < 3 || rank > 5 || (smem_offset & 15u) != 0u) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_BAD;
    return;
  }
  const tmac::TensorMap* map = maps + b;
  if (device_copy) {
    tmac::copy_map_on_device(slots + b, maps + b, &stage);
    map = slots + b;
  }
  tmac::prepare_global_map_load(base, smem_offset + copy_bytes, IM2COL_SMEM_POISON, map, &bar);
  bool done;
  if (threadIdx.x == 0) {
    tmac::tma_load_im2col(rank, dst, map, p + 1, p + 6, &bar);
    tmac::ptx::mbarrier_arrive_expect_tx(tmac::ptx::sem_release, tmac::ptx::scope_cta,
                                         tmac::ptx::space_shared, &bar, tx_bytes);
  }
  done = tmac::bounded_wait(&bar, 0, timeout_ns);
  __syncthreads();
  tmac::copy_out(out + out_offset, dst, copy_bytes);
  if (threadIdx.x == 0) status[b] = done ? tmac::STATUS_OK : tmac::STATUS_TIMEOUT;
}

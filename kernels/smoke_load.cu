// The harness's smoke kernel: one tiled TMA load of a box per block, through a
// host-encoded map passed as a const __grid_constant__ parameter, copied out.
//
// coords: [blocks][rank] int32; out: [blocks][box_bytes]; status: [blocks].
// expect_bytes is what the mbarrier is told to expect; passing more than the box
// holds makes the wait time out on purpose (the bounded wait's self-test).
#include "common.cuh"

extern "C" __global__ void smoke_load(const __grid_constant__ tmac::TensorMap map, int rank,
                                      const tmac::s32* coords, unsigned char* out,
                                      tmac::u32* status, tmac::u32 box_bytes,
                                      tmac::u32 expect_bytes, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  unsigned char* tile = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  if (threadIdx.x == 0) tmac::init_barrier(&bar);
  __syncthreads();
  const bool done = tmac::load_and_wait(rank, tile, &map, coords + b * rank, &bar, expect_bytes,
                                        timeout_ns);
  if (!done) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_TIMEOUT;
    return;
  }
  tmac::copy_out(out + static_cast<size_t>(b) * box_bytes, tile, box_bytes);
  if (threadIdx.x == 0) status[b] = tmac::STATUS_OK;
}

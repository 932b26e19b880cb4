// prefetch.tensormap on a map in each state space, then a tiled TMA load of one box per
// block through a map, copied out (fixtures/tma_load/prefetch_map.py).
//
// The PTX ISA (prefetch, prefetchu): "prefetch{.tensormap_space}.tensormap [a];" with
// ".tensormap_space = { .const, .param }"; "If no state space is given, the prefetch uses
// Generic Addressing."; "A prefetch to a shared memory location performs no operation."
//
// where: the map the prefetch names (PREFETCH_*); through: the map the load reads
// (0: the parameter, 1: the __constant__ copy, 2: the copy in global memory, acquired in
// the tensor-map proxy first). coords: [blocks][2] int32; out: [blocks][box_bytes];
// status: [blocks].
#include "common.cuh"

__constant__ tmac::TensorMap tmac_const_map;

enum : int {
  PREFETCH_PARAM_GENERIC = 0, PREFETCH_PARAM = 1, PREFETCH_CONST_GENERIC = 2, PREFETCH_CONST = 3,
  PREFETCH_GLOBAL_GENERIC = 4, PREFETCH_SHARED_GENERIC = 5, PREFETCH_NONE = 6
};

extern "C" __global__ void prefetch_map(const __grid_constant__ tmac::TensorMap map,
                                        const tmac::TensorMap* gmap, int where, int through,
                                        const tmac::s32* coords, unsigned char* out,
                                        tmac::u32* status, tmac::u32 box_bytes,
                                        tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  __shared__ tmac::TensorMap smap;
  unsigned char* tile = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  const tmac::TensorMap* load_map = through == 1 ? &tmac_const_map : through == 2 ? gmap : &map;
  if (threadIdx.x < 16) smap.opaque[threadIdx.x] = map.opaque[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    switch (where) {
      case PREFETCH_PARAM_GENERIC:
        asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
        break;
      case PREFETCH_PARAM:
        asm volatile("{ .reg .u64 a; cvta.to.param.u64 a, %0; prefetch.param.tensormap [a]; }"
                     ::"l"(&map) : "memory");
        break;
      case PREFETCH_CONST_GENERIC:
        asm volatile("prefetch.tensormap [%0];" ::"l"(&tmac_const_map) : "memory");
        break;
      case PREFETCH_CONST:
        asm volatile("{ .reg .u64 a; cvta.to.const.u64 a, %0; prefetch.const.tensormap [a]; }"
                     ::"l"(&tmac_const_map) : "memory");
        break;
      case PREFETCH_GLOBAL_GENERIC:
        asm volatile("prefetch.tensormap [%0];" ::"l"(gmap) : "memory");
        break;
      case PREFETCH_SHARED_GENERIC:
        asm volatile("prefetch.tensormap [%0];" ::"l"(&smap) : "memory");
        break;
      default:
        break;
    }
    if (through == 2)
      tmac::ptx::fence_proxy_tensormap_generic(tmac::ptx::sem_acquire, tmac::ptx::scope_gpu, gmap,
                                               tmac::ptx::n32_t<128>{});
    tmac::init_barrier(&bar);
  }
  __syncthreads();
  const bool done = tmac::load_and_wait(2, tile, load_map, coords + b * 2, &bar, box_bytes,
                                        timeout_ns);
  if (!done) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_TIMEOUT;
    return;
  }
  tmac::copy_out(out + static_cast<size_t>(b) * box_bytes, tile, box_bytes);
  if (threadIdx.x == 0) status[b] = tmac::STATUS_OK;
}

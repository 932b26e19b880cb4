// Batched im2col-wide TMA loads for suites/test_im2col_load.py::test_im2col_wide_load:
// one block per case, every parameter at run time (one build serves every case of
// ranks 3 to 5 and both wide modes).
//
// PTX ISA, cp.async.bulk.tensor (Data Movement and Conversion Instructions), Syntax:
//   "cp.async.bulk.tensor.dim.dst.src{.load_mode}.completion_mechanism{.multicast}{.cta_group}{.level::cache_hint}
//    [dstMem], [tensorMap, tensorCoords], [mbar]{, im2colInfo} {, ctaMask} {, cache-policy}"
//   ".load_mode = { .tile, .tile::gather4, .im2col, .im2col::w, .im2col::w::128 }"
// and for im2colInfo: ".im2col::w | { wHalo, wOffset } | A vector of 2 arguments containing
// wHalo and wOffset arguments." (the same row for .im2col::w::128); "Argument wHalo is a
// 16bit unsigned integer whose valid set of values differs on the load-mode and is as
// follows: Im2col::w mode : valid range is [0, 512). Im2col::w::128 mode : valid range is
// [0, 32). Argument wOffset is a 16bit unsigned integer whose valid range of values is
// [0, 32)."
//
// Target ISA Notes: "Qualifiers .tile::gather4 and .im2col::w require: sm_100a when
// destination state space is .shared::cluster and is supported on sm_100f from PTX ISA
// version 8.8." and "Qualifier .im2col::w::128 is supported on following architectures:
// sm_100a ...". The wide loads are therefore compiled only where the sm_100 family's
// features are (__CUDA_ARCH_FEAT_SM100_ALL for sm_100a, __CUDA_ARCH_FEAT_SM103_ALL for
// sm_103a, __CUDA_ARCH_FAMILY_SPECIFIC__ 1000/1030 for sm_100f/sm_103f); on any other
// target (sm_90a, sm_110a, sm_120a, ...) the kernel builds without them and every block
// writes STATUS_UNSUPPORTED (fixtures/cuda_layer/status.py) without touching the map.
//
// maps:   [cases] 128-byte CUtensorMaps (cuTensorMapEncodeIm2colWide) in global memory,
//         each acquired by its block in the tensor-map proxy (kernels/common.cuh).
// params: [cases][TMA_WIDE_NPARAM] int32: coords[5], wHalo, wOffset, mode (0: im2col::w,
//         1: im2col::w::128), tx_bytes, copy_bytes, smem_offset, out_offset.
// out:    pre-poisoned by the host; each block copies copy_bytes bytes of its shared
//         memory from the destination (the pixel rows + guard), poisoned before the load.
// status: [cases] status words, pre-poisoned UNWRITTEN.
#include "common.cuh"

#define TMA_WIDE_NPARAM 12
#define TMA_SMEM_POISON 0xA5
#define TMA_STATUS_UNSUPPORTED 3u

#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) &&                                      \
     (__CUDA_ARCH_FAMILY_SPECIFIC__ == 1000 || __CUDA_ARCH_FAMILY_SPECIFIC__ == 1030))
#define TMA_HAS_IM2COL_W 1
#else
#define TMA_HAS_IM2COL_W 0
#endif

namespace {

#if TMA_HAS_IM2COL_W
#define TMA_WIDE_ASM(DIM, MODE, COORDS, ...)                                                   \
  asm volatile("cp.async.bulk.tensor." DIM ".shared::cluster.global." MODE                    \
               ".mbarrier::complete_tx::bytes [%0], [%1, " COORDS "], [%2], {%3, %4};"        \
               :: "r"(s), "l"(map), "r"(b), "h"(halo), "h"(off), __VA_ARGS__ : "memory")

// One im2col-wide load of `rank` (3..5) coordinates into `dst`, completing on `bar`.
__device__ inline void wide_load(int rank, int mode, void* dst, const void* map,
                                 const tmac::s32* c, tmac::u64* bar) {
  const tmac::u32 s = static_cast<tmac::u32>(__cvta_generic_to_shared(dst));
  const tmac::u32 b = static_cast<tmac::u32>(__cvta_generic_to_shared(bar));
  const unsigned short halo = static_cast<unsigned short>(c[5]);
  const unsigned short off = static_cast<unsigned short>(c[6]);
  if (mode == 0) {
    switch (rank) {
      case 3: TMA_WIDE_ASM("3d", "im2col::w", "{%5, %6, %7}", "r"(c[0]), "r"(c[1]), "r"(c[2])); break;
      case 4: TMA_WIDE_ASM("4d", "im2col::w", "{%5, %6, %7, %8}", "r"(c[0]), "r"(c[1]), "r"(c[2]),
                           "r"(c[3])); break;
      default: TMA_WIDE_ASM("5d", "im2col::w", "{%5, %6, %7, %8, %9}", "r"(c[0]), "r"(c[1]),
                            "r"(c[2]), "r"(c[3]), "r"(c[4])); break;
    }
  } else {
    switch (rank) {
      case 3: TMA_WIDE_ASM("3d", "im2col::w::128", "{%5, %6, %7}", "r"(c[0]), "r"(c[1]), "r"(c[2])); break;
      case 4: TMA_WIDE_ASM("4d", "im2col::w::128", "{%5, %6, %7, %8}", "r"(c[0]), "r"(c[1]),
                           "r"(c[2]), "r"(c[3])); break;
      default: TMA_WIDE_ASM("5d", "im2col::w::128", "{%5, %6, %7, %8, %9}", "r"(c[0]), "r"(c[1]),
                            "r"(c[2]), "r"(c[3]), "r"(c[4])); break;
    }
  }
}
#undef TMA_WIDE_ASM
#endif

}  // namespace

extern "C" __global__ void __launch_bounds__(128)
im2col_wide_load_batch(const tmac::TensorMap* maps, const tmac::s32* params, unsigned char* out,
                       tmac::u32* status, int rank, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  unsigned char* base = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  const tmac::s32* p = params + static_cast<size_t>(b) * TMA_WIDE_NPARAM;
  const int mode = p[7];
  const tmac::u32 tx_bytes = static_cast<tmac::u32>(p[8]);
  const tmac::u32 copy_bytes = static_cast<tmac::u32>(p[9]);
  const tmac::u32 smem_offset = static_cast<tmac::u32>(p[10]);
  const tmac::u32 out_offset = static_cast<tmac::u32>(p[11]);
  unsigned char* dst = base + smem_offset;

  if (rank < 3 || rank > 5 || (mode != 0 && mode != 1) || (smem_offset & 15u) != 0u) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_BAD;
    return;
  }
#if TMA_HAS_IM2COL_W
  const tmac::TensorMap* map = maps + b;
  tmac::prepare_global_map_load(base, smem_offset + copy_bytes, TMA_SMEM_POISON, map, &bar);
  bool done = false;
  if (threadIdx.x == 0) {
    wide_load(rank, mode, dst, map, p, &bar);
    tmac::ptx::mbarrier_arrive_expect_tx(tmac::ptx::sem_release, tmac::ptx::scope_cta,
                                         tmac::ptx::space_shared, &bar, tx_bytes);
  }
  done = tmac::bounded_wait(&bar, 0, timeout_ns);
  __syncthreads();
  // Copied out even after a timeout: the bytes tell what the load did.
  tmac::copy_out(out + out_offset, dst, copy_bytes);
  if (threadIdx.x == 0) status[b] = done ? tmac::STATUS_OK : tmac::STATUS_TIMEOUT;
#else
  (void)maps; (void)out; (void)timeout_ns; (void)tx_bytes; (void)copy_bytes; (void)out_offset;
  (void)dst; (void)bar;
  if (threadIdx.x == 0) status[b] = TMA_STATUS_UNSUPPORTED;
#endif
}

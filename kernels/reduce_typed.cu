// cp.reduce.async.bulk.tensor takes no element type: PTX ISA cp.reduce.async.bulk.tensor,
// "The type of each tensor data element in the source and the destination tensor is
// specified in Tensor-map." suites/test_tma_reduce.py builds this file twice: as it is
// (the untyped spelling, which must build) and with TYPED defined (the same instruction
// with a .f32 type qualifier, which ptxas must refuse). So a (.redOp, type) pair the
// ISA's table leaves out cannot be refused at build time; what the GPU does with one is
// measured (fixtures/tma_store/reduce_model.py EVIDENCE["disallowed-pair"]).
#include "common.cuh"

#ifdef TYPED
#define TMAC_REDUCE_ADD "cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.f32.tile.bulk_group"
#else
#define TMAC_REDUCE_ADD "cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group"
#endif

extern "C" __global__ void reduce_add_1d(const tmac::TensorMap* map, int c0) {
  __shared__ alignas(128) float src[32];
  if (threadIdx.x == 0) {
    const tmac::u32 s = static_cast<tmac::u32>(__cvta_generic_to_shared(src));
    asm volatile(TMAC_REDUCE_ADD " [%0, {%1}], [%2];" :: "l"(map), "r"(c0), "r"(s) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

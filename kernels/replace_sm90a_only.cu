// tensormap.replace is arch-specific: the toolchain suite builds this for the
// plain target (sm_90) and expects the build to fail (seed 000: "marked as
// specific to sm_90a. To use them, compile using nvcc -arch sm_90a").
#include "common.cuh"

extern "C" __global__ void replace_address(tmac::TensorMap* out, tmac::u64 address) {
  __shared__ tmac::TensorMap smem_map;
  if (threadIdx.x == 0) {
    smem_map = tmac::TensorMap{};
    tmac::ptx::tensormap_replace_global_address(tmac::ptx::space_shared, &smem_map, address);
  }
  __syncwarp();
  tmac::ptx::tensormap_cp_fenceproxy(tmac::ptx::sem_release, tmac::ptx::scope_gpu, out,
                                     &smem_map, tmac::ptx::n32_t<128>{});
}

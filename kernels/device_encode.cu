// Device-side encoding and modification of tiled tensor maps (issue 5).
//
// Seed 000 (CUDA Programming Guide 10.30.1): "Copy-initialize a tensor map in
// shared memory with the template_tensor_map value. Modify the tensor map in
// shared memory using the cuda::ptx::tensormap_replace functions ... copy the
// modified tensor map from shared memory to global memory and perform any
// necessary fencing." Tip: "On sm_90a, a zero-initialized buffer in shared
// memory may also be used as the initial tensor map value."
//
// One build serves every case: each map is a small program of replace ops,
// (field, ordinal, value), interpreted at run time. The PTX operands that must
// be immediates (the ordinal of .box_dim/.global_dim/.global_stride/
// .element_stride and the new_val of the .field3 fields, seed 003: "When .field3
// is specified, the operand new_val must be an immediate") are reached through
// switches over compile-time constants, so every ordinal and every Table 33
// value the target allows is compiled in.
//
// Two writing styles, two kernels of this one file:
//   device_encode_raw      inline PTX written here (asm with "n" immediates)
//   device_encode_ptxwrap  the cuda::ptx wrappers (FIELD_ELEMENT_SIZE uses the
//                          tensormap_replace_element_size alias of seed 000)
// Two state spaces, per map (flags bit 1):
//   shared   lane 0 copies the template (or zeros) to shared memory, replaces
//            there (.shared::cta); the warp copies it out with
//            tensormap.cp_fenceproxy ... release.gpu (seed 000's step 4);
//   global   the warp writes the template (or zeros) to the output map in
//            global memory, lane 0 replaces in place (.global), then
//            fence.proxy.tensormap::generic.release.gpu publishes it; the
//            consumer (device_map_load) acquires with
//            fence.proxy.tensormap::generic.acquire.gpu (seed 001).
// One warp per map, MAPS_PER_BLOCK maps per block, many maps per launch.
//
// Target gating (seed 003): .swizzle_atomicity and .elemtype 13..15 exist on
// sm_100a (and later families), not on sm_90a; .swizzle_mode 4 only on sm_103a.
// Without the feature the op answers STATUS_BAD. TMAC_DE_PROBE forces one of
// them into the build anyway, to check that a target mismatch is a build
// error with a log (1: atomicity, 2: elemtype 13, 3: swizzle_mode 4).
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM101_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM103_ALL) || defined(__CUDA_ARCH_FEAT_SM110_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM120_ALL)
#define TMAC_DE_HAS_SM100_FIELDS 1
#else
#define TMAC_DE_HAS_SM100_FIELDS 0
#endif
#ifndef TMAC_DE_PROBE
#define TMAC_DE_PROBE 0
#endif

namespace de {
using namespace tmac;

// Field codes: fixtures/device_encode.py FIELD_CODES.
enum : u32 {
  FIELD_GLOBAL_ADDRESS = 0, FIELD_RANK = 1, FIELD_BOX_DIM = 2, FIELD_GLOBAL_DIM = 3,
  FIELD_GLOBAL_STRIDE = 4, FIELD_ELEMENT_STRIDE = 5, FIELD_ELEMTYPE = 6,
  FIELD_INTERLEAVE_LAYOUT = 7, FIELD_SWIZZLE_MODE = 8, FIELD_FILL_MODE = 9,
  FIELD_SWIZZLE_ATOMICITY = 10, FIELD_ELEMENT_SIZE = 11   // alias of element_stride
};
enum : u32 { FLAG_FROM_ZEROS = 1u, FLAG_GLOBAL = 2u };
enum { MAPS_PER_BLOCK = 4 };

struct Op { u32 field; u32 ord; u64 value; };            // 16 bytes

// ----------------------------------------------------------------- raw PTX
// The address operand: a 32-bit shared-window address or a 64-bit global one.
struct RawShared {
  u32 a;
  __device__ explicit RawShared(void* p) : a(static_cast<u32>(__cvta_generic_to_shared(p))) {}
};
struct RawGlobal {
  u64 a;
  __device__ explicit RawGlobal(void* p) : a(static_cast<u64>(__cvta_generic_to_global(p))) {}
};

#define DE_SS_shared "shared::cta"
#define DE_SS_global "global"
#define DE_AC_shared "r"
#define DE_AC_global "l"

// new_val in a register, no ordinal.
#define DE_RAW1(SP, FIELD, TY, C, v)                                                   \
  asm volatile("tensormap.replace.tile." FIELD "." DE_SS_##SP ".b1024." TY " [%0], %1;" \
               : : DE_AC_##SP(m.a), C(v) : "memory")
// ordinal immediate, new_val in a register.
#define DE_RAW2(SP, FIELD, TY, C, ORD, v)                                                     \
  asm volatile("tensormap.replace.tile." FIELD "." DE_SS_##SP ".b1024." TY " [%0], %1, %2;"    \
               : : DE_AC_##SP(m.a), "n"(ORD), C(v) : "memory")
// new_val immediate.
#define DE_RAW3(SP, FIELD, VAL)                                                             \
  asm volatile("tensormap.replace.tile." FIELD "." DE_SS_##SP ".b1024.b32 [%0], %1;"          \
               : : DE_AC_##SP(m.a), "n"(VAL) : "memory")

#define DE_ORD5(X) X(0) X(1) X(2) X(3) X(4)
#define DE_ORD4(X) X(0) X(1) X(2) X(3)

#define DE_RAW_APPLY(SP, MT)                                                              \
  __device__ inline bool apply_raw(MT m, const Op& op) {                                  \
    const u32 v32 = static_cast<u32>(op.value);                                           \
    const u64 v64 = op.value;                                                             \
    switch (op.field) {                                                                   \
      case FIELD_GLOBAL_ADDRESS: DE_RAW1(SP, "global_address", "b64", "l", v64); return true; \
      case FIELD_RANK: DE_RAW1(SP, "rank", "b32", "r", v32); return true;                 \
      case FIELD_BOX_DIM: switch (op.ord) {                                               \
        DE_ORD5(DE_CASE_BOX) default: return false; }                                     \
      case FIELD_GLOBAL_DIM: switch (op.ord) {                                            \
        DE_ORD5(DE_CASE_GDIM) default: return false; }                                    \
      case FIELD_GLOBAL_STRIDE: switch (op.ord) {                                         \
        DE_ORD4(DE_CASE_GSTR) default: return false; }                                    \
      case FIELD_ELEMENT_STRIDE: case FIELD_ELEMENT_SIZE: switch (op.ord) {               \
        DE_ORD5(DE_CASE_ESTR) default: return false; }                                    \
      case FIELD_ELEMTYPE: switch (op.value) {                                            \
        DE_CASE_F3("elemtype", 0) DE_CASE_F3("elemtype", 1) DE_CASE_F3("elemtype", 2)     \
        DE_CASE_F3("elemtype", 3) DE_CASE_F3("elemtype", 4) DE_CASE_F3("elemtype", 5)     \
        DE_CASE_F3("elemtype", 6) DE_CASE_F3("elemtype", 7) DE_CASE_F3("elemtype", 8)     \
        DE_CASE_F3("elemtype", 9) DE_CASE_F3("elemtype", 10) DE_CASE_F3("elemtype", 11)   \
        DE_CASE_F3("elemtype", 12) DE_RAW_ELEMTYPE_SM100                                  \
        default: return false; }                                                          \
      case FIELD_INTERLEAVE_LAYOUT: switch (op.value) {                                          \
        DE_CASE_F3("interleave_layout", 0) DE_CASE_F3("interleave_layout", 1)             \
        DE_CASE_F3("interleave_layout", 2) default: return false; }                       \
      case FIELD_SWIZZLE_MODE: switch (op.value) {                                        \
        DE_CASE_F3("swizzle_mode", 0) DE_CASE_F3("swizzle_mode", 1)                       \
        DE_CASE_F3("swizzle_mode", 2) DE_CASE_F3("swizzle_mode", 3) DE_RAW_SWZ96          \
        default: return false; }                                                          \
      case FIELD_FILL_MODE: switch (op.value) {                                           \
        DE_CASE_F3("fill_mode", 0) DE_CASE_F3("fill_mode", 1) default: return false; }    \
      case FIELD_SWIZZLE_ATOMICITY: DE_RAW_ATOMICITY                                      \
      default: return false;                                                              \
    }                                                                                     \
  }

// The case bodies refer to the SP of the enclosing expansion through DE_SP.
#define DE_CASE_BOX(O) case O: DE_RAW2_SP("box_dim", "b32", "r", O, v32); return true;
#define DE_CASE_GDIM(O) case O: DE_RAW2_SP("global_dim", "b32", "r", O, v32); return true;
#define DE_CASE_GSTR(O) case O: DE_RAW2_SP("global_stride", "b64", "l", O, v64); return true;
#define DE_CASE_ESTR(O) case O: DE_RAW2_SP("element_stride", "b32", "r", O, v32); return true;
#define DE_CASE_F3(F, V) case V: DE_RAW3_SP(F, V); return true;

#if TMAC_DE_HAS_SM100_FIELDS || TMAC_DE_PROBE == 2
#define DE_RAW_ELEMTYPE_SM100 \
  DE_CASE_F3("elemtype", 13) DE_CASE_F3("elemtype", 14) DE_CASE_F3("elemtype", 15)
#else
#define DE_RAW_ELEMTYPE_SM100
#endif
#if TMAC_DE_PROBE == 3
#define DE_RAW_SWZ96 DE_CASE_F3("swizzle_mode", 4)
#else
#define DE_RAW_SWZ96
#endif
#if TMAC_DE_HAS_SM100_FIELDS || TMAC_DE_PROBE == 1
#define DE_RAW_ATOMICITY switch (op.value) {                                       \
    DE_CASE_F3("swizzle_atomicity", 0) DE_CASE_F3("swizzle_atomicity", 1)          \
    DE_CASE_F3("swizzle_atomicity", 2) DE_CASE_F3("swizzle_atomicity", 3)          \
    default: return false; }
#else
#define DE_RAW_ATOMICITY return false;
#endif

#define DE_RAW2_SP(F, TY, C, O, v) DE_RAW2(shared, F, TY, C, O, v)
#define DE_RAW3_SP(F, V) DE_RAW3(shared, F, V)
DE_RAW_APPLY(shared, RawShared)
#undef DE_RAW2_SP
#undef DE_RAW3_SP
#define DE_RAW2_SP(F, TY, C, O, v) DE_RAW2(global, F, TY, C, O, v)
#define DE_RAW3_SP(F, V) DE_RAW3(global, F, V)
DE_RAW_APPLY(global, RawGlobal)
#undef DE_RAW2_SP
#undef DE_RAW3_SP

// ------------------------------------------------------------ cuda::ptx
template <int N> using n32 = ptx::n32_t<N>;

#define DE_W_ORD(FN, O) case O: ptx::FN(sp, m, n32<O>{}, val); return true;
#define DE_W_ORD5(FN) DE_W_ORD(FN, 0) DE_W_ORD(FN, 1) DE_W_ORD(FN, 2) DE_W_ORD(FN, 3) DE_W_ORD(FN, 4)
#define DE_W_ORD4(FN) DE_W_ORD(FN, 0) DE_W_ORD(FN, 1) DE_W_ORD(FN, 2) DE_W_ORD(FN, 3)
#define DE_W_F3(FN, V) case V: ptx::FN(sp, m, n32<V>{}); return true;

template <class Space>
__device__ inline bool apply_ptxwrap(Space sp, void* m, const Op& op) {
  switch (op.field) {
    case FIELD_GLOBAL_ADDRESS: {
      const u64 val = op.value;
      ptx::tensormap_replace_global_address(sp, m, val);
      return true;
    }
    case FIELD_RANK: {
      const u32 val = static_cast<u32>(op.value);
      ptx::tensormap_replace_rank(sp, m, val);
      return true;
    }
    case FIELD_BOX_DIM: {
      const u32 val = static_cast<u32>(op.value);
      switch (op.ord) { DE_W_ORD5(tensormap_replace_box_dim) default: return false; }
    }
    case FIELD_GLOBAL_DIM: {
      const u32 val = static_cast<u32>(op.value);
      switch (op.ord) { DE_W_ORD5(tensormap_replace_global_dim) default: return false; }
    }
    case FIELD_GLOBAL_STRIDE: {
      const u64 val = op.value;
      switch (op.ord) { DE_W_ORD4(tensormap_replace_global_stride) default: return false; }
    }
    case FIELD_ELEMENT_STRIDE: {
      const u32 val = static_cast<u32>(op.value);
      switch (op.ord) { DE_W_ORD5(tensormap_replace_element_stride) default: return false; }
    }
    case FIELD_ELEMENT_SIZE: {      // the alias seed 000 uses
      const u32 val = static_cast<u32>(op.value);
      switch (op.ord) { DE_W_ORD5(tensormap_replace_element_size) default: return false; }
    }
    case FIELD_ELEMTYPE:
      switch (op.value) {
        DE_W_F3(tensormap_replace_elemtype, 0) DE_W_F3(tensormap_replace_elemtype, 1)
        DE_W_F3(tensormap_replace_elemtype, 2) DE_W_F3(tensormap_replace_elemtype, 3)
        DE_W_F3(tensormap_replace_elemtype, 4) DE_W_F3(tensormap_replace_elemtype, 5)
        DE_W_F3(tensormap_replace_elemtype, 6) DE_W_F3(tensormap_replace_elemtype, 7)
        DE_W_F3(tensormap_replace_elemtype, 8) DE_W_F3(tensormap_replace_elemtype, 9)
        DE_W_F3(tensormap_replace_elemtype, 10) DE_W_F3(tensormap_replace_elemtype, 11)
        DE_W_F3(tensormap_replace_elemtype, 12)
#if TMAC_DE_HAS_SM100_FIELDS
        DE_W_F3(tensormap_replace_elemtype, 13) DE_W_F3(tensormap_replace_elemtype, 14)
        DE_W_F3(tensormap_replace_elemtype, 15)
#endif
        default: return false;
      }
    case FIELD_INTERLEAVE_LAYOUT:
      switch (op.value) {
        DE_W_F3(tensormap_replace_interleave_layout, 0)
        DE_W_F3(tensormap_replace_interleave_layout, 1)
        DE_W_F3(tensormap_replace_interleave_layout, 2)
        default: return false;
      }
    case FIELD_SWIZZLE_MODE:
      switch (op.value) {
        DE_W_F3(tensormap_replace_swizzle_mode, 0) DE_W_F3(tensormap_replace_swizzle_mode, 1)
        DE_W_F3(tensormap_replace_swizzle_mode, 2) DE_W_F3(tensormap_replace_swizzle_mode, 3)
        default: return false;
      }
    case FIELD_FILL_MODE:
      switch (op.value) {
        DE_W_F3(tensormap_replace_fill_mode, 0) DE_W_F3(tensormap_replace_fill_mode, 1)
        default: return false;
      }
    case FIELD_SWIZZLE_ATOMICITY:
#if TMAC_DE_HAS_SM100_FIELDS
      switch (op.value) {
        DE_W_F3(tensormap_replace_swizzle_atomicity, 0)
        DE_W_F3(tensormap_replace_swizzle_atomicity, 1)
        DE_W_F3(tensormap_replace_swizzle_atomicity, 2)
        DE_W_F3(tensormap_replace_swizzle_atomicity, 3)
        default: return false;
      }
#else
      return false;
#endif
    default:
      return false;
  }
}

struct StyleRaw {
  __device__ static bool shared(void* m, const Op& op) { return apply_raw(RawShared(m), op); }
  __device__ static bool global(void* m, const Op& op) { return apply_raw(RawGlobal(m), op); }
};
struct StylePtxwrap {
  __device__ static bool shared(void* m, const Op& op) {
    return apply_ptxwrap(ptx::space_shared, m, op);
  }
  __device__ static bool global(void* m, const Op& op) {
    return apply_ptxwrap(ptx::space_global, m, op);
  }
};

// templates: [n] maps (ignored for FLAG_FROM_ZEROS); ops: [n][max_ops];
// nops, flags: [n]; out: [n] maps; status: [n] (pre-poisoned by the host).
template <class Style>
__device__ inline void encode(const TensorMap* templates, const Op* ops, const u32* nops,
                              const u32* flags, TensorMap* out, u32* status, u32 n,
                              u32 max_ops) {
  __shared__ TensorMap smem_maps[MAPS_PER_BLOCK];
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const u32 i = blockIdx.x * MAPS_PER_BLOCK + warp;
  if (i >= n) return;                                    // whole warps only
  const u32 f = flags[i];
  const bool zeros = (f & FLAG_FROM_ZEROS) != 0;
  const Op* prog = ops + static_cast<size_t>(i) * max_ops;
  const u32 count = nops[i] < max_ops ? nops[i] : max_ops;
  TensorMap* dst = out + i;
  bool ok = nops[i] <= max_ops;
  if ((f & FLAG_GLOBAL) == 0) {
    TensorMap* sm = smem_maps + warp;
    if (lane < 16) sm->opaque[lane] = zeros ? 0ull : templates[i].opaque[lane];
    __syncwarp();
    if (lane == 0)
      for (u32 k = 0; k < count; ++k) ok = Style::shared(sm, prog[k]) && ok;
    __syncwarp();
    ptx::tensormap_cp_fenceproxy(ptx::sem_release, ptx::scope_gpu, dst, sm, n32<128>{});
  } else {
    if (lane < 16) dst->opaque[lane] = zeros ? 0ull : templates[i].opaque[lane];
    __syncwarp();
    if (lane == 0) {
      for (u32 k = 0; k < count; ++k) ok = Style::global(dst, prog[k]) && ok;
      // Seed 001: the release part of the pattern for a map modified in global memory.
      ptx::fence_proxy_tensormap_generic(ptx::sem_release, ptx::scope_gpu);
    }
    __syncwarp();
  }
  if (lane == 0) status[i] = ok ? STATUS_OK : STATUS_BAD;
}

// ------------------------------------------------------------------ loads
// params: [loads][DE_NPARAM] int32: map index, rank, coords[5], tx_bytes,
// copy_bytes, out_offset. Shared memory from the 1024-aligned destination is
// poisoned (0xA5) for copy_bytes, so unwritten bytes show.
enum { NPARAM = 10 };

}  // namespace de

extern "C" __global__ void __launch_bounds__(32 * de::MAPS_PER_BLOCK)
device_encode_raw(const tmac::TensorMap* templates, const de::Op* ops, const tmac::u32* nops,
                  const tmac::u32* flags, tmac::TensorMap* out, tmac::u32* status,
                  tmac::u32 n, tmac::u32 max_ops) {
  de::encode<de::StyleRaw>(templates, ops, nops, flags, out, status, n, max_ops);
}

extern "C" __global__ void __launch_bounds__(32 * de::MAPS_PER_BLOCK)
device_encode_ptxwrap(const tmac::TensorMap* templates, const de::Op* ops,
                      const tmac::u32* nops, const tmac::u32* flags, tmac::TensorMap* out,
                      tmac::u32* status, tmac::u32 n, tmac::u32 max_ops) {
  de::encode<de::StylePtxwrap>(templates, ops, nops, flags, out, status, n, max_ops);
}

// One block per load through a map in global memory (device-encoded in place,
// copied out by cp_fenceproxy, or written by the host): the block's thread 0
// acquires the map in the tensor-map proxy first (seed 001: "The thread that
// uses the tensor map and the thread that performs the fence must be in the
// same block").
extern "C" __global__ void __launch_bounds__(128)
device_map_load(const tmac::TensorMap* maps, const tmac::s32* params, unsigned char* out,
                tmac::u32* status, tmac::u64 timeout_ns) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ tmac::u64 bar;
  unsigned char* dst = tmac::align_up(smem_raw, 1024);
  const int b = blockIdx.x;
  const tmac::s32* p = params + static_cast<size_t>(b) * de::NPARAM;
  const tmac::TensorMap* map = maps + p[0];
  const int rank = p[1];
  const tmac::u32 tx_bytes = static_cast<tmac::u32>(p[7]);
  const tmac::u32 copy_bytes = static_cast<tmac::u32>(p[8]);
  const tmac::u32 out_offset = static_cast<tmac::u32>(p[9]);
  if (rank < 1 || rank > 5) {
    if (threadIdx.x == 0) status[b] = tmac::STATUS_BAD;
    return;
  }
  tmac::prepare_global_map_load(dst, copy_bytes, 0xA5, map, &bar);
  const bool done = tmac::load_and_wait(rank, dst, map, p + 2, &bar, tx_bytes, timeout_ns);
  __syncthreads();
  tmac::copy_out(out + out_offset, dst, copy_bytes);
  if (threadIdx.x == 0) status[b] = done ? tmac::STATUS_OK : tmac::STATUS_TIMEOUT;
}

// Data handed between the generic proxy (ordinary loads and stores) and the async proxy
// (TMA), with and without the documented proxy fences, and the byte accounting of the
// mbarrier a TMA load completes (fixtures/fences/async_proxy.py, tx_count.py).
//
// Every tensor is a 2D uint32 tensor of 32 columns; a tile is a box of 32 x 8 elements
// (1,024 bytes), tile k at rows 8k..8k+7. Element i of the tile of hand-off k holds
// value(k, i) = k * 1024 + i + 1 (tmac::proxy_value), so a stale tile reads as the
// value of an earlier hand-off, or as the poison it started with. The kernels do not
// judge: they copy what each hand-off saw to `seen` ([hand-offs][256] uint32) and the
// host compares it with the model. status: one word per block (fixtures/cuda_layer/status.py).
#include "common.cuh"

namespace tmac {
constexpr u32 TILE_ELEMS = 256;            // 32 x 8 uint32
constexpr u32 TILE_BYTES = TILE_ELEMS * 4;
constexpr u32 SMEM_POISON = 0xA5A5A5A5u;

__device__ inline u32 proxy_value(u32 k, u32 i) { return k * 1024u + i + 1u; }

__device__ inline void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ inline void fence_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Thread 0 loads the box at (x, y) into `dst`, the barrier told to expect `expect` bytes
// first; every thread waits for the phase of `parity`, bounded (its own answer: a block
// that branches on it agrees first, __syncthreads_and).
__device__ inline bool load_tile(void* dst, const void* map, s32 x, s32 y, u64* bar, u32 parity,
                                 u32 expect, u64 timeout_ns) {
  if (threadIdx.x == 0) {
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, bar,
                                   expect);
    const s32 c[2] = {x, y};
    tma_load(2, dst, map, c, bar);
  }
  return bounded_wait(bar, parity, timeout_ns);
}

// Copy a tile of shared memory to the hand-off's slot of `seen`.
__device__ inline void record(u32* seen, u32 k, const u32* tile) {
  for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) seen[k * TILE_ELEMS + i] = tile[i];
}

// After a wait that may have ended before the copy did (a timeout, or a barrier told to
// expect fewer bytes than come): let the copy land before the block reads or leaves its
// shared memory. No document bounds a TMA's latency; 200 us is four orders above it.
__device__ inline void settle() {
  const u64 start = globaltimer();
  while (globaltimer() - start < 200000) __nanosleep(1000);
  __syncthreads();
}

// Flags at .gpu scope (SYS false: one GPU) or .sys (two GPUs: the producer writes over
// peer access into the consumer's memory).
template <bool SYS>
__device__ inline bool spin_until(const u32* flag, u32 at_least, u64 timeout_ns) {
  const u64 start = globaltimer();
  u32 v;
  for (;;) {
    if constexpr (SYS)
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    else
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v >= at_least) return true;
    if (globaltimer() - start > timeout_ns) return false;
  }
}

template <bool SYS>
__device__ inline void publish(u32* flag, u32 v) {
  if constexpr (SYS) {
    __threadfence_system();
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(v) : "memory");
  } else {
    __threadfence();
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(flag), "r"(v) : "memory");
  }
}

// The hand-offs of one pair p, as its producer (writes tile p of `tensor` with ordinary
// stores, publishes ready[p]) or its consumer (acquires ready[p], with `fenced` runs
// fence.proxy.async.global, TMA-loads tile p through `map`, records it, releases ack[p]
// before the producer overwrites the tile). flags: ready[pairs], ack[pairs], zeroed by the
// host. A flag that never comes ends the block's hand-offs: false (TIMEOUT).
template <bool SYS>
__device__ inline bool flag_handoffs(bool producer, u32 p, const TensorMap* map, u32* tensor,
                                     int fenced, int pairs, int trials, u32* flags, u32* seen,
                                     u64 timeout_ns) {
  __shared__ alignas(1024) u32 tile[TILE_ELEMS];
  __shared__ u64 bar;
  __shared__ int ok;
  u32* ready = flags + p;
  u32* ack = flags + pairs + p;
  if (threadIdx.x == 0) { init_barrier(&bar); ok = 1; }
  __syncthreads();
  for (int t = 0; t < trials; ++t) {
    const u32 k = p * trials + t;
    if (producer) {
      if (threadIdx.x == 0 && !spin_until<SYS>(ack, t, timeout_ns)) ok = 0;
      __syncthreads();
      if (!ok) break;
      for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x)
        tensor[p * TILE_ELEMS + i] = proxy_value(k, i);
      __syncthreads();
      if (threadIdx.x == 0) publish<SYS>(ready, t + 1);
    } else {
      if (threadIdx.x == 0) {
        if (!spin_until<SYS>(ready, t + 1, timeout_ns)) ok = 0;
        else if (fenced) fence_async_global();
      }
      __syncthreads();
      if (!ok) break;
      if (!__syncthreads_and(load_tile(tile, map, 0, static_cast<s32>(p * 8), &bar, t & 1,
                                       TILE_BYTES, timeout_ns))) {
        ok = 0;
        settle();
        break;
      }
      record(seen, k, tile);
      fence_async_shared();          // the next load rewrites the tile these threads read
      __syncthreads();
      if (threadIdx.x == 0) publish<SYS>(ack, t + 1);
    }
  }
  return ok;
}
}  // namespace tmac

// Threads write a tile into shared memory, then thread 0 TMA-stores it (reduce: adds it,
// cp.reduce.async.bulk.tensor .add) to tile (block * trials + t) of the tensor; with
// `fenced`, each writing thread runs fence.proxy.async.shared::cta before the barrier.
// The next hand-off rewrites the same shared tile after cp.async.bulk.wait_group.read 0
// (the source read) and a barrier. The tensor itself is what the host reads back.
extern "C" __global__ void __launch_bounds__(128)
smem_then_write(const __grid_constant__ tmac::TensorMap map, int fenced, int reduce, int trials,
                tmac::u32* status) {
  using namespace tmac;
  __shared__ alignas(1024) u32 tile[TILE_ELEMS];
  for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) tile[i] = SMEM_POISON;
  fence_async_shared();
  __syncthreads();
  const u32 s = static_cast<u32>(__cvta_generic_to_shared(tile));
  for (int t = 0; t < trials; ++t) {
    const u32 k = blockIdx.x * trials + t;
    for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) tile[i] = proxy_value(k, i);
    if (fenced) fence_async_shared();
    __syncthreads();
    if (threadIdx.x == 0) {
      const s32 y = static_cast<s32>(k * 8);
      if (reduce)
        asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
                     " [%0, {%1, %2}], [%3];" :: "l"(&map), "r"(0), "r"(y), "r"(s) : "memory");
      else
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
                     " [%0, {%1, %2}], [%3];" :: "l"(&map), "r"(0), "r"(y), "r"(s) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    status[blockIdx.x] = STATUS_OK;
  }
}

// Pairs of blocks on one GPU: block p < pairs is pair p's producer, block pairs + p its
// consumer (flag_handoffs, flags at .gpu scope).
extern "C" __global__ void __launch_bounds__(128)
flag_then_load(const __grid_constant__ tmac::TensorMap map, tmac::u32* tensor, int fenced,
               int pairs, int trials, tmac::u32* flags, tmac::u32* seen, tmac::u32* status,
               tmac::u64 timeout_ns) {
  using namespace tmac;
  const bool producer = static_cast<int>(blockIdx.x) < pairs;
  const u32 p = producer ? blockIdx.x : blockIdx.x - pairs;
  const bool ok = flag_handoffs<false>(producer, p, &map, tensor, fenced, pairs, trials, flags,
                                       seen, timeout_ns);
  if (threadIdx.x == 0) status[blockIdx.x] = ok ? STATUS_OK : STATUS_TIMEOUT;
}

// The same hand-offs across two GPUs, launched at once: block p of flag_produce_sys, on the
// producer GPU, writes tile p of the consumer GPU's tensor over peer access; block p of
// flag_consume_sys, on the consumer GPU, loads it; the flags, in the consumer's memory, at
// .sys scope (seed 001: "If the threads are on different devices, the .sys scope must be
// used.").
extern "C" __global__ void __launch_bounds__(128)
flag_produce_sys(tmac::u32* tensor, int pairs, int trials, tmac::u32* flags, tmac::u32* status,
                 tmac::u64 timeout_ns) {
  using namespace tmac;
  const bool ok = flag_handoffs<true>(true, blockIdx.x, nullptr, tensor, 0, pairs, trials, flags,
                                      nullptr, timeout_ns);
  if (threadIdx.x == 0) status[blockIdx.x] = ok ? STATUS_OK : STATUS_TIMEOUT;
}

extern "C" __global__ void __launch_bounds__(128)
flag_consume_sys(const __grid_constant__ tmac::TensorMap map, int fenced, int pairs, int trials,
                 tmac::u32* flags, tmac::u32* seen, tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  const bool ok = flag_handoffs<true>(false, blockIdx.x, &map, nullptr, fenced, pairs, trials,
                                      flags, seen, timeout_ns);
  if (threadIdx.x == 0) status[blockIdx.x] = ok ? STATUS_OK : STATUS_TIMEOUT;
}

// The tensor's tiles written with ordinary stores by one kernel, for the next kernel to
// TMA-load (read_then_load, fenced): tile k = proxy_value(k, .), one block per tile.
extern "C" __global__ void write_tiles(tmac::u32* tensor) {
  for (tmac::u32 i = threadIdx.x; i < tmac::TILE_ELEMS; i += blockDim.x)
    tensor[blockIdx.x * tmac::TILE_ELEMS + i] = tmac::proxy_value(blockIdx.x, i);
}

// Each block TMA-loads tiles block * trials + t into one shared stage, in turn. Its
// threads read the stage with ordinary loads, then (with `fenced`: after
// fence.proxy.async.shared::cta) meet at a barrier, thread 0 issues the next load into
// the same stage, and only then do the threads record what they read: a load that
// overtook the reads would show as the next tile's values.
extern "C" __global__ void __launch_bounds__(128)
read_then_load(const __grid_constant__ tmac::TensorMap map, int fenced, int trials,
               tmac::u32* seen, tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  __shared__ alignas(1024) u32 tile[TILE_ELEMS];
  __shared__ u64 bar;
  constexpr u32 PER = TILE_ELEMS / 128;
  if (threadIdx.x == 0) init_barrier(&bar);
  __syncthreads();
  const u32 first = blockIdx.x * trials;
  bool ok = __syncthreads_and(load_tile(tile, &map, 0, static_cast<s32>(first * 8), &bar, 0,
                                        TILE_BYTES, timeout_ns));
  for (int t = 0; ok && t < trials; ++t) {
    u32 held[PER];
    for (u32 j = 0; j < PER; ++j) {
      const volatile u32* v = tile + threadIdx.x + j * 128;
      held[j] = *v;
    }
    if (fenced) fence_async_shared();
    __syncthreads();
    const bool more = t + 1 < trials;
    if (more && threadIdx.x == 0) {
      ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar,
                                     TILE_BYTES);
      const s32 c[2] = {0, static_cast<s32>((first + t + 1) * 8)};
      tma_load(2, tile, &map, c, &bar);
    }
    for (u32 j = 0; j < PER; ++j) seen[(first + t) * TILE_ELEMS + threadIdx.x + j * 128] = held[j];
    if (more) ok = __syncthreads_and(bounded_wait(&bar, (t + 1) & 1, timeout_ns));
  }
  if (!ok) settle();
  if (threadIdx.x == 0) status[blockIdx.x] = ok ? STATUS_OK : STATUS_TIMEOUT;
}

// A fresh mbarrier for each load: thread 0 initialises barrier t, then runs the fence of
// `fence` (0 none, 1 fence.proxy.async.shared::cta, 2 fence.mbarrier_init.release.cluster),
// the block meets, and the tile block * trials + t is loaded with it and recorded.
extern "C" __global__ void __launch_bounds__(128)
init_then_load(const __grid_constant__ tmac::TensorMap map, int fence, int trials,
               tmac::u32* seen, tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  __shared__ alignas(1024) u32 tile[TILE_ELEMS];
  __shared__ u64 bars[64];
  bool ok = trials <= 64;
  for (int t = 0; ok && t < trials; ++t) {
    const u32 k = blockIdx.x * trials + t;
    if (threadIdx.x == 0) {
      ptx::mbarrier_init(&bars[t], 1);
      if (fence == 1) fence_async_shared();
      if (fence == 2) ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    __syncthreads();
    ok = __syncthreads_and(load_tile(tile, &map, 0, static_cast<s32>(k * 8), &bars[t], 0,
                                     TILE_BYTES, timeout_ns));
    if (!ok) { settle(); break; }
    record(seen, k, tile);
    fence_async_shared();
    __syncthreads();
  }
  if (threadIdx.x == 0) status[blockIdx.x] = ok ? STATUS_OK : (trials <= 64 ? STATUS_TIMEOUT : STATUS_BAD);
}

// Byte accounting: block b loads the box at coords[b] (x, y) with its barrier told to
// expect expect[b] bytes, records the shared tile and its status word when the wait ends
// (OK or TIMEOUT), lets the copy land, then loads tile 0 with a fresh barrier told the
// box's bytes, the check that the block is unhurt (after[b], seen[blocks + b]).
extern "C" __global__ void __launch_bounds__(128)
tx_load(const __grid_constant__ tmac::TensorMap map, const tmac::s32* coords,
        const tmac::u32* expect, tmac::u32* seen, tmac::u32* status, tmac::u32* after,
        tmac::u64 timeout_ns) {
  using namespace tmac;
  __shared__ alignas(1024) u32 tile[TILE_ELEMS];
  __shared__ u64 bar[2];
  const u32 b = blockIdx.x;
  for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) tile[i] = SMEM_POISON;
  fence_async_shared();
  __syncthreads();
  if (threadIdx.x == 0) { init_barrier(&bar[0]); init_barrier(&bar[1]); }
  __syncthreads();
  const bool done = load_tile(tile, &map, coords[2 * b], coords[2 * b + 1], &bar[0], 0, expect[b],
                              timeout_ns);
  record(seen, b, tile);
  if (threadIdx.x == 0) status[b] = done ? STATUS_OK : STATUS_TIMEOUT;
  settle();
  for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) tile[i] = SMEM_POISON;
  fence_async_shared();
  __syncthreads();
  const bool again = __syncthreads_and(load_tile(tile, &map, 0, 0, &bar[1], 0, TILE_BYTES, timeout_ns));
  record(seen, gridDim.x + b, tile);
  if (!again) settle();
  if (threadIdx.x == 0) after[b] = again ? STATUS_OK : STATUS_TIMEOUT;
}

// Multicast byte accounting: clusters of two CTAs; CTA 0 of cluster c loads the box at
// coords[c] to both CTAs (ctaMask 0b11), each CTA's own barrier told to expect
// expect[c] bytes. seen / status: [clusters * 2], CTA r of cluster c at 2c + r.
extern "C" __global__ void __launch_bounds__(128)
tx_multicast(const __grid_constant__ tmac::TensorMap map, const tmac::s32* coords,
             const tmac::u32* expect, tmac::u32* seen, tmac::u32* status, tmac::u64 timeout_ns) {
  using namespace tmac;
  __shared__ alignas(1024) u32 tile[TILE_ELEMS];
  __shared__ u64 bar;
  const u32 r = ptx::get_sreg_cluster_ctarank();
  const u32 c = ptx::get_sreg_clusterid_x();
  const u32 slot = 2 * c + r;
  for (u32 i = threadIdx.x; i < TILE_ELEMS; i += blockDim.x) tile[i] = SMEM_POISON;
  fence_async_shared();
  __syncthreads();
  init_multicast_barrier(&bar, expect[c]);
  if (r == 0 && threadIdx.x == 0) {
    const s32 k[2] = {coords[2 * c], coords[2 * c + 1]};
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, tile, &map, k, &bar,
                              static_cast<cuda::std::uint16_t>(0x3));
  }
  const bool done = bounded_wait(&bar, 0, timeout_ns);
  record(seen, slot, tile);
  if (threadIdx.x == 0) status[slot] = done ? STATUS_OK : STATUS_TIMEOUT;
  settle();
  cluster_sync();
}

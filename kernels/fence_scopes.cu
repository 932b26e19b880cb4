// Fence scopes (issue 6): publishing a modified tensor map and acquiring it in the
// consuming block, across blocks, kernels, streams, graphs and GPUs.
//
// Seed 001: "using a tensor map in global memory requires explicitly establishing a
// release-acquire pattern in the tensor map proxy between the threads that modify the
// tensor map and the threads that use it." Release: tensormap.cp_fenceproxy (seed 000,
// step 4). Acquire: fence.proxy.tensormap::generic.acquire, "in the same block" as the
// thread that uses the map; ".gpu" on one device, ".sys" across devices.
//
// Every scenario re-encodes a map many times. A *version* (struct Version, a table
// written by the host, fixtures/fences.py) is a distinct uint32 2D tensor at its own
// address with its own dims (w, h) and row stride (w * 4 bytes); its element (x, y)
// holds  tag << 20 | y << 10 | x  (tag = version index + 1, x, y < 1024). A map is
// made from the host-encoded template by replacing global_address, global_dim[0..1]
// and global_stride[0] in shared memory (seed 000 steps 2-3), then published.
// Each load is a 32x8 box at (v.x, v.y - 8 * j) (load j of an iteration), which
// straddles the right edge (and, for j = 0, the bottom edge) of version v, so the
// zero fill checks the dims too. The kernel compares every element with what version
// v must give and records, per load:
//   seen[k]: the tag of box element (0, 0) (always in bounds of the intended version),
//            or one of the SEEN_* codes below;
//   bad[k]:  how many of the 256 elements differ from version v's.
// The host turns (schedule, seen, bad) into ok / stale / wrong / torn / timeout counts.
//
// No wait is unbounded: mbarrier waits use tmac::bounded_wait, flag and counter waits
// poll %globaltimer; a timeout ends the block with STATUS_TIMEOUT and a SEEN_* code.
// Scopes are template parameters: S == 0 is .gpu, S == 1 is .sys.
#include "common.cuh"

namespace fence {
using namespace tmac;

struct Version {          // 32 bytes; fixtures/fences.py VERSION_DTYPE
  u64 addr;
  u32 w, h;               // global_dim[0], global_dim[1]; stride = 4 * w bytes
  u32 x, y;               // coordinates of load 0
  u32 tag;                // element tag (version index + 1)
  u32 pad;
};

constexpr u32 BOX_W = 32, BOX_H = 8, BOX_ELEMS = BOX_W * BOX_H, BOX_BYTES = BOX_ELEMS * 4;
constexpr u32 MAX_LOADS = 4;
enum : u32 {
  SEEN_ZERO = 0xFFFFFF00u,          // element (0, 0) was zero: the map pointed elsewhere
  SEEN_FLAG_TIMEOUT = 0xFFFFFF01u,  // the consumer's flag wait passed its bound
  SEEN_TMA_TIMEOUT = 0xFFFFFF02u,   // the mbarrier wait passed its bound
  SEEN_SLOT_TIMEOUT = 0xFFFFFF03u,  // the producer's wait for a free slot passed its bound
};

// ------------------------------------------------------------------ scoped operations
template <int S> __device__ inline void release_map(TensorMap* dst, const TensorMap* src) {
  // Warp-collective (.sync.aligned): every lane of the warp executes it.
  if constexpr (S == 1)
    ptx::tensormap_cp_fenceproxy(ptx::sem_release, ptx::scope_sys, dst, src, ptx::n32_t<128>{});
  else
    ptx::tensormap_cp_fenceproxy(ptx::sem_release, ptx::scope_gpu, dst, src, ptx::n32_t<128>{});
}

template <int S> __device__ inline void acquire_map(const TensorMap* m) {
  if constexpr (S == 1)
    ptx::fence_proxy_tensormap_generic(ptx::sem_acquire, ptx::scope_sys, m, ptx::n32_t<128>{});
  else
    ptx::fence_proxy_tensormap_generic(ptx::sem_acquire, ptx::scope_gpu, m, ptx::n32_t<128>{});
}

template <int S> __device__ inline void store_release(u32* p, u32 v) {
  if constexpr (S == 1) asm volatile("st.release.sys.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
  else asm volatile("st.release.gpu.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

template <int S> __device__ inline u32 load_acquire(const u32* p) {
  u32 v;
  if constexpr (S == 1) asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int S> __device__ inline void add_release(u32* p, u32 v) {
  if constexpr (S == 1) asm volatile("red.release.sys.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
  else asm volatile("red.release.gpu.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

// Wait until *p >= target, for at most timeout_ns (one thread). False on timeout.
template <int S> __device__ inline bool wait_at_least(const u32* p, u32 target, u64 timeout_ns) {
  const u64 start = globaltimer();
  while (load_acquire<S>(p) < target) {
    if (globaltimer() - start > timeout_ns) return false;
    __nanosleep(64);
  }
  return true;
}

// --------------------------------------------------------------------- map encoding
// One thread: template -> shared memory, replace the fields of version v (seed 000).
__device__ inline void encode_in_smem(TensorMap* sm, const TensorMap& tmpl, const Version& v) {
  *sm = tmpl;
  ptx::tensormap_replace_global_address(ptx::space_shared, sm, v.addr);
  ptx::tensormap_replace_global_dim(ptx::space_shared, sm, ptx::n32_t<0>{}, v.w);
  ptx::tensormap_replace_global_dim(ptx::space_shared, sm, ptx::n32_t<1>{}, v.h);
  ptx::tensormap_replace_global_stride(ptx::space_shared, sm, ptx::n32_t<0>{},
                                       static_cast<u64>(v.w) * 4u);
}

// One warp (all 32 lanes): encode version v in `sm` and publish it to `dst` at scope S.
template <int S>
__device__ inline void encode_and_publish(TensorMap* sm, const TensorMap& tmpl, const Version& v,
                                          TensorMap* dst) {
  if ((threadIdx.x & 31u) == 0) encode_in_smem(sm, tmpl, v);
  __syncwarp();
  release_map<S>(dst, sm);
  __syncwarp();
}

// ------------------------------------------------------------------- load and check
struct Smem {
  alignas(128) TensorMap map[2];
  u64 bar;
  u32 phase;
  u32 bad[MAX_LOADS];
  u32 flag_ok;
};

// Thread 0 issues `nloads` loads of version v's boxes through `map` (already acquired
// by this block) into `tiles`, completing on s.bar.
__device__ inline void issue_loads(const void* map, const Version& v, u32 nloads, u32* tiles,
                                   Smem& s) {
  if (threadIdx.x == 0) {
    for (u32 j = 0; j < nloads; ++j) {
      s.bad[j] = 0;
      const s32 c[2] = {static_cast<s32>(v.x), static_cast<s32>(v.y - BOX_H * j)};
      tma_load(2, tiles + j * BOX_ELEMS, map, c, &s.bar);
    }
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &s.bar,
                                   nloads * BOX_BYTES);
  }
}

// All threads of the block: wait (bounded) for the loads issue_loads started and check
// them against version v. Writes seen[j] / bad[j]. Returns false on a timeout (recorded
// as SEEN_TMA_TIMEOUT). Ends with the proxy fence that lets TMA write the tiles again;
// the caller synchronizes the block before the next issue_loads.
__device__ bool check_loads(const Version& v, u32 nloads, u32* tiles, Smem& s, u64 timeout_ns,
                            u32* seen, u32* bad) {
  const u32 parity = s.phase & 1u;
  const bool done = bounded_wait(&s.bar, parity, timeout_ns);
  if (__syncthreads_or(!done)) {
    if (threadIdx.x == 0)
      for (u32 j = 0; j < nloads; ++j) { seen[j] = SEEN_TMA_TIMEOUT; bad[j] = BOX_ELEMS; }
    return false;
  }
  for (u32 i = threadIdx.x; i < nloads * BOX_ELEMS; i += blockDim.x) {
    const u32 j = i / BOX_ELEMS, e = i % BOX_ELEMS;
    const u32 gx = v.x + e % BOX_W, gy = v.y - BOX_H * j + e / BOX_W;
    const u32 want = (gx < v.w && gy < v.h) ? ((v.tag << 20) | (gy << 10) | gx) : 0u;
    if (tiles[i] != want) atomicAdd(&s.bad[j], 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (u32 j = 0; j < nloads; ++j) {
      const u32 t = tiles[j * BOX_ELEMS];
      seen[j] = t ? (t >> 20) : SEEN_ZERO;
      bad[j] = s.bad[j];
    }
    s.phase += 1;
  }
  // The tiles are read by the generic proxy; the next TMA writes them (async proxy).
  ptx::fence_proxy_async(ptx::space_shared);
  return true;
}

// issue_loads + check_loads, then the block synchronizes.
__device__ bool load_check(const void* map, const Version& v, u32 nloads, u32* tiles, Smem& s,
                           u64 timeout_ns, u32* seen, u32* bad) {
  issue_loads(map, v, nloads, tiles, s);
  if (!check_loads(v, nloads, tiles, s, timeout_ns, seen, bad)) return false;
  __syncthreads();
  return true;
}

__device__ inline u32* tile_base() {
  extern __shared__ unsigned char smem_raw[];
  return reinterpret_cast<u32*>(align_up(smem_raw, 128));
}

__device__ inline void init_block(Smem& s) {
  if (threadIdx.x == 0) { init_barrier(&s.bar); s.phase = 0; }
  __syncthreads();
}

// ------------------------------------------- scenario 1: publish and acquire in one block
// maps: one slot per block. sched: [iters][blocks] version indices. seen/bad:
// [iters][blocks][nloads]. The warp that publishes also acquires and loads.
template <int S>
__device__ void same_block(const TensorMap& tmpl, TensorMap* maps, const Version* table,
                           const u32* sched, u32 iters, u32 nloads, u32* seen, u32* bad,
                           u32* status, u64 timeout_ns) {
  __shared__ Smem s;
  u32* tiles = tile_base();
  const u32 b = blockIdx.x, nb = gridDim.x;
  init_block(s);
  for (u32 i = 0; i < iters; ++i) {
    const Version v = table[sched[i * nb + b]];
    if (threadIdx.x < 32) encode_and_publish<S>(&s.map[0], tmpl, v, maps + b);
    if (threadIdx.x == 0) acquire_map<S>(maps + b);
    __syncthreads();
    const size_t k = (static_cast<size_t>(i) * nb + b) * nloads;
    if (!load_check(maps + b, v, nloads, tiles, s, timeout_ns, seen + k, bad + k)) {
      if (threadIdx.x == 0) status[b] = STATUS_TIMEOUT;
      return;
    }
  }
  if (threadIdx.x == 0) status[b] = STATUS_OK;
}

// ------------------------------------- scenario 2: producer block, flag, consumer blocks
// K map slots used round robin: iteration i's version goes to slot i % K. flag: the
// number of versions published. done[K]: per slot, how many consumer loads through it
// completed; the producer re-encodes slot s for iteration i only when all `consumers`
// finished the i / K earlier uses of s (loads completed, not just issued).
// acquire_mode 0: each consumer block acquires the slot itself (the documented rule).
// acquire_mode 1: consumers do not acquire; the producer block acquires after publishing
//                 (a fence in *another* block: seed 001 says this does not suffice).
// drain 0: the producer rewrites a slot without waiting for the loads through it
//          (flashinfer#5438; an observation: no document says what such loads see).
struct RingArgs {
  TensorMap* maps;
  const Version* table;
  const u32* sched;        // [iters]
  u32* flag;
  u32* done;               // [K]
  u32 iters, K, nloads, consumers, acquire_mode, drain;
  u64 timeout_ns;
};

template <int S>
__device__ void producer_loop(const TensorMap& tmpl, const RingArgs& a, u32* status) {
  __shared__ Smem s;
  if (threadIdx.x >= 32) return;      // one warp produces
  for (u32 i = 0; i < a.iters; ++i) {
    const u32 slot = i % a.K;
    if (threadIdx.x == 0)
      s.flag_ok = !a.drain || wait_at_least<S>(a.done + slot, a.consumers * (i / a.K), a.timeout_ns);
    __syncwarp();
    if (!s.flag_ok) {
      if (threadIdx.x == 0) *status = STATUS_TIMEOUT;
      return;
    }
    encode_and_publish<S>(&s.map[0], tmpl, a.table[a.sched[i]], a.maps + slot);
    if (threadIdx.x == 0) {
      if (a.acquire_mode == 1) acquire_map<S>(a.maps + slot);
      store_release<S>(a.flag, i + 1);
    }
    __syncwarp();
  }
  if (threadIdx.x == 0) *status = STATUS_OK;
}

// Consumer c of a.consumers: seen/bad [iters][consumers][nloads].
template <int S>
__device__ void consumer_loop(const RingArgs& a, u32 c, u32* seen, u32* bad, u32* status) {
  __shared__ Smem s;
  u32* tiles = tile_base();
  init_block(s);
  for (u32 i = 0; i < a.iters; ++i) {
    const u32 slot = i % a.K;
    const size_t k = (static_cast<size_t>(i) * a.consumers + c) * a.nloads;
    if (threadIdx.x == 0) {
      s.flag_ok = wait_at_least<S>(a.flag, i + 1, a.timeout_ns);
      if (s.flag_ok && a.acquire_mode == 0) acquire_map<S>(a.maps + slot);
    }
    __syncthreads();
    if (!s.flag_ok) {
      if (threadIdx.x == 0) { seen[k] = SEEN_FLAG_TIMEOUT; *status = STATUS_TIMEOUT; }
      return;
    }
    const Version v = a.table[a.sched[i]];
    if (!load_check(a.maps + slot, v, a.nloads, tiles, s, a.timeout_ns, seen + k, bad + k)) {
      if (threadIdx.x == 0) *status = STATUS_TIMEOUT;
      return;
    }
    if (threadIdx.x == 0) add_release<S>(a.done + slot, 1u);
  }
  if (threadIdx.x == 0) *status = STATUS_OK;
}

// ---------------------------- scenario 3/4: producer and consumer kernels, host-written maps
// The iteration index is `*cursor` when cursor is not null (graph replays advance it with
// fence_bump), else `iter`.
__device__ inline u32 iteration(const u32* cursor, u32 iter) { return cursor ? *cursor : iter; }

template <int S>
__device__ void produce_one(const TensorMap& tmpl, TensorMap* map, const Version* table,
                            const u32* sched, const u32* cursor, u32 iter) {
  __shared__ alignas(128) TensorMap sm;
  if (threadIdx.x >= 32) return;
  const u32 i = iteration(cursor, iter);
  encode_and_publish<S>(&sm, tmpl, table[sched[i]], map);
}

// acquire: 1 = each block acquires the map (the rule), 0 = no acquire (report only).
template <int S>
__device__ void consume_one(const TensorMap* map, const Version* table, const u32* sched,
                            const u32* cursor, u32 iter, u32 nloads, u32 acquire, u32* seen,
                            u32* bad, u32* status, u64 timeout_ns) {
  __shared__ Smem s;
  u32* tiles = tile_base();
  const u32 i = iteration(cursor, iter);
  const u32 b = blockIdx.x, nb = gridDim.x;
  init_block(s);
  if (threadIdx.x == 0 && acquire) acquire_map<S>(map);
  __syncthreads();
  const size_t k = (static_cast<size_t>(i) * nb + b) * nloads;
  const bool ok = load_check(map, table[sched[i]], nloads, tiles, s, timeout_ns, seen + k, bad + k);
  if (threadIdx.x == 0) status[static_cast<size_t>(i) * nb + b] = ok ? STATUS_OK : STATUS_TIMEOUT;
}

// ----------------------------------- scenario 5: re-encode a block's own map between loads
// Each block owns maps[b]. Iteration i: loads of version sched[i][b] are issued through
// maps[b]; while they are in flight, warp 1 already prepares version i + 1 in shared
// memory; only after the loads completed (the mbarrier wait) is it published to maps[b]
// (DeepGEMM#343, cutlass#2162: publishing before completion races the loads).
// DRAIN false: published as soon as the loads are issued, while they are in flight
// (flashinfer#5438; an observation: no document says what such loads see).
template <int S, bool DRAIN>
__device__ void in_flight(const TensorMap& tmpl, TensorMap* maps, const Version* table,
                          const u32* sched, u32 iters, u32 nloads, u32* seen, u32* bad,
                          u32* status, u64 timeout_ns) {
  __shared__ Smem s;
  u32* tiles = tile_base();
  const u32 b = blockIdx.x, nb = gridDim.x;
  init_block(s);
  if (threadIdx.x < 32) encode_and_publish<S>(&s.map[0], tmpl, table[sched[b]], maps + b);
  for (u32 i = 0; i < iters; ++i) {
    if (threadIdx.x == 0) acquire_map<S>(maps + b);
    __syncthreads();
    const Version v = table[sched[i * nb + b]];
    const size_t k = (static_cast<size_t>(i) * nb + b) * nloads;
    issue_loads(maps + b, v, nloads, tiles, s);
    // Loads in flight: prepare the next version in shared memory (not the global map).
    const bool more = i + 1 < iters;
    if (more && threadIdx.x == 32) encode_in_smem(&s.map[1], tmpl, table[sched[(i + 1) * nb + b]]);
    if (!DRAIN && more && threadIdx.x >= 32 && threadIdx.x < 64) {
      __syncwarp();
      release_map<S>(maps + b, &s.map[1]);   // under the loads in flight
      __syncwarp();
    }
    if (!check_loads(v, nloads, tiles, s, timeout_ns, seen + k, bad + k)) {
      if (threadIdx.x == 0) status[b] = STATUS_TIMEOUT;
      return;
    }
    // The loads through maps[b] completed: now the global map may change.
    if (DRAIN && more && threadIdx.x >= 32 && threadIdx.x < 64) {
      __syncwarp();
      release_map<S>(maps + b, &s.map[1]);
      __syncwarp();
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) status[b] = STATUS_OK;
}

}  // namespace fence

using fence::RingArgs;
using fence::Version;
using tmac::TensorMap;
using tmac::u32;
using tmac::u64;

#define FENCE_BOTH_SCOPES(MACRO) MACRO(gpu, 0) MACRO(sys, 1)

#define SAME_BLOCK(NAME, S)                                                                   \
  extern "C" __global__ void __launch_bounds__(128) fence_same_block_##NAME(                  \
      const __grid_constant__ TensorMap tmpl, TensorMap* maps, const Version* table,          \
      const u32* sched, u32 iters, u32 nloads, u32* seen, u32* bad, u32* status, u64 tmo) {   \
    fence::same_block<S>(tmpl, maps, table, sched, iters, nloads, seen, bad, status, tmo);    \
  }
FENCE_BOTH_SCOPES(SAME_BLOCK)

// Block 0 produces, blocks 1.. consume (consumer c = blockIdx.x - 1).
#define ACROSS_BLOCKS(NAME, S)                                                                \
  extern "C" __global__ void __launch_bounds__(128) fence_across_blocks_##NAME(               \
      const __grid_constant__ TensorMap tmpl, const __grid_constant__ RingArgs a, u32* seen,  \
      u32* bad, u32* status) {                                                                \
    if (blockIdx.x == 0) fence::producer_loop<S>(tmpl, a, status);                           \
    else fence::consumer_loop<S>(a, blockIdx.x - 1, seen, bad, status + blockIdx.x);         \
  }
FENCE_BOTH_SCOPES(ACROSS_BLOCKS)

// The same two roles as separate kernels (two GPUs: producer on one, consumers on the other).
#define RING_SPLIT(NAME, S)                                                                   \
  extern "C" __global__ void __launch_bounds__(128) fence_ring_producer_##NAME(               \
      const __grid_constant__ TensorMap tmpl, const __grid_constant__ RingArgs a,             \
      u32* status) {                                                                          \
    fence::producer_loop<S>(tmpl, a, status);                                                 \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(128) fence_ring_consumer_##NAME(               \
      const __grid_constant__ RingArgs a, u32* seen, u32* bad, u32* status) {                 \
    fence::consumer_loop<S>(a, blockIdx.x, seen, bad, status + blockIdx.x);                  \
  }
FENCE_BOTH_SCOPES(RING_SPLIT)

#define ONE_SHOT(NAME, S)                                                                     \
  extern "C" __global__ void __launch_bounds__(128) fence_produce_##NAME(                     \
      const __grid_constant__ TensorMap tmpl, TensorMap* map, const Version* table,           \
      const u32* sched, const u32* cursor, u32 iter) {                                        \
    fence::produce_one<S>(tmpl, map, table, sched, cursor, iter);                             \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(128) fence_consume_##NAME(                     \
      const TensorMap* map, const Version* table, const u32* sched, const u32* cursor,        \
      u32 iter, u32 nloads, u32 acquire, u32* seen, u32* bad, u32* status, u64 tmo) {         \
    fence::consume_one<S>(map, table, sched, cursor, iter, nloads, acquire, seen, bad,        \
                          status, tmo);                                                       \
  }
FENCE_BOTH_SCOPES(ONE_SHOT)

#define IN_FLIGHT(NAME, S)                                                                    \
  extern "C" __global__ void __launch_bounds__(128) fence_in_flight_##NAME(                   \
      const __grid_constant__ TensorMap tmpl, TensorMap* maps, const Version* table,          \
      const u32* sched, u32 iters, u32 nloads, u32* seen, u32* bad, u32* status, u64 tmo) {   \
    fence::in_flight<S, true>(tmpl, maps, table, sched, iters, nloads, seen, bad, status, tmo); \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(128) fence_in_flight_no_drain_##NAME(          \
      const __grid_constant__ TensorMap tmpl, TensorMap* maps, const Version* table,          \
      const u32* sched, u32 iters, u32 nloads, u32* seen, u32* bad, u32* status, u64 tmo) {   \
    fence::in_flight<S, false>(tmpl, maps, table, sched, iters, nloads, seen, bad, status, tmo); \
  }
FENCE_BOTH_SCOPES(IN_FLIGHT)

// Programmatic dependent launch (flashinfer#4036, NVIDIA/cutlass#2760): the producer lets
// its dependent start at once (griddepcontrol.launch_dependents), waits delay_ns, then
// publishes the iteration's version; the consumer, launched with programmatic stream
// serialization, waits for its prerequisite grid (griddepcontrol.wait) when `wait` is set,
// then acquires the map in each block and loads (PTX ISA, griddepcontrol: ".wait modifier
// causes the executing thread to wait until all prerequisite grids in flight have
// completed and all the memory operations from the prerequisite grids are performed and
// made visible to the current grid"). Without the wait no document orders the two.
__device__ inline void spin_ns(u64 ns) {
  const u64 start = tmac::globaltimer();
  while (tmac::globaltimer() - start < ns) __nanosleep(256);
}

#define PDL(NAME, S)                                                                          \
  extern "C" __global__ void __launch_bounds__(128) fence_produce_pdl_##NAME(                 \
      const __grid_constant__ TensorMap tmpl, TensorMap* map, const Version* table,           \
      const u32* sched, u32 iter, u64 delay_ns) {                                             \
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");                         \
    if (threadIdx.x < 32) spin_ns(delay_ns);                                                  \
    fence::produce_one<S>(tmpl, map, table, sched, nullptr, iter);                           \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(128) fence_consume_pdl_##NAME(                 \
      const TensorMap* map, const Version* table, const u32* sched, u32 iter, u32 nloads,     \
      u32 wait, u32* seen, u32* bad, u32* status, u64 tmo) {                                  \
    if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");                            \
    fence::consume_one<S>(map, table, sched, nullptr, iter, nloads, 1u, seen, bad, status,   \
                          tmo);                                                               \
  }
FENCE_BOTH_SCOPES(PDL)

// Graph replays: advance the iteration cursor (one thread).
extern "C" __global__ void fence_bump(u32* cursor) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *cursor += 1;
}

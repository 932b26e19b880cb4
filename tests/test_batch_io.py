"""The plumbing the four TMA-load GPU runners share (fixtures/tma_load/batch_io.py), on a CPU:
the pool layout and its filling, the after-launch global check on synthetic before/after
pools, the isolation-target body and the lazy isolated batches (run_isolated faked), each
for the cases of every runner's generator (tiled, im2col, im2col-wide, multicast).

The expected offsets, spans and notes are worked out by hand in the comments (guard 256
bytes, tensors rounded up to 256 bytes), not copied from the code under test."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fixtures.tma_load as tl
from fixtures.cuda_layer.batching import bucket
from fixtures.cuda_layer.isolation import Outcome
from fixtures.tensormap.registry import RuleFailure
from fixtures.tma_load import batch_io, im2col_runner, im2col_wide_runner, multicast_runner, runner

GUARD = 256        # fixtures/tma_box/tiled_cases.py GLOBAL_GUARD
GUARD_BYTE = 0xC3  # fixtures/tma_box/tiled_cases.py GUARD_BYTE


def _cases(kind: str, level: str = "smoke") -> list:
    if kind == "tiled":
        return [c for c in tl.generate(level) if c.expect == "data"]
    if kind == "im2col":
        return [c for c in tl.generate_im2col(level) if c.expect == "data"]
    if kind == "wide":
        return tl.wide_cases(level)
    return list(tl.multicast.generate(level))


def _global_bytes(kind: str):
    return {"tiled": tl.global_bytes, "im2col": tl.im2col_global_bytes,
            "wide": tl.wide_global_bytes, "multicast": tl.multicast.global_bytes}[kind]


def _run_type(kind: str):
    if kind == "multicast":
        return tl.MulticastRun
    return lambda case_id: tl.CaseRun(case_id, "CUDA_SUCCESS")


# Three cases of each generator (smoke), their tensor bytes, and the layout by hand:
# pos = 0; per case: pos += 256 (guard); offset = pos; pos += ceil(bytes / 256) * 256 + 256.
HAND = {
    "tiled": (["u8-r1-box32-swz0-il0-zerofill-esN-straddle-hi-d0",
               "u8-r1-box32-swz0-il0-zerofill-esN-negative",
               "u32-r1-box32-swz128-il0-zerofill-es1-straddle-hi-d0"],
              [64, 64, 240],
              # spans 256, 256, 256: 256 | 256+256+256+256 = 1024 | 1024+512+256 = 1792
              [256, 1024, 1792], 1792 + 256 + 256),
    "im2col": (["u8-r3-im2col-swz32-il0-zerofill-cpp32-ppc9-lo0-upm1-es1x1x1-at0_5_0-off0-inside",
                "u8-r3-im2col-swz64-il0-zerofill-cpp64-ppc1-lo0-upm2-es1x3x2-at0_3_0-off0-inside",
                "u16-r3-im2col-swz32-il0-zerofill-cpp16-ppc1-lo0-up0-es1x1x1-at0_0_0-off0-inside"],
               [1632, 720, 144],
               # spans 1792, 768, 256: 256 | 256+1792+256+256 = 2560 | 2560+768+512 = 3840
               [256, 2560, 3840], 3840 + 256 + 256),
    "wide": (["s64-r3-im2colw128-swz64-zerofill-c2-lom1-hi1-s1-inside-h0-o0",
              "s64-r3-im2colw128-swz64-zerofill-c2-lom1-hi1-s1-left-h0-o0",
              "f64-r3-im2colw128-swz64-nanfill-c2-lo0-hi0-s2-inside-h1-o0"],
             [8880, 8880, 13344],
             # spans 35*256 = 8960, 8960, 53*256 = 13568: 256 | 256+8960+512 = 9728 |
             # 9728+8960+512 = 19200
             [256, 9728, 19200], 19200 + 13568 + 256),
    "multicast": (["tile-cl2-mask0b11-src0-bf16-r1-box48-swz0-il0-zerofill-esN-straddle-lo-d0",
                   "tile-cl2-mask0b11-src0-s32-r4-box8x1x1x3-swz32-il0-zerofill-esN-straddle-lo-d3",
                   "tile-cl2-mask0b11-src0-s32-r4-box8x1x1x3-swz32-il0-zerofill-esN-straddle-lo-d3"
                   "-dev-template"],
                  [128, 2112, 2112],
                  # spans 256, 9*256 = 2304, 2304: 256 | 256+256+512 = 1024 | 1024+2304+512 = 3840
                  [256, 1024, 3840], 3840 + 2304 + 256),
}
KINDS = list(HAND)


def _hand_cases(kind: str) -> list:
    ids, nbytes, _, _ = HAND[kind]
    by_id = {c.id: c for c in _cases(kind)}
    missing = [i for i in ids if i not in by_id]
    assert not missing, f"the {kind} generator no longer makes {missing}"
    cases = [by_id[i] for i in ids]
    assert [c.tensor_bytes for c in cases] == nbytes
    return cases


def test_every_runner_shares_the_one_copy():
    """The four runners use batch_io's pieces, not copies of them: the one-block-per-case
    runners launch through run_blocks (which lays out the pool and checks it), the
    multicast runner uses host_pool and check_global itself."""
    for mod in (runner, im2col_runner, im2col_wide_runner):
        assert mod.run_blocks is batch_io.run_blocks and mod.CaseRun is batch_io.CaseRun
        assert not hasattr(mod, "_layout") and not hasattr(mod, "host_pool"), mod.__name__
    assert multicast_runner.host_pool is batch_io.host_pool
    assert multicast_runner.check_global is batch_io.check_global
    assert not hasattr(multicast_runner, "_layout")
    for cls in (tl.LoadBatches, tl.Im2colBatches, tl.WideBatches, tl.MulticastBatches):
        assert issubclass(cls, batch_io.IsolatedBatches)
    assert runner.batch_target.__module__ == "fixtures.tma_load.runner"


@pytest.mark.parametrize("kind", KINDS)
def test_layout_by_hand(kind):
    cases = _hand_cases(kind)
    _, _, offs, total = HAND[kind]
    assert batch_io.layout(cases) == (offs, total)
    assert [o % 256 for o in offs] == [0, 0, 0]
    assert batch_io.layout([]) == ([], 0)


@pytest.mark.parametrize("kind", KINDS)
def test_host_pool_holds_each_tensor_between_guards(kind):
    cases = _hand_cases(kind)
    _, nbytes, offs, total = HAND[kind]
    pool, got_offs = batch_io.host_pool(cases, _global_bytes(kind))
    assert got_offs == offs and pool.dtype == np.uint8 and pool.size == total
    mask = np.zeros(total, dtype=bool)
    for c, o, n in zip(cases, offs, nbytes):
        assert np.array_equal(pool[o:o + n], np.asarray(_global_bytes(kind)(c), dtype=np.uint8))
        mask[o:o + n] = True
    assert (pool[~mask] == GUARD_BYTE).all()      # guards and the alignment padding


@pytest.mark.parametrize("kind", KINDS)
def test_check_global_attributes_each_change_to_its_case(kind):
    cases = _hand_cases(kind)
    _, _, offs, total = HAND[kind]
    pool, _ = batch_io.host_pool(cases, _global_bytes(kind))
    runs = [_run_type(kind)(c.id) for c in cases]
    batch_io.check_global(cases, offs, runs, pool, pool.copy())
    assert [(r.global_intact, r.global_note) for r in runs] == [(True, "")] * 3
    # case 0's span is [0, offs[0] + span0 + 256), case 1's starts there: the first byte
    # of the pool, one byte inside case 0's tensor and the last byte of case 0's trailing
    # guard belong to case 0; the first byte after it to case 1; case 2 is untouched.
    end0 = offs[1] - GUARD
    after = pool.copy()
    for at in (0, offs[0] + 5, end0 - 1, end0):
        after[at] ^= 0xFF
    runs = [_run_type(kind)(c.id) for c in cases]
    batch_io.check_global(cases, offs, runs, pool, after)
    assert [(r.global_intact, r.global_note) for r in runs] == [
        (False, "3 global byte(s) changed, first at tensor offset -256"),
        (False, "1 global byte(s) changed, first at tensor offset -256"),
        (True, "")]
    # the last byte of the pool: case 2's trailing guard, span - 1 + 256 past its tensor
    after = pool.copy()
    after[total - 1] ^= 1
    runs = [_run_type(kind)(c.id) for c in cases]
    batch_io.check_global(cases, offs, runs, pool, after)
    span2 = total - GUARD - offs[2]
    assert [r.global_intact for r in runs] == [True, True, False]
    assert runs[2].global_note == f"1 global byte(s) changed, first at tensor offset {span2 + 255}"


def test_isolated_batch_builds_runs_and_drops_the_pool(monkeypatch):
    import fixtures.cuda_layer.launch as launch
    loaded = []
    monkeypatch.setattr(launch, "load_kernel",
                        lambda src, arch, cache_dir=None: loaded.append((src, arch, cache_dir))
                        or "module")
    cases = _hand_cases("tiled")
    seen = {}

    def fake_run_batch(module, cs, **options):
        seen.update(module=module, ids=[c.id for c in cs], options=options)
        return [tl.CaseRun(c.id, "CUDA_SUCCESS", pool=np.zeros(4, np.uint8)) for c in cs]

    out = batch_io.isolated_batch(fake_run_batch, "k.cu", tl.case_from_params,
                                  [c.params() for c in cases], "sm_90a", "/cache", timeout_ns=7)
    assert loaded == [("k.cu", "sm_90a", "/cache")]
    assert seen == {"module": "module", "ids": [c.id for c in cases], "options": {"timeout_ns": 7}}
    assert list(out) == [c.id for c in cases]
    assert all(r.pool is None and r.case_id == k for k, r in out.items())


# ---------------------------------------------------------------- the lazy isolated batches

# (class, isolation target, kernel source(s) built, rule of a case without a result,
#  "... did not complete", the batch key, extra positional target args after arch)
BATCHES = {
    "tiled": (tl.LoadBatches, "fixtures.tma_load.runner:batch_target", ["tma_load.cu"],
              lambda c: "tma-load.model", "the load", lambda c: (c.rank, bucket(c.id)), False),
    "im2col": (tl.Im2colBatches, "fixtures.tma_load.im2col_runner:batch_target",
               ["im2col_load.cu"], lambda c: "tma-load.im2col", "the load",
               lambda c: bucket(c.id), False),
    "wide": (tl.WideBatches, "fixtures.tma_load.im2col_wide_runner:wide_batch_target",
             ["im2col_wide_load.cu"], lambda c: "tma-load.im2col-wide", "the load",
             lambda c: (c.rank, bucket(c.id)), False),
    "multicast": (tl.MulticastBatches, "fixtures.tma_load.multicast_runner:batch_target",
                  ["multicast_load.cu", "device_encode.cu"], lambda c: c.rule,
                  "the multicast load", lambda c: (c.cluster,), True),
}


class _Kernels:
    def __init__(self):
        self.cache_dir, self.built = Path("/kc"), []

    def build(self, source, arch):
        self.built.append((source, arch))


@pytest.mark.parametrize("kind", KINDS)
def test_batches_group_call_and_fail_as_before(kind, monkeypatch):
    cls, target, sources, rule_of, what, key, with_sm = BATCHES[kind]
    cases = _cases(kind, "standard")
    gpu = SimpleNamespace(arch="sm_90a", sm=90, ordinal=3)
    kernels = _Kernels()
    calls = []

    def fake_run_isolated(tgt, params, *args, device, timeout, **options):
        calls.append((tgt, [p["id"] for p in params], args, device, timeout, options))
        # every case but the last of the batch: the last "was not run"
        return Outcome("returned", {p["id"]: f"run of {p['id']}" for p in params[:-1]})

    monkeypatch.setattr(batch_io, "run_isolated", fake_run_isolated)
    b = cls(gpu, kernels, cases, call_timeout=42.0, timeout_ns=5)
    # the batches: the cases of one key, in generator order, at most `size` per batch
    size = 128 if kind == "multicast" else 512
    groups: dict = {}
    for c in cases:
        groups.setdefault(key(c), []).append(c.id)
    want = sorted(ids[i:i + size] for ids in groups.values() for i in range(0, len(ids), size))
    assert sorted(b.batches.members.values()) == want
    assert kernels.built == []                        # nothing before the first result
    first = b.batches.members[next(iter(b.batches.members))]
    case = b.by_id[first[0]]
    assert b.result(case) == f"run of {case.id}"
    assert len(calls) == 1
    tgt, ids, args, device, timeout, options = calls[0]
    assert (tgt, ids, device, timeout, options) == (target, first, 3, 42.0, {"timeout_ns": 5})
    assert args == (("sm_90a", 90, "/kc") if with_sm else ("sm_90a", "/kc"))
    built = [s for s, _ in kernels.built]
    assert built[0] == sources[0] and set(built) <= set(sources) and kernels.built[0][1] == "sm_90a"
    if len(first) > 1:
        last = b.by_id[first[-1]]
        with pytest.raises(RuleFailure) as info:
            b.result(last)
        text = str(info.value)
        assert f"[rule {rule_of(last)}]" in text and f"[case {last.id}]" in text, text
        assert f"{what} did not complete: not run: the isolated batch returned without it" in text
    assert len(calls) == 1 and len(kernels.built) == len(built)     # one batch, one build


def test_im2col_batches_fail_the_rule_the_suite_names(monkeypatch):
    monkeypatch.setattr(batch_io, "run_isolated",
                        lambda *a, **k: Outcome("returned", {}))
    cases = _cases("im2col")
    b = tl.Im2colBatches(SimpleNamespace(arch="sm_90a", ordinal=0), _Kernels(), cases)
    with pytest.raises(RuleFailure, match=r"\[rule tma-load.im2col-device-copy\]"):
        b.result(cases[0], "tma-load.im2col-device-copy")


# ---------------------------------------------------------------- the runners' launch code, faked

class _FakeArray(np.ndarray):
    """A "device" array: host memory with a fake 128-aligned address and cupy's get()."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.fake_ptr)

    def get(self):
        return np.array(self)


class _FakeCupy:
    uint8, uint32 = np.uint8, np.uint32

    def __init__(self):
        self.arrays = []

    def _dev(self, a):
        d = np.array(a).view(_FakeArray)
        d.fake_ptr = 0x100000 * (len(self.arrays) + 1)
        self.arrays.append(d)
        return d

    def asarray(self, a):
        return self._dev(a)

    def full(self, n, v, dtype):
        return self._dev(np.full(n, v, dtype=dtype))

    def zeros(self, n, dtype):
        return self._dev(np.zeros(n, dtype=dtype))


class _FakeModule:
    """The kernel: every status word OK, the output bytes 0..255 repeated, and one byte of
    the first case's leading guard overwritten (so the global check has something to find)."""

    def __init__(self, cp):
        self.cp, self.launches = cp, []

    def function(self, name):
        def launch(grid, block, *args, **kw):
            self.launches.append((name, grid, block, args, kw))
            d_out, d_status = args[-4:-2] if name != "im2col_load_batch" else args[3:5]
            d_status[:] = 0
            d_out[:] = np.arange(d_out.size) % 256
            self.cp.arrays[0][0] ^= 0xFF
        return SimpleNamespace(launch=launch)


@pytest.mark.parametrize("kind", ["tiled", "im2col", "wide"])
def test_run_batch_lays_out_encodes_launches_and_checks(kind, monkeypatch):
    """The tiled, im2col and wide ``run_batch`` on a fake cupy, encoder and kernel: each map
    is encoded at the pool's address plus the case's hand-computed offset, every case gets
    its status and its slice of the output, and the guard byte the fake kernel overwrote
    is found in the first case's span only. (multicast_runner.run_batch's launch is not
    faked: it needs the occupancy query and device-built maps; a GPU run exercises it.)"""
    import sys
    import fixtures.tensormap.encode as enc
    cp = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    addresses = []

    def fake_encode(*args, **kw):
        addresses.append(args[2])
        return enc.EncodeResult(0, "CUDA_SUCCESS", bytes(128))

    for name in ("encode_tiled", "encode_im2col", "encode_im2col_wide"):
        monkeypatch.setattr(enc, name, fake_encode)
    cases = _hand_cases(kind)
    _, _, offs, _ = HAND[kind]
    if kind == "tiled":
        cases = cases[:2]                       # one rank per batch
        offs = offs[:2]
    run = {"tiled": runner.run_batch, "im2col": im2col_runner.run_batch,
           "wide": im2col_wide_runner.run_wide_batch}[kind]
    module = _FakeModule(cp)
    runs = run(module, cases)
    pool_ptr = cp.arrays[0].fake_ptr
    assert addresses == [pool_ptr + o for o in offs]
    assert [r.case_id for r in runs] == [c.id for c in cases]
    assert [r.tensor_base for r in runs] == offs and all(r.pool is not None for r in runs)
    assert [r.status for r in runs] == [0] * len(cases)
    assert all(r.image is not None and len(r.image) > 0 for r in runs)
    assert [(r.global_intact, r.global_note) for r in runs] == (
        [(False, "1 global byte(s) changed, first at tensor offset -256")]
        + [(True, "")] * (len(cases) - 1))
    (name, grid, block, _, kw), = module.launches
    assert grid == len(cases) and block == 128 and kw["sync"] is True

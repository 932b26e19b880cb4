"""The engine every batched TMA operation runs on (fixtures/engine), on a CPU: the guarded
pool's layout and filling (pool.py), the attribution of changed pool bytes to cases
(``changes``, ``Run.global_intact`` / ``global_note`` / ``changed_at``), the isolation
target's body (batches.py ``run_cases``, ``run_alone``), the lazy isolated batches
(``Batches``, run_isolated faked) and one launch (launch.py ``run_batch`` on a fake CuPy,
encoder and kernel), each for the cases of every operation's generator (tiled, im2col,
im2col-wide, multicast, prefetch, store).

The expected offsets, spans and notes are worked out by hand in the comments (guard 256
bytes, tensors rounded up to 256 bytes), not copied from the code under test."""
from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fixtures.tma_load as tl
import fixtures.tma_store as ts
from fixtures import engine
from fixtures.cuda_layer.isolated_child import resolve_target
from fixtures.cuda_layer.isolation import Outcome, target_name
from fixtures.engine import batches as engine_batches, pool
from fixtures.engine.operation import Operation, Run
from fixtures.engine.units import bucket
from fixtures.rules.registry import RuleFailure
from fixtures.tma_box import im2col, im2col_cases, tiled, tiled_cases

GUARD = 256         # fixtures/engine/pool.py GLOBAL_GUARD
GUARD_BYTE = 0xC3   # fixtures/engine/pool.py GUARD_BYTE
STORE_POISON = 0x5A     # fixtures/tma_store/cases.py GLOBAL_POISON: a store's tensor before it


def _cases(kind: str, level: str = "smoke") -> list:
    if kind == "tiled":
        return [c for c in tiled_cases.generate(level) if c.expect == "data"]
    if kind == "im2col":
        return [c for c in im2col_cases.generate(level) if c.expect == "data"]
    if kind == "wide":
        return list(tl.wide_cases(level))
    if kind == "multicast":
        return list(tl.multicast.generate(level))
    if kind == "prefetch":
        return [c for c in tl.prefetch.generate(level) if c.expect == "done"]
    return [c for c in ts.generate(level) if c.expect == "data"] + list(ts.variant_cases(level))


def _global_bytes(kind: str, case) -> np.ndarray:
    """The case's tensor as its generator makes it (not through the operation)."""
    if kind == "writes":
        return np.full(case.tensor_bytes, STORE_POISON, dtype=np.uint8)
    return {"tiled": tiled_cases.global_bytes, "im2col": im2col_cases.global_bytes,
            "wide": tl.im2col_wide_cases.wide_global_bytes,
            "multicast": tl.multicast.global_bytes,
            "prefetch": lambda c: tiled_cases.global_bytes(c.source)}[kind](case)


OPS = {"tiled": tl.TILED, "im2col": tl.IM2COL, "wide": tl.WIDE, "multicast": tl.MULTICAST,
       "prefetch": tl.PREFETCH, "writes": ts.WRITES}

# Cases of each generator (smoke), their tensor bytes, and the layout by hand:
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
    "prefetch": (["tile-u8-r2-box128x6-swz128-il0-zerofill-esN-interior",
                  "tile-u32-r2-box12x3-swz128-il0-zerofill-es1-outside-d1",
                  "im2col-u8-r3-im2col-swz128-il0-zerofill-cpp16-ppc1-lo0-up0-es1x1x1-at32_3_0"
                  "-off2-straddle-hi-W-dst+512"],
                 [1536, 384, 512],
                 # spans 6*256 = 1536, 2*256 = 512, 512: 256 | 256+1536+512 = 2304 |
                 # 2304+512+512 = 3328
                 [256, 2304, 3328], 3328 + 512 + 256),
    "writes": (["tile-u8-r1-box64-swz64-il0-zerofill-esN-outside-d0",
                "tile-u16-r1-box64-swz128-il0-zerofill-es1-outside-d0",
                "tile-bf16-r4-box16x2x5x1-swz128-il16-nanfill-es1-straddle-hi-d1-load-after-wait",
                "tile-u64-r4-box4x5x6x1-swz32-il32-zerofill-esN-straddle-hi-d0-load-next-kernel"],
               [112, 160, 84672, 34560],
               # spans 256, 256, 331*256 = 84736, 135*256 = 34560: 256 | 256+256+512 = 1024 |
               # 1024+256+512 = 1792 | 1792+84736+512 = 87040
               [256, 1024, 1792, 87040], 87040 + 34560 + 256),
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


def test_every_operation_runs_on_the_one_engine():
    """The features declare their kernels (Operation subclasses) and keep no launch, pool
    or batch code of their own; the suites' batches are the engine's (device_encode's
    LoadBatches too), and its one isolation target resolves to run_cases."""
    import fixtures.device_encode as de
    import fixtures.tma_load.operations as load_ops
    import fixtures.tma_store.operations as store_ops
    for op in OPS.values():
        assert isinstance(op, Operation) and type(op) is not Operation
    for mod in (load_ops, store_ops):
        for name in ("run_batch", "host_pool", "layout", "changes", "Batches", "run_contained"):
            assert not hasattr(mod, name), f"{mod.__name__}.{name}"
    assert issubclass(de.LoadBatches, engine.Batches)
    assert resolve_target(target_name(engine.run_cases)) is engine.run_cases


@pytest.mark.parametrize("kind", KINDS)
def test_layout_by_hand(kind):
    cases = _hand_cases(kind)
    _, nbytes, offs, total = HAND[kind]
    assert pool.layout(cases) == (offs, total)
    assert [o % 256 for o in offs] == [0] * len(cases)
    assert pool.layout([]) == ([], 0)
    assert [pool.span(c) for c in cases] == [-(-n // 256) * 256 for n in nbytes]


@pytest.mark.parametrize("kind", KINDS)
def test_host_pool_holds_each_tensor_between_guards(kind):
    cases = _hand_cases(kind)
    _, nbytes, offs, total = HAND[kind]
    op = OPS[kind]
    tensors = [op.tensor(c) for c in cases]
    for c, t in zip(cases, tensors):            # the operation's tensor is the generator's
        assert np.array_equal(t, _global_bytes(kind, c)), c.id
    got, got_offs = pool.host_pool(cases, tensors)
    assert got_offs == offs and got.dtype == np.uint8 and got.size == total
    mask = np.zeros(total, dtype=bool)
    for c, o, n in zip(cases, offs, nbytes):
        assert np.array_equal(got[o:o + n], _global_bytes(kind, c))
        mask[o:o + n] = True
    assert (got[~mask] == GUARD_BYTE).all()      # guards and the alignment padding


@pytest.mark.parametrize("kind", ["tiled", "writes"])
def test_a_case_data_is_built_once_and_crosses_with_it(kind):
    """pool.memo: the operation's tensor is made once per case object, kept on it (a
    frozen dataclass) and pickled with it into the isolated child."""
    case = replace(_hand_cases(kind)[0])          # a fresh object: nothing memoized yet
    op, name = OPS[kind], {"tiled": "tensor", "writes": "data"}[kind]
    assert name not in vars(case)
    first = op.tensor(case)
    assert name in vars(case) and op.tensor(case) is first
    back = pickle.loads(pickle.dumps(case))
    assert back == case and name in vars(back) and np.array_equal(op.tensor(back), first)


class _MemoMidPickle:
    """A value whose pickling hands the GPU thread beside it the case to memoize into,
    and waits (up to ``wait`` seconds) for that memo to be set: what the GIL's switching
    let happen on a node of four H100s."""

    def __init__(self, start, done, wait: float):
        self.start, self.done, self.wait = start, done, wait

    def __reduce__(self):
        self.start.set()
        self.done.wait(self.wait)
        return (str, ("value",))


def test_a_case_is_never_pickled_while_another_gpu_thread_memoizes_into_it():
    """A batch's cases are pickled for one GPU's child (isolated_child.send) while another
    GPU's thread memoizes a model into one of them (pool.memo): the memo waits for the
    pickling (gpu_threads.SHARED), so the pickle holds the case whole (it raised
    "dictionary changed size during iteration" before)."""
    import io
    import threading

    from fixtures.cuda_layer import isolated_child

    case = replace(_hand_cases("tiled")[0])
    start, done = threading.Event(), threading.Event()
    object.__setattr__(case, "probe", _MemoMidPickle(start, done, wait=0.5))

    def other_gpu():
        start.wait(5)
        pool.memo(case, "model_x", lambda c: "made")
        done.set()

    t = threading.Thread(target=other_gpu)
    t.start()
    out = io.BytesIO()
    isolated_child.send(out, case)         # raises RuntimeError when the memo lands mid-pickle
    t.join(5)
    assert done.is_set() and vars(case)["model_x"] == "made"
    back = pickle.loads(out.getvalue()[8:])
    assert back.id == case.id and vars(back)["probe"] == "value" and "model_x" not in vars(back)


def _runs(cases) -> list:
    return [Run(c.id) for c in cases]


@pytest.mark.parametrize("kind", KINDS)
def test_changes_attribute_each_changed_byte_to_its_case(kind):
    cases = _hand_cases(kind)
    _, _, offs, total = HAND[kind]
    before, _ = pool.host_pool(cases, [_global_bytes(kind, c) for c in cases])
    runs = _runs(cases)
    pool.changes(cases, offs, runs, before, before.copy())
    assert [(r.global_intact, r.global_note) for r in runs] == [(True, "")] * len(cases)
    # case 0's span is [0, offs[0] + span0 + 256), case 1's starts there: the first byte
    # of the pool, five bytes into case 0's tensor and the last byte of case 0's trailing
    # guard belong to case 0 (span offsets 0, 256 + 5, end0 - 1); the first byte after it
    # to case 1 (its span offset 0); the others are untouched.
    end0 = offs[1] - GUARD
    after = before.copy()
    for at in (0, offs[0] + 5, end0 - 1, end0):
        after[at] ^= 0xFF
    runs = _runs(cases)
    pool.changes(cases, offs, runs, before, after)
    assert [(r.global_intact, r.global_note) for r in runs] == [
        (False, "3 global byte(s) changed, first at tensor offset -256"),
        (False, "1 global byte(s) changed, first at tensor offset -256")] + [
        (True, "")] * (len(cases) - 2)
    assert runs[0].changed_at.tolist() == [0, 261, end0 - 1]
    assert runs[0].changed_to == bytes([after[0], after[offs[0] + 5], after[end0 - 1]])
    assert runs[1].changed_at.tolist() == [0] and runs[1].changed_to == bytes([after[end0]])
    # the case's span after the launch, from its span before it: the pool's bytes there
    span0 = pool.guarded_span(cases[0], _global_bytes(kind, cases[0]))
    assert np.array_equal(span0, before[:end0])
    assert np.array_equal(runs[0].span_after(span0), after[:end0])
    # the last byte of the pool: the last case's trailing guard, span - 1 + 256 past its tensor
    after = before.copy()
    after[total - 1] ^= 1
    runs = _runs(cases)
    pool.changes(cases, offs, runs, before, after)
    assert [r.global_intact for r in runs] == [True] * (len(cases) - 1) + [False]
    last = total - GUARD - offs[-1]
    assert runs[-1].global_note == f"1 global byte(s) changed, first at tensor offset {last + 255}"
    # the same change with the last case left out: a byte in no case's span, noted in every run
    runs = _runs(cases[:-1])
    pool.changes(cases[:-1], offs[:-1], runs, before, after)
    note = f"1 pool byte(s) outside every case's span changed (first at pool offset {total - 1})"
    assert [(r.global_intact, r.global_note) for r in runs] == [(False, note)] * (len(cases) - 1)
    assert all(r.changed_at.size == 0 for r in runs)


# ---------------------------------------------------------------- the isolation target

def test_run_cases_builds_the_modules_and_returns_runs_by_id(monkeypatch):
    """The child's one target: the operation's module (and kernels/device_encode.cu's only
    when a case's map is built on the device), run_batch of the case objects, {id: Run}."""
    loaded, seen = [], []
    monkeypatch.setattr(engine_batches, "load_kernel",
                        lambda src, arch, cache_dir=None: loaded.append((src, arch, cache_dir))
                        or f"module {src}")

    def fake_run_batch(module, op, cases, **options):
        seen.append((module, op, list(cases), options))
        return [Run(c.id, "CUDA_SUCCESS") for c in cases]

    monkeypatch.setattr(engine_batches, "run_batch", fake_run_batch)
    cases = _hand_cases("tiled")
    out = engine.run_cases(tl.TILED, cases, "sm_90a", 90, "/cache")
    assert loaded == [("tma_load.cu", "sm_90a", "/cache")]
    (module, op, got, options), = seen
    assert module == "module tma_load.cu" and op is tl.TILED
    assert all(a is b for a, b in zip(got, cases)) and len(got) == len(cases)
    assert options == {"de_module": None, "sm": 90}
    assert list(out) == [c.id for c in cases] and all(r.case_id == k for k, r in out.items())
    loaded.clear(), seen.clear()
    mc = _hand_cases("multicast")                 # the third is "-dev-template"
    engine.run_cases(tl.MULTICAST, mc, "sm_100a", 100, None)
    assert loaded == [("multicast_load.cu", "sm_100a", None), ("device_encode.cu", "sm_100a", None)]
    assert seen[0][3] == {"de_module": "module device_encode.cu", "sm": 100}


class _Kernels:
    def __init__(self):
        self.cache_dir, self.built = Path("/kc"), []

    def build(self, source, arch):
        self.built.append((source, arch))


def test_run_alone_builds_in_the_worker_then_runs_the_one_case(monkeypatch):
    calls = []
    monkeypatch.setattr(engine_batches, "run_isolated",
                        lambda *a, **k: calls.append((a, k)) or Outcome("returned", {}))
    case = _hand_cases("writes")[2]                         # a load-back: no device build
    built = _hand_cases("multicast")[2]                     # "-dev-template"
    kernels = _Kernels()
    gpu = SimpleNamespace(arch="sm_90a", sm=90, ordinal=1)
    assert engine.run_alone(ts.WRITES, case, gpu, kernels).kind == "returned"
    engine.run_alone(tl.MULTICAST, built, gpu, kernels, timeout=9.0)
    assert kernels.built == [("tma_store.cu", "sm_90a"), ("multicast_load.cu", "sm_90a"),
                             ("device_encode.cu", "sm_90a")]
    assert calls == [((engine.run_cases, ts.WRITES, [case], "sm_90a", 90, "/kc"),
                      {"device": 1, "timeout": 120.0, "alone": True}),
                     ((engine.run_cases, tl.MULTICAST, [built], "sm_90a", 90,
                       "/kc"), {"device": 1, "timeout": 9.0, "alone": True})]


# ---------------------------------------------------------------- the lazy isolated batches

# (kernel source(s) built, rule of a case without a result, "... did not complete",
#  the batch key, cases per batch) -- from each operation's declaration, by hand
BATCHES = {
    "tiled": (["tma_load.cu"], lambda c: "tma-load.model", "the load",
              lambda c: (c.rank, bucket(c.id)), 512),
    "im2col": (["im2col_load.cu"], lambda c: c.rule, "the load", lambda c: (bucket(c.id),), 512),
    "wide": (["im2col_wide_load.cu"], lambda c: "tma-load.im2col-wide", "the load",
             lambda c: (c.rank, bucket(c.id)), 512),
    "multicast": (["multicast_load.cu", "device_encode.cu"], lambda c: c.rule,
                  "the multicast load", lambda c: (c.cluster,), 128),
    "prefetch": (["tma_prefetch.cu"], lambda c: "tma-prefetch.model", "the prefetch",
                 lambda c: (bucket(c.id),), 512),
    "writes": (["tma_store.cu", "device_encode.cu"], lambda c: c.rule, "the write",
               lambda c: (bucket(c.id),), 512),
}


@pytest.mark.parametrize("kind", KINDS)
def test_batches_group_call_and_fail_as_declared(kind, monkeypatch):
    sources, rule_of, what, key, size = BATCHES[kind]
    cases = _cases(kind, "standard")
    gpu = SimpleNamespace(arch="sm_90a", sm=90, ordinal=3)
    kernels = _Kernels()
    calls = []

    def fake_run_isolated(tgt, op, cs, *args, device, timeout, alone, **options):
        assert alone is False                   # a batch runs in the batches' child
        calls.append((tgt, op, list(cs), args, device, timeout, options))
        # every case but the last of the batch: the last "was not run"
        return Outcome("returned", {c.id: f"run of {c.id}" for c in cs[:-1]})

    monkeypatch.setattr(engine_batches, "run_isolated", fake_run_isolated)
    op = replace(OPS[kind], call_timeout=42.0, timeout_ns=5)
    b = engine.Batches(gpu, kernels, cases, op)
    # the batches: the cases of one key, in generator order, at most `size` per batch
    groups: dict = {}
    for c in cases:
        groups.setdefault(key(c), []).append(c.id)
    want = sorted(ids[i:i + size] for ids in groups.values() for i in range(0, len(ids), size))
    assert sorted(b.members.values()) == want
    assert kernels.built == []                        # nothing before the first result
    first = next(ids for ids in b.members.values() if len(ids) > 1)
    case = b.by_id[first[0]]
    assert b.result(case) == f"run of {case.id}"
    assert len(calls) == 1
    tgt, got_op, got, args, device, timeout, options = calls[0]
    assert (tgt, device, timeout, options) == (engine.run_cases, 3, 42.0, {})
    assert got_op is op and got_op.timeout_ns == 5            # the options travel in the op
    assert [c.id for c in got] == first and all(c is b.by_id[c.id] for c in got)  # themselves
    assert args == ("sm_90a", 90, "/kc")
    built = [s for s, _ in kernels.built]
    assert built[0] == sources[0] and set(built) <= set(sources) and kernels.built[0][1] == "sm_90a"
    last = b.by_id[first[-1]]
    with pytest.raises(RuleFailure) as info:
        b.result(last)
    text = str(info.value)
    assert f"[rule {rule_of(last)}]" in text and f"[case {last.id}]" in text, text
    assert f"{what} did not complete: not run: the isolated batch returned without it" in text
    assert len(calls) == 1 and len(kernels.built) == len(built)     # one batch, one build


def test_batches_fail_the_rule_of_the_case(monkeypatch):
    """IM2COL names no rule of its own: a case without a result fails its own rule, a
    ``-dev-copy`` load tma-load.im2col-device-copy."""
    monkeypatch.setattr(engine_batches, "run_isolated", lambda *a, **k: Outcome("returned", {}))
    cases = _cases("im2col")
    copy = next(c for c in cases if c.device_copy)
    b = engine.Batches(SimpleNamespace(arch="sm_90a", sm=90, ordinal=0), _Kernels(), cases,
                       tl.IM2COL)
    with pytest.raises(RuleFailure, match=r"\[rule tma-load.im2col-device-copy\]"):
        b.result(copy)


def test_a_trap_in_a_batch_fails_its_case_alone(monkeypatch):
    """The batch faults; run_contained runs its cases one per call: the one that traps
    alone fails with the trap, the rest of the batch runs on as a batch."""
    groups: dict = {}
    for c in _cases("tiled"):
        groups.setdefault(tl.TILED.key(c), []).append(c)
    cases = next(g for g in groups.values() if len(g) >= 3)[:3]     # one batch of three
    bad = cases[1].id
    calls = []

    def fake_run_isolated(tgt, op, cs, *args, device, timeout, alone):
        ids = [c.id for c in cs]
        calls.append(ids)
        if bad in ids:
            return Outcome("cuda_error", error="CUDA_ERROR_ILLEGAL_INSTRUCTION", poisoned=True)
        return Outcome("returned", {i: f"run of {i}" for i in ids})

    monkeypatch.setattr(engine_batches, "run_isolated", fake_run_isolated)
    b = engine.Batches(SimpleNamespace(arch="sm_90a", sm=90, ordinal=0), _Kernels(), cases,
                       tl.TILED)
    assert b.result(cases[0]) == f"run of {cases[0].id}"
    ids = [c.id for c in cases]
    assert calls == [ids, ids[:1], ids[1:2], ids[2:]]
    with pytest.raises(RuleFailure) as info:
        b.result(cases[1])
    assert (f"[rule tma-load.model] [case {bad}] the load did not complete: it trapped: "
            f"CUDA_ERROR_ILLEGAL_INSTRUCTION (the context was poisoned) (run alone in the "
            f"isolated child, after its batch of 3 faulted)") in str(info.value)
    assert b.result(cases[2]) == f"run of {cases[2].id}" and len(calls) == 4


def test_the_harness_raising_in_the_child_is_a_harness_error_not_the_rule(monkeypatch):
    """The harness's own exception in the child (say, memory it could not allocate) judges
    no rule: the case that raises it alone is a HarnessError, the rest run on."""
    from fixtures.cuda_layer.faults import HarnessError
    groups: dict = {}
    for c in _cases("tiled"):
        groups.setdefault(tl.TILED.key(c), []).append(c)
    cases = next(g for g in groups.values() if len(g) >= 3)[:3]
    bad = cases[1].id

    def fake_run_isolated(tgt, op, cs, *args, device, timeout, alone):
        ids = [c.id for c in cs]
        if bad in ids:
            return Outcome("exception", error="HarnessError: harness: put the tensor in "
                                              "registered memory failed")
        return Outcome("returned", {i: f"run of {i}" for i in ids})

    monkeypatch.setattr(engine_batches, "run_isolated", fake_run_isolated)
    b = engine.Batches(SimpleNamespace(arch="sm_90a", sm=90, ordinal=0), _Kernels(), cases,
                       tl.TILED)
    with pytest.raises(HarnessError, match=r"the load did not complete: the harness raised "
                                           r"HarnessError: harness: put the tensor in registered"):
        b.result(cases[1])
    assert b.result(cases[0]) == f"run of {cases[0].id}"
    assert b.result(cases[2]) == f"run of {cases[2].id}"


# ---------------------------------------------------------------- one launch, faked

class _FakeArray(np.ndarray):
    """A "device" array: host memory with a fake 128-aligned address and cupy's get()."""

    def __array_finalize__(self, obj):
        self.fake_ptr = getattr(obj, "fake_ptr", None)

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

    def ascontiguousarray(self, a):
        return self._dev(a)

    def full(self, n, v, dtype):
        return self._dev(np.full(n, v, dtype=dtype))

    def zeros(self, n, dtype):
        return self._dev(np.zeros(n, dtype=dtype))


# per kernel: the argument index of (params, out, status); out None: the kernel has none
# (kernels/tma_load.cu ... tma_store.cu, as fixtures/*/operations.py ``args`` passes them)
ARGS = {"tma_load_batch": (1, 2, 3), "im2col_load_batch": (2, 3, 4),
        "im2col_wide_load_batch": (1, 2, 3), "tma_prefetch_batch": (1, None, 2),
        "tma_write_batch": (1, 4, 3)}
AFTER_WAIT_LOADED, NEXT_KERNEL_LOADED = 7, 9     # the fake load-backs' status words


class _FakeModule:
    """The kernels: every status word OK, the output bytes 0..255 repeated, and one byte of
    the first case's leading guard overwritten (so the global check has something to
    find); a write also changes the first byte of the second case's tensor and, for a
    load-back row, writes its load status (after-wait in the kernel, next-kernel in
    ``tma_load_after``)."""

    def __init__(self, cp):
        self.cp, self.launches = cp, []

    def function(self, name):
        def launch(grid, block, *args, **kw):
            self.launches.append((name, grid, block, args, kw))
            if name == "tma_load_after":
                maps, params, out, load, timeout = args
                load[params[:, 10] == 2] = NEXT_KERNEL_LOADED
                return
            p, o, s = ARGS[name]
            args[s][:] = 0
            if o is not None:
                args[o][:] = np.arange(args[o].size) % 256
            d_pool = self.cp.arrays[0]
            d_pool[0] ^= 0xFF
            if name == "tma_write_batch":
                d_pool[1024] ^= 0x01        # the second case's tensor (HAND["writes"] offsets)
                args[5][args[p][:, 10] == 1] = AFTER_WAIT_LOADED
        return SimpleNamespace(launch=launch)


def _fake_encoder(addresses):
    import fixtures.tensormap.encode as enc

    def fake_encode(*args, **kw):
        addresses.append(args[2])
        return enc.EncodeResult(0, "CUDA_SUCCESS", bytes(128))
    return fake_encode


def _launch_faked(kind, monkeypatch, op=None):
    import sys
    import fixtures.tensormap.encode as enc
    cp = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    addresses = []
    fake = _fake_encoder(addresses)
    for name in ("encode_tiled", "encode_im2col", "encode_im2col_wide"):   # the one encode path
        monkeypatch.setattr(enc, name, fake)
    cases = _hand_cases(kind)
    module = _FakeModule(cp)
    runs = engine.run_batch(module, op or OPS[kind], cases)
    return cp, module, cases, runs, addresses


def _image_bytes(kind, case) -> int:
    """The shared-memory bytes each case's block copies out, from the box models."""
    if kind == "tiled":
        return tiled.copy_bytes(case.load)
    if kind == "im2col":
        return im2col.copy_bytes(case.load)
    if kind == "wide":
        return tl.wide.copy_bytes(case.load)
    if kind == "prefetch":
        return 0
    return tiled.copy_bytes(case.store) if case.order else 0


@pytest.mark.parametrize("kind", ["tiled", "im2col", "wide", "prefetch", "writes"])
def test_run_batch_lays_out_encodes_launches_and_checks(kind, monkeypatch):
    """``run_batch`` of the tiled, im2col, wide, prefetch and write operations on a fake
    cupy, encoder and kernel: each map is encoded at the pool's address plus the case's
    hand-computed offset, every case gets its status and its slice of the output (each
    image 16-byte aligned after the one before), and the guard byte the fake kernel
    overwrote is found in the first case's span only. (The multicast operation's launch
    is not faked: it needs the occupancy query and device-built maps; a GPU run
    exercises it.)"""
    cp, module, cases, runs, addresses = _launch_faked(kind, monkeypatch)
    _, _, offs, total = HAND[kind]
    op = OPS[kind]
    pool_ptr = cp.arrays[0].fake_ptr
    assert cp.arrays[0].size == total
    assert addresses == [pool_ptr + o for o in offs]
    assert [r.case_id for r in runs] == [c.id for c in cases]
    assert [r.encode_status for r in runs] == ["CUDA_SUCCESS"] * len(cases)
    assert all(r.launched for r in runs)
    assert [r.status for r in runs] == [0] * len(cases)
    # the images: case k's slice of the output, which the fake kernel filled with 0..255
    sizes = [_image_bytes(kind, c) for c in cases]
    at = 0
    for r, n in zip(runs, sizes):
        if n == 0:
            assert r.image is None
            continue
        assert r.image == bytes((at + j) % 256 for j in range(n)), r.case_id
        at += -(-n // 16) * 16
    notes = [(False, "1 global byte(s) changed, first at tensor offset -256")]
    if kind == "writes":
        notes.append((False, "1 global byte(s) changed, first at tensor offset 0"))
    assert [(r.global_intact, r.global_note) for r in runs] == (
        notes + [(True, "")] * (len(cases) - len(notes)))
    assert runs[0].changed_at.tolist() == [0] and runs[0].changed_to == bytes([GUARD_BYTE ^ 0xFF])
    name, grid, block, args, kw = module.launches[0]
    assert name == op.kernel and grid == len(cases) and kw["sync"] is True
    assert block == (32 if kind == "prefetch" else 128)
    rows = np.asarray(args[ARGS[name][0]])
    assert rows.shape[0] == len(cases) and rows.dtype == np.int32
    if kind == "writes":
        # the store wrote byte 0 of the second case's tensor: span offset 256
        assert runs[1].changed_at.tolist() == [GUARD]
        assert runs[1].changed_to == bytes([STORE_POISON ^ 0x01])
        # slots 10..13 of a row: load-back mode, its tx bytes, image bytes, out offset
        assert rows[:, 10].tolist() == [0, 0, 1, 2]
        assert rows[:, 12].tolist() == sizes and rows[:, 13].tolist() == [0, 0, 0, 640]
        assert [r.load_status for r in runs] == [None, None, AFTER_WAIT_LOADED,
                                                 NEXT_KERNEL_LOADED]
        assert [m[0] for m in module.launches] == ["tma_write_batch", "tma_load_after"]
        # each source at its row's offset (slot 6, size slot 7), 16-byte aligned in order
        src = np.asarray(args[2])
        pos = 0
        for c, row in zip(cases, rows):
            want = ts.smem_source(c)
            assert (row[6], row[7]) == (pos, want.size), c.id
            assert np.array_equal(src[pos:pos + want.size], want)
            pos = -(-(pos + want.size) // 16) * 16
    else:
        assert len(module.launches) == 1
        assert all(r.load_status is None for r in runs)


def test_each_image_starts_16_byte_aligned_in_the_output(monkeypatch):
    """The tiled load copying 4 bytes past each box (``extra_copy``, as the seed-004 probe
    does): images of 160 + 4, 160 + 4 and 256 + 4 bytes lie at output offsets 0,
    176 (164 rounded up to 16) and 352 (176 + 176), each row naming its offset."""
    cp, module, cases, runs, _ = _launch_faked("tiled", monkeypatch,
                                               replace(tl.TILED, extra_copy=4))
    rows = np.asarray(module.launches[0][3][1])
    assert rows[:, -3].tolist() == [164, 164, 260]  # row: coords[5], tx, copy bytes, dst, out
    assert rows[:, -1].tolist() == [0, 176, 352]
    for r, at, n in zip(runs, (0, 176, 352), (164, 164, 260)):
        assert r.image == bytes((at + j) % 256 for j in range(n)), r.case_id


def test_a_case_read_from_a_second_run_says_so(monkeypatch):
    """A batch whose first run faulted as a context killed from outside does
    (CUDA_ERROR_LAUNCH_FAILED), none of whose cases faults alone, runs whole again: each
    case that reads its result (Batches.outcome) adds the note to isolation.AGAIN, which
    the case's record reads; a case of another batch adds nothing."""
    from fixtures.cuda_layer import isolation
    groups: dict = {}
    for c in _cases("tiled"):
        groups.setdefault(tl.TILED.key(c), []).append(c)
    cases = next(g for g in groups.values() if len(g) >= 3)[:3]
    calls = []

    def fake_run_isolated(tgt, op, cs, *args, device, timeout, alone):
        ids = [c.id for c in cs]
        calls.append(ids)
        if len(calls) == 1:
            return Outcome("cuda_error", error="CUDA_ERROR_LAUNCH_FAILED", poisoned=True)
        return Outcome("returned", {i: f"run of {i}" for i in ids})

    monkeypatch.setattr(engine_batches, "run_isolated", fake_run_isolated)
    engine_batches.RAN_AGAIN.clear()
    isolation.AGAIN.clear()
    try:
        b = engine.Batches(SimpleNamespace(arch="sm_90a", sm=90, ordinal=0), _Kernels(), cases, tl.TILED)
        for n, c in enumerate(cases, 1):
            assert b.result(c) == f"run of {c.id}"
            assert len(isolation.AGAIN) == n and isolation.AGAIN[-1].startswith("its batch of 3 cases faulted")
        ids = [c.id for c in cases]
        assert calls == [ids, ids[:1], ids[1:2], ids[2:], ids]
    finally:
        engine_batches.RAN_AGAIN.clear()
        isolation.AGAIN.clear()

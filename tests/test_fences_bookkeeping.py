"""CPU self-tests of fixtures/fences: versions, expected data, schedules, the
classification of kernel records, struct layouts and the quoted rules."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

from fixtures import fences
from fixtures.cuda_layer import build

from seeds import seed


@pytest.fixture(scope="module")
def plan():
    return fences.plan_versions(64, nloads=4, seed=3)


@pytest.fixture(scope="module")
def pool(plan):
    return fences.pool_bytes(plan)


def test_versions_fit_the_kernel_encoding(plan):
    assert plan.n == 64
    assert (plan.w % 4 == 0).all(), "rows must be multiples of 16 bytes"
    assert (plan.w < fences.MAX_COORD).all() and (plan.h < fences.MAX_COORD).all()
    assert (plan.x + fences.BOX_W > plan.w).all(), "every box straddles the right edge"
    assert (plan.y < plan.h).all() and (plan.y + fences.BOX_H > plan.h).all()
    assert (plan.y >= fences.BOX_H * (plan.nloads - 1)).all(), "load j's element (0,0) in bounds"
    assert (plan.offset % fences.VERSION_ALIGN == 0).all()
    ends = plan.offset + plan.w.astype(np.uint64) * plan.h * 4
    assert (ends[:-1] <= plan.offset[1:]).all(), "versions overlap"
    assert ends[-1] <= plan.pool_bytes
    assert plan.tags().tolist() == list(range(1, 65))


def test_plan_limits():
    with pytest.raises(ValueError):
        fences.plan_versions(1)
    with pytest.raises(ValueError):
        fences.plan_versions(fences.MAX_TAG + 1)
    with pytest.raises(ValueError):
        fences.plan_versions(8, nloads=fences.MAX_LOADS + 1)


def test_pool_holds_each_version(plan, pool):
    for v in (0, 17, 63):
        o, w, h = int(plan.offset[v]) // 4, int(plan.w[v]), int(plan.h[v])
        block = pool[o:o + w * h].reshape(h, w)
        assert (block == fences.version_data(v + 1, w, h)).all()
        assert block[3, 5] == ((v + 1) << 20) | (3 << 10) | 5


def test_expected_box_zero_fill(plan):
    box = fences.expected_box(plan, 5, 0)
    w, h, x, y = (int(a[5]) for a in (plan.w, plan.h, plan.x, plan.y))
    assert box.shape == (8, 32)
    assert (box[:, w - x:] == 0).all() and (box[h - y:, :] == 0).all()
    assert box[0, 0] == (6 << 20) | (y << 10) | x


@pytest.mark.parametrize("j", range(4))
def test_the_right_map_gives_a_clean_record(plan, pool, j):
    for v in range(plan.n):
        assert fences.simulate_record(plan, pool, v, address_of=v, j=j) == (v + 1, 0)


def test_a_stale_map_is_always_detected(plan, pool):
    """For every consecutive pair a schedule can produce, a load through the previous
    map (address and dims), or the new address with the old dims (a torn map), or the
    old address with the new dims, does not pass as the new version."""
    sched = fences.make_schedule(200, 3, plan, gap=1)
    prev = fences.previous_versions(sched)
    for (i, lane), p in np.ndenumerate(prev):
        if p < 0:
            continue
        v = int(sched[i, lane])
        for addr, dims in ((p, p), (v, p), (p, v)):
            for j in range(plan.nloads):
                seen, bad = fences.simulate_record(plan, pool, v, address_of=addr, dims_of=dims, j=j)
                assert (seen, bad) != (v + 1, 0), (i, lane, addr, dims, j)


@pytest.mark.parametrize("gap", [1, 2, 3])
def test_schedule_changes_version_and_dims_on_every_reuse(plan, gap):
    sched = fences.make_schedule(300, 5, plan, gap=gap, seed=gap)
    assert sched.shape == (300, 5) and sched.max() < plan.n
    assert fences.schedule_problems(sched, plan, gap) == []
    assert len(np.unique(sched)) > plan.n // 2, "the schedule should use many versions"


def test_schedule_problems_are_found(plan):
    sched = fences.make_schedule(10, 1, plan)
    sched[5] = sched[4]
    assert any("repeats" in p for p in fences.schedule_problems(sched, plan))


def test_schedule_needs_enough_versions():
    with pytest.raises(ValueError):
        fences.make_schedule(4, 1, fences.plan_versions(4), gap=2)


def test_previous_versions():
    sched = np.arange(12, dtype=np.uint32).reshape(6, 2)
    prev = fences.previous_versions(sched, 2)
    assert (prev[:2] == -1).all() and (prev[2:] == sched[:-2]).all()


def _classify(exp, prev, seen, bad):
    tags = np.arange(1, 11)
    return fences.classify(np.array(exp), np.array(prev), np.array(seen, dtype=np.uint32),
                           np.array(bad, dtype=np.uint32), tags)


def test_classify_each_category():
    exp = [[0, 1, 2, 3, 4, 5, 6, 7, 8]]
    prev = [[-1, 0, 1, 2, 3, 4, 5, 6, 7]]
    seen = [[1, 1, 5, 4, fences.SEEN_ZERO, fences.SEEN_FLAG_TIMEOUT, fences.SEEN_TMA_TIMEOUT,
             fences.UNWRITTEN, fences.SEEN_SLOT_TIMEOUT]]
    bad = [[0, 256, 256, 3, 256, 0, 256, 0, 0]]
    c = _classify(exp, prev, seen, bad)
    assert c.counts == {"ok": 1, "stale": 1, "wrong": 1, "torn": 1, "zero": 1,
                        "flag_timeout": 1, "tma_timeout": 1, "slot_timeout": 1, "unwritten": 1}
    # version 1 (tag 2) was expected at lane 1, it saw tag 1 = the previous version (0)
    assert any("iteration 0 lane 1 load 0: stale (saw tag 1, want tag 2, previous tag 1"
               in e for e in c.examples), c.examples
    assert c.failed == 8 and c.total == 9


def test_classify_broadcasts_one_schedule_over_lanes_and_loads():
    sched = np.array([[0], [1], [2]])
    seen = np.array([[[1, 1], [1, 1]], [[2, 2], [1, 2]], [[3, 3], [3, 3]]], dtype=np.uint32)
    bad = np.zeros_like(seen)
    c = fences.classify(np.broadcast_to(sched, (3, 2)), np.broadcast_to(
        fences.previous_versions(sched), (3, 2)), seen, bad, np.arange(1, 4))
    assert c.counts["ok"] == 11 and c.counts["stale"] == 1
    assert c.examples == ["iteration 1 lane 1 load 0: stale (saw tag 1, want tag 2, previous "
                          "tag 1, 0 of 256 elements off)"]


def test_make_result_and_failure_message(plan):
    sched = fences.make_schedule(4, 2, plan)
    tags = plan.tags()[sched]
    seen = np.repeat(tags[..., None], plan.nloads, axis=2).astype(np.uint32)
    bad = np.zeros_like(seen)
    st = np.zeros(2, np.uint32)
    r = fences.make_result("same-block", "gpu", plan, sched, fences.previous_versions(sched),
                           seen, bad, st, ["block 0", "block 1"])
    assert r.ok and r.loads == 4 * 2 * plan.nloads and r.iterations == 4 and r.lanes == 2
    r.check("fence.release-acquire", case="ok-case")
    props = dict(r.properties())
    assert props["iterations"] == 4 and props["count_ok"] == r.loads
    seen[2, 1, 0] = tags[1, 1]                      # the previous version of that slot
    st[1] = 1
    r = fences.make_result("same-block", "gpu", plan, sched, fences.previous_versions(sched),
                           seen, bad, st, ["block 0", "block 1"])
    assert not r.ok and r.counts["stale"] == 1
    with pytest.raises(AssertionError) as info:
        r.check("fence.release-acquire", "fence.scope-gpu", case="gpu-case")
    msg = str(info.value)
    assert info.value.rule == "fence.release-acquire" and info.value.case == "gpu-case"
    assert msg.startswith("[rule fence.release-acquire] [case gpu-case] ") and "stale" in msg and "block 1: timeout" in msg
    assert "the `.gpu` scope suffices" in msg


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text)


SEED_RULES = sorted(r for r in fences.RULES if fences.RULES[r].document.startswith("seed "))


def test_only_the_dependent_launch_rule_quotes_a_document_beyond_the_seeds():
    """The seeds hold every fence rule's sentence but griddepcontrol's (PTX ISA), which
    the test of that rule's kernels quotes from the PTX ISA as the seeds' other
    neighbours do (cp.async.bulk.tensor, multicast)."""
    assert set(fences.RULES) - set(SEED_RULES) == {"fence.pdl-wait"}
    assert fences.RULES["fence.pdl-wait"].document.startswith("PTX ISA, griddepcontrol")


@pytest.mark.parametrize("rule_id", SEED_RULES)
def test_rules_are_quoted_verbatim(rule_id):
    rule = fences.RULES[rule_id]
    prefix = rule.document.split(":")[0].split()[-1]          # "seed 001: ..." -> "001"
    assert _normalize(rule.quote) in _normalize(seed(prefix)), (
        f"{rule_id}: not found verbatim in seed {prefix}")


def test_struct_layouts_match_the_kernel():
    src = (build.KERNEL_DIR / fences.SOURCE).read_text()
    assert ctypes.sizeof(fences.RingArgs) == 72
    assert fences.RingArgs.timeout_ns.offset == 64
    assert fences.VERSION_DTYPE.itemsize == 32 and fences.VERSION_DTYPE.fields["tag"][1] == 24
    fields = re.search(r"struct RingArgs \{(.*?)\};", src, re.S).group(1)
    names = re.findall(r"(\w+)(?:,|;)", fields)
    assert names == [f[0] for f in fences.RingArgs._fields_], names
    for code in ("SEEN_ZERO", "SEEN_FLAG_TIMEOUT", "SEEN_TMA_TIMEOUT", "SEEN_SLOT_TIMEOUT"):
        m = re.search(code + r" = (0x[0-9A-Fa-f]+)u", src)
        assert int(m.group(1), 16) == getattr(fences, code)


def test_every_kernel_name_used_exists():
    src = (build.KERNEL_DIR / fences.SOURCE).read_text()
    host = "".join(p.read_text() for p in sorted(Path(fences.__file__).parent.glob("*.py")))
    macros = set(re.findall(r"fence_(\w+?)_##NAME", src)) | {"bump"}
    used = set(re.findall(r'"fence_(\w+?)(?:_\{scope\})?"', host))
    used |= set(re.findall(r'f"fence_(\w+?)_\{scope\}"', host))
    assert used and used <= macros, used - macros


def test_stale_analysis_names_a_descriptor_that_was_never_refetched():
    plan = fences.plan_versions(32, 1, seed=4)
    pool = fences.pool_bytes(plan)
    sched = fences.make_schedule(20, 1, plan, gap=1)
    seen = np.zeros((20, 3, 1), np.uint32)
    bad = np.zeros_like(seen)
    for i in range(20):
        want = int(sched[i, 0])
        stuck = int(sched[0, 0]) if i < 10 else int(sched[i - 1, 0])   # first map, then previous
        for lane in range(3):
            if i < 2:                                                   # two good iterations
                seen[i, lane, 0] = want + 1
                continue
            seen[i, lane, 0], bad[i, lane, 0] = fences.simulate_record(plan, pool, want,
                                                                       address_of=stuck)
    a = fences.stale_analysis(plan, sched, seen, bad)
    # A record both maps would give (e.g. an all-zero box) counts as the first map's.
    assert a["leading_ok_iterations"] == 2
    assert a["as_first_map"] >= 8 * 3 and a["as_first_map"] + a["as_previous_map"] == 18 * 3


def test_scenarios_on_several_streams_run_with_the_users_hardware_queues(monkeypatch):
    """The workers have one hardware work queue per context (cuda_env.one_queue_here),
    which would serialize what a scenario runs on several streams of one GPU at once. A
    scenario that creates more than one stream is in SEVERAL_STREAMS (with the modes that
    use them); every suite call of one in a child lets ``streams`` follow
    ``needs_streams``; and the scenario itself refuses to run such a mode, before any GPU
    work, in a process of one queue."""
    import ast
    import inspect
    from fixtures.cuda_layer import cuda_env
    from fixtures.fences import runner
    several = {name for name, fn in runner.RUNNERS.items()
               if inspect.getsource(fn).count("Stream(") > 1}
    assert several and several <= set(runner.SEVERAL_STREAMS) <= set(runner.RUNNERS)
    assert runner.needs_streams("across_kernels", "events")
    assert not runner.needs_streams("across_kernels", "stream") and not runner.needs_streams("same_block", None)
    root = Path(__file__).resolve().parents[1]
    calls = 0
    for path in sorted((root / "suites").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_isolated"
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value == "fixtures.fences.runner:isolated"):
                continue
            scenario = node.args[1].value
            if scenario not in runner.SEVERAL_STREAMS:
                continue
            calls += 1
            streams = {k.arg: k.value for k in node.keywords}.get("streams")
            follows = (isinstance(streams, ast.Constant) and streams.value is True) or (
                isinstance(streams, ast.Call) and getattr(streams.func, "attr", None) == "needs_streams")
            assert follows, (f"{path.name}:{node.lineno}: run_isolated of {scenario!r} in a mode on "
                             f"several streams needs streams=True (or streams=fences.needs_streams(...))")
    assert calls >= 2
    # a process of one queue (a worker) refuses the events mode; one of the user's runs it
    monkeypatch.setattr(cuda_env, "_user_connections", None)
    monkeypatch.setenv(cuda_env.CONNECTIONS, "1")
    with pytest.raises(RuntimeError, match=r"streams=True"):
        runner.run_across_kernels("sm_90a", mode="events")
    runner.require_queues("across_kernels", "stream")
    monkeypatch.delenv(cuda_env.CONNECTIONS)
    runner.require_queues("across_kernels", "events")


def test_ring_args_are_set_by_name_and_only_through_ring_args():
    """Every number of a RingArgs is the one named (a positional call once passed the
    timeout as ``drain`` and left the timeout 0, so every two-GPU flag wait ended at once,
    seen first on a node of two H200s); no module of the harness builds one otherwise."""
    from fixtures.fences.kernel import ring_args
    a = ring_args(1, 2, 3, 4, 5, iters=6, K=7, nloads=8, consumers=9, acquire_mode=10,
                  drain=False, timeout_ns=11 << 33)
    assert [getattr(a, f) for f, _ in a._fields_] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 11 << 33]
    root = Path(fences.__file__).resolve().parents[1]
    calls = [f"{p.relative_to(root)}: {line.strip()}" for p in root.rglob("*.py")
             for line in p.read_text().splitlines()
             if "RingArgs(" in line and "class RingArgs" not in line]
    assert calls == ["fences/kernel.py: return RingArgs(maps, table, sched, flag, done, "
                     "iters=iters, K=K, nloads=nloads,"], calls

"""Fence scopes across two GPUs (issue 6, scenario 6): one GPU encodes a tensor map
and publishes it at ``.sys`` into memory the other GPU uses; the other GPU acquires at
``.sys`` in each consuming block and loads. Maps in one GPU's memory describe data in
the other's.

Every GPU of the run is a producer and a consumer: the pairs are a ring over the run's
GPUs at smoke and standard (each GPU to the next, the last to the first; with two GPUs
both ways), every ordered pair at full (fixtures/cuda_layer/placement.py ``pairs``); the
ids name the GPUs of the pair (``two-gpu-events-gpu2-to-gpu3-...``). Each pair needs
peer access both ways, checked for that pair (a pair without it skips, naming it). With
fewer than two GPUs the cases of GPUs 0 and 1 are collected and skip (the ``gpus``
fixture marks these multi_gpu and skips them with the reason).

Seed 001: "If the threads are on different devices, the `.sys` scope must be used."
"""
from __future__ import annotations

import functools

import pytest

from fixtures import fences
from fixtures.cuda_layer import placement
from fixtures.plugins.run_control import every_gpu
from fixtures.rules.registry import fail_all
from fixtures.tensormap import sweep
from reports.model import OBSERVATION_PREFIX


def _cases(config):
    iters = sweep.pick(config, smoke=16, standard=128, full=1024)
    consumers = sweep.pick(config, smoke=4, standard=16, full=64)
    ordinals = [d.ordinal for d in every_gpu.run_gpus()]
    cases = []
    for mode, layouts in (("flag", (("consumer", "consumer"), ("producer", "consumer"))),
                          ("events", (("consumer", "consumer"), ("producer", "consumer"),
                                      ("consumer", "producer"), ("producer", "producer")))):
        for producer, consumer in placement.pairs(ordinals, every=sweep.level(config) == "full"):
            for data_on, map_on in layouts:
                cases.append(dict(mode=mode, producer=producer, consumer=consumer,
                                  data_on=data_on, map_on=map_on, consumers=consumers,
                                  iters=iters))
    return cases


def _id(kw):
    return (f"two-gpu-{kw['mode']}-gpu{kw['producer']}-to-gpu{kw['consumer']}-"
            f"map-on-{kw['map_on']}-data-on-{kw['data_on']}-scope=sys-"
            f"consumers={kw['consumers']}-iters={kw['iters']}")


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = _cases(metafunc.config)
        metafunc.parametrize("case", cases, ids=[_id(c) for c in cases])
    if "proxy_pair" in metafunc.fixturenames:
        ordinals = [d.ordinal for d in every_gpu.run_gpus()]
        pairs = placement.pairs(ordinals, every=sweep.level(metafunc.config) == "full")
        cases = [(c, p, q) for c in fences.TWO_GPU_CASES for p, q in pairs]
        metafunc.parametrize("proxy_pair", cases, ids=[f"{c}-gpu{p}-to-gpu{q}" for c, p, q in cases])


@functools.lru_cache(maxsize=None)
def _peer_access(a: int, b: int) -> str | None:
    """Peer access between GPUs ``a`` and ``b``, enabled both ways once per process: None,
    or why not."""
    return fences.peer_access(a, b)


@pytest.mark.rule("fence.release-acquire")
def test_two_gpu(gpus, kernels, request, case):
    """The producer GPU (tensormap.replace in shared memory, tensormap.cp_fenceproxy
    .release.sys) writes each version into a map slot in one GPU's memory describing
    data in one GPU's memory; the consumer GPU's blocks each acquire at .sys and load.
    "flag": both kernels run at once, handoffs by st.release.sys / ld.acquire.sys flags
    in the consumer's memory (bounded waits). "events": kernels ordered by
    cross-device events."""
    pair = (case["producer"], case["consumer"])
    every_gpu.ran_on(request.node, pair)
    why = _peer_access(*sorted(pair))
    if why:
        pytest.skip(f"needs peer access between GPUs {pair[0]} and {pair[1]}: {why}")
    r = fences.run_two_gpu(gpus[0].arch, kernels.cache_dir, **case)
    request.node.user_properties.extend(r.properties())
    print(r.line())
    r.check("fence.release-acquire", "fence.scope-sys", "fence.same-block", case=request.node.callspec.id)


@pytest.mark.unproven       # not yet run on a node of several GPUs (issue 58)
@pytest.mark.rule(fences.TWO_GPU_RULE)
def test_proxy_fence_two_gpu(gpus, kernels, request, proxy_pair):
    """A tile written by another GPU over peer access with ordinary stores and published
    with a .sys release flag, TMA-loaded by the consumer GPU after its .sys acquire
    (fixtures/fences/async_proxy.py ``run_proxy_two_gpu``; DeepEP's NVLink hand-off): with
    fence.proxy.async.global every tile exact, without it an observation, counted."""
    case, producer, consumer = proxy_pair
    every_gpu.ran_on(request.node, (producer, consumer))
    why = _peer_access(*sorted((producer, consumer)))
    if why:
        pytest.skip(f"needs peer access between GPUs {producer} and {consumer}: {why}")
    answer = fences.run_proxy_two_gpu(case, gpus[0].arch, kernels.cache_dir, producer=producer,
                                      consumer=consumer)
    errors, seen = fences.judge_two_gpu(case, answer)
    fail_all(request.node.callspec.id, errors)
    if seen:
        pytest.skip(f"{OBSERVATION_PREFIX} not a pass (without the proxy fence the documents "
                    f"promise nothing): {seen}")

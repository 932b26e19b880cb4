"""Fence scopes across two GPUs (issue 6, scenario 6): one GPU encodes a tensor map
and publishes it at ``.sys`` into memory the other GPU uses; the other GPU acquires at
``.sys`` in each consuming block and loads. Maps in one GPU's memory describe data in
the other's; both directions. Needs two GPUs with peer access (the ``gpus`` fixture
marks these multi_gpu and skips them with the reason otherwise).

Seed 001: "If the threads are on different devices, the `.sys` scope must be used."
"""
from __future__ import annotations

import pytest

from fixtures import fences
from fixtures.tensormap import sweep


def _cases(config):
    iters = sweep.pick(config, smoke=16, standard=128, full=1024)
    consumers = sweep.pick(config, smoke=4, standard=16, full=64)
    cases = []
    for mode, layouts in (("flag", (("consumer", "consumer"), ("producer", "consumer"))),
                          ("events", (("consumer", "consumer"), ("producer", "consumer"),
                                      ("consumer", "producer"), ("producer", "producer")))):
        for direction in ((0, 1), (1, 0)):
            for data_on, map_on in layouts:
                cases.append(dict(mode=mode, producer=direction[0], consumer=direction[1],
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


@pytest.fixture(scope="session")
def pair(gpus):
    """The two lowest GPU ordinals, with peer access enabled both ways."""
    ordinals = sorted(g.ordinal for g in gpus)[:2]
    why = fences.peer_access(*ordinals)
    if why:
        pytest.skip(f"needs peer access between GPUs {ordinals}: {why}")
    return ordinals


@pytest.mark.rule("fence.release-acquire")
def test_two_gpu(gpus, pair, kernels, request, case):
    """The producer GPU (tensormap.replace in shared memory, tensormap.cp_fenceproxy
    .release.sys) writes each version into a map slot in one GPU's memory describing
    data in one GPU's memory; the consumer GPU's blocks each acquire at .sys and load.
    "flag": both kernels run at once, handoffs by st.release.sys / ld.acquire.sys flags
    in the consumer's memory (bounded waits). "events": kernels ordered by
    cross-device events."""
    kw = dict(case)
    kw["producer"], kw["consumer"] = pair[case["producer"]], pair[case["consumer"]]
    r = fences.run_two_gpu(gpus[0].arch, kernels.cache_dir, **kw)
    request.node.user_properties.extend(r.properties())
    print(r.line())
    r.check("fence.release-acquire", "fence.scope-sys", "fence.same-block", case=request.node.callspec.id)

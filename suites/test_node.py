"""The node's own case: can this node run the suite's GPU cases at all (README, 'On a GPU
node')? Passed when GPUs with tensor maps are usable; failed when the run's GPUs are fewer
than ``--require-gpus=N`` asks, and by default where an NVIDIA driver is installed but CUDA
cannot initialize; skipped (no GPU) on a machine without one.

Every run reports it, whatever it selects: run here where the run collected it, else by the
controller under this test's id (``fixtures.plugins.run_control.controller``), so that the id a report
gives reruns as ``python -m pytest suites/test_node.py::test_usable_gpus``. Its outcome is
the one the run started with (``fixtures.plugins.run_control.harness.node_outcome``): a node that
fails it runs no other case. Where its GPUs are usable, the run's environment fingerprint
must name the driver and every GPU CUDA sees (``fixtures.plugins.run_control.node_fingerprint``):
a fingerprint that lost them fails this case, naming what it lacks.
"""
from __future__ import annotations

import pytest

from fixtures.plugins.run_control.harness import NODE_RULE
from fixtures.plugins.run_control.node_fingerprint import node_case


@pytest.mark.rule(NODE_RULE)
def test_usable_gpus(request):
    outcome, message = node_case(request.config)
    if outcome == "skipped":
        pytest.skip(message)
    assert outcome == "passed", message

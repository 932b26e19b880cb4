"""A trap lane with no jobs for the self-tests of what it serves (its GPU service, its fork
server), started as the controller starts it, and the isolated calls they make; a call
of a real isolation target in a real child of fresh runners (``in_a_real_child``)."""
from __future__ import annotations

import contextlib
import os

from fixtures.cuda_layer import isolation, trap_lane


@contextlib.contextmanager
def running_lane(tmp_path, new_runner, register=None, unregister=None, **start):
    """A lane at ``tmp_path/gpu`` (no GPU; its later modules: tests/preloaded_marker.py),
    ``trap_lane.start``'s ``start`` arguments; ``register(path)`` once it runs. Yields
    ``make(*args)``: a runner ``new_runner(path, *args)``, each stopped at the end, with
    ``make.path`` and ``make.proc``; then ``unregister()``, and the lane stopped."""
    path = tmp_path / "gpu"
    proc = trap_lane.start(path, None, os.getpid(), later_modules=("preloaded_marker",), **start)
    trap_lane.join(path, [], None)
    if register is not None:
        register(path)
    runners: list = []

    def make(*args):
        r = new_runner(path, *args)
        runners.append(r)
        return r

    make.path, make.proc = path, proc
    try:
        yield make
    finally:
        for r in runners:
            r.stop()
        if unregister is not None:
            unregister()
        trap_lane.leave()
        trap_lane.stop(path)


def call(r, name, *args, **kw):
    """Runner ``r``'s call of tests/isolation_targets.py's ``name``, naming no GPU."""
    return r.call(f"isolation_targets:{name}", *args, device=None, **kw)


def in_a_real_child(monkeypatch, target, *args, **kwargs):
    """``run_isolated(target, *args, **kwargs)`` in a real isolated child (no GPU named),
    this process's runners fresh for it and stopped after: the Outcome. A feature's
    target, pickled into the child and back, proves it resolves and runs there."""
    monkeypatch.setattr(isolation, "_runners", {})
    try:
        return isolation.run_isolated(target, *args, device=None, timeout=60, **kwargs)
    finally:
        for r in isolation._runners.values():
            r.stop()

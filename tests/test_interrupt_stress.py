"""The end of a run under random interrupts (issue 40): real ``pytest -n 2`` runs of a
generated tree of short cases, through the suite's plugins, every core kept busy by
spinning processes, each run stopped at a random moment by one of: SIGINT to its process
group (Ctrl-C), SIGTERM to the controller (``kill``), SIGTERM to the group (Slurm's
scancel or time limit, a pod's deletion), or ``--run-timeout``.

What every run must show, whatever the moment:
  * it ends, within 30 s of the signal (Slurm kills 30 s after its SIGTERM);
  * its exit status is 2, or 0 when it had ended before the stop: every case had
    finished when the signal was sent, and the reports say "completed" with every case
    reported (a signal sent before its last case finished must never be lost: a Ctrl-C
    swallowed by a garbage collector's callback let a run complete and exit 0); never 3
    nor pytest's INTERNALERROR;
  * where its report folder exists, the folder is whole: results.json (of its schema)
    and junit.xml both there, holding exactly the same case ids, results.json's exit
    status the process's, its verdict INTERRUPTED (TIMED OUT for --run-timeout) when
    it exited 2, and no temporary file left;
  * a signal that lands before the report folder exists (the run still importing and
    configuring pytest) ends the run by the signal (killed by it, or exit 2; a Ctrl-C
    in Python's own start-up, before pytest runs -- its ``site`` import, say -- ends it
    as Python ends a failed start-up: status 1, the KeyboardInterrupt in its traceback)
    and leaves no report folder at all: never a half-made one (a lock and nothing else)
    that a fleet merge would read as a node, never exit 0 or 3;
  * no process of the run is left once it has ended (each process of the run carries a
    tag in its environment; /proc is searched for it, so a child that left the process
    group is found too).

The number of runs is ``TMAC_STRESS_RUNS`` (default 4, one of each kind: the ordinary
self-test run stays quick; CI runs 50, ``.ci/run``). The moments are drawn from a seed
(``TMAC_STRESS_SEED``, else a random one): five runs in eight are stopped a random
moment after their start (a fraction of the time an uninterrupted run under the same
load takes to finish its last case, measured first, or ``TMAC_STRESS_BASE=SECONDS``;
every ``--run-timeout``, which counts from the session's start, is of these), three a
random delay after their last case finished, where a run's end is whatever its length
under the load of the moment: the last reports, the reports written, the workers
stopping, pytest's teardown. That end took 0.1 s in most runs and 2.7 to 11 s (after
the reports: xdist waiting for its workers to exit) in a few alike, so the delay is
drawn log-uniformly from 1 ms to 3.2 s: two in three under 0.2 s. The log of every run (kind, moment, exit, cases, time to stop) is printed and,
with ``TMAC_STRESS_LOG=FILE``, written as JSON lines. Each failure names its run, kind,
moment and seed, and the command that replays that run alone (``TMAC_STRESS_ONLY``)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from reports.model import read_junit

from nested_run import make_tree, plugin_env, pytest_argv, report

RUNS = int(os.environ.get("TMAC_STRESS_RUNS") or 4)
SEED = os.environ.get("TMAC_STRESS_SEED") or str(random.SystemRandom().randrange(10**9))
ONLY = [int(k) for k in (os.environ.get("TMAC_STRESS_ONLY") or "").replace(",", " ").split()]
BASE = float(os.environ["TMAC_STRESS_BASE"]) if os.environ.get("TMAC_STRESS_BASE") else None
LOG = os.environ.get("TMAC_STRESS_LOG")

KINDS = ("SIGINT-group", "SIGTERM-controller", "SIGTERM-group", "run-timeout")
CASES, CASE_S = 300, 0.02
STOP_BOUND_S = 30.0        # Slurm's KillWait, Kubernetes' grace period: SIGKILL after 30 s
SLOW_S = 5.0               # a run still there this long after its stop: where each process waits
HANG_S = 120.0             # past this, the run is stopped (its threads' stacks dumped first)
TAG = "TMAC_STRESS_TAG"

TREE = f'''
    import os, time, pytest
    DONE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "done")

    @pytest.mark.parametrize("case", [f"c{{i}}" for i in range({CASES})])
    def test_case(case):
        time.sleep({CASE_S})
        fd = os.open(DONE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)   # one byte a case: the
        os.write(fd, b".")                                            # stress sees the last
        os.close(fd)
'''


# Loaded by every process of a run (-p): SIGUSR2 (which the harness does not use) makes
# it write every thread's Python stack to the run's log, and go on (to a copy of its
# stderr taken now: a worker's pytest points its stderr at a case's capture meanwhile).
STACKS_PLUGIN = '''
import faulthandler, os, signal
LOG = os.fdopen(os.dup(2), "w")
faulthandler.register(signal.SIGUSR2, file=LOG, all_threads=True)
'''
STACKS_MARK = "Current thread 0x"


@dataclass
class Outcome:
    run: int
    kind: str
    anchor: str                  # "start" or "last case": what the moment counts from
    at_s: float                  # the signal's moment after the anchor (--run-timeout: its value)
    seed: str
    fraction: float | None = None    # of an uninterrupted run's length (anchor "start")
    sent: bool = False           # False: the run had ended before the signal
    folder_at_signal: bool | None = None
    done_at_signal: int | None = None    # cases finished when the signal was sent
    exit: int | None = None
    stop_s: float | None = None  # from the signal (or the timeout's moment) to the exit
    wall_s: float = 0.0
    tail_s: float = 0.0          # from the last case to the exit (anchor "last case")
    folder: bool = False
    cases: int | None = None
    verdict: str | None = None
    left: list = field(default_factory=list)
    slow: list = field(default_factory=list)     # SLOW_S after the stop: its processes' waits
    stacks: str = ""                             # and their threads' Python stacks
    problems: list = field(default_factory=list)

    def line(self) -> str:
        what = (f"exit {self.exit}" if self.exit is not None else "did not end")
        stop = f", stopped {self.stop_s:.1f} s after" if self.stop_s is not None and self.sent else ""
        rep = (f"{self.cases} cases in both reports" if self.cases is not None
               else "folder left" if self.folder else "no report folder")
        when = (f"at {self.at_s:.2f} s ({self.fraction:.2f} of the way to its last case)" if self.anchor == "start"
                else f"{self.at_s:.3f} s after its last case")
        return (f"run {self.run} {self.kind} {when}"
                f"{'' if self.sent else ' (ended first)'}: {what}{stop}, {rep}"
                + (f", {len(self.left)} process(es) left" if self.left else "")
                + (f"; {SLOW_S:g} s after the stop: " + " | ".join(self.slow) if self.slow else "")
                + (f"; {self.verdict.split(' (')[0]}" if self.verdict else ""))

    def replay(self, base: float) -> str:
        return (f"TMAC_STRESS_SEED={self.seed} TMAC_STRESS_BASE={base:.2f} "
                f"TMAC_STRESS_ONLY={self.run} "
                f"python -m pytest tests/{Path(__file__).name} -p no:cacheprovider")


def plan(seed: str, run: int, base: float) -> Outcome:
    """Run ``run``'s kind and anchor (in turn: each four runs have each kind, each eight
    each signal after the start and after the last case) and its moment (drawn): after
    the start, two runs in five while the run starts (before and while its report folder
    is made, the workers starting), the others later, up to just past its end (module
    docstring)."""
    rng = random.Random(f"{seed}:{run}")
    kind = KINDS[run % len(KINDS)]
    if kind == "run-timeout" or (run + run // len(KINDS)) % 2 == 0:
        fraction = rng.uniform(0.0, 0.25) if rng.random() < 0.4 else rng.uniform(0.25, 1.05)
        return Outcome(run, kind, "start", round(max(0.05, fraction * base), 3), seed,
                       fraction=round(fraction, 3))
    return Outcome(run, kind, "last case", round(10 ** rng.uniform(-3.0, 0.5), 4), seed)


def processes_tagged(tag: str) -> dict[int, str]:
    """The processes whose environment holds ``TAG=tag``: pid -> command line."""
    want = f"{TAG}={tag}".encode()
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                found[int(entry.name)] = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:          # ended meanwhile, or not ours to read
            pass
    return found


def waits(tag: str) -> list[str]:
    """Where each process of the run waits: its state and each thread's kernel wait
    channel (/proc; e.g. do_wait: a parent waiting for a child, futex: a lock or the GIL,
    poll: a pipe), to tell which process a slow stop waited for."""
    out = []
    for pid, cmd in sorted(processes_tagged(tag).items()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            chans: dict[str, int] = {}
            for task in Path(f"/proc/{pid}/task").iterdir():
                w = (task / "wchan").read_text().strip() or "-"
                chans[w] = chans.get(w, 0) + 1
        except OSError:
            continue
        who = "controller" if "-m pytest" in cmd else "worker" if "sys.stdin" in cmd else cmd[:40]
        out.append(f"{pid} {who} {state} " + ",".join(f"{w}x{n}" if n > 1 else w for w, n in sorted(chans.items())))
    return out


def left_processes(tag: str, wait_s: float = 10.0) -> dict[int, str]:
    """The run's processes still there ``wait_s`` after it ended (killed, once seen)."""
    deadline = time.monotonic() + wait_s
    left = processes_tagged(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_tagged(tag)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


@pytest.fixture(scope="module")
def busy():
    """Every core kept busy by a spinning process for as long as the module runs."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
            for _ in range(os.cpu_count() or 2)]
    yield len(spin)
    for p in spin:
        p.kill()
        p.wait()


def start(root: Path, out: Path, tag: str, log, *extra: str) -> subprocess.Popen:
    env = plugin_env(root, **{TAG: tag, "PYTHONFAULTHANDLER": "1"})
    return subprocess.Popen(pytest_argv("-n", "2", "-q", "-p", "stressstacks", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", *extra),
                            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def python_start(o: Outcome, text: str) -> bool:
    """Did a Ctrl-C end the run in Python's own start-up, before pytest ran (no report
    folder)? Python then exits 1, the KeyboardInterrupt in its traceback."""
    return o.exit == 1 and o.kind == "SIGINT-group" and "KeyboardInterrupt" in text


def check_reports(o: Outcome, out: Path, text: str) -> None:
    """The report folder's checks (module docstring)."""
    o.folder = out.exists()
    if not o.folder:
        if o.exit not in (2, -signal.SIGINT, -signal.SIGTERM) and not python_start(o, text):
            o.problems.append(f"no report folder, and exit {o.exit}: neither the signal's nor 2")
        return
    names = sorted(p.name for p in out.iterdir())
    if "results.json" not in names or "junit.xml" not in names:
        o.problems.append(f"a half-made report folder (exit {o.exit}): it holds {names}")
        return
    try:
        meta = report(out)
    except (AssertionError, ValueError) as e:
        o.problems.append(f"results.json unreadable or off its schema: {e}")
        return
    ids = {c["id"] for c in meta["cases"]}
    junit = set(read_junit(out / "junit.xml").cases)
    o.verdict = meta.get("verdict")
    if ids != junit:
        o.problems.append(f"junit.xml and results.json differ: {len(junit)} and {len(ids)} cases; only in "
                          f"junit.xml {sorted(junit - ids)[:5]}, only in results.json {sorted(ids - junit)[:5]}")
    else:
        o.cases = len(ids)
    if meta["exitstatus"] != o.exit:
        o.problems.append(f"results.json says exit status {meta['exitstatus']}, the process exited {o.exit}")
    if o.exit not in (0, 2):
        o.problems.append(f"exit status {o.exit} with a report folder: 2 (or 0, ended first) only")
    if o.exit == 2:
        want = "TIMED OUT" if o.kind == "run-timeout" else "INTERRUPTED"
        if meta.get("status") != want:
            o.problems.append(f"exit 2 under the verdict {meta.get('verdict')!r}, not {want}")
    elif o.exit == 0:
        if meta["end"] != {"kind": "completed"} or meta["not_reported"]:
            o.problems.append(f"exit 0, but the reports say {meta['end']}, {meta['not_reported']} not reported")
    tmp = [n for n in names if n.endswith((".tmp", ".once"))]
    if tmp:
        o.problems.append(f"temporary files left in the report folder: {tmp}")


def stress_run(tmp_path: Path, root: Path, o: Outcome) -> Outcome:
    out = tmp_path / f"out{o.run}"
    tag = f"{o.seed}-{o.run}-{os.getpid()}-{time.monotonic_ns()}"
    log_path = tmp_path / f"run{o.run}.log"
    extra = [f"--run-timeout={o.at_s:.3f}"] if o.kind == "run-timeout" else []
    done = root / "done"
    done.unlink(missing_ok=True)
    with log_path.open("w+") as log:
        t0 = time.monotonic()
        proc = start(root, out, tag, log, *extra)
        try:
            t_anchor = t0
            if o.anchor == "last case" or o.kind == "none":
                while proc.poll() is None and (not done.exists() or done.stat().st_size < CASES):
                    time.sleep(0.005)
                t_anchor = time.monotonic()
            if o.kind in ("run-timeout", "none"):   # --run-timeout counts from the session's start
                t_sig = t_anchor + o.at_s
            else:
                while time.monotonic() < t_anchor + o.at_s and proc.poll() is None:
                    time.sleep(0.005)
                t_sig = time.monotonic()
                if proc.poll() is None:
                    o.folder_at_signal = out.exists()
                    if o.kind == "SIGINT-group":
                        os.killpg(proc.pid, signal.SIGINT)
                    elif o.kind == "SIGTERM-group":
                        os.killpg(proc.pid, signal.SIGTERM)
                    else:
                        proc.send_signal(signal.SIGTERM)
                    o.sent = True
                    # read once it is sent: a case that finishes meanwhile counts as before it
                    o.done_at_signal = done.stat().st_size if done.exists() else 0
            try:
                try:
                    o.exit = proc.wait(timeout=max(0.0, t_sig - time.monotonic()) + SLOW_S)
                except subprocess.TimeoutExpired:
                    o.slow = waits(tag)
                    for pid in processes_tagged(tag):      # their stacks into the log (STACKS_PLUGIN)
                        try:
                            os.kill(pid, signal.SIGUSR2)
                        except OSError:
                            pass
                    o.exit = proc.wait(timeout=max(0.0, t_sig - time.monotonic()) + HANG_S)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)       # faulthandler: every thread's stack
                time.sleep(3)
                o.problems.append(f"did not end within {HANG_S:g} s of the stop (its stacks are in the log)")
            t_end = time.monotonic()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        o.wall_s = round(t_end - t0, 2)
        o.tail_s = round(t_end - t_anchor, 2)
        if o.kind == "run-timeout":
            o.sent = o.exit != 0               # 0: the run ended before its timeout
        if o.sent and o.exit is not None and t_end > t_sig:
            o.stop_s = round(t_end - t_sig, 2)
        log.seek(0)
        text = log.read()
    if o.slow and STACKS_MARK in text:
        o.stacks = text[text.index(STACKS_MARK) - 200:][:12000]
    if o.exit is not None:
        if o.exit not in (0, 1, 2, -signal.SIGINT, -signal.SIGTERM):
            o.problems.append(f"exit status {o.exit}")     # 1: only as python_start says (below)
        if o.exit == 0 and o.done_at_signal is not None and o.done_at_signal < CASES:
            o.problems.append(f"signalled with {o.done_at_signal} of {CASES} cases finished, the run "
                              f"completed and exited 0: the stop was lost")
        if o.stop_s is not None and o.stop_s > STOP_BOUND_S and o.kind != "run-timeout":
            o.problems.append(f"ended {o.stop_s:.1f} s after the signal: a scheduler kills after {STOP_BOUND_S:g} s")
    if "INTERNALERROR" in text:
        o.problems.append("INTERNALERROR in its output")
    check_reports(o, out, text)
    left = left_processes(tag)
    o.left = [f"{pid}: {cmd}" for pid, cmd in sorted(left.items())]
    if left:
        o.problems.append(f"processes of the run left after it ended: {o.left}")
    if o.problems:
        o.problems.append(f"its output's end:\n{text[-4000:]}")
    return o


@pytest.mark.timeout(120 + 60 * (len(ONLY) or RUNS))
def test_random_interrupts_end_every_run_whole(tmp_path, busy):
    root = make_tree(tmp_path / "t", TREE)
    (root / "stressstacks.py").write_text(STACKS_PLUGIN)
    t_all = time.monotonic()
    base = BASE
    if base is None:                    # an uninterrupted run under the same load: its lengths
        o = stress_run(tmp_path, root, Outcome(-1, "none", "last case", 0.0, SEED))
        assert not o.problems and o.exit == 0 and o.cases == CASES + 1, \
            f"the uninterrupted run ({o.line()}):\n" + "\n".join(o.problems)
        base = round(o.wall_s - o.tail_s, 2)
        print(f"\nstress: seed {SEED}, {busy} spinning processes, an uninterrupted run takes {o.wall_s:.2f} s, "
              f"{base:.2f} s to its last case")
    else:
        print(f"\nstress: seed {SEED}, {busy} spinning processes, an uninterrupted run's last case taken "
              f"as at {base:.2f} s")
    outcomes = []
    for k in ONLY or range(RUNS):
        o = stress_run(tmp_path, root, plan(SEED, k, base))
        outcomes.append(o)
        print(o.line() + (f"  <-- {o.problems[0]}" if o.problems else ""), flush=True)
        if o.stacks:
            print(f"  the stacks of run {o.run}'s processes {SLOW_S:g} s after its stop:\n{o.stacks}", flush=True)
        if LOG:
            with open(LOG, "a") as f:
                f.write(json.dumps(dict(asdict(o), base_s=base, problems=o.problems[:-1])) + "\n")
    exits: dict[str, int] = {}
    for o in outcomes:
        exits[str(o.exit)] = exits.get(str(o.exit), 0) + 1
    bad = [o for o in outcomes if o.problems]
    print(f"stress: {len(outcomes)} runs in {time.monotonic() - t_all:.0f} s, exits {exits}, "
          f"{sum(o.folder for o in outcomes)} with a report folder, "
          f"{sum(bool(o.left) for o in outcomes)} leaving processes, {len(bad)} with problems; "
          f"longest stop {max((o.stop_s or 0 for o in outcomes), default=0):.1f} s, "
          f"{sum(bool(o.slow) for o in outcomes)} over {SLOW_S:g} s")
    assert not bad, "\n\n".join(
        f"{o.line()} [seed {o.seed}]\n  " + "\n  ".join(o.problems) + f"\n  replay: {o.replay(base)}"
        for o in bad)

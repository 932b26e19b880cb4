"""The controller's terminal held for at most HOLD_S (fixtures/plugins/reporting/held_output.py):
nothing written is lost, reordered or held longer than that, and a run's terminal shows
every case's letter and its summary after them. CPU only."""
from __future__ import annotations

import io
import os
import subprocess
import time

from fixtures.plugins.reporting import held_output
from fixtures.plugins.reporting.held_output import HeldOutput

from nested_run import make_tree, pytest_run, pytest_start, wait_for


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class Counted(io.StringIO):
    def __init__(self):
        super().__init__()
        self.writes = self.flushes = 0

    def write(self, s):
        self.writes += 1
        return super().write(s)

    def flush(self):
        self.flushes += 1


def test_text_is_held_until_its_oldest_part_is_hold_s_old_then_written_at_once():
    clock, out = Clock(), Counted()
    held = HeldOutput(out, hold_s=60.0, clock=clock)     # the timer never fires within the test
    for letter in "..s.":
        held.write(letter)
        held.flush()
    assert out.getvalue() == "" and out.writes == 0
    clock.t += 60.0
    held.write("F")
    assert out.getvalue() == "..s.F" and out.writes == 1 and out.flushes == 1
    held.write(" [ 5/9]\n")
    assert out.getvalue() == "..s.F", "the clock starts again with the next text held"
    held.drain()
    assert out.getvalue() == "..s.F [ 5/9]\n" and out.writes == 2
    held.drain()
    assert out.writes == 2, "nothing held: nothing written"


def test_a_flush_after_hold_s_passes_the_text_on_without_a_write():
    clock, out = Clock(), Counted()
    held = HeldOutput(out, hold_s=60.0, clock=clock)
    held.write(".")
    clock.t += 59.9
    held.flush()
    assert out.getvalue() == ""
    clock.t += 0.1
    held.flush()
    assert out.getvalue() == "."


def test_the_timer_passes_held_text_on_when_nothing_more_is_written():
    out = Counted()
    held = HeldOutput(out, hold_s=0.05)
    held.write("...")
    deadline = time.monotonic() + 5
    while out.getvalue() != "..." and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out.getvalue() == "...", "a run waiting on a slow case would not show its last letters"


def test_hold_and_release_put_the_stream_in_front_and_back():
    out = Counted()
    tr = type("TR", (), {})()
    tr._tw = type("TW", (), {})()
    tr._tw._file = out
    held = held_output.hold(tr)
    assert tr._tw._file is held and held.stream is out
    assert held_output.hold(tr) is None, "held twice"
    held.write("ab")
    assert held.isatty() is False and held.getvalue() == "", "what the stream has, the held stream has"
    held_output.release(tr)
    assert tr._tw._file is out and out.getvalue() == "ab"
    held_output.release(tr)                      # twice: nothing more
    assert out.getvalue() == "ab"


def test_a_run_shows_every_letter_then_its_summary(tmp_path):
    root = make_tree(tmp_path / "t", '''
        import pytest
        @pytest.mark.parametrize("i", range(300))
        def test_many(i):
            assert i != 123, "one failure"
    ''')
    r = pytest_run(root, "-n", "2", "-q", f"--report-dir={tmp_path / 'r'}")
    out = r.stdout
    lines = out.splitlines()
    progress = [i for i, line in enumerate(lines) if line.rstrip().endswith("%]")]
    letters = "".join(lines[i].split(" [")[0] for i in progress)
    assert letters.count(".") == 299 and letters.count("F") == 1, out[-3000:]
    summary = next(i for i, line in enumerate(lines) if "short test summary info" in line)
    assert progress[-1] < summary, out[-3000:]
    assert lines[-1].startswith("verdict: "), out[-2000:]
    assert "1 failed, 299 passed" in out and r.returncode == 1


def test_a_slow_case_leaves_the_earlier_letters_on_the_terminal(tmp_path):
    """The letters of the cases before a case that takes long show while it runs (the
    timer), not when it ends."""
    started = tmp_path / "started"
    root = make_tree(tmp_path / "t", f'''
        import time, pytest
        @pytest.mark.parametrize("case", range(31))
        def test_case(case):
            if case == 30:
                open({str(started)!r}, "w").close()
                time.sleep(30)
    ''')
    p = pytest_start(root, "-n", "1", "-q", f"--report-dir={tmp_path / 'r'}", text=False)
    try:
        assert wait_for(started, 120, p), "the slow case never started"
        time.sleep(1.0)                          # ten times HOLD_S
        os.set_blocking(p.stdout.fileno(), False)
        try:
            seen = os.read(p.stdout.fileno(), 1 << 20).decode(errors="replace")
        except BlockingIOError:                  # nothing written at all
            seen = ""
        assert seen.splitlines()[-1:] == ["." * 30], f"the 30 cases before the slow one were not all shown: {seen[-2000:]!r}"
    finally:
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(30)

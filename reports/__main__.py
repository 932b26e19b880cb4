"""``python -m reports {matrix,diff,merge,timeline,repro,bench}``; see README.md.

Exit status: 0 success (diff: nothing got worse; merge: all nodes alike and passing),
1 diff found a regression not accepted (or, --strict, another or unknown harness) /
merge flagged a node, a node does not pass or fewer came than --expect-nodes / repro
met a case no reproducer is written for (the others written), 2 unreadable input, output that cannot be written, the same run given twice to merge,
or bad usage. Installed as the console script ``tmac-reports`` (tmac_reports.py), which
runs from any folder.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import bench
from . import diff as diff_mod
from . import matrix as matrix_mod
from . import merge as merge_mod
from . import repro as repro_mod
from . import timeline as timeline_mod
from .model import ReportInputError, load_run


class OutputError(Exception):
    """An output file that cannot be written (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep the message short and clear
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _write(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


def _accept(text: str) -> list[str]:
    """``--accept vanished,skipped`` -> the class names, each checked."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in diff_mod.CLASSES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown class {', '.join(bad) or repr(text)} "
                                         f"(one of: {', '.join(diff_mod.CLASSES)})")
    return names


DIFF_EPILOG = """\
regression classes (each loss of verdict, OLD -> NEW):
  failed            now failed and was not (from passed, skipped, known issue,
                    could not build), or a new case that failed
  could-not-build   likewise, into could not build
  known-issue       passed -> known issue
  skipped           passed or known issue -> skipped (coverage lost)
  vanished          a case in OLD that is not in NEW
  collection-error  a suite file that no longer collects (its cases vanish too)
  known-issue-moved a known issue in both runs, of another known-issue entry in NEW
  known-issue-changed
                    a known-issue entry of both runs whose pattern, mode, rule,
                    match or conditions changed (it may absorb other failures)

harness: environment.json's "harness" section (package versions, sources sha256,
constraints) of OLD and NEW are compared and any difference is listed; --strict
makes a different harness, or one that is unknown (no section), exit 1.

exit status:
  0  nothing got worse, or every regression is in an --accept'ed class
  1  a regression in a class not accepted; with --strict, also another or an
     unknown harness
  2  unreadable input, --json / --markdown not writable, or bad usage
"""


MERGE_EPILOG = """\
a node is flagged when it ran other case ids than the reference set (the set that
more than half of the nodes ran exactly, else the union of all nodes' case ids:
missing or extra cases), another sweep, --arch, selecting options (-k, -m, ...)
or known-issues file than the majority, a case in another state than most nodes
that ran it, or other versions (driver, NVRTC, CCCL, ...).
a node fails when its verdict is not PASS: FAIL (failed or could not build
cases), NOT MEASURED (no usable GPU), INTERRUPTED, TIMED OUT, INCOMPLETE,
INTERNAL ERROR, NO CASES RAN, NOTHING PASSED, NO REPORT (a folder without a
readable report: a node that crashed or stopped before writing one, merged with
what its folder holds), or any other (e.g. GPU LOST).

exit status:
  0  every node passes and none is flagged (one node: it passes)
  1  a node is flagged or does not pass (NO REPORT included), or fewer nodes
     than --expect-nodes
  2  a path that does not exist, the same folder or run id twice, nothing left
     to merge, --out not writable, or bad usage
"""


def cmd_matrix(a) -> int:
    run = load_run(a.run)
    out = Path(a.out) if a.out else (Path(a.run) if Path(a.run).is_dir() else Path(a.run).parent)
    try:
        p_md, p_html = matrix_mod.write(run, out)
    except OSError as e:
        raise OutputError(f"cannot write the matrix into {out}: {e.strerror or e}"
                          + ("" if a.out else " (give --out DIR)")) from None
    print(f"wrote {p_md} and {p_html}")
    return 0


def cmd_diff(a) -> int:
    old, new = load_run(a.old), load_run(a.new)
    d = diff_mod.diff_runs(old, new)
    accept = {c for group in a.accept for c in group}
    md = diff_mod.to_markdown_text(d, accept, a.strict)
    js = diff_mod.to_json_text(d, accept, a.strict)
    if a.markdown:
        _write(a.markdown, md)
    if a.json:
        _write(a.json, js)
    if "-" not in (a.markdown, a.json):
        sys.stdout.write(js if a.format == "json" else md)
    return diff_mod.exit_status(d, accept, a.strict)


def cmd_merge(a) -> int:
    me = f"{a.prog} merge"
    paths, notes = merge_mod.run_inputs(a.runs, a.out)
    for line in notes:
        print(f"{me}: {line}", file=sys.stderr)
    if not paths:
        print(f"{me}: no run folder left to merge (give the node folders, "
              "and an --out folder apart from them)", file=sys.stderr)
        return 2
    dup = merge_mod.duplicates(paths)
    if dup:
        print(f"{me}: {dup}", file=sys.stderr)
        return 2
    read, runs, unreadable = [], [], []
    for p in paths:
        if not Path(p).exists():
            raise ReportInputError(f"{p}: no such file or folder")
        try:
            runs.append(load_run(p))
            read.append(p)
        except ReportInputError as e:   # a node without a readable report: merged as such
            unreadable.append((p, str(e).removeprefix(f"{p}: ")))
            print(f"{me}: {p}: no readable report ({unreadable[-1][1]}): a node that does not pass",
                  file=sys.stderr)
    dup = merge_mod.duplicates(read, runs)
    if dup:
        print(f"{me}: {dup}", file=sys.stderr)
        return 2
    m = merge_mod.merge_runs(runs, a.expect_nodes, unreadable)
    if len(runs) + len(unreadable) == 1:
        print(f"{me}: 1 node only: nothing to compare it with", file=sys.stderr)
    if merge_mod.too_few(m):
        print(f"{me}: {len(m['nodes'])} node(s) came, --expect-nodes {a.expect_nodes}", file=sys.stderr)
    outs = merge_mod.outputs(m)
    if a.out:
        for name, text in outs.items():
            _write(str(Path(a.out) / name), text)
        print(f"wrote {', '.join(str(Path(a.out) / n) for n in outs)}", file=sys.stderr)
    sys.stdout.write(outs["fleet.json"] if a.format == "json" else outs["fleet.md"])
    return merge_mod.exit_status(m)


def cmd_timeline(a) -> int:
    run = load_run(a.run)
    analysis = timeline_mod.analyze(run, wall=a.wall)
    for path in (a.html, a.json):
        if path:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        timeline_mod.write(run, analysis, a.html, a.json)
    except OSError as e:
        raise OutputError(f"cannot write {e.filename or a.html or a.json}: {e.strerror or e}") from None
    print(timeline_mod.text(analysis))
    return 0


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"seconds, more than 0: {text!r}")
    return v


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"a number of nodes, 1 or more: {text!r}")
    return n


def main(argv: list[str] | None = None, prog: str = "python -m reports") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:                 # its own options: python -m reports bench --help
        return bench.main(argv[1:], prog=f"{prog} bench")
    p = _Parser(prog=prog, description="Reports of TMA conformance runs.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    m = sub.add_parser("matrix", help="conformance matrix (matrix.md, matrix.html) of one run")
    m.add_argument("run", help="run folder, results.json or JUnit XML")
    m.add_argument("--out", help="folder to write into (default: the run folder)")
    m.set_defaults(fn=cmd_matrix)
    d = sub.add_parser("diff", help="what changed between two runs; exit 1 on a regression",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=DIFF_EPILOG)
    d.add_argument("old", help="run folder, results.json or JUnit XML (before)")
    d.add_argument("new", help="run folder, results.json or JUnit XML (after)")
    d.add_argument("--markdown", metavar="PATH", help="write the Markdown here ('-' for stdout)")
    d.add_argument("--json", metavar="PATH", help="write the JSON here ('-' for stdout)")
    d.add_argument("--format", choices=("md", "json"), default="md", help="what goes to stdout (default md)")
    d.add_argument("--accept", metavar="CLASS", action="append", type=_accept, default=[],
                   help="list the regressions of CLASS but do not exit 1 for them; repeatable or "
                        f"comma-separated; CLASS: {', '.join(diff_mod.CLASSES)}")
    d.add_argument("--strict", action="store_true",
                   help="also exit 1 when OLD and NEW ran different harnesses (package versions, sources, "
                        "constraints) or a run's harness is unknown (every loss of verdict exits 1 anyway)")
    d.set_defaults(fn=cmd_diff)
    g = sub.add_parser("merge", help="fleet view of many nodes' runs; exit 1 if a node differs or fails",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=MERGE_EPILOG)
    g.add_argument("runs", nargs="+", help="run folders (one per node); the --out folder and folders "
                                           "holding only a merge's output are left out")
    g.add_argument("--out", help="folder for fleet.md, fleet.html, fleet.json")
    g.add_argument("--format", choices=("md", "json"), default="md", help="what goes to stdout (default md)")
    g.add_argument("--expect-nodes", metavar="N", type=_count, default=None,
                   help="exit 1 when fewer than N nodes' runs came (a node that wrote nothing)")
    g.set_defaults(fn=cmd_merge)
    t = sub.add_parser("timeline", help="where one run's wall time went, from its results.json")
    t.add_argument("run", help="run folder or results.json")
    t.add_argument("--html", metavar="PATH", help="write the workers over time (and the breakdown) here")
    t.add_argument("--json", metavar="PATH", help="write the breakdown as JSON here")
    t.add_argument("--wall", metavar="SECONDS", type=_seconds, default=None,
                   help="the run's wall time measured outside it: what the timeline does not "
                        "cover of it is unattributed")
    t.set_defaults(fn=cmd_timeline)
    repro_mod.add_parser(sub)
    sub.add_parser("bench", help="time to verdict: sweeps, workers, compiles (see its --help)")
    a = p.parse_args(argv)
    a.prog = prog
    try:
        return a.fn(a)
    except ReportInputError as e:
        print(f"{prog} {a.cmd}: unreadable input: {e}", file=sys.stderr)
        return 2
    except OutputError as e:
        print(f"{prog} {a.cmd}: {e}", file=sys.stderr)
        return 2
    except OSError as e:                      # any other file the tools meet: one line, never a traceback
        print(f"{prog} {a.cmd}: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

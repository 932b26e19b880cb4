"""``python -m reports {matrix,diff,merge,bench}``; see README.md.

Exit status: 0 success (diff: nothing got worse; merge: all nodes alike and passing),
1 diff found a regression not accepted / merge flagged a node or a node does not pass,
2 unreadable input, output that cannot be written, or bad usage.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import diff as diff_mod
from . import matrix as matrix_mod
from . import merge as merge_mod
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

exit status:
  0  nothing got worse, or every regression is in an --accept'ed class
  1  a regression in a class not accepted
  2  unreadable input, --json / --markdown not writable, or bad usage
"""


MERGE_EPILOG = """\
a node fails when its run verdict is not PASS: FAIL (failed or could not build
cases), NOT MEASURED (no usable GPU), INTERRUPTED, TIMED OUT, INCOMPLETE,
INTERNAL ERROR, NO CASES RAN, NOTHING PASSED.

exit status:
  0  every node passes and none differs from the majority (one node: it passes)
  1  a node differs from the majority (cases or versions) or does not pass
  2  unreadable input, nothing left to merge, --out not writable, or bad usage
"""


def cmd_matrix(a) -> int:
    run = load_run(a.run)
    out = Path(a.out) if a.out else (Path(a.run) if Path(a.run).is_dir() else Path(a.run).parent)
    p_md, p_html = matrix_mod.write(run, out)
    print(f"wrote {p_md} and {p_html}")
    return 0


def cmd_diff(a) -> int:
    old, new = load_run(a.old), load_run(a.new)
    d = diff_mod.diff_runs(old, new)
    accept = {c for group in a.accept for c in group}
    md = diff_mod.to_markdown_text(d, accept)
    js = diff_mod.to_json_text(d, accept)
    if a.markdown:
        _write(a.markdown, md)
    if a.json:
        _write(a.json, js)
    if "-" not in (a.markdown, a.json):
        sys.stdout.write(js if a.format == "json" else md)
    return diff_mod.exit_status(d, accept)


def cmd_merge(a) -> int:
    paths, notes = merge_mod.run_inputs(a.runs, a.out)
    for line in notes:
        print(f"python -m reports merge: {line}", file=sys.stderr)
    if not paths:
        print("python -m reports merge: no run folder left to merge (give the node folders, "
              "and an --out folder apart from them)", file=sys.stderr)
        return 2
    runs = [load_run(p) for p in paths]
    m = merge_mod.merge_runs(runs)
    if len(runs) == 1:
        print("python -m reports merge: 1 node only: nothing to compare it with", file=sys.stderr)
    outs = merge_mod.outputs(m)
    if a.out:
        for name, text in outs.items():
            _write(str(Path(a.out) / name), text)
        print(f"wrote {', '.join(str(Path(a.out) / n) for n in outs)}", file=sys.stderr)
    sys.stdout.write(outs["fleet.json"] if a.format == "json" else outs["fleet.md"])
    return merge_mod.exit_status(m)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:                 # its own options: python -m reports bench --help
        from . import bench
        return bench.main(argv[1:])
    p = _Parser(prog="python -m reports", description="Reports of TMA conformance runs.")
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
                   help="no effect, kept for old scripts: every loss of verdict already exits 1")
    d.set_defaults(fn=cmd_diff)
    g = sub.add_parser("merge", help="fleet view of many nodes' runs; exit 1 if a node differs or fails",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=MERGE_EPILOG)
    g.add_argument("runs", nargs="+", help="run folders (one per node); the --out folder and folders "
                                           "holding only a merge's output are left out")
    g.add_argument("--out", help="folder for fleet.md, fleet.html, fleet.json")
    g.add_argument("--format", choices=("md", "json"), default="md", help="what goes to stdout (default md)")
    g.set_defaults(fn=cmd_merge)
    sub.add_parser("bench", help="time to verdict: sweeps, workers, compiles (see its --help)")
    a = p.parse_args(argv)
    try:
        return a.fn(a)
    except ReportInputError as e:
        print(f"python -m reports {a.cmd}: unreadable input: {e}", file=sys.stderr)
        return 2
    except OutputError as e:
        print(f"python -m reports {a.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

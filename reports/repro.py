"""``python -m reports repro RUN_DIR CASE_ID... [--out DIR]`` / ``--all-failed``: the
standalone reproducer of a case of a run (fixtures/repro), one Python file per case
that needs only the NVIDIA driver, cuda-python (with NVRTC) and NumPy.

Exit status: 0 every file written; 1 a case that no reproducer is written for (its kind,
or not collected at the run's sweep), the others written; 2 unreadable input, an
unwritable --out, or bad usage; 3 the harness failed writing one (its exception in one
line), the others written.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .model import FAILED, KNOWN, load_run

WRITTEN_STATES = (FAILED, KNOWN)      # --all-failed: the failures, known issues included


def _env(run) -> dict:
    return run.env if isinstance(run.env, dict) else {}


def ids_to_write(run, case_ids: list[str], all_failed: bool) -> list[str]:
    if all_failed:
        return sorted(c.id for c in run.cases.values() if c.state in WRITTEN_STATES)
    return list(case_ids)


def main(a) -> int:
    """The ``repro`` command of ``python -m reports`` (``a``: its parsed arguments)."""
    me = f"{a.prog} repro"
    if bool(a.case_ids) == bool(a.all_failed):
        print(f"{me}: give CASE_ID(s) or --all-failed", file=sys.stderr)
        return 2
    run = load_run(a.run)
    ids = ids_to_write(run, a.case_ids, a.all_failed)
    if not ids:
        print(f"{me}: the run has no failed case and no known issue: nothing to write")
        return 0
    out = Path(a.out) if a.out else (Path(a.run) if Path(a.run).is_dir() else Path(a.run).parent) / "repro"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{me}: cannot write into {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    from fixtures import repro     # the harness, imported only when a file is written
    from fixtures.plugins.environment import survey
    writer = {"git_commit": survey.git_commit(), "sources_sha256": survey.sources_digest()}
    status = 0
    for cid in ids:
        try:
            name, text = repro.write(cid, _env(run), run.cases.get(cid), writer=writer)
        except (repro.Unsupported, repro.NotCollected) as e:
            print(f"{me}: {cid}: not written: {e}", file=sys.stderr)
            status = max(status, 1)
            continue
        except Exception as e:      # the harness's own fault: said in one line, not a traceback
            print(f"{me}: {cid}: not written: the harness failed writing it: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
            status = 3
            continue
        path = out / name
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            print(f"{me}: cannot write {path}: {e.strerror or e}", file=sys.stderr)
            return 2
        path.chmod(0o755)
        print(f"wrote {path} ({len(text.splitlines())} lines): python3 {path}")
    return status


def add_parser(sub) -> None:
    r = sub.add_parser("repro", help="a standalone reproducer (one Python file) of a case of a run")
    r.add_argument("run", help="run folder (its results.json and environment.json)")
    r.add_argument("case_ids", nargs="*", metavar="CASE_ID", help="a case id, as the report gives it")
    r.add_argument("--all-failed", action="store_true", help="one file per failed case of the run (known issues included)")
    r.add_argument("--out", help="folder to write into (default: RUN/repro)")
    r.set_defaults(fn=main)


__all__ = ["main", "add_parser"]

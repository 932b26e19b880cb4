"""The console script ``tmac-reports``: ``python -m reports`` from any folder.

The install (``pip install -e ".[cu13]"``) maps this one top-level module to the
checkout and makes no ``fixtures`` or ``reports`` package importable elsewhere
(pyproject.toml); this module puts its own folder, the checkout, first on the path of
its own process only and runs ``reports.__main__.main``.
"""
from __future__ import annotations

import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent


def main() -> int:
    if not (CHECKOUT / "reports" / "__main__.py").is_file():
        print(f"tmac-reports: {CHECKOUT} holds no reports/ folder (the checkout moved? "
              "reinstall with pip install -e)", file=sys.stderr)
        return 2
    if sys.path[:1] != [str(CHECKOUT)]:
        sys.path.insert(0, str(CHECKOUT))
    from reports.__main__ import main as reports_main
    return reports_main(prog="tmac-reports")


if __name__ == "__main__":
    sys.exit(main())

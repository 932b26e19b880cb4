"""Where the source documents are (not a test module)."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDS = Path(os.environ.get("TMA_SEEDS", ROOT.parent / "shared" / "seeds"))


def seed(prefix: str) -> str:
    """The text of the seed document whose name starts with ``prefix`` (e.g. "004")."""
    if not SEEDS.is_dir():
        pytest.skip(f"source documents not found at {SEEDS} (set TMA_SEEDS)")
    matches = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    assert matches, f"no seed {prefix}_*.txt in {SEEDS}"
    return matches[0].read_text(encoding="utf-8", errors="replace")

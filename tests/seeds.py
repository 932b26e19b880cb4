"""Where the source documents are (not a test module): the folder ``TMA_SEEDS`` names,
holding the excerpts ``000_*.txt`` ... ``004_*.txt`` (README, "Self-tests")."""
import os
from pathlib import Path

import pytest

SEEDS = Path(os.environ["TMA_SEEDS"]) if os.environ.get("TMA_SEEDS") else None


def seed(prefix: str) -> str:
    """The text of the seed document whose name starts with ``prefix`` (e.g. "004")."""
    if SEEDS is None:
        pytest.skip("the source documents are not here: set TMA_SEEDS to their folder "
                    "(README, 'Self-tests')")
    if not SEEDS.is_dir():
        pytest.fail(f"TMA_SEEDS={SEEDS} is not a folder", pytrace=False)
    matches = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    assert matches, f"no seed {prefix}_*.txt in {SEEDS}"
    return matches[0].read_text(encoding="utf-8", errors="replace")

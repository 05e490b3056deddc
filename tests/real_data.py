"""Where the real QA samples are: ``../shared/data/real`` beside the repository (its PROVENANCE.md
says what each file is). Tests read them there and skip, saying so, on a machine without them."""

from pathlib import Path

import pytest

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
if not REAL.is_dir():  # a checkout elsewhere on a machine that keeps shared/ at /work
    REAL = Path("/work/shared/data/real")
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="the real QA samples (../shared/data/real) are not here")

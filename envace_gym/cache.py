"""Where envace-gym keeps files it derives once (converted weights, bfcl-eval's result folders)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``$ENVACE_CACHE`` (default ``~/.cache/envace-gym``) joined with ``parts``, created."""
    path = Path(os.environ.get("ENVACE_CACHE", Path.home() / ".cache" / "envace-gym"), *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path

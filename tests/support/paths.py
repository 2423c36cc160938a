"""Where things are, for tests in any folder under tests/: the repository and its folders."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # tests/support: these modules, and the scripts tests run
TESTS = SUPPORT.parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"

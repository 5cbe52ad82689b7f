"""Where the repository is, for tests in any sub-directory of tests/ (docs/, deploy/,
meshhealth/ and the working directory of the commands they run)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

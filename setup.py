"""Build hook only (the project is configured in pyproject.toml): stamp the git revision the
package is built from into the built ``fedsim/_revision.txt``, so that an installed fedsim
(``pip install .``, a wheel) still records it in every results.json. Outside a git checkout
(a source distribution) nothing is stamped and results.json says null."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def _revision(root: Path) -> str | None:
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not rev:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


class BuildWithRevision(build_py):
    def run(self):
        super().run()
        rev = _revision(Path(__file__).resolve().parent)
        if rev and not self.dry_run:
            target = Path(self.build_lib) / "fedsim" / "_revision.txt"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(rev + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildWithRevision})

"""The Makefile's editable install, as a fresh clone runs it: setuptools' compat mode (kept
for the reason the Makefile and docs/architecture.md give) without its deprecation box."""

from __future__ import annotations

import re
import subprocess
import venv
from pathlib import Path

from .conftest import ROOT, STEP_TIMEOUT_S, _source_copy, clean_env


def test_the_compat_editable_install_prints_no_deprecation_box(tmp_path: Path) -> None:
    """Issue 44: every fresh clone's `make` printed setuptools' "Compat editable installs"
    box. The recipe is run as the Makefile writes it (its dependencies left out: --no-deps)."""
    makefile = (ROOT / "Makefile").read_text()
    quiet = re.search(r'^COMPAT_QUIET := (\w+)="([^"]+)"$', makefile, re.M)
    assert quiet is not None
    recipe = next(line for line in makefile.splitlines() if "editable_mode=compat" in line)
    assert recipe.strip().startswith("$(COMPAT_QUIET) $(PY) -m pip install -q -e '.[dev]'")
    source = _source_copy(tmp_path / "clone")
    venv.create(tmp_path / "env", with_pip=True, symlinks=True)
    python = tmp_path / "env" / "bin" / "python"
    result = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "-e",
            ".",
            "--config-settings",
            "editable_mode=compat",
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        env={**clean_env(), quiet.group(1): quiet.group(2)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Compat editable installs" not in result.stdout + result.stderr
    assert "!!" not in result.stderr
    paths = [p.read_text() for p in (tmp_path / "env").glob("lib/python*/site-packages/*.pth")]
    assert any(str(source) in text for text in paths), paths  # compat: the checkout's path

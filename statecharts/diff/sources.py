"""The two machines to compare: ``MODULE:NAME``, a JSON/YAML file, or ``git:REV:PATH`` (a
JSON/YAML machine file as committed at a revision of the repository the command runs in).

A file's guards, actions, actors and delays get placeholder implementations that never run
(as for drawing): a diff compares names and structure, not code.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ..errors import MachineDefinitionError
from ..machine import Machine
from ..render.source import SourceError, load_machine_for_drawing

GIT_PREFIX = "git:"
_FILE_SUFFIXES = (".json", ".yaml", ".yml")
_GIT_TIMEOUT_S = 60


def load_machine_for_diff(spec: str, cwd: Path | None = None) -> Machine:
    """The machine ``spec`` names; SourceError (naming ``spec``) when it cannot be read."""
    if not spec.startswith(GIT_PREFIX):
        return load_machine_for_drawing(spec)
    rev, _, path = spec[len(GIT_PREFIX) :].partition(":")
    if not rev or not path:
        raise SourceError(f"{spec!r}: write git:REV:PATH, e.g. git:HEAD~1:machines/order.json")
    if not path.endswith(_FILE_SUFFIXES):
        raise SourceError(
            f"{spec}: only JSON/YAML machine files can be read from git (a "
            "Python module of another revision is not imported)"
        )
    text = git_show(rev, path, cwd)
    with tempfile.TemporaryDirectory(prefix="statecharts-diff-") as folder:
        file = Path(folder) / Path(path).name
        file.write_bytes(text)
        try:
            return load_machine_for_drawing(str(file))
        except MachineDefinitionError as exc:
            raise SourceError(f"{spec}: {exc}") from exc


def git_show(rev: str, path: str, cwd: Path | None = None) -> bytes:
    """The bytes of ``path`` at ``rev`` (``git show REV:PATH``), path relative to the
    repository's top; SourceError with git's own message when it fails."""
    if rev.startswith("-"):
        raise SourceError(f"git:{rev}:{path}: a revision does not start with '-'")
    try:
        result = subprocess.run(
            ["git", "show", f"{rev}:{path}"],
            cwd=cwd,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SourceError(f"git:{rev}:{path}: the git program is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise SourceError(f"git:{rev}:{path}: git did not answer in {_GIT_TIMEOUT_S} s") from exc
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()
        raise SourceError(f"git:{rev}:{path}: {message}")
    return result.stdout

"""The machines of a ``machines/`` folder as committed at a git revision, for
``statecharts diagrams --diff-base REV``: what a pull request changes, machine by machine.

The folder at REV is extracted (``git archive``) into a temporary directory and imported there
by a separate Python process (another revision's modules must not replace this process's own),
which prints each machine's config with its implementations reduced to their names. Both sides
are then rebuilt the same way, with placeholder implementations, so only the definitions are
compared.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..machine import Machine
from ..render.source import SourceError, machine_from_config

_TIMEOUT_S = 120


def machines_at(rev: str, machines_dir: Path) -> dict[str, Machine]:
    """The machines (by diagram stem) that ``machines_dir`` exposes at ``rev``; SourceError
    naming the revision when git or the import fails."""
    folder = machines_dir.resolve()
    top = _git(["rev-parse", "--show-toplevel"], folder).decode().strip()
    relative = folder.relative_to(top).as_posix()
    archive = _git(["archive", "--format=tar", rev, relative], Path(top))
    with tempfile.TemporaryDirectory(prefix="statecharts-base-") as work:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(work, filter="data")
        return _imported(Path(work) / relative, rev)


def machines_now(machines_dir: Path) -> dict[str, Machine]:
    """The working tree's machines, rebuilt like ``machines_at``'s (names, no code)."""
    from ..render.diagrams import discover

    return {e.stem: _rebuilt(_plain(e.machine), e.stem) for e in discover(machines_dir)}


def _imported(folder: Path, rev: str) -> dict[str, Machine]:
    try:
        result = subprocess.run(
            [sys.executable, "-m", "statecharts.diff.revisions", str(folder)],
            cwd=folder.parent,
            capture_output=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SourceError(f"machines at {rev}: importing took over {_TIMEOUT_S} s") from exc
    if result.returncode != 0:
        raise SourceError(
            f"machines at {rev}: {result.stderr.decode(errors='replace').strip()[-2000:]}"
        )
    dumped = orjson.loads(result.stdout)
    return {stem: _rebuilt(item, f"{stem} at {rev}") for stem, item in dumped.items()}


def _rebuilt(item: Mapping[str, Any], where: str) -> Machine:
    config = dict(item["config"])
    if isinstance(config.get("context"), str):  # a function of the input, by its name
        config["context"] = _computed_context
    machine = machine_from_config(config, where)
    version = item.get("version")
    return Machine(
        machine.config, machine.implementations, version if isinstance(version, str) else None
    )


def _computed_context(*_: Any) -> Any:
    raise RuntimeError("placeholder: this machine was rebuilt only to compare it")


def _plain(machine: Machine) -> dict[str, Any]:
    """A machine's config and version label as JSON data, implementations as their names."""
    plain: dict[str, Any] = orjson.loads(
        orjson.dumps({"config": machine.config, "version": machine.version}, default=_name)
    )
    return plain


def _name(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    kind = getattr(value, "type", None)
    if isinstance(kind, str):
        return {"type": kind}
    return str(getattr(value, "__name__", None) or type(value).__name__)


def _git(args: list[str], cwd: Path) -> bytes:
    try:
        result = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=_TIMEOUT_S, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise SourceError(f"git {' '.join(args)}: {exc}") from exc
    if result.returncode != 0:
        raise SourceError(f"git {' '.join(args)}: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def _dump(folder: Path) -> bytes:
    """What the child process prints: each discovered machine as plain data."""
    from ..render.diagrams import discover

    return orjson.dumps({e.stem: _plain(e.machine) for e in discover(folder)})


if __name__ == "__main__":
    sys.stdout.buffer.write(_dump(Path(sys.argv[1])))

"""Screenshots of the three pages (runs list, a run, a workflow), shared by the browser tests
and by `python -m tests.ui.screenshots`, which regenerates docs/img/ui-*.png from fresh demo
data (a new SQLite file, the UI in a subprocess, the system Chromium)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC_IMAGES = ROOT / "docs" / "img"


def take_screenshots(
    page: Any, base_url: str, run_id: str, workflow: str, out_dir: Path
) -> list[Path]:
    """ui-runs.png, ui-run.png, ui-workflow.png of the server at `base_url`, in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    shots = [
        ("ui-runs.png", "/"),
        ("ui-run.png", f"/runs/{run_id}"),
        ("ui-workflow.png", f"/workflows/{workflow}"),
    ]
    paths = []
    for name, path in shots:
        page.goto(base_url + path)
        page.wait_for_load_state("networkidle")
        target = out_dir / name
        page.screenshot(path=str(target), full_page=True)
        paths.append(target)
    return paths


def main() -> int:
    """Regenerate the doc screenshots from fresh demo data."""
    from playwright.sync_api import sync_playwright

    from tests.ui.browser import CHROMIUM_ARGS, chromium_path
    from tests.ui.demo import fill
    from tests.ui.processes import ui_server

    with tempfile.TemporaryDirectory(prefix="statecharts-ui-shots-") as tmp:
        workdir = Path(tmp)
        url = f"sqlite:///{workdir / 'runs.db'}"
        demo = fill(url)
        with ui_server(url, workdir) as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page()
            for path in take_screenshots(page, server.url, demo.retrying, "order", DOC_IMAGES):
                print(path.relative_to(ROOT))
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

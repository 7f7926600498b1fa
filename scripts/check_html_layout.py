"""Check mapo's HTML pages in a real browser: headless Chromium at a desktop and a phone width.

For each page and width it saves a screenshot and measures whether the page scrolls sideways
(the document wider than the viewport). Exits 1 naming every page and width that does.

    python scripts/check_html_layout.py runs/<run>/report.html runs/<run>/transcripts.html \
        --out docs/img/layout

Needs a Chromium binary (Debian: `apt-get install chromium`; or --chromium PATH). It is a
documented check, not part of the test suite: CI machines have no browser.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTHS = {"desktop": 1280, "phone": 390}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Headless Chromium will not make a window narrower than 500 px, so the page is shown in an
# iframe of the width under test. The probe, appended to a copy of the page, measures it after
# layout and posts the figures to the host page, which writes them where --dump-dom prints them.
PROBE = """<script>
window.addEventListener('load', () => {
  const wide = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1);
  parent.postMessage(document.documentElement.scrollWidth + ' ' + innerWidth + ' ' +
    wide.slice(0, 3).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')).join(','), '*');
});
</script>"""
HOST = """<!doctype html><html><head><style>body{{margin:0}}iframe{{border:0;width:{width}px;height:{height}px}}</style>
<script>addEventListener('message', e => {{ const m = document.createElement('meta'); m.id = 'layout-probe';
m.content = e.data; document.head.appendChild(m); }});</script></head>
<body><iframe src="{src}"></iframe></body></html>"""


def chromium(path: str | None) -> str:
    found = path or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        sys.exit("no Chromium found: apt-get install chromium, or give --chromium PATH")
    return found


def host_page(folder: Path, page: Path, width: int, height: int, probe: bool) -> Path:
    """A page holding `page` (a probed copy when `probe`) in an iframe `width` px wide."""
    shown = folder / f"probed-{page.name}" if probe else page.resolve()
    if probe:
        shown.write_text(page.read_text(encoding="utf-8") + PROBE, encoding="utf-8")
    host = folder / f"host-{width}-{page.stem}.html"
    host.write_text(HOST.format(width=width, height=height, src=shown.as_uri()), encoding="utf-8")
    return host


def measure(browser: str, page: Path, width: int, user_data: str) -> tuple[int, int, str]:
    """(document scroll width, viewport width, the first elements wider than the viewport)."""
    with tempfile.TemporaryDirectory() as tmp:
        host = host_page(Path(tmp), page, width, 900, probe=True)
        dom = subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={user_data}", f"--window-size={max(width, 500)},900",
             "--allow-file-access-from-files", "--virtual-time-budget=5000", "--dump-dom", host.as_uri()],
            capture_output=True, text=True, timeout=120,
        ).stdout
    found = re.search(r'id="layout-probe" content="(\d+) (\d+) ?([^"]*)"', dom)
    if not found:
        sys.exit(f"{page}: the layout probe did not run (Chromium printed no DOM with it)")
    return int(found.group(1)), int(found.group(2)), found.group(3)


def screenshot(browser: str, page: Path, width: int, out: Path, user_data: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        host = host_page(Path(tmp), page, width, 1600, probe=False)
        subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={user_data}", f"--window-size={max(width, 500)},1600",
             "--allow-file-access-from-files", "--virtual-time-budget=5000", f"--screenshot={out.resolve()}",
             host.as_uri()],
            capture_output=True, timeout=120, check=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=Path, help="HTML files to check")
    parser.add_argument("--out", type=Path, default=Path("layout-check"), help="folder for the screenshots")
    parser.add_argument("--chromium", help="the browser binary (default: chromium on PATH)")
    args = parser.parse_args()
    browser = chromium(args.chromium)
    args.out.mkdir(parents=True, exist_ok=True)
    failures = []
    with tempfile.TemporaryDirectory() as user_data:
        for page in args.pages:
            for label, width in WIDTHS.items():
                scroll, viewport, wide = measure(browser, page, width, user_data)
                shot = args.out / f"{page.stem}-{label}.png"
                screenshot(browser, page, width, shot, user_data)
                ok = scroll <= viewport
                print(f"{page} at {width}px: document {scroll}px wide, viewport {viewport}px: "
                      f"{'no sideways scroll' if ok else 'SCROLLS SIDEWAYS (' + wide + ')'}; screenshot {shot}")
                if not ok:
                    failures.append(f"{page.name}@{width}")
    if failures:
        print("sideways scroll on: " + ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

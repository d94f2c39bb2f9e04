"""The documentation site builds (`mkdocs build --strict`, as CI runs it) and every page of its nav
comes out with its title; the API reference lists the entry points. Skipped only where the docs
extra (`pip install ".[docs]"`) is not installed."""

from __future__ import annotations

import html
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _absent(module: str) -> bool:
    try:  # a dotted name whose parent package is missing raises rather than answering None
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python") if _absent(m)]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f'the docs extra is not installed (no {", ".join(MISSING)}): pip install ".[docs]"'
)
# anchors (ids) the API reference must hold: the entry points, the algorithm protocol and its registry
API_NAMES = ("marljax.train", "marljax.train.loop.train", "marljax.load_policy", "marljax.algos.api.Trainer",
             "marljax.algos.api.AlgorithmSpec", "marljax.algos.registry.register")  # fmt: skip


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip


def nav_pages(nav: list) -> list[tuple[str, str]]:
    """(nav title, markdown path) of every page in mkdocs.yml's nav, depth first."""
    pages = []
    for item in nav:
        for title, value in item.items():
            pages += nav_pages(value) if isinstance(value, list) else [(title, value)]
    return pages


def html_path(site: Path, page: str) -> Path:
    stem = page.removesuffix(".md")
    return site / "index.html" if stem == "index" else site / stem / "index.html"


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("¶", "").strip()


def page_problems(site: Path, pages: list[tuple[str, str]]) -> list[str]:
    """What is wrong with the built site: a nav page with no HTML file, a <title> that is not the nav
    title, or an <h1> that is not the markdown page's own first heading."""
    problems = []
    for title, page in pages:
        out = html_path(site, page)
        if not out.exists():
            problems.append(f"{page}: no {out.relative_to(site)}")
            continue
        built = out.read_text()
        head = re.search(r"<title>(.*?)</title>", built, re.S)
        if page == "index.md":  # the home page's <title> is the site's name
            title = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_name"]
        if not head or not text_of(head.group(1)).startswith(title):
            problems.append(f"{page}: <title> {head and text_of(head.group(1))!r} is not {title!r}")
        source = (ROOT / "docs" / page).read_text()
        if page == "contributing.md":  # included from the repository root
            source = (ROOT / "CONTRIBUTING.md").read_text()
        heading = re.search(r"^# (.+)$", source, re.M)
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", built, re.S)
        want = heading and text_of(re.sub(r"`([^`]*)`", r"\1", heading.group(1)))
        if not h1 or text_of(h1.group(1)) != want:
            problems.append(f"{page}: <h1> {h1 and text_of(h1.group(1))!r} is not {want!r}")
    return problems


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(scope="module")
def pages() -> list[tuple[str, str]]:
    return nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


def test_every_nav_page_is_built_with_its_title(site, pages):
    assert len(pages) >= 20
    assert not page_problems(site, pages)


def test_every_docs_page_is_in_the_nav(pages):
    listed = {page for _, page in pages}
    assert not sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")
                      if str(p.relative_to(ROOT / "docs")) not in listed)  # fmt: skip


def test_the_api_reference_lists_the_entry_points(site):
    built = (site / "api" / "index.html").read_text()
    assert not [name for name in API_NAMES if f'id="{name}"' not in built]
    shown = text_of(built)
    assert "marljax.train.loop.train" in shown and "marljax.load_policy" in shown


def render(chromium: str, page: Path) -> str:
    """The DOM headless Chromium holds after loading `page` (its scripts run)."""
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_every_page_renders_in_headless_chromium(site, pages, tmp_path):
    """What a browser shows, not only what mkdocs wrote: each nav page's DOM after Chromium loaded
    it has its title and heading, and the API reference its entry points (`.ci/run` installs Debian's
    chromium where it is missing)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    for _, page in pages:
        rendered = tmp_path / html_path(site, page).relative_to(site)
        rendered.parent.mkdir(parents=True, exist_ok=True)
        rendered.write_text(render(chromium, html_path(site, page)))
    assert not page_problems(tmp_path, pages)
    api = (tmp_path / "api" / "index.html").read_text()
    assert not [name for name in API_NAMES if f'id="{name}"' not in api]


def test_a_missing_or_mistitled_page_is_detected(site, pages):
    """Negative controls: a nav page with no HTML, and one whose title differs, are both reported."""
    title, page = pages[1]
    assert page_problems(site, [("Nowhere", "nowhere.md")]) == ["nowhere.md: no nowhere/index.html"]
    wrong = page_problems(site, [("Not " + title, page)])
    assert len(wrong) == 1 and "<title>" in wrong[0]


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """Negative control for the CI command: --strict turns a link to a missing page into a failure."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the guide](guide.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nnav:\n  - Home: index.md\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "guide.md" in done.stdout + done.stderr

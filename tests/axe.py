"""axe-core in the browser tests: the vendored script (no download at run time) and the one way
of asking it for what a test forbids, the serious and critical violations of the page now
shown. The every-page walk (tests/test_browser_every_page.py) runs its own rule selection."""

from __future__ import annotations

from pathlib import Path

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"

_VIOLATIONS_JS = (
    "() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map("
    "v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target)})))"
)


def serious_axe_violations(page) -> list[dict]:
    """axe's serious and critical violations on `page` (id, impact, the first three nodes)."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(_VIOLATIONS_JS)
    return [v for v in found if v["impact"] in ("serious", "critical")]

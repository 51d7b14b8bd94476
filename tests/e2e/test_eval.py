"""`refusal-guard eval --simulate` on a machine with no key and no network:
it prints the summary and writes the report, and the report's HTML page,
opened from disk in a real browser (Debian's chromium through Playwright),
draws its charts with the numbers of report.json and fetches nothing."""

import json
import os
import shutil
import subprocess

from conftest import ARTEFACTS, open_page, refusal_guard_binary

# What the page shows a share as: one decimal, as the Markdown summary.
def pct(share):
    return "–" if share is None else f"{100 * share:.1f}%"


def pp(value):
    return ("+" if value >= 0 else "") + f"{100 * value:.1f} pp"


def run_eval(tmp_path):
    out = tmp_path / "eval"
    # No provider key in sight: --simulate needs none.
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [str(refusal_guard_binary()), "eval", "--simulate", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# refusal-guard eval"), done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["complete"] and report["run"]["contract_violations"] == 0
    assert (out / "report.md").read_text() == done.stdout
    return out, report


def merged(report, variant, category):
    """A category's cells of one variant, every provider together."""
    cells = [c for c in report["cells"] if c["variant"] == variant and c["category"] == category]
    refused = sum(c["refused"]["count"] for c in cells)
    recovered = sum(c["recovered"]["count"] for c in cells)
    return recovered / refused if refused else None


def test_eval_report_page_draws_the_json(browser, tmp_path):
    out, report = run_eval(tmp_path)
    page_path = out / "report.html"
    page, errors, requests = open_page(browser, page_path.as_uri(), "eval-report.png", ready="#cell-rows")
    assert errors == []
    assert requests == [page_path.as_uri()]
    variants = [v["name"] for v in report["run"]["variants"]]
    categories = sorted({c["category"] for c in report["cells"]})
    assert len(variants) == 2 and len(categories) >= 2

    # Recovered share per category and variant: a bar each, its height the share.
    bars = page.locator("#recovered-chart g.bar")
    assert bars.count() == len(variants) * (1 + len(categories))
    plot = float(page.locator("#recovered-chart").get_attribute("data-plot-height"))
    for variant in variants:
        overall = next(c for c in report["variants"] if c["variant"] == variant)
        expected = {"all": overall["recovered"]["share"]}
        expected.update({c: merged(report, variant, c) for c in categories})
        for category, share in expected.items():
            bar = page.locator(f'#recovered-chart g.bar[data-variant="{variant}"][data-category="{category}"]')
            assert bar.count() == 1
            drawn = bar.get_attribute("data-share")
            assert (drawn == "" and share is None) or abs(float(drawn) - share) < 1e-9, (variant, category)
            heights = bar.locator("rect[data-step]").evaluate_all(
                "rects => rects.reduce((sum, r) => sum + r.height.baseVal.value, 0)"
            )
            assert abs(heights - (share or 0) * plot) < 0.01, (variant, category, heights, share)
    # Some bar is drawn at all: the report recovers something.
    assert page.locator("#recovered-chart rect[data-step]").count() > 0

    # Cost against recovery: a large point per variant at its numbers.
    points = page.locator("#cost-chart circle.variant-point")
    assert points.count() == len(variants)
    for cell in report["variants"]:
        point = page.locator(f'#cost-chart circle.variant-point[data-variant="{cell["variant"]}"]')
        assert abs(float(point.get_attribute("data-share")) - cell["recovered"]["share"]) < 1e-9
        assert abs(float(point.get_attribute("data-tokens")) - cell["added_tokens"]["per_refusal"]) < 1e-9

    # Every cell's numbers in the table, as report.json has them.
    for cell in report["variants"] + report["cells"]:
        row = page.locator(
            f'#cell-rows tr[data-variant="{cell["variant"]}"][data-category="{cell["category"]}"]'
            f'[data-provider="{cell["provider"]}"]'
        )
        assert row.count() == 1
        field = lambda name: row.locator(f'td[data-field="{name}"]').inner_text().strip()
        assert field("calls") == str(cell["calls"])
        assert field("refused") == pct(cell["refused"]["share"])
        assert field("recovered") == pct(cell["recovered"]["share"])
        assert field("dead") == pct(cell["dead"]["share"])
        for shape in ["empty", "partial", "error"]:
            assert field(shape) == str(cell["refused_by_shape"][shape]["count"])
        for step in ["server_side", "chain", "rescue", "continuation"]:
            assert field(step) == str(cell["recovered_by_step"][step]["count"])
        assert field("added tokens") == str(cell["added_tokens"]["total"])

    # The comparison: each difference and its interval.
    comparison = report["comparison"]
    for d in comparison["rows"]:
        row = page.locator(f'#comparison-rows tr[data-category="{d["category"]}"][data-metric="{d["metric"]}"]')
        assert row.count() == 1
        assert row.locator('td[data-field="difference"]').inner_text().strip() == pp(d["difference"])
        interval = f'{pp(d["interval"]["low"])} to {pp(d["interval"]["high"])}'
        assert row.locator('td[data-field="interval"]').inner_text().strip() == interval
        assert row.locator(".verdict").inner_text().strip() == d["verdict"]
    assert errors == []
    page.close()
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(page_path, ARTEFACTS / "eval-report.html")

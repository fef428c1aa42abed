"""docs/guide/python.md runs as written, and its figures are what it computes."""

import pathlib
import re

import pytest

from conftest import ROOT


def guide_blocks():
    text = (ROOT / "docs" / "guide" / "python.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_guide_runs_and_its_figures_hold(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    import matplotlib

    matplotlib.use("Agg")
    (ROOT / "target" / "readme").mkdir(parents=True, exist_ok=True)
    ns = {}
    for block in guide_blocks():
        exec(compile(block, "docs/guide/python.md", "exec"), ns)
    assert ns["routed"].shape == (103, 24, 8)
    lru = ns["lru"]
    table = (ROOT / "docs" / "guide" / "python.md").read_text()
    # every row of the guide's LRU table, to the digits it prints
    rows = re.findall(r"^\| (e\S+) \| (\d+)% \| ([\d.]+) \| ([\d.]+) \|$", table, re.M)
    assert len(rows) == len(lru) == 10
    for mech, budget, page_ins, tps in rows:
        r = lru[(lru["inputs.policy"] == mech) & (lru["retention.budget"] == f"{budget}%")]
        assert f"{r['cache.page_ins_per_token'].item():.1f}" == page_ins
        assert f"{r['timing.tokens_per_s'].item():.1f}" == tps
    best = ns["p"]["recommended_row"]
    assert (best["mechanism"], best["fit"]["budget_units"], best["fit"]["experts_kept"]) == ("e2:hot", 376, 752)
    assert f"{best['fit']['tokens_per_s']:.1f}" == "70.9"
    assert pathlib.Path(ROOT / "target" / "readme" / "python-sweep.png").stat().st_size > 0

"""The service's status headline (aegisbench/service/status.py): what ``submit --wait``, the
submission page and ``/api/v1/submissions/{id}/row`` show per source. On the fire-spread track it
lists seed 003's ECE (``ece_seed003``) beside our pooled ECE, from the board's floor view and,
for a row not on the board, from the evaluator's results, with the same values both ways."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from aegisbench.cli import main
from aegisbench.service import status as st


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A fire-spread reference forecaster scored by the evaluator, and the board built from it."""
    from aegisbench.builders.firespread import build_firespread_repo
    from aegisbench.forecasters.baselines import write_baselines
    root = tmp_path_factory.mktemp("headline")
    params = {"grid": [16, 16], "realizations": 12, "s_levels": [0, 30], "initial_conditions": 4,
              "test_initial_conditions": [2, 3], "realizations_per_shard": 6,
              "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}
    build_firespread_repo(params, "0.1.0", root / "repo")
    write_baselines(root / "repo", root / "subs", names=("persistence",))
    results = root / "store" / "results"
    assert main(["evaluate", str(root / "subs" / "firespread_persistence"), "--dataset", str(root / "repo"),
                 "--results", str(results), "--n-resamples", "20"]) == 0
    assert main(["leaderboard", "--results", str(results), "--dataset", str(root / "repo"),
                 "--out", str(root / "board")]) == 0
    return root


def _host(leaderboard, results):
    return SimpleNamespace(project=SimpleNamespace(leaderboard=leaderboard, hosted_results=results))


def test_the_fire_spread_headline_lists_seed_003s_ece_beside_ours(scored, tmp_path):
    assert st.HEADLINE["firespread"] == ("f1", "brier", "ece", "ece_seed003")
    sid = "firespread_persistence"
    on_board = st.headline(_host(scored / "board", scored / "store" / "results"), sid, "firespread")
    assert on_board, "no headline rows from the floor view"
    sources = {r["source"] for r in on_board}
    for source in sources:
        metrics = [r["metric"] for r in on_board if r["source"] == source]
        assert metrics == ["brier", "ece", "ece_seed003", "f1"], (source, metrics)
    seed = [r for r in on_board if r["metric"] == "ece_seed003"]
    assert all(r["floor"] is not None and 0.0 <= r["floor"] <= 1.0 and r["floor_text"] != "n/a" for r in seed)
    # a row not on the board: the same metrics and values from the evaluator's results
    empty = tmp_path / "board"
    empty.mkdir()
    off_board = st.headline(_host(empty, scored / "store" / "results"), sid, "firespread")
    key = lambda r: (r["source"], r["metric"])  # noqa: E731
    assert sorted(map(key, off_board)) == sorted(map(key, on_board))
    by = {key(r): r for r in off_board}
    for r in on_board:
        assert by[key(r)]["floor"] == pytest.approx(r["floor"]) and by[key(r)]["clean"] == pytest.approx(r["clean"])


def test_the_detection_headlines_are_unchanged(scored):
    assert st.HEADLINE["sar"] == st.HEADLINE["smoke"] == ("recall", "precision", "f1")
    # the ECEs are the fire-spread track's headline only
    rows = st.headline(_host(scored / "nowhere", scored / "store" / "results"), "firespread_persistence", "sar")
    assert rows and {r["metric"] for r in rows} <= {"recall", "precision", "f1"}


def test_no_results_no_headline(scored, tmp_path):
    shutil.copytree(scored / "board", tmp_path / "board")
    assert st.headline(_host(tmp_path / "board", tmp_path / "none"), "unknown_id", "firespread") == []

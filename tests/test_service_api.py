"""The hosted leaderboard through its real parts (issue 30): ``aegisbench serve`` and ``aegisbench
worker`` as subprocesses on 127.0.0.1 over a temporary project, SQLite in WAL mode, real HTTP.

An upload is validated, stored under an id the server assigns, scored once by a worker with the
evaluator's own code (the same numbers as ``aegisbench evaluate`` on the same folder), and shows
on the page with the dataset digest and evaluator version it was scored with; every accepted form
(Parquet, COCO JSON files, COCO or YOLO as a zip) scores like ``evaluate``; a team's file cannot
name another team; a team sees only its own submissions; every revision of the board can be
rebuilt byte for byte, and with versioning on each one is a git commit of the DVC-tracked store.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import httpx
import polars as pl
import pytest
import yaml

from _evalkit import gt_table
from _servicekit import (Server, Worker, add_team, api, cli, coco_files, files_of, gt_submission, make_project,
                         upload, wait_final, wait_for, yolo_files, zip_bytes)
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.predictions import write_parquet_predictions

ID = re.compile(r"sub-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def hosted(tmp_path_factory, repo, index):
    root = make_project(tmp_path_factory.mktemp("hosted") / "proj", repo,
                        {"phases": [{"name": "open", "daily_limit": 50, "total_limit": 100}]})
    teams = {name: add_team(root, name) for name in ("Lab A", "Lab B")}
    server, worker = Server(root), Worker(root)
    yield root, server, worker, teams
    worker.stop()
    server.stop()


def local_metrics(tmp_path, sid: str, index, build) -> pl.DataFrame:
    """``aegisbench evaluate``'s metrics of a folder named ``sid`` made by ``build(folder)``."""
    folder = tmp_path / "local" / sid
    build(folder)
    out = evaluate_submission(folder, index.repo, tmp_path / "local-results",
                              EvaluationParams(bootstrap=BootstrapParams(n_resamples=20), warp_grid=3))
    return pl.read_parquet(out / "metrics.parquet")


def served_metrics(root, sid: str) -> pl.DataFrame:
    return pl.read_parquet(root / "hosted" / "store" / "results" / sid / "metrics.parquet")


def test_an_upload_is_scored_once_and_shows_on_the_page(hosted, index, tmp_path):
    root, server, _, teams = hosted
    folder = gt_submission(tmp_path / "mine", index, name="GT boxes", team="Lab A")
    r = upload(server, teams["Lab A"], files_of(folder))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert ID.fullmatch(sid) and r.json()["status"] == "queued"
    stored = root / "hosted" / "store" / "submissions" / sid
    assert sorted(p.name for p in stored.iterdir()) == ["predictions.parquet", "submission.yaml"]
    assert all(not p.stat().st_mode & 0o222 for p in stored.iterdir())  # read-only once stored
    row = wait_final(server, teams["Lab A"], sid)
    assert (row["status"], row["attempts"], row["charged"], row["standing"]) == ("scored", 1, True, True)
    assert row["dataset_digest"] == index.digest and row["evaluator_version"]
    # the same numbers as `aegisbench evaluate` on the same folder
    mine = local_metrics(tmp_path, sid, index, lambda f: shutil.copytree(stored, f))
    assert served_metrics(root, sid).equals(mine)
    # on the page and in the board's Parquet, naming the digest and evaluator it was scored with
    page = httpx.get(server.url + "/").text
    assert sid in page and f"<code>{index.digest[:12]}</code> · evaluator {row['evaluator_version']}" in page
    board = pl.read_parquet(root / "hosted" / "leaderboard" / "leaderboard.parquet").filter(pl.col("submission") == sid)
    assert board.height and set(board["dataset_digest"]) == {index.digest} and set(board["team"]) == {"Lab A"}
    # its log, its results and the team's row
    kinds = [e["kind"] for e in api(server, teams["Lab A"], f"/api/v1/submissions/{sid}/log")["events"]]
    assert kinds[:3] == ["uploaded", "queued", "started"] and kinds.count("scored") == 0 and "published" in kinds
    res = api(server, teams["Lab A"], f"/api/v1/submissions/{sid}/results")
    assert res["provenance"]["dataset_digest"] == index.digest and len(res["metrics"]) == mine.height
    rows = api(server, teams["Lab A"], f"/api/v1/submissions/{sid}/row")["rows"]
    recall = next(r for r in rows if r["metric"] == "recall")
    clean = mine.filter((pl.col("metric") == "recall") & (pl.col("config") == "clean"))["value"][0]
    assert recall["clean"] == pytest.approx(clean)
    # uploading the same content again is the same submission, not charged twice
    again = upload(server, teams["Lab A"], files_of(folder))
    assert again.status_code == 200 and again.json() == {"id": sid, "status": "scored", "duplicate": True}


def test_the_team_is_the_tokens_whatever_the_file_says(hosted, index, tmp_path):
    root, server, _, teams = hosted
    folder = gt_submission(tmp_path / "x", index, name="impostor", team="Lab A")
    r = upload(server, teams["Lab B"], files_of(folder))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    wait_final(server, teams["Lab B"], sid)
    prov = json.loads((root / "hosted" / "store" / "results" / sid / "provenance.json").read_text())
    assert prov["team"] == "Lab B"
    stored = yaml.safe_load((root / "hosted" / "store" / "submissions" / sid / "submission.yaml").read_text())
    assert stored["team"] == "Lab B"
    log = api(server, teams["Lab B"], f"/api/v1/submissions/{sid}/log")["events"]
    assert any("said team 'Lab A'" in e["text"] for e in log)


def test_a_team_sees_only_its_own_submissions(hosted, index, tmp_path):
    _, server, _, teams = hosted
    folder = gt_submission(tmp_path / "b", index, name="B only")
    sid = upload(server, teams["Lab B"], files_of(folder)).json()["id"]
    listed_a = {s["id"] for s in api(server, teams["Lab A"], "/api/v1/submissions")["submissions"]}
    assert sid not in listed_a
    for path in ("", "/log", "/results", "/row"):
        other = httpx.get(f"{server.url}/api/v1/submissions/{sid}{path}",
                          headers={"Authorization": f"Bearer {teams['Lab A']}"})
        unknown = httpx.get(f"{server.url}/api/v1/submissions/sub-000000000000{path}",
                            headers={"Authorization": f"Bearer {teams['Lab A']}"})
        assert other.status_code == unknown.status_code == 404
        assert other.json()["error"].replace(sid, "X") == unknown.json()["error"].replace("sub-000000000000", "X")
    sel = httpx.post(f"{server.url}/api/v1/submissions/{sid}/select",
                     headers={"Authorization": f"Bearer {teams['Lab A']}"})
    assert sel.status_code == 404


@pytest.mark.parametrize("form", ["coco_json", "coco_zip", "yolo_zip"])
def test_every_accepted_form_scores_like_evaluate(hosted, index, tmp_path, form):
    root, server, _, teams = hosted
    table = gt_table(index, "sar", score=lambda c, s, i, k: [0.9 - 0.1 * j for j in range(k)])
    meta = gt_submission(tmp_path / "meta", index, name=f"form {form}")
    parts = [("submission", ("submission.yaml", (meta / "submission.yaml").read_bytes()))]
    if form == "coco_json":
        members = coco_files(index, table, tmp_path / "gt")
        parts += [("predictions", (name, data)) for name, data in members.items()]
    elif form == "coco_zip":
        members = coco_files(index, table, tmp_path / "gt")
        parts.append(("predictions", ("coco.zip", zip_bytes(members, "predictions/"))))
    else:
        members = yolo_files(index, table)
        parts.append(("predictions", ("yolo.zip", zip_bytes(members))))
    r = upload(server, teams["Lab A"], parts)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert wait_final(server, teams["Lab A"], sid)["form"] == form.split("_")[0]
    stored = root / "hosted" / "store" / "submissions" / sid
    assert {p.relative_to(stored / "predictions").as_posix(): p.read_bytes()
            for p in (stored / "predictions").rglob("*") if p.is_file()} == members
    assert served_metrics(root, sid).equals(local_metrics(tmp_path, sid, index, lambda f: shutil.copytree(stored, f)))


def test_the_board_keeps_every_revision(hosted, index, tmp_path):
    root, server, _, teams = hosted
    ledger = root / "hosted" / "store" / "ledger.jsonl"
    before = len(ledger.read_text().splitlines())
    sids = []
    for k in range(2):
        table = gt_table(index, "sar", score=0.5 + 0.1 * k)
        folder = tmp_path / f"rev{k}"
        gt_submission(folder, index, name=f"revision {k}")
        write_parquet_predictions(table, folder / "predictions.parquet")
        sids.append(upload(server, teams["Lab A"], files_of(folder)).json()["id"])
        wait_final(server, teams["Lab A"], sids[-1])
        shutil.copytree(root / "hosted" / "leaderboard", tmp_path / f"published{k}")
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["revision"] for e in entries] == list(range(1, len(entries) + 1))
    mine = [e for e in entries[before:] if e["submission"] in sids]
    assert [e["submission"] for e in mine] == sids and all(e["event"] == "scored" for e in mine)
    # Lab A's latest scored submission stands for its track; the one before stood at its own revision
    assert sids[0] in mine[0]["standing"] and sids[0] not in mine[1]["standing"] and sids[1] in mine[1]["standing"]
    for k, e in enumerate(mine):
        out = tmp_path / f"rebuilt{k}"
        done = cli("hosted-board", "--project", str(root), "--revision", str(e["revision"]), "--out", str(out))
        assert "identical to the board published then" in done.stdout
        diff = subprocess.run(["diff", "-r", str(out), str(tmp_path / f"published{k}")], capture_output=True)
        assert diff.returncode == 0, diff.stdout[:2000]


def test_selected_standing_and_versioning_in_git_and_dvc(tmp_path, repo, index):
    """With ``standing: selected`` the team's choice stands; with versioning each revision is a
    git commit of the DVC-tracked store, from which the store of any revision comes back."""
    root = make_project(tmp_path / "proj", repo, {"phases": [{"name": "p", "standing": "selected"}],
                                                  "versioning": "dvc"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True)
    token = add_team(root, "Lab S")
    server, worker = Server(root), Worker(root)
    try:
        sids = []
        for k in range(2):
            folder = gt_submission(tmp_path / f"s{k}", index, name=f"choice {k}")
            write_parquet_predictions(gt_table(index, "sar", score=0.4 + 0.2 * k), folder / "predictions.parquet")
            sids.append(upload(server, token, files_of(folder)).json()["id"])
            wait_final(server, token, sids[-1])
        assert api(server, token, f"/api/v1/submissions/{sids[1]}")["standing"]
        r = httpx.post(f"{server.url}/api/v1/submissions/{sids[0]}/select",
                       headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        wait_for(lambda: api(server, token, f"/api/v1/submissions/{sids[0]}")["standing"], 60, 0.3, "the selection")
        page = httpx.get(server.url + "/").text
        assert sids[0] in page and sids[1] not in page

        def commits():
            out = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True).stdout
            return [m for m in out.splitlines() if m.startswith("hosted leaderboard revision")]
        log = wait_for(lambda: len(commits()) == 4 and commits(), 60, 0.3, "the commit of revision 4")
    finally:
        worker.stop()
        server.stop()
    assert log == [
        "hosted leaderboard revision 4: standing", f"hosted leaderboard revision 3: scored {sids[1]}",
        f"hosted leaderboard revision 2: scored {sids[0]}", "hosted leaderboard revision 1: standing"]
    # the store as it stood at revision 2 comes back from git + DVC: one submission, one results folder
    shutil.rmtree(root / "hosted" / "store")
    subprocess.run(["git", "checkout", "-q", "HEAD~2", "--", "hosted/store.dvc"], cwd=root, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "checkout", "-q", "hosted/store.dvc"], cwd=root, check=True)
    assert sorted(p.name for p in (root / "hosted/store/submissions").iterdir()) == [sids[0]]
    assert len((root / "hosted/store/ledger.jsonl").read_text().splitlines()) == 2


def test_submit_waits_for_the_row_and_the_api_is_described(hosted, index, tmp_path):
    _, server, _, teams = hosted
    folder = gt_submission(tmp_path / "cli", index, name="from the command line")
    run = cli("submit", str(folder), "--server", server.url, "--wait", env={"AEGISBENCH_TOKEN": teams["Lab B"]})
    lines = run.stdout.splitlines()
    sid = lines[0].split()[0]
    assert ID.fullmatch(sid) and lines[0] == f"{sid} accepted: queued"
    assert f"{sid} synthetic_sar recall: clean 1.000; floor 1.000 [1.000, 1.000] at " in run.stdout
    assert "upload cli:" in run.stderr and f"{sid}: scored" in run.stderr
    spec = httpx.get(server.url + "/openapi.json").json()
    assert {"/health", "/api/v1/limits", "/api/v1/submissions", "/api/v1/submissions/{sid}",
            "/api/v1/submissions/{sid}/log", "/api/v1/submissions/{sid}/results", "/api/v1/submissions/{sid}/row",
            "/api/v1/submissions/{sid}/select"} <= set(spec["paths"])
    form = spec["paths"]["/api/v1/submissions"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert set(form["schema"]["required"]) == {"submission", "predictions"}
    assert httpx.get(server.url + "/docs").status_code == 200
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["dataset_digest"] == index.digest and health["workers"] >= 1

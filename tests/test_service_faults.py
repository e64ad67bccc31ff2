"""The submission server and its workers under load and faults (issue 30), all real processes:

* 4 teams x 5 concurrent uploads against a daily limit of 3: exactly 3 accepted per team, the
  rest 429, every accepted one queued once and scored once;
* a worker killed with SIGKILL mid-scoring: its lease runs out, another worker finishes the job,
  the submission is scored once (one result, one revision) and charged once;
* the server killed mid-upload: nothing of that upload is visible or stored after a restart, and
  the same upload then succeeds;
* a failure of ours (the results store unusable): retried, then ``error``, and not charged.
"""

from __future__ import annotations

import json
import socket
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest

from _servicekit import (Server, Worker, add_team, api, cli, files_of, gt_submission, make_project, upload, wait_final,
                         wait_for)


def db_rows(root, sql: str, *args):
    with sqlite3.connect(root / "hosted" / "queue.sqlite3") as conn:
        return conn.execute(sql, args).fetchall()


def test_concurrent_uploads_stop_exactly_at_the_limit(tmp_path, repo, index):
    root = make_project(tmp_path / "proj", repo, {"phases": [{"name": "p", "daily_limit": 3, "total_limit": 50}]})
    tokens = {f"Team {k}": add_team(root, f"Team {k}") for k in range(4)}
    folders = {(t, j): gt_submission(tmp_path / f"{k}-{j}", index, name=f"team {k} try {j}")
               for k, t in enumerate(tokens) for j in range(5)}
    server = Server(root)
    try:
        with ThreadPoolExecutor(20) as pool:
            answers = dict(zip(folders, pool.map(lambda key: upload(server, tokens[key[0]], files_of(folders[key])),
                                                 folders)))
        for team in tokens:
            codes = sorted(answers[(team, j)].status_code for j in range(5))
            assert codes == [201, 201, 201, 429, 429], [answers[(team, j)].text for j in range(5)]
        accepted = sorted(r.json()["id"] for r in answers.values() if r.status_code == 201)
        assert len(set(accepted)) == 12
        assert sorted(sid for (sid,) in db_rows(root, "SELECT id FROM aegis_submissions")) == accepted
        jobs = db_rows(root, "SELECT arguments FROM firm_queue_jobs")
        assert sorted(json.loads(a)["args"][0] for (a,) in jobs) == accepted  # each queued exactly once
        worker = Worker(root, processes=2)
        try:
            for team, token in tokens.items():
                for key in [k for k in folders if k[0] == team and answers[k].status_code == 201]:
                    assert wait_final(server, token, answers[key].json()["id"], 180)["status"] == "scored"
        finally:
            worker.stop()
        assert db_rows(root, "SELECT count(*) FROM aegis_events WHERE kind = 'started'") == [(12,)]
        ledger = [json.loads(x) for x in (root / "hosted/store/ledger.jsonl").read_text().splitlines()]
        assert sorted(e["submission"] for e in ledger if e["event"] == "scored") == accepted
        # every revision rebuilds: the last as published, byte for byte; one published with a later one, from its
        # own inputs (its board was never shown alone)
        last = cli("hosted-board", "--project", str(root), "--revision", str(len(ledger)), "--out", str(tmp_path / "b"))
        assert "identical to the board published then" in last.stdout
        batched = [e["revision"] for e in ledger if e["board_sha256"] is None]
        if batched:
            done = cli("hosted-board", "--project", str(root), "--revision", str(batched[0]), "--out",
                       str(tmp_path / "b0"))
            assert "published together with a later revision" in done.stdout
    finally:
        server.stop()


def test_a_worker_killed_mid_scoring_is_replaced_and_the_job_scored_once(tmp_path, repo, index):
    root = make_project(tmp_path / "proj", repo, {"lease_seconds": 3})
    token = add_team(root, "Lab K")
    server = Server(root)
    doomed = Worker(root, env={"AEGISBENCH_TEST_PAUSE_SCORING": "60"})
    try:
        sid = upload(server, token, files_of(gt_submission(tmp_path / "k", index, name="killed"))).json()["id"]
        wait_for(lambda: api(server, token, f"/api/v1/submissions/{sid}")["status"] == "running", 60, 0.2,
                 "the first worker to start scoring")
        doomed.kill()  # SIGKILL to the worker's process group, mid-scoring
        assert api(server, token, f"/api/v1/submissions/{sid}")["status"] == "running"
        rescuer = Worker(root)
        try:
            row = wait_final(server, token, sid, 120)
        finally:
            rescuer.stop()
        assert (row["status"], row["attempts"], row["charged"]) == ("scored", 2, True)
        kinds = [e["kind"] for e in api(server, token, f"/api/v1/submissions/{sid}/log")["events"]]
        assert kinds.count("started") == 2 and kinds.count("published") == 1
        assert db_rows(root, "SELECT count(*) FROM aegis_submissions WHERE charged") == [(1,)]
        ledger = [json.loads(x) for x in (root / "hosted/store/ledger.jsonl").read_text().splitlines()]
        assert [e["submission"] for e in ledger if e["event"] == "scored"] == [sid]
        assert sorted(p.name for p in (root / "hosted/store/results").iterdir()) == [sid]
    finally:
        doomed.kill()
        server.stop()


def test_the_server_killed_mid_upload_leaves_nothing_and_the_upload_succeeds_after(tmp_path, repo, index):
    root = make_project(tmp_path / "proj", repo)
    token = add_team(root, "Lab U")
    folder = gt_submission(tmp_path / "u", index, name="interrupted")
    server = Server(root)
    host, port = server.url.removeprefix("http://").split(":")
    body = b"--b\r\n" + b'Content-Disposition: form-data; name="submission"; filename="submission.yaml"\r\n\r\n'
    body += (folder / "submission.yaml").read_bytes() + b"\r\n--b\r\n"
    head = (f"POST /api/v1/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {len(body) + 50000}\r\n\r\n").encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(head + body)  # half an upload, then the server dies
        server.kill()
    assert db_rows(root, "SELECT count(*) FROM aegis_submissions") == [(0,)]
    server = Server(root)
    try:
        assert api(server, token, "/api/v1/submissions")["submissions"] == []
        assert list((root / "hosted/store/submissions").iterdir()) == []
        r = upload(server, token, files_of(folder))
        assert r.status_code == 201 and r.json()["duplicate"] is False
        assert [s["id"] for s in api(server, token, "/api/v1/submissions")["submissions"]] == [r.json()["id"]]
    finally:
        server.stop()


@pytest.mark.parametrize("attempts", [2])
def test_a_failure_of_ours_is_retried_and_never_charged(tmp_path, repo, index, attempts):
    root = make_project(tmp_path / "proj", repo, {"max_attempts": attempts})
    token = add_team(root, "Lab F")
    server = Server(root)
    worker = Worker(root)
    try:
        wait_for(lambda: (root / "hosted/store/ledger.jsonl").is_file(), 60, 0.2, "the worker to start")
        (root / "hosted/store/results").rmdir()
        (root / "hosted/store/results").write_text("not a folder: the results store is broken")
        folder = gt_submission(tmp_path / "f", index, name="ours")
        sid = upload(server, token, files_of(folder)).json()["id"]
        row = wait_final(server, token, sid, 120)
        assert (row["status"], row["charged"], row["attempts"]) == ("error", False, attempts)
        assert row["message"].startswith(f"a failure of ours after {attempts} run(s), not charged")
        log = api(server, token, f"/api/v1/submissions/{sid}/log")["events"]
        assert [e["kind"] for e in log].count("started") == attempts
        assert any(e["kind"] == "queued" and "retried" in e["text"] for e in log)
        # the store repaired, the team uploads the same content again: queued again, scored, still free
        (root / "hosted/store/results").unlink()
        (root / "hosted/store/results").mkdir()
        again = upload(server, token, files_of(folder))
        assert again.status_code == 200 and again.json() == {"id": sid, "status": "queued", "duplicate": True}
        row = wait_final(server, token, sid, 120)
        assert (row["status"], row["charged"]) == ("scored", False)
        assert db_rows(root, "SELECT count(*) FROM aegis_submissions") == [(1,)]
    finally:
        worker.stop()
        server.stop()

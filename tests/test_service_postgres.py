"""The hosted leaderboard on a real PostgreSQL server (issue 30: ``--db postgresql://...`` for a
server and workers on several machines). The server is the distribution's PostgreSQL, started
by this module on 127.0.0.1 in a temporary folder and stopped at its end; without its binaries
(``.ci/run`` installs them) the module is skipped with a message.

Over PostgreSQL: an upload is scored and shown; concurrent uploads stop exactly at the limit
(the team row is locked ``FOR UPDATE``); a worker killed mid-scoring is replaced and the job
scored once (firm-queue claims with ``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from _servicekit import (Server, Worker, add_team, api, files_of, free_port, gt_submission, make_project, upload,
                         wait_final, wait_for)

BINDIR = next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)), None)


def _as_postgres() -> list[str]:
    """Run PostgreSQL's programs as the ``postgres`` user when we are root (it refuses root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run the PostgreSQL server as")
    return ["runuser", "-u", "postgres", "--"]


@pytest.fixture(scope="module")
def postgres():
    if BINDIR is None or not os.path.exists(f"{BINDIR}/initdb"):
        pytest.skip("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
                    "(apt-get install postgresql; .ci/run does)")
    pytest.importorskip("psycopg")
    prefix = _as_postgres()
    top = Path(tempfile.mkdtemp(prefix="aegisbench-pg-"))  # under /tmp: pytest's own folder is root's alone
    data = top / "data"
    data.mkdir()
    if prefix:
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(top, "postgres", "postgres")
    subprocess.run([*prefix, f"{BINDIR}/initdb", "-D", str(data), "-A", "trust", "-U", "aegis", "--no-sync"],
                   check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen([*prefix, f"{BINDIR}/postgres", "-D", str(data), "-p", str(port), "-h", "127.0.0.1",
                               "-k", str(data), "-c", "fsync=off", "-c", "max_connections=200"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"postgresql://aegis@127.0.0.1:{port}/postgres"
    import psycopg

    def ready():
        try:
            psycopg.connect(url, connect_timeout=1).close()
            return True
        except psycopg.OperationalError:
            return False
    wait_for(ready, 60, 0.2, "the PostgreSQL server")
    yield url
    server.terminate()
    server.wait(30)
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture()
def db(postgres):
    """A new database of the server for one test."""
    import psycopg
    name = f"t{time.monotonic_ns()}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres.rsplit("/", 1)[0] + f"/{name}"


def test_round_trip_and_the_limit_under_concurrency(tmp_path, repo, index, db):
    root = make_project(tmp_path / "proj", repo, {"phases": [{"name": "p", "daily_limit": 2}]})
    tokens = {f"PG {k}": add_team(root, f"PG {k}", db=db) for k in range(3)}
    assert not (root / "hosted" / "queue.sqlite3").exists()  # everything went to PostgreSQL
    folders = {(t, j): gt_submission(tmp_path / f"{k}-{j}", index, name=f"pg {k} {j}")
               for k, t in enumerate(tokens) for j in range(4)}
    server = Server(root, db=db)
    try:
        with ThreadPoolExecutor(12) as pool:
            answers = dict(zip(folders, pool.map(lambda key: upload(server, tokens[key[0]], files_of(folders[key])),
                                                 folders)))
        for team in tokens:
            assert sorted(answers[(team, j)].status_code for j in range(4)) == [201, 201, 429, 429]
        worker = Worker(root, db=db)
        try:
            for (team, _), r in answers.items():
                if r.status_code == 201:
                    assert wait_final(server, tokens[team], r.json()["id"], 120)["status"] == "scored"
        finally:
            worker.stop()
        import httpx
        page = httpx.get(server.url + "/").text
        standing = [api(server, t, "/api/v1/submissions")["submissions"] for t in tokens.values()]
        assert all(sum(s["standing"] for s in subs) == 1 for subs in standing)  # one row per team and track
        assert all(s["id"] in page for subs in standing for s in subs if s["standing"])
    finally:
        server.stop()


def test_a_killed_worker_is_replaced_over_postgres(tmp_path, repo, index, db):
    root = make_project(tmp_path / "proj", repo, {"lease_seconds": 3})
    token = add_team(root, "PG K", db=db)
    server = Server(root, db=db)
    doomed = Worker(root, db=db, env={"AEGISBENCH_TEST_PAUSE_SCORING": "60"})
    try:
        sid = upload(server, token, files_of(gt_submission(tmp_path / "k", index, name="pg killed"))).json()["id"]
        wait_for(lambda: api(server, token, f"/api/v1/submissions/{sid}")["status"] == "running", 60, 0.2,
                 "the first worker to start scoring")
        doomed.kill()
        rescuer = Worker(root, db=db)
        try:
            row = wait_final(server, token, sid, 120)
        finally:
            rescuer.stop()
        assert (row["status"], row["attempts"], row["charged"]) == ("scored", 2, True)
    finally:
        doomed.kill()
        server.stop()

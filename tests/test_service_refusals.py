"""What a stranger can send the submission server, refused (issue 30, bad input): each refusal
is one line in the API's error body (the validator's lines in ``problems``), with its status,
and stores nothing — no folder in the store, nothing left in ``incoming/``, no row.

401 missing / wrong / revoked token; 413 an upload over ``max_upload_bytes``, answered from the
``Content-Length`` header before the body is sent, or when a chunked body passes the limit; 400
zips with ``..``, absolute, backslashed or hidden names, symbolic links, too many members or an
expansion beyond the cap; 400 another dataset digest (naming both); 400 metadata with control
or bidi characters, over-long fields, out-of-range numbers, duplicate keys; 400 predictions the
validator refuses (the same lines as ``aegisbench validate``); 429 over the daily limit (naming
when it resets); 403 after the closing date. ``aegisbench submit`` prints them and exits 2.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import socket
import stat
import zipfile

import pytest
import yaml

from _evalkit import rewrite_rows, rows_of
from _servicekit import Server, add_team, cli, files_of, gt_submission, make_project, upload

LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def site(tmp_path_factory, repo):
    root = make_project(tmp_path_factory.mktemp("refusals") / "proj", repo, {
        "phases": [{"name": "p1", "daily_limit": 2, "total_limit": 10}], "max_upload_bytes": LIMIT,
        "max_zip_members": 20, "max_zip_ratio": 50})
    tokens = {n: add_team(root, n) for n in ("Lab R", "Lab Q", "Gone")}
    cli("team", "revoke", "Gone", "--project", str(root))
    server = Server(root)
    yield root, server, tokens
    server.stop()


@pytest.fixture()
def good(tmp_path, index):
    return gt_submission(tmp_path / "good", index, name="refusal probe")


def stored(root) -> tuple[list[str], list[str]]:
    store = root / "hosted" / "store" / "submissions"
    return sorted(os.listdir(store)), sorted(os.listdir(root / "hosted" / "incoming"))


def refused(site, token, files, status: int) -> dict:
    root, server, _ = site
    before = stored(root)
    r = upload(server, token, files)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "problems"} and "\n" not in body["error"] and body["problems"]
    assert stored(root) == before and before[1] == []
    return body


def with_yaml(folder, **changes) -> list:
    meta = yaml.safe_load((folder / "submission.yaml").read_text())
    meta.update(changes)
    files = files_of(folder)
    files[0] = ("submission", ("submission.yaml", yaml.safe_dump(meta).encode()))
    return files


def test_tokens(site, good):
    _, _, tokens = site
    for token in (None, "aeg_1_short", tokens["Lab R"][:-1] + ("A" if tokens["Lab R"][-1] != "A" else "B"),
                  tokens["Gone"]):
        body = refused(site, token, files_of(good), 401)
        assert body["error"].startswith("missing, wrong or revoked token")


def test_the_database_keeps_no_token(site):
    root, _, tokens = site
    raw = b"".join(p.read_bytes() for p in (root / "hosted").glob("queue.sqlite3*"))
    assert all(t.split("_", 2)[2].encode() not in raw for t in tokens.values())


def _raw_request(url: str, head: bytes, body: bytes = b"", chunks: list[bytes] | None = None) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(head + body)
        for c in chunks or []:
            try:
                s.sendall(f"{len(c):x}\r\n".encode() + c + b"\r\n")
            except OSError:  # the server answered and closed: stop sending
                break
        out = b""
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                break
            if not data:
                break
            out += data
    return out


def test_too_large_is_refused_before_the_body_is_read(site):
    root, server, tokens = site
    before = stored(root)
    head = (f"POST /api/v1/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tokens['Lab R']}\r\n"
            f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {10 * 1024**3}\r\n\r\n").encode()
    answer = _raw_request(server.url, head, b"--b\r\n")  # 5 of the 10 GiB announced: the rest is never sent
    assert answer.startswith(b"HTTP/1.1 413") and b"larger than the limit of 262144 bytes" in answer
    head = (f"POST /api/v1/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tokens['Lab R']}\r\n"
            f"Content-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    part = (b'--b\r\nContent-Disposition: form-data; name="predictions"; filename="p.parquet"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n")
    answer = _raw_request(server.url, head, chunks=[part] + [b"x" * 65536] * 16)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert stored(root) == before


def _zip_with(name: str, data: bytes = b"", symlink: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo(name)
        if symlink:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, data)
    return buf.getvalue()


@pytest.mark.parametrize("member, symlink, expect", [
    ("../outside.json", False, "'..' is not allowed"),
    ("/etc/clean.json", False, "absolute member names are not allowed"),
    ("C:/clean.json", False, "absolute member names are not allowed"),
    ("predictions\\clean.json", False, "backslashes are not allowed"),
    (".hidden/clean.json", False, "hidden names"),
    ("clean.json", True, "symbolic links are not accepted"),
])
def test_zip_members_that_could_leave_the_folder(site, good, member, symlink, expect):
    files = files_of(good)[:1] + [("predictions", ("p.zip", _zip_with(member, b"/etc/passwd", symlink)))]
    body = refused(site, site[2]["Lab R"], files, 400)
    assert expect in body["error"]


def test_zip_bombs_and_member_counts(site, good):
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as zf:
        for k in range(21):
            zf.writestr(f"c{k}.json", b"[]")
    body = refused(site, site[2]["Lab R"], files_of(good)[:1] + [("predictions", ("m.zip", many.getvalue()))], 400)
    assert "21 members, more than the limit of 20" in body["error"]
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("clean.json", b"0" * (4 * 1024**2))
    body = refused(site, site[2]["Lab R"], files_of(good)[:1] + [("predictions", ("b.zip", bomb.getvalue()))], 400)
    assert "bytes expanded, more than the limit" in body["error"]
    # a member whose header understates what it expands to is stopped while decompressing
    liar = bytearray(bomb.getvalue())
    small = (1000).to_bytes(4, "little")
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local and central headers: uncompressed size
        i = liar.index(sig)
        liar[i + off:i + off + 4] = small
    body = refused(site, site[2]["Lab R"], files_of(good)[:1] + [("predictions", ("l.zip", bytes(liar)))], 400)
    assert "zip member 'clean.json'" in body["error"]


def test_another_dataset_digest_names_both(site, good, index):
    body = refused(site, site[2]["Lab R"], with_yaml(good, dataset_digest="ab" * 32), 400)
    assert "ab" * 32 in body["error"] and index.digest in body["error"]


@pytest.mark.parametrize("field, value, expect", [
    ("name", "evil\x1b[31m", "U+001B"),
    ("model", "yolo\u202eevil", "U+202E"),
    ("description", "x" * 2001, "2001 characters long, more than the limit of 2000"),
    ("contact", "y" * 201, "more than the limit of 200"),
    ("parameters", 10**400, "must be a positive integer"),
    ("parameters", -3, "must be a positive integer"),
    ("paper", "javascript:alert(1)", "http(s) URL"),
])
def test_metadata_is_typed_and_bounded(site, good, field, value, expect):
    body = refused(site, site[2]["Lab R"], with_yaml(good, **{field: value}), 400)
    assert f"field {field}" in body["error"] and expect in body["error"]


def test_duplicate_keys_and_not_yaml(site, good):
    text = (good / "submission.yaml").read_text() + "name: second name\n"
    files = [("submission", ("submission.yaml", text.encode()))] + files_of(good)[1:]
    assert "key 'name' given twice" in refused(site, site[2]["Lab R"], files, 400)["error"]
    files = [("submission", ("submission.yaml", b"\xff\xfe"))] + files_of(good)[1:]
    assert "not UTF-8" in refused(site, site[2]["Lab R"], files, 400)["error"]


def test_form_fields(site, good):
    token = site[2]["Lab R"]
    assert "unknown form field 'evil'" in refused(site, token, files_of(good) + [("evil", ("x", b"1"))], 400)["error"]
    assert "no predictions" in refused(site, token, files_of(good)[:1], 400)["error"]
    two = files_of(good) + [("predictions", ("clean.json", b"[]"))]
    assert "one form" in refused(site, token, two, 400)["error"]
    bad = files_of(good)[:1] + [("predictions", ("clean;rm -rf.json", b"[]"))]
    assert "named <config>.json" in refused(site, token, bad, 400)["error"]


def test_the_validators_lines_as_validate_prints_them(site, good, repo):
    rows = rows_of(good)
    rows[3]["x2"] = rows[3]["x1"] - 5
    rows[5]["score"] = 1.5
    rewrite_rows(good, rows)
    local = cli("validate", str(good), "--dataset", str(repo), "--no-verify", check=False)
    assert local.returncode == 2
    expected = [line.replace(f"{good}/", "") for line in local.stderr.splitlines()[:-1]]
    body = refused(site, site[2]["Lab R"], files_of(good), 400)
    assert body["problems"] == expected and len(expected) == 2
    assert body["error"] == expected[0] + " (and 1 more problem(s))"


def test_daily_limit_names_the_reset_and_submit_exits_2(site, index, tmp_path):
    root, server, tokens = site
    for k in range(2):
        folder = gt_submission(tmp_path / f"q{k}", index, name=f"quota {k}")
        assert upload(server, tokens["Lab Q"], files_of(folder)).status_code == 201
    folder = gt_submission(tmp_path / "q2", index, name="quota 2")
    body = refused(site, tokens["Lab Q"], files_of(folder), 429)
    tomorrow = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    assert f"used its 2 submissions for today in phase 'p1'; the daily limit resets at {tomorrow}" in body["error"]
    run = cli("-q", "submit", str(folder), "--server", server.url, env={"AEGISBENCH_TOKEN": tokens["Lab Q"]},
              check=False)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [body["error"]]
    # the token is never taken from the command line
    run = cli("submit", str(folder), "--server", server.url, "--token", tokens["Lab Q"], check=False)
    assert run.returncode == 2 and "unrecognized arguments: --token" in run.stderr


def test_submit_without_a_token_and_with_a_shared_token_file(site, good, tmp_path):
    _, server, tokens = site
    env = {"AEGISBENCH_TOKEN": "", "AEGISBENCH_CONFIG": str(tmp_path / "tokens.yaml"), "HOME": str(tmp_path)}
    run = cli("submit", str(good), "--server", server.url, env=env, check=False)
    assert run.returncode == 2 and "no token: set AEGISBENCH_TOKEN" in run.stderr
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({server.url: tokens["Gone"]}))
    os.chmod(tmp_path / "tokens.yaml", 0o644)
    run = cli("submit", str(good), "--server", server.url, env=env, check=False)
    assert run.returncode == 2 and "readable by others" in run.stderr
    os.chmod(tmp_path / "tokens.yaml", 0o600)
    run = cli("submit", str(good), "--server", server.url, env=env, check=False)
    assert run.returncode == 2 and run.stderr.strip().splitlines()[-1].startswith("missing, wrong or revoked token")


def test_after_the_closing_date(tmp_path, repo, good):
    closed = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).replace(microsecond=0)
    root = make_project(tmp_path / "closed", repo, {"phases": [{"name": "final", "closes": closed.isoformat()}]})
    token = add_team(root, "Late Lab")
    server = Server(root)
    try:
        r = upload(server, token, files_of(good))
        assert r.status_code == 403 and r.json()["error"] == (
            f"submissions are closed: phase 'final' closed at {closed.isoformat()}")
        assert stored(root) == ([], [])
    finally:
        server.stop()

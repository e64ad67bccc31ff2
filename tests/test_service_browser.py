"""A team in a real headless browser (issue 30): Debian's Chromium driven by Playwright against
``aegisbench serve`` on 127.0.0.1. It opens the team page, pastes its token, uploads
``submission.yaml`` and the predictions through the form, sees its submission queued, and
after a worker scored it sees its row on the public leaderboard page; a refused upload shows
the validator's message on the page; a wrong token is refused; the queue page is for admins.
Skipped without Chromium (``.ci/run`` installs it) or the Playwright package.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _evalkit import rewrite_rows, rows_of
from _servicekit import Server, Worker, add_team, gt_submission, make_project, wait_for

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed at /usr/bin/chromium "
                                "(apt-get install -y chromium)")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture()
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield b
        b.close()


def test_a_team_uploads_through_the_form_and_sees_its_row(tmp_path, repo, index, browser):
    root = make_project(tmp_path / "proj", repo)
    token = add_team(root, "Browser Lab")
    admin = add_team(root, "Operators", admin=True)
    good = gt_submission(tmp_path / "good", index, name="Form upload")
    bad = gt_submission(tmp_path / "bad", index, name="Bad rows")
    rows = rows_of(bad)
    rows[2]["x2"] = rows[2]["x1"] - 1
    rewrite_rows(bad, rows)
    server, worker = Server(root), Worker(root)
    try:
        page = browser.new_page()
        page.goto(server.url + "/team")
        page.fill("#token", "aeg_1_" + "x" * 43)
        page.click("#login button")
        assert "wrong or revoked token" in page.inner_text("#error")
        page.fill("#token", token)
        page.click("#login button")
        assert page.inner_text("h1") == "Team Browser Lab"
        # a refused upload: the validator's line, nothing listed
        page.set_input_files("#submission", str(bad / "submission.yaml"))
        page.set_input_files("#predictions", str(bad / "predictions.parquet"))
        page.click("#upload button")
        assert "predictions.parquet:row 2 field x2: x2 must exceed x1" in page.inner_text("#error")
        assert page.query_selector("#submissions") is None
        # the good one: queued, then scored, then on the public page
        page.set_input_files("#submission", str(good / "submission.yaml"))
        page.set_input_files("#predictions", str(good / "predictions.parquet"))
        page.click("#upload button")
        notice = page.inner_text("#notice")
        sid = notice.split("accepted: ")[1].split(",")[0]
        assert page.inner_text(f"tr[data-id='{sid}'] .status") in ("queued", "running", "scored")

        def scored():
            page.reload()
            cell = page.query_selector(f"tr[data-id='{sid}'] td:nth-child(7) a")
            return cell is not None and page.inner_text(f"tr[data-id='{sid}'] .status") == "scored"
        wait_for(scored, 90, 0.5, "the row to be scored and standing")
        page.goto(server.url + "/")
        row = page.query_selector(f"#models-table tr[data-submission='{sid}']")
        assert row is not None and "Browser Lab" in row.inner_text() and "self-reported" in row.inner_text()
        page.click(f"#models-table tr[data-submission='{sid}'] a")
        assert sid in page.url
        # the submission's own page: its log
        page.goto(f"{server.url}/team/submissions/{sid}")
        log = page.inner_text("#log")
        assert "accepted: track sar" in log and "scoring on" in log
        # the queue page: refused to a team, shown to an admin
        page.goto(server.url + "/admin/queue")
        assert "admin teams" in page.content()
        other = browser.new_page()
        other.goto(server.url + "/team")
        other.fill("#token", admin)
        other.click("#login button")
        other.goto(server.url + "/admin/queue")
        assert sid in other.inner_text("#queue") and other.query_selector("#workers") is not None
    finally:
        worker.stop()
        server.stop()

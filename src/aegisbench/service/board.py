"""The hosted leaderboard: which submissions stand, the page, its ledger and its versions.

* **Standing**: per team and track, one scored submission is on the board: the latest upload, or,
  when the phase says ``standing: selected``, the one the team selected (the latest until it
  selects one). The pipeline's own results (``results/``) stand beside them.
* **Publishing** (:func:`publish`) happens one at a time (a blocking ``flock`` on
  ``hosted/.board.lock``; the project folder is the one place every worker writes) and gives every
  newly scored submission its own **revision**: a line of ``hosted/store/ledger.jsonl`` with the
  revision, the submission, the standing ids (exactly the submissions published before it plus
  this one) and the SHA-256 of every input results folder. The board is built once per
  publication, for its last revision, written to ``hosted/leaderboard/`` (swapped in whole) and its
  SHA-256 recorded; submissions scored meanwhile by other workers are published together, their
  revisions recorded but never shown alone. A change of standing without a new score (a team
  selecting another submission) is a revision too.
* **Versioning**: after each revision the store (submissions, results, ledger) is ``dvc add``-ed
  and ``hosted/store.dvc`` committed to git (``hosting.versioning``), so any past revision is a
  commit; :func:`rebuild_revision` rebuilds the board of revision N from the ledger and the
  append-only store and says whether its bytes equal those published then.

>>> pick_standing([("a", 1, "sar", 1, False, "p"), ("b", 1, "sar", 2, False, "p"), ("c", 1, "sar", 3, True, "p")],
...               {"p": "selected"})
['c']
>>> pick_standing([("a", 1, "sar", 1, False, "p"), ("b", 1, "sar", 2, False, "p")], {"p": "latest"})
['b']
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import select, update

from aegisbench.errors import BadInput
from aegisbench.hashing import file_sha256, json_sha256
from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.leaderboard.results import result_folders
from aegisbench.service.db import add_event, submissions, teams
from aegisbench.service.project import HostedProject

log = logging.getLogger(__name__)

LEDGER_FORMAT = 1


def tree_sha256(folder: Path) -> str | None:
    """SHA-256 over the relative paths and contents of every file under ``folder``
    (None when it does not exist)."""
    if not folder.is_dir():
        return None
    files = {p.relative_to(folder).as_posix(): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    return json_sha256(files)


@contextmanager
def board_lock(project: HostedProject):
    """Hold the one-publisher lock of the hosted board (blocking: publishers take turns)."""
    path = project.hosted / ".board.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def pick_standing(rows, standing_of: dict[str, str]) -> list[str]:
    """The standing ids among scored ``rows`` ``(id, team_id, track, uploaded, selected, phase)``:
    per team and track, the latest selected one where its phase's rule is ``selected``, else
    the latest; sorted."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row[1], row[2]), []).append(row)
    out = []
    for group in groups.values():
        group.sort(key=lambda r: (r[3], r[0]))
        rule = standing_of.get(group[-1][5], "latest")
        chosen = [r for r in group if r[4]] if rule == "selected" else []
        out.append((chosen or group)[-1][0])
    return sorted(out)


def read_ledger(project: HostedProject) -> list[dict]:
    """Every revision of the ledger, in order (BadInput naming the line when one is malformed)."""
    if not project.ledger.is_file():
        return []
    out = []
    for n, line in enumerate(project.ledger.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"line {n}: malformed JSON ({exc})", where=str(project.ledger)) from None
        if not isinstance(entry, dict) or entry.get("revision") != len(out) + 1:
            raise BadInput(f"line {n}: expected revision {len(out) + 1}", where=str(project.ledger))
        out.append(entry)
    return out


def _append(project: HostedProject, entry: dict) -> None:
    project.ledger.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(project.ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _preview(project: HostedProject) -> Path | None:
    p = project.root / "data" / "preview"
    return p if p.is_dir() else None


def pipeline_inputs(project: HostedProject) -> dict[str, str]:
    """The SHA-256 of every results folder of the pipeline (``results/<id>/``)."""
    folders = result_folders(project.results) if project.results.is_dir() else []
    return {p.name: tree_sha256(p) for p in folders}


def build_board(project: HostedProject, standing: list[str], out: Path, pipeline: list[Path] | None = None):
    """Build the board of ``standing`` hosted ids beside the pipeline's results folders into
    ``out``; returns ``(report, inputs)`` where ``inputs`` hashes every folder it read."""
    if pipeline is None:
        pipeline = result_folders(project.results) if project.results.is_dir() else []
    hosted = [project.hosted_results / s for s in standing]
    preview = _preview(project)
    report = build_leaderboard(None, project.dataset, out, references=project.rules.references, preview=preview,
                               extra_results=[*pipeline, *hosted], private=project.root,
                               submissions=[project.submissions, project.root / "submissions"])
    inputs = {"pipeline": {p.name: tree_sha256(p) for p in pipeline},
              "hosted": {p.name: tree_sha256(p) for p in hosted},
              "preview": tree_sha256(preview) if preview else None}
    return report, inputs


def publish(host) -> list[int]:
    """Give every scored submission not yet on the board its revision, and record a change of
    standing (see the module doc); returns the new revisions. Submissions scored meanwhile by
    other workers are published together: each gets its revision in the ledger (standing and
    inputs recorded, so its board can be rebuilt), the board is built once, for the last."""
    project, runtime = host.project, host.runtime
    rules = {p.name: p.standing for p in project.rules.phases}
    with board_lock(project):
        ledger = read_ledger(project)
        if ledger and not _versioned(project, ledger[-1]):  # a publisher died between its ledger line and commit
            version_store(project, ledger[-(ledger[-1].get("batch") or 1):])
        done = {e["submission"]: e["revision"] for e in ledger if e.get("event") == "scored"}
        with runtime.engine.connect() as conn:
            pending = [r for r in _scored_rows(conn, False) if r[6] is None]
        for row in pending:
            if row[0] in done:  # its ledger line was written, the row not updated (a crash in between)
                _mark(runtime, row[0], done[row[0]])
        with runtime.engine.connect() as conn:
            rows = _scored_rows(conn, True)
        plan = []
        for row in sorted((r for r in pending if r[0] not in done), key=lambda r: (r[7], r[0])):
            rows.append(row)
            plan.append(("scored", row[0], pick_standing(rows, rules)))
        if not plan:
            standing = pick_standing(rows, rules)
            event = ("standing" if not ledger or ledger[-1]["standing"] != standing else
                     "pipeline" if ledger[-1]["inputs"]["pipeline"] != pipeline_inputs(project) else
                     "rebuilt" if not project.site.is_dir() else None)
            if event is None:
                return []
            plan.append((event, None, standing))
        entries = _record(host, ledger, plan)
        version_store(project, entries)
        for entry in entries:
            if entry["submission"]:
                _mark(runtime, entry["submission"], entry["revision"])
    return [e["revision"] for e in entries]


def _scored_rows(conn, published_only: bool):
    """``(id, team, track, uploaded, selected, phase, revision, scored_at)`` of scored submissions."""
    c = submissions.c
    q = select(c.id, c.team_id, c.track, c.uploaded_at, c.selected, c.phase, c.revision, c.scored_at).where(
        c.status == "scored")
    if published_only:
        q = q.where(c.revision.is_not(None))
    return [tuple(r) for r in conn.execute(q)]


def _mark(runtime, sid: str, revision: int) -> None:
    with runtime.engine.begin() as conn:
        conn.execute(update(submissions).where(submissions.c.id == sid).values(revision=revision))
        add_event(conn, sid, "published", f"on the leaderboard from revision {revision}")


def _team_names(runtime, ids) -> dict[str, str]:
    with runtime.engine.connect() as conn:
        rows = conn.execute(select(submissions.c.id, teams.c.name).join(teams, teams.c.id == submissions.c.team_id)
                            .where(submissions.c.id.in_(list(ids)))).all()
    return {r.id: r.name for r in rows}


def _record(host, ledger: list[dict], plan: list[tuple]) -> list[dict]:
    """Build the board of the last planned revision and append every planned revision to the ledger."""
    from aegisbench.leaderboard.results import current_dataset_digest, current_evaluator_version
    project = host.project
    report, inputs = build_board(project, plan[-1][2], project.leaderboard)
    board = tree_sha256(project.leaderboard)
    hashes = dict(inputs["hosted"])
    common = {"format": LEDGER_FORMAT, "dataset_digest": current_dataset_digest(project.dataset),
              "evaluator_version": current_evaluator_version()}
    entries = []
    for k, (event, sid, standing) in enumerate(plan):
        last = k == len(plan) - 1
        for s in standing:
            if s not in hashes:
                hashes[s] = tree_sha256(project.hosted_results / s)
        entry = {**common, "revision": len(ledger) + 1, "event": event, "submission": sid, "standing": standing,
                 "teams": _team_names(host.runtime, standing), "batch": len(plan) if last else None,
                 "inputs": {"pipeline": inputs["pipeline"], "hosted": {s: hashes[s] for s in standing},
                            "preview": inputs["preview"]},
                 "board_sha256": board if last else None,  # None: never shown alone (published with the next)
                 "merged": list(report.merged) if last else None,
                 "skipped": [s.folder for s in report.skipped] if last else None}
        _append(project, entry)
        ledger.append(entry)
        entries.append(entry)
    log.info("hosted leaderboard revision %s (%s): %d merged, %d skipped",
             f"{entries[0]['revision']}-{entries[-1]['revision']}" if len(entries) > 1 else entries[0]["revision"],
             ", ".join(f"{e['event']} {e['submission'] or ''}".strip() for e in entries), len(report.merged),
             len(report.skipped))
    return entries


# ------------------------------------------------------------------ versioning


def _dvc(project: HostedProject, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project.root, capture_output=True, text=True)


def _versioned(project: HostedProject, entry: dict) -> bool:
    """Whether the last commit of the store is ``entry``'s (True when there is nothing to version)."""
    mode, root = project.rules.versioning, project.root
    if mode == "none" or not (root / ".dvc").is_dir() or not (root / ".git").exists():
        return True
    last = subprocess.run(["git", "log", "-1", "--format=%s", "--", "hosted/store.dvc"], cwd=root,
                          capture_output=True, text=True).stdout.strip()
    return last.startswith(f"hosted leaderboard revision {entry['revision']}:")


def commit_message(entries: list[dict]) -> str:
    """The git commit message of the revisions published together (the last one first).

    >>> commit_message([{"revision": 4, "event": "scored", "submission": "a"},
    ...                 {"revision": 5, "event": "scored", "submission": "b"}])
    'hosted leaderboard revision 5: scored b (published with revision 4: scored a)'
    """
    def what(e):
        return f"{e['event']} {e['submission'] or ''}".strip()
    last = entries[-1]
    text = f"hosted leaderboard revision {last['revision']}: {what(last)}"
    if len(entries) > 1:
        text += " (published with " + "; ".join(f"revision {e['revision']}: {what(e)}" for e in entries[:-1]) + ")"
    return text


def version_store(project: HostedProject, entries: list[dict]) -> str | None:
    """``dvc add`` the store and commit ``hosted/store.dvc`` for the revisions ``entries`` (see
    ``hosting.versioning``); returns the git commit, or None when nothing was committed."""
    mode = project.rules.versioning
    is_dvc, is_git = (project.root / ".dvc").is_dir(), (project.root / ".git").exists()
    if mode == "none" or (mode == "auto" and not is_dvc):
        return None
    if not is_dvc:
        raise BadInput("hosting.versioning is 'dvc' but the project is not a DVC repository (dvc init)",
                       where=str(project.root))
    added = _dvc(project, "--wait-for-lock", "add", "-q", str(project.store.relative_to(project.root)))
    if added.returncode:
        raise RuntimeError(f"dvc add {project.store}: {added.stderr.strip() or added.stdout.strip()}")
    if not is_git:
        return None
    paths = ["hosted/store.dvc", "hosted/.gitignore"]
    git = ["git", "-c", "user.name=aegisbench worker", "-c", "user.email=worker@aegisbench.invalid"]
    subprocess.run([*git, "add", "--", *paths], cwd=project.root, check=True, capture_output=True)
    done = subprocess.run([*git, "commit", "-q", "--no-verify", "-m", commit_message(entries), "--", *paths],
                          cwd=project.root,
                          capture_output=True, text=True)
    if done.returncode:
        if "nothing to commit" in done.stdout + done.stderr or "no changes added" in done.stdout + done.stderr:
            return None
        raise RuntimeError(f"git commit in {project.root}: {done.stderr.strip() or done.stdout.strip()}")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project.root, capture_output=True, text=True, check=True)
    return head.stdout.strip()


def rebuild_revision(project: HostedProject, revision: int, out: Path) -> tuple[dict, bool | None]:
    """Rebuild the board of ``revision`` into ``out`` from the ledger and the store; returns the
    ledger entry and whether every byte equals the board published at that revision (None: that
    revision was published together with a later one, so its board was never shown alone).
    BadInput when an input has changed since (another dataset digest, a pipeline results folder
    rewritten): check out the git commit of that revision first."""
    ledger = read_ledger(project)
    if not 1 <= revision <= len(ledger):
        raise BadInput(f"no revision {revision}: the ledger has {len(ledger)}", where="--revision")
    entry = ledger[revision - 1]
    from aegisbench.leaderboard.results import current_dataset_digest
    digest = current_dataset_digest(project.dataset)
    if digest != entry["dataset_digest"]:
        raise BadInput(f"the dataset digest is {digest[:12]}, revision {revision} was built on "
                       f"{entry['dataset_digest'][:12]}: check out that revision's commit", where=str(project.dataset))
    pipeline = []
    for name, sha in sorted(entry["inputs"]["pipeline"].items()):
        folder = project.results / name
        if tree_sha256(folder) != sha:
            raise BadInput(f"changed since revision {revision} (or absent): check out that revision's commit "
                           "(git checkout + dvc checkout) to rebuild it", where=str(folder))
        pipeline.append(folder)
    for name, sha in entry["inputs"]["hosted"].items():
        if tree_sha256(project.hosted_results / name) != sha:
            raise BadInput("hosted results changed: the store is append-only; restore it with dvc checkout",
                           where=str(project.hosted_results / name))
    if out.exists() and any(out.iterdir()):
        raise BadInput("output folder is not empty", where=str(out))
    build_board(project, entry["standing"], out, pipeline)
    if entry["board_sha256"] is None:
        return entry, None
    return entry, tree_sha256(out) == entry["board_sha256"]

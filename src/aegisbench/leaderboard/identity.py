"""Which rows a leaderboard may show, and as what: results bound to the content of their stored
submission, and the status of each row (verified, self-reported, published).

>>> bind_to_submissions([], ["submissions"])
([], [])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from aegisbench.attestation import folder_files, row_status
from aegisbench.leaderboard.results import ResultEntry, Skipped

log = logging.getLogger(__name__)


def bind_to_submissions(entries: list[ResultEntry], roots: Sequence[str | Path]
                        ) -> tuple[list[ResultEntry], list[Skipped]]:
    """Keep the results whose provenance names exactly the files of the submission they claim:
    ``<root>/<id>/`` in the first of ``roots`` that holds one (the stored submissions). A
    results folder with no stored submission, or scored from other files, is skipped: a folder
    named like another submission cannot stand for it. Published numbers (``status:
    published``) have no submission folder and pass."""
    kept, skipped = [], []
    for entry in entries:
        if entry.provenance.get("status") == "published":
            kept.append(entry)
            continue
        stored = next((Path(r) / entry.folder for r in roots if (Path(r) / entry.folder).is_dir()), None)
        if stored is None:
            why = f"no stored submission {entry.folder!r} (in {', '.join(Path(r).name + '/' for r in roots)})"
        elif folder_files(stored) != entry.provenance.get("submission_files"):
            why = (f"scored from other files than {stored.parent.name}/{entry.folder} holds: results are bound to "
                   "the content of their submission; evaluate it again")
        else:
            kept.append(entry)
            continue
        skipped.append(Skipped(entry.folder, "malformed", why))
        log.warning("skipping results %s: %s", entry.folder, why)
    return kept, skipped



def statuses(entries: Sequence[ResultEntry], private: str | Path | None = None) -> dict[str, tuple[str, str | None]]:
    """Per merged submission, ``(status, reason)`` (:func:`aegisbench.attestation.row_status`,
    checked against the attestations of the project ``private``)."""
    return {e.folder: row_status(e.provenance, private) for e in entries}

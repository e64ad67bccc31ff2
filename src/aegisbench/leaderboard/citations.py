"""``leaderboard/CITATION.bib``: the BibTeX a paper citing the leaderboard needs, the benchmark's
entry (``@software{aegisbench, ...}`` with the benchmark version and the dataset digest the board
was scored on) and every source's entries as its dataset card states them.

The sources' citations are read from the dataset repo's card (``README.md``): its hidden
``aegisbench-card-inputs`` comment holds each source's ``citation`` (BibTeX, given with
``build --citation`` or in ``params.yaml``). Each is checked with
:func:`aegisbench.attribution.bibtex_entries`; a source without one is named in a comment, one
whose text does not parse or reuses a key already in the file is left out with a warning (the
board is still built). Same dataset, same bytes.

>>> text = citation_bib("0.5.0", "ab" * 32, [{"name": "sar", "citation": "@misc{sar1, title={S}, year={2020}}"},
...                                          {"name": "smoke", "citation": ""}])
>>> [line for line in text.splitlines() if line.startswith("@")]
['@software{aegisbench,', '@misc{sar1, title={S}, year={2020}}']
>>> "% smoke: no citation given in the dataset card" in text
True
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from aegisbench.atomic import atomic_write_text
from aegisbench.attribution import bibtex_entries
from aegisbench.dataset.card import CITATION, card_inputs
from aegisbench.dataset.manifest import CARD, MANIFEST
from aegisbench.errors import BadInput
from aegisbench.readers import read_json, read_text

log = logging.getLogger(__name__)
CITATION_FILE = "CITATION.bib"
BENCHMARK_KEY = "aegisbench"
_HEADER = ("% BibTeX for the AegisBench leaderboard (written by aegisbench leaderboard).\n"
           "% Cite the benchmark (aegisbench) and the source datasets whose results you report.\n")


def _comment(text: str) -> str:
    """Text safe in a BibTeX comment line (no ``@`` that would open an entry, one line)."""
    return re.sub(r"[^A-Za-z0-9 ._:/()=,+-]", "_", str(text))[:120]


def citation_bib(version: str, digest: str, sources: list[dict]) -> str:
    """The text of ``CITATION.bib``: the benchmark's entry, then each source's (card order)."""
    parts = [_HEADER, CITATION % (_comment(version), _comment(digest)) + "\n"]
    keys = {BENCHMARK_KEY}
    for source in sources:
        name = _comment(source.get("name") or "?")
        text = str(source.get("citation") or "").strip()
        if not text:
            parts.append(f"% {name}: no citation given in the dataset card\n")
            continue
        try:
            found = bibtex_entries(text, where=f"source {name}: citation")
        except BadInput as exc:
            log.warning("%s: left out of %s", exc, CITATION_FILE)
            parts.append(f"% {name}: its citation in the dataset card is not valid BibTeX (left out)\n")
            continue
        taken = sorted(k for k in found if k.casefold() in keys)
        if taken:
            log.warning("source %s: citation key %r is already in %s: left out", name, taken[0], CITATION_FILE)
            parts.append(f"% {name}: its citation key {_comment(taken[0])} is already used above (left out)\n")
            continue
        keys |= {k.casefold() for k in found}
        parts.append(f"% {name}\n{text}\n")
    return "\n".join(parts)


def dataset_citation_bib(dataset: str | Path, digest: str, version: str | None = None) -> str:
    """:func:`citation_bib` of the dataset repo ``dataset`` (the benchmark version from its
    manifest, else ``version``; the sources from its card's inputs, none without a card)."""
    dataset = Path(dataset)
    manifest = read_json(dataset / MANIFEST, "dataset manifest")
    declared = manifest.get("benchmark_version") if isinstance(manifest, dict) else None
    sources: list[dict] = []
    card = dataset / CARD
    if card.is_file():
        try:
            inputs = card_inputs(read_text(card, "dataset card"))
            problem = None if inputs is not None else "no card inputs (not written by this builder?)"
        except BadInput as exc:  # the board stands without the sources' citations; verify names the card
            inputs, problem = None, exc.message
        if inputs is None:
            log.warning("%s: %s: %s names the benchmark only", card, problem, CITATION_FILE)
        else:
            sources = inputs[1]
    return citation_bib(str(declared or version or "unknown"), digest, sources)


def write_citations(dataset: str | Path, out: Path, digest: str, version: str | None = None) -> Path:
    """Write ``out/CITATION.bib`` (:func:`dataset_citation_bib`) atomically; return its path."""
    path = out / CITATION_FILE
    atomic_write_text(path, dataset_citation_bib(dataset, digest, version))
    return path

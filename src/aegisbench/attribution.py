"""What a source owes its authors: its licence (an SPDX id), its citation (BibTeX) and its
homepage, checked once here and read by ``params.yaml`` sources, ``build --license/--citation
/--homepage``, the dataset card, ``publish`` and ``leaderboard/CITATION.bib``.

* :func:`spdx_license` accepts one SPDX licence id (any case; ``unknown`` only where allowed)
  and returns it as SPDX spells it; :func:`hub_license` gives the Hugging Face card's
  ``license`` value (the Hub's lower-case id, or ``other`` with a name and a link).
* :func:`bibtex_entries` parses BibTeX strictly (pybtex): at least one entry, every entry
  with a key and fields, no syntax error, no key twice; :func:`check_citation` returns the
  text as given once it parses.
* :func:`check_homepage` accepts an ``http(s)`` URL without spaces or credentials.

>>> spdx_license("cc-by-4.0"), hub_license("CC-BY-4.0")
('CC-BY-4.0', ('cc-by-4.0', None))
>>> bibtex_entries("@article{suo2023, title={HIT-UAV}, year={2023}}")
['suo2023']
>>> check_homepage("https://example.org/data")
'https://example.org/data'
"""

from __future__ import annotations

import functools
import re

from aegisbench.errors import BadInput
from aegisbench.fields import check_url

#: the licence value of a source whose licence nobody stated (a build may use it; publish refuses it)
UNKNOWN = "unknown"
#: longest BibTeX text of one source (characters)
MAX_CITATION = 4000
MAX_HOMEPAGE = 300
#: the Hub's licence ids (the card's ``license:`` field) that are SPDX ids in lower case; any other
#: SPDX id goes to the card as ``license: other`` with ``license_name`` and ``license_link``
HUB_LICENSES = frozenset({
    "apache-2.0", "mit", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd-2-clause", "bsd-3-clause",
    "bsd-3-clause-clear", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0", "cc-by-sa-3.0",
    "cc-by-sa-4.0", "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-3.0",
    "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0", "cdla-sharing-1.0",
    "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0", "etalab-2.0",
    "eupl-1.1", "agpl-3.0", "gfdl", "gpl-2.0", "gpl-3.0", "lgpl-2.1", "lgpl-3.0", "isc", "lppl-1.3c",
    "ms-pl", "mpl-2.0", "odc-by", "odbl", "osl-3.0", "postgresql", "ofl-1.1", "ncsa", "unlicense", "zlib",
    "pddl",
})
_HOMEPAGE = re.compile(r"^https?://[^\s/@]+(/[^\s]*)?$")


@functools.lru_cache(maxsize=1)
def _spdx():
    from license_expression import get_spdx_licensing
    return get_spdx_licensing()


def spdx_license(value: object, where: str = "license", allow_unknown: bool = True) -> str:
    """One SPDX licence id as SPDX spells it (``cc-by-4.0`` -> ``CC-BY-4.0``); ``unknown`` when
    ``allow_unknown``; else BadInput naming ``where``.

    >>> spdx_license("MIT OR Apache-2.0")
    Traceback (most recent call last):
    ...
    aegisbench.errors.BadInput: license: 'MIT OR Apache-2.0' is not one SPDX licence id (e.g. CC-BY-4.0, MIT, Apache-2.0; https://spdx.org/licenses/)
    """
    text = value.strip() if isinstance(value, str) else None
    if text and text.lower() == UNKNOWN:
        if allow_unknown:
            return UNKNOWN
        raise BadInput("the licence is unknown: give the source's SPDX licence id (e.g. CC-BY-4.0); a dataset "
                       "whose licence nobody stated cannot be published", where=where)
    hint = "(e.g. CC-BY-4.0, MIT, Apache-2.0; https://spdx.org/licenses/)"
    if not text or len(text) > 80 or not re.fullmatch(r"[A-Za-z0-9.+-]+", text):
        raise BadInput(f"{str(value)[:80]!r} is not one SPDX licence id {hint}", where=where)
    info = _spdx().validate(text)
    key = info.normalized_expression
    if info.errors or not key or " " in key or text.lower() not in _spellings(key):
        raise BadInput(f"{text!r} is not one SPDX licence id {hint}", where=where)
    return key


def _spellings(key: str) -> set[str]:
    """An SPDX id and its deprecated SPDX spellings (``GPL-2.0`` for ``GPL-2.0-only``, ``GPL-2.0+``
    for ``GPL-2.0-or-later``), lower case; not the library's looser aliases (``GPL``)."""
    low = key.lower()
    out = {low}
    if low.endswith("-only"):
        out.add(low[:-5])
    if low.endswith("-or-later"):
        out.add(low[:-9] + "+")
    return out


def hub_license(spdx: str) -> tuple[str, str | None]:
    """``(license, license_name)`` of the card's YAML for an SPDX id (or ``unknown``): the Hub's
    id when it has one (``license_name`` None), else ``other`` and the SPDX id as the name."""
    low = spdx.lower()
    if low == UNKNOWN or low in HUB_LICENSES:
        return low, None
    if low.endswith("-only") and low[:-5] in HUB_LICENSES:  # the Hub spells GPL-3.0-only gpl-3.0
        return low[:-5], None
    return "other", spdx


def license_url(spdx: str) -> str:
    """The licence text's page: SPDX's list (``https://spdx.org/licenses/<id>.html``); '' for unknown."""
    return "" if spdx.lower() == UNKNOWN else f"https://spdx.org/licenses/{spdx}.html"


def bibtex_entries(text: str, where: str = "citation") -> list[str]:
    """The entry keys of BibTeX ``text``, parsed strictly; BadInput naming ``where`` when it is
    empty, longer than :data:`MAX_CITATION`, has no entry or does not parse."""
    from pybtex.database import parse_string
    from pybtex.scanner import PybtexSyntaxError

    if not isinstance(text, str) or not text.strip():
        raise BadInput("no BibTeX entry given", where=where)
    if len(text) > MAX_CITATION:
        raise BadInput(f"the BibTeX text is {len(text)} characters; at most {MAX_CITATION}", where=where)
    try:
        data = parse_string(text, "bibtex")
    except PybtexSyntaxError as exc:
        raise BadInput(f"the BibTeX does not parse ({exc})", where=where) from None
    except Exception as exc:  # pybtex: BibliographyDataError (a key twice), PybtexError
        raise BadInput(f"the BibTeX does not parse ({type(exc).__name__}: {exc})", where=where) from None
    if not data.entries:
        raise BadInput("no BibTeX entry found (expected e.g. @article{key, title={...}, year={...}})", where=where)
    empty = [k for k, e in data.entries.items() if not e.fields and not e.persons]
    if empty:
        raise BadInput(f"the BibTeX entry {empty[0]!r} has no fields", where=where)
    return list(data.entries)


def check_citation(text: object, where: str = "citation") -> str:
    """BibTeX text (stripped) that parses (:func:`bibtex_entries`); '' stays ''."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return ""
    if not isinstance(text, str):
        raise BadInput("must be BibTeX text", where=where)
    bibtex_entries(text, where)
    return text.strip()


def check_homepage(url: object, where: str = "homepage") -> str:
    """An ``http(s)`` URL with a host (:func:`aegisbench.fields.check_url`, the rule of every URL a
    submitter gives) of at most :data:`MAX_HOMEPAGE` characters and without ``user:password@``, or ''."""
    if url is None or url == "":
        return ""
    if not isinstance(url, str) or len(url) > MAX_HOMEPAGE or check_url(url) is None or not _HOMEPAGE.match(url):
        raise BadInput(f"{str(url)[:80]!r} is not an http(s) URL", where=where)
    return url

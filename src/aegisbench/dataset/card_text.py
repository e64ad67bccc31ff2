"""Text a source brings into the dataset card (descriptions, licences, citations), made inert:
it is data, never Markdown or HTML of the card.
"""

from __future__ import annotations

from aegisbench.attribution import MAX_CITATION

#: longest source text shown in the card (characters); longer text is cut with a mark
MAX_CARD_TEXT = 500
_MD_SPECIAL = str.maketrans({"\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]", "`": "\\`", "*": "\\*",
                             "_": "\\_", "<": "&lt;", ">": "&gt;", "&": "&amp;"})


def card_text(value, limit: int = MAX_CARD_TEXT) -> str:
    """Text from a source (description, licence) as inert Markdown for a table cell: one line,
    control characters dropped, Markdown and HTML specials escaped (no link, image, tag, code or
    heading can start), at most ``limit`` characters.

    >>> card_text("# Title\\n<img src=x onerror=alert(1)> [x](javascript:alert(1)) a|b")
    'Title &lt;img src=x onerror=alert(1)&gt; \\\\[x\\\\](javascript:alert(1)) a\\\\|b'
    """
    text = " ".join("".join(c if c.isprintable() else " " for c in str(value)).split()).lstrip("#").strip()
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return text.translate(_MD_SPECIAL)


def card_citations(sources: list[dict]) -> list[str]:
    """The sources' citations, each cut to :data:`MAX_CITATION` characters, control characters
    but line breaks dropped (they go inside a fenced block that none of them can close)."""
    out = []
    for s in sources:
        text = str(s.get("citation") or "").strip()[:MAX_CITATION]
        if text:
            out.append("".join(c for c in text if c.isprintable() or c in "\n\t"))
    return out


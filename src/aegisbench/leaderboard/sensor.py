"""Conditions not built for a source's sensor, said once per source.

A thermal source gets no split of a corruption whose physics is visible-band only (the
build records ``not_physical`` per config, the evaluator writes null rows noted
``not physical for thermal``). The leaderboard gives those conditions no heat-map column,
no severity panel, no table row and no gallery row: one note per source lists them
(:func:`not_built_view`), the page, the model pages and the Markdown print it.

>>> conds = [{"config": f"low_light_s{k}", "corruption": "low_light", "family": "storm", "severity": k}
...          for k in (1, 2, 3)]
>>> not_built_text("hituav", "thermal", conds)
'Not built for hituav (thermal sensor): 3 conditions whose physics does not hold for it, so no column, panel or row here: low_light (s1, s2, s3).'
"""

from __future__ import annotations

from itertools import groupby

from aegisbench.leaderboard.plots import series_key, tick_label
from aegisbench.leaderboard.tables import Section
from aegisbench.vocab import COMPOUND, config_kind


def not_built_items(conds) -> list[dict]:
    """One entry per corruption (or compound condition): its name, family and levels (none
    for a compound: its name holds them)."""
    out = []
    for key, run in groupby(conds, key=series_key):
        run = list(run)
        levels = [] if config_kind(run[0]["config"]) == COMPOUND else [tick_label(c) for c in run]
        out.append({"name": key, "family": run[0]["family"] or "", "levels": ", ".join(levels)})
    return out


def not_built_text(source: str, sensor: str | None, conds, name=str) -> str:
    """The one sentence that stands for every condition not built for ``source`` (``name``
    formats each corruption's name: a code span in Markdown)."""
    items = "; ".join(f"{name(i['name'])} ({i['levels']})" if i["levels"] else name(i["name"])
                      for i in not_built_items(conds))
    n = len(conds)
    return (f"Not built for {source} ({sensor or 'its'} sensor): {n} condition{'s' if n != 1 else ''} whose physics "
            f"does not hold for it, so no column, panel or row here: {items}.")


def not_built_view(section: Section) -> dict | None:
    """The note of one section (None when every condition of its track was built for it)."""
    if not section.not_built:
        return None
    return {"sensor": section.sensor or "", "n": len(section.not_built),
            "items": not_built_items(section.not_built),
            "text": not_built_text(section.source, section.sensor, section.not_built)}

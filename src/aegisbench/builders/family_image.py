"""The builder's half of the image-condition family: one shard task per (source, config,
block of rows), the condition configs' metas and descriptions, the image sources.

Every detection source gets every config of its track whose physics holds for its sensor
(:mod:`aegisbench.builders.conditions`); ``clean`` also gets the source's validation split.
"""

from __future__ import annotations

from pathlib import Path

from aegisbench.builders.conditions import config_specs, not_physical
from aegisbench.builders.families import PLANNERS, FamilyPlan
from aegisbench.builders.hfrepo import ShardTask
from aegisbench.builders.source_table import require_eval_splits, split_counts
from aegisbench.errors import BadInput
from aegisbench.params import Params


def image_tasks(params: Params, sources_dir: Path, specs: list) -> list[ShardTask]:
    """Every image shard of the build: source x config x index."""
    require_eval_splits({s.name: sources_dir / f"{s.name}.parquet" for s in params.sources})  # refuse, don't warn
    tasks: list[ShardTask] = []
    rps = params.build.rows_per_shard
    for src in params.sources:
        table = sources_dir / f"{src.name}.parquet"
        if not table.exists():
            raise BadInput("source table missing; run `aegisbench sources` first", where=str(table))
        counts = split_counts(table)
        for spec in specs:
            if src.track not in spec.tracks or not spec.physical_for(src.modality):
                continue  # not this track's config, or its physics does not hold for the sensor
            roles = ([("val", f"{src.name}_val")] if spec.include_val else []) + [("test", src.name)]
            for role, split in roles:
                n = counts.get(role, 0)
                n_shards = max(1, -(-n // rps)) if n else 0
                for i in range(n_shards):
                    tasks.append(ShardTask(spec.name, split, src.name, role, str(table),
                                           i * rps, min(n, (i + 1) * rps), i, n_shards))
    return tasks


@PLANNERS.register("image")
def plan_images(params: Params, sources_dir: Path) -> FamilyPlan:
    """The image family's part of a build of ``params``."""
    specs = config_specs(params)
    tasks = image_tasks(params, sources_dir, specs)
    sources = [{"name": s.name, "track": s.track, "kind": s.kind, "license": s.license, "modality": s.modality,
                "citation": s.citation, "homepage": s.homepage, "description": s.description} for s in params.sources]
    return FamilyPlan(
        tasks=tasks, metas={s.name: s.meta for s in specs}, descriptions={s.name: s.description for s in specs},
        sources=sources,
        manifest_sources={s.name: {"track": s.track, "kind": s.kind, "modality": s.modality} for s in params.sources},
        transforms={s.name: s.transform(params) for s in specs}, not_physical=not_physical(params, specs))

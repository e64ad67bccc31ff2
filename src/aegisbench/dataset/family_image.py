"""The image-condition family: every config of frames with boxes (``clean``, a corruption at a
severity, a compound, a WARP noise level), one ``image`` row per frame.

A row's content key is :func:`~aegisbench.dataset.schema.content_key` with the pixel hash
recomputed from the decoded image (:func:`~aegisbench.dataset.images.decode_image`), so an
encoder's bytes never decide it.

>>> FAMILY.kinds["clean"], FAMILY.tracks
('image', ('sar', 'smoke'))
"""

from __future__ import annotations

from aegisbench.dataset.families import FAMILIES, ConfigFamily
from aegisbench.dataset.images import decode_image
from aegisbench.dataset.schema import content_key
from aegisbench.errors import BadInput
from aegisbench.hashing import pixel_sha256
from aegisbench.vocab import CLEAN, COMPOUND, CORRUPTION, DETECTION_TRACKS, WARP_NOISE


def image_row_key(kind: str, config: str, row: dict, where: str) -> tuple[list, dict[str, str | None], list[str]]:
    """The row's content key with its pixel hash recomputed from the decoded image."""
    bad = []
    try:
        sha = pixel_sha256(decode_image((row["image"] or {}).get("bytes") or b"", where))
    except BadInput:
        sha = None
        bad.append("the image cannot be decoded")
    if sha is not None and row["sha256"] != sha:
        bad.append("its sha256 column is not the hash of its decoded pixels")
    if row["condition"] != config:
        bad.append(f"condition {row['condition']!r} is not the config {config!r}")
    return content_key({**row, "sha256": sha}), {row["image_id"]: sha}, [f"({row['image_id']}): {b}" for b in bad]


FAMILY = FAMILIES.add("image", ConfigFamily(
    name="image", kinds={k: "image" for k in (CLEAN, CORRUPTION, COMPOUND, WARP_NOISE)}, row_key=image_row_key,
    tracks=DETECTION_TRACKS, rank=0, task_categories=("object-detection",),
    task_ids={"sar": "person-detection", "smoke": "smoke-detection"}))

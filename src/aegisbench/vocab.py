"""The benchmark's words, defined once: tracks, disaster families, condition kinds, the
config-name grammar, submission fields and the WARP grid. A leaf: it imports nothing
from aegisbench but :mod:`aegisbench.errors`, and every other module takes these words
from here instead of spelling them again.

Config names (the Hugging Face configs of a built repo, and the ``config`` column of
results): ``clean``; ``<corruption>_s<k>`` (k = 1..3); compounds join single conditions
with ``+`` (``low_light_s2+inundation_s2``), their config name with ``__``;
``warp_noise_<thousandths>`` (WARP global noise ``a``); ``firespread_s<level>`` and
``firespread_statistic``; ``warp_patch`` (results only: the WARP patch test). Which
corruption names exist is the corruption registry's business
(:mod:`aegisbench.corruptions.registry`), not the grammar's.

>>> DETECTION_TRACKS, FAMILIES[0]
(('sar', 'smoke'), 'flood')
>>> corruption_config("low_light", 3), parse_corruption_config("low_light_s3")
('low_light_s3', ('low_light', 3))
>>> warp_noise_config(0.21), parse_warp_noise_config("warp_noise_210")
('warp_noise_210', 0.21)
>>> [config_kind(c) for c in ("clean", "dust_haze_s1", "low_light_s2__inundation_s2",
...                           "warp_noise_100", "firespread_s20", "firespread_statistic")]
['clean', 'corruption', 'compound', 'warp_noise', 'firespread_ensemble', 'firespread_statistic']
"""

from __future__ import annotations

import re

from aegisbench.errors import BadInput

# ---------------------------------------------------------------------- tracks

SAR, SMOKE, FIRESPREAD = "sar", "smoke", "firespread"
#: Every track, in display order; detection tracks score boxes, firespread scores maps.
TRACKS = (SAR, SMOKE, FIRESPREAD)
DETECTION_TRACKS = (SAR, SMOKE)
#: The one object label of each detection track: what ``detect`` writes (model classes are
#: mapped to it) and the only ``label`` value ``validate`` accepts.
TRACK_LABELS = {SAR: "person", SMOKE: "smoke"}

# -------------------------------------------------------------------- families

FLOOD, WILDFIRE, STORM, EARTHQUAKE = "flood", "wildfire", "storm", "earthquake"
#: The disaster families of the corruptions, in table order (seed 004, Table 1). Which
#: corruption belongs to which is declared once, at its registration.
FAMILIES = (FLOOD, WILDFIRE, STORM, EARTHQUAKE)
#: ``family`` values of configs that are not one disaster corruption.
COMPOUND_FAMILY, WARP_FAMILY, FIRESPREAD_FAMILY = "compound", "warp", "firespread"


def family_rank(family: str | None) -> int:
    """Display rank of a family: its index in :data:`FAMILIES`, after them any other.

    >>> family_rank("storm"), family_rank("warp")
    (2, 4)
    """
    return FAMILIES.index(family) if family in FAMILIES else len(FAMILIES)


def disaster_family(family: str | None) -> str | None:
    """``family`` if it is one of the four disaster families, else None."""
    return family if family in FAMILIES else None


# ------------------------------------------------------------- condition kinds

#: ``kind`` of a config in the manifest meta (so nothing downstream parses names).
CLEAN = "clean"
CORRUPTION = "corruption"
COMPOUND = "compound"
WARP_NOISE = "warp_noise"
FIRESPREAD_ENSEMBLE = "firespread_ensemble"
FIRESPREAD_STATISTIC = "firespread_statistic"
#: the pooled Var[Z_t]-stratified rows a fire-spread evaluation writes beside its metrics
STRATA_FILE = "strata.parquet"
CONDITION_KINDS = (CLEAN, CORRUPTION, COMPOUND, WARP_NOISE, FIRESPREAD_ENSEMBLE, FIRESPREAD_STATISTIC)
#: Results-only config of the WARP cloud-patch test, and its ``corruption`` value. The WARP
#: noise sweep's levels are results-only configs too (``warp_noise_<thousandths>``, kind
#: ``warp_noise``): the repo stores neither test.
WARP_PATCH = "warp_patch"
CLOUD_PATCH = "cloud_patch"
#: The submission files of the two WARP tests (smoke track; ``aegisbench warp-detect`` adds them).
WARP_PATCH_FILE, WARP_NOISE_FILE = "warp_patch.parquet", "warp_noise.parquet"

#: ``kind`` of a corruption-registry entry: one of the disaster corruptions, or a
#: WARP perturbation (same ``fn(image, rng, **params)`` contract, no severity ladder).
WARP = "warp"
PERTURBATION_KINDS = (CORRUPTION, WARP)

#: Severity levels of a corruption ladder.
SEVERITIES = (1, 2, 3)
#: ``build.geometry``: pixel-unit parameters per 1000 px of the frame, or of the median target.
GEOMETRIES = ("frame", "target-relative")

# --------------------------------------------------------- config-name grammar

COMPOUND_SEP = "+"   # in condition names: applied left to right
CONFIG_SEP = "__"    # the same join in Hugging Face config names
_SINGLE = re.compile(r"^(?P<corruption>[a-z][a-z0-9_]*?)_s(?P<severity>[0-9]+)$")
_WARP_NOISE_PREFIX = "warp_noise_"
_FIRESPREAD_PREFIX = "firespread_s"


def corruption_config(corruption: str, severity: int) -> str:
    """``low_light`` at severity 3 -> ``low_light_s3`` (the name is not checked)."""
    return f"{corruption}_s{int(severity)}"


def parse_corruption_config(name: object) -> tuple[str, int] | None:
    """``low_light_s3`` -> ``("low_light", 3)``; None when ``name`` is not of that form."""
    m = _SINGLE.match(name) if isinstance(name, str) else None
    return (m["corruption"], int(m["severity"])) if m else None


def compound_parts(condition: str) -> list[str]:
    """The single conditions of a (possibly compound) condition name, in order."""
    return condition.split(COMPOUND_SEP)


def condition_to_config(condition: str) -> str:
    """Condition name -> config name (``+`` becomes ``__``); a bijection because
    corruption names never contain a double underscore."""
    return condition.replace(COMPOUND_SEP, CONFIG_SEP)


def config_to_condition(config: str) -> str:
    """Config name -> condition name (``__`` becomes ``+``)."""
    return config.replace(CONFIG_SEP, COMPOUND_SEP)


def severity_key(severity: int) -> str:
    """The key of a severity in tables and reports: ``s1``, ``s2``, ``s3``."""
    return f"s{int(severity)}"


def parse_severity_key(key: object) -> int | None:
    """``"s2"`` or ``2`` or ``"2"`` -> 2 (any non-negative integer); None otherwise."""
    text = str(key)
    num = text[1:] if text.startswith("s") else text
    return int(num) if num.isascii() and num.isdigit() else None


def warp_noise_config(a: float) -> str:
    """Config name of a WARP noise level, in thousandths: ``warp_noise_210`` for a = 0.21."""
    k = round(float(a) * 1000)
    if not 0 <= k <= 1000 or abs(k - float(a) * 1000) > 1e-6:
        raise BadInput(f"WARP noise level must be a multiple of 0.001 in [0, 1], got {a!r}",
                       where="warp_noise")
    return f"{_WARP_NOISE_PREFIX}{k:03d}"


def parse_warp_noise_config(name: object) -> float | None:
    """Inverse of :func:`warp_noise_config`; None when ``name`` is not a WARP noise config."""
    if not isinstance(name, str) or not name.startswith(_WARP_NOISE_PREFIX):
        return None
    tail = name[len(_WARP_NOISE_PREFIX):]
    return int(tail) / 1000.0 if tail.isascii() and tail.isdigit() and int(tail) <= 1000 else None


#: Config of the fire-spread ensemble statistics (one row per initial condition and S-level).
FIRESPREAD_STATISTIC_CONFIG = "firespread_statistic"


def firespread_config(s_level: int) -> str:
    """Config of the fire-spread ensembles at one S-level: ``firespread_s20``."""
    return f"{_FIRESPREAD_PREFIX}{int(s_level)}"


def parse_firespread_config(name: object) -> int | None:
    """``firespread_s20`` -> 20; None when ``name`` is not an ensemble config."""
    if not isinstance(name, str) or not name.startswith(_FIRESPREAD_PREFIX):
        return None
    tail = name[len(_FIRESPREAD_PREFIX):]
    return int(tail) if tail.isascii() and tail.isdigit() else None


def is_firespread_config(name: object) -> bool:
    return name == FIRESPREAD_STATISTIC_CONFIG or parse_firespread_config(name) is not None


def config_kind(name: object) -> str | None:
    """The condition kind a config name spells by the grammar alone (``warp_patch`` for the
    results-only patch config), or None. The manifest meta is authoritative for a built
    repo; this is for names given before one exists (params, CLI arguments)."""
    if not isinstance(name, str):
        return None
    if name == CLEAN:
        return CLEAN
    if name == WARP_PATCH:
        return WARP_PATCH
    if name == FIRESPREAD_STATISTIC_CONFIG:
        return FIRESPREAD_STATISTIC
    if parse_firespread_config(name) is not None:
        return FIRESPREAD_ENSEMBLE
    if parse_warp_noise_config(name) is not None:
        return WARP_NOISE
    parts = compound_parts(config_to_condition(name))
    if all(parse_corruption_config(p) is not None for p in parts):
        return CORRUPTION if len(parts) == 1 else COMPOUND
    return None


# ------------------------------------------------------------------ submissions

#: Fields every ``submission.yaml`` must carry (any track).
REQUIRED_FIELDS = ("name", "team", "track", "model", "contact", "license", "description",
                   "dataset_version", "dataset_digest")
#: Keys a submission may not set: the evaluator freezes the threshold itself.
THRESHOLD_KEYS = frozenset({"threshold", "thresholds", "conf_threshold", "confidence_threshold",
                            "score_threshold", "frozen_threshold"})
#: Threshold-like names (case-insensitive): ``thresh`` anywhere, the word ``thr``, or a
#: confidence / score word joined to ``min``, ``cut`` or ``thr`` (either order).
THRESHOLD_PATTERN = re.compile(r"thresh|(?<![a-z])thr(?![a-z])|(conf|confidence|score)[^a-z0-9]?(min|cut|thr)"
                               r"|(min|cut)[^a-z0-9]?(conf|confidence|score)", re.IGNORECASE)


def is_threshold_key(name: object) -> bool:
    """Whether a ``submission.yaml`` key or a column name sets a threshold (refused, in every track).

    >>> is_threshold_key("conf_min"), is_threshold_key("Threshold"), is_threshold_key("probability")
    (True, True, False)
    """
    return str(name).lower() in THRESHOLD_KEYS or THRESHOLD_PATTERN.search(str(name)) is not None

# ------------------------------------------------------------------------- WARP

#: Side of the WARP cloud-patch position grid (seed 000: 25 x 25 positions).
WARP_GRID = 25

# ------------------------------------------------------------------------- sources

#: (A source's ``kind``, a synthetic generator or a folder format, is a registered unit:
#: :mod:`aegisbench.builders.source_kinds`.)

# Sensor modalities a source declares (``sources.<name>.modality``, ``build --modality``). Each
# corruption declares the modalities its physics holds for; other combinations are not built.
RGB, THERMAL = "rgb", "thermal"
MODALITIES = (RGB, THERMAL)

"""The dataset digests released for each ``benchmark_version`` of the embedded default.

A digest is a hash of content, so anyone can rebuild a repo, move one box, rehash it with the
project's own functions and get a repo that ``verify`` accepts under a new digest. What makes a
repo *the* benchmark is that its digest is the one released for its version: ``aegisbench verify``
says whether it is, ``verify --expect DIGEST`` refuses any other, and the leaderboard says when
its rows were scored on a build that was never released.

Manifest format 2 (each split's rows, whatever the shard layout; ``tests/test_pinned_digest.py``
keeps format 1's history).

>>> release_note("5f089529f8271fd3e9504080b60d5bbfc4a560441c4c3d32953363c89fba0867", "0.5.0")
'the released digest of benchmark 0.5.0'
>>> release_note("ab" * 32, "0.5.0")
'not a released digest: benchmark 0.5.0 of the embedded default was released as 5f089529f827'
"""

from __future__ import annotations

RELEASED = {
    "0.5.0": "5f089529f8271fd3e9504080b60d5bbfc4a560441c4c3d32953363c89fba0867",
    # the reference's statistic definitions and s1 motion-blur kernel, WARP noise swept at detection time
    "0.6.0": "745f894a0665c7b0fff38438ea43e5390bdd16947f6fe509b0b1168c2282ce1d",
    # issue 36: the SAR reference's learning rate (a new draw of every synthetic frame), PNG written run-length
    "0.7.0": "df206ec8ac735f1128f6cb8166bdb7e915371c4029fa780c1ed44f91845e754f",
    # issue 36: the references train on more frames (SAR 320 images; smoke 48 sequences at 10 epochs)
    "0.8.0": "b69f337063cdcc225a5e1528ab1194f58bffc4f9d76bcfcdad321a0c1b6b8344",
    # issue 36: the references' convolutions on NumPy's OpenBLAS (a new draw of every synthetic frame)
    "0.9.0": "55296241da948da7b67c2e0e59414b80e3e23134aad6d10188c2e4cd3a539099",
}


def is_released(digest: str) -> bool:
    return digest in RELEASED.values()


def release_note(digest: str, version: str) -> str:
    """Whether ``digest`` is the released build of ``version``, in words."""
    if RELEASED.get(version) == digest:
        return f"the released digest of benchmark {version}"
    if version in RELEASED:
        return (f"not a released digest: benchmark {version} of the embedded default was released as "
                f"{RELEASED[version][:12]}")
    return f"not a released digest (no release of benchmark {version}; a build of your own sources)"

"""``docker/images.py prune`` removes only the stale tags the script built, never an image of a user.

The images here are one-line Dockerfiles ``FROM`` the base image (no layer of their own: about a second
each), in a repository of this test (``dltrain-test-<random>/...``), so that the prune run by the test
cannot touch the machine's real images; every tag the test makes is removed at its end.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.support.images import builder, ensure_images

pytestmark = [pytest.mark.containers]


def _build(tag: str, dockerfile: str, *args: str) -> None:
    subprocess.run(
        ["docker", "build", "-q", "-t", tag, *args, "-"],
        input=dockerfile,
        text=True,
        check=True,
        capture_output=True,
    )


def _exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def test_prune_removes_its_own_stale_tag_and_keeps_images_users_built_from_it(monkeypatch):
    images = builder()
    base = ensure_images(["base"])["base"]
    repository = f"dltrain-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(images, "REPOSITORY", repository)
    ours = f"{repository}/train:{'0' * 16}"  # a tag the script built, no longer current
    # what a user builds FROM ours, as docs/engines/kubeflow.md says; and one a user named like ours
    kubeflow = f"{repository}/train-kubeflow:local"
    lookalike = f"{repository}/train:{'1' * 16}"
    made = [ours, kubeflow, lookalike]
    try:
        _build(ours, f"FROM {base}\n", *images.labels("train", ours))
        _build(kubeflow, f"FROM {ours}\nENTRYPOINT []\n")
        _build(lookalike, f"FROM {ours}\nLABEL user=1\n")
        inherited = subprocess.run(
            ["docker", "image", "inspect", "--format", '{{index .Config.Labels "dltrain.image"}}', kubeflow],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert inherited == "train"  # the user's image carries the project's label: not the proof

        assert images.prune() == [ours]
        assert not _exists(ours)
        assert _exists(kubeflow) and _exists(lookalike)
        assert images.prune() == []  # and a second run leaves the user's images alone too
    finally:
        subprocess.run(["docker", "rmi", "-f", *made], capture_output=True)
    assert not [tag for tag in made if _exists(tag)]

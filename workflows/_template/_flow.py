"""Seeding a sandbox from a :class:`~workflows.SeedTemplate`: the packed archive, checked
against its digest, uploaded as it is, then extracted; written once for both faces (and for
the pools, which run flows on the same drivers)."""

from __future__ import annotations

import logging
from typing import BinaryIO

from workflows._flows import Blocking, Call, Flow, upload_archive

from ._template import SeedTemplate

__all__ = ["template_seed_flow"]

log = logging.getLogger("workflows")


def template_seed_flow(sandbox_id: str, template: SeedTemplate, progress: bool | None) -> Flow[int]:
    """Check the template's archive against its digest (before any request: a damaged one is
    never uploaded), upload it, have the sandbox extract it into its workspace. Returns the
    number of files (and links) seeded, as a seed does."""
    from klavis_sandbox_client.api.local_sandbox import get_upload_url, initialize_workspace

    which = {"local_sandbox_id": sandbox_id}
    archive: BinaryIO = yield Blocking(template.open)
    with archive:
        yield from upload_archive(
            Call(get_upload_url, True, which), archive, template.size, progress
        )
    yield Call(initialize_workspace, True, which)
    log.info(
        "seeded sandbox %s from template %s: %d entries, %d bytes",
        sandbox_id,
        template.digest,
        template.files,
        template.size,
    )
    return template.files

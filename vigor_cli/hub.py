"""The Hugging Face hub, seen from a machine that may be offline.

Without a network the hub clients retry each request for about half a minute and print a
warning per retry before they fail. Every loader that may reach the hub (models, datasets,
LiveCodeBench files) asks :func:`unreachable` first: a quick connection to the hub's
endpoint; when that fails the loader uses its cache or says so in one line at once.
``HF_HUB_OFFLINE=1`` is honoured as the hub clients honour it (cache only, no probe).
"""

from __future__ import annotations

import logging
import socket
from urllib.parse import urlparse

from vigor_cli.errors import UserError

PROBE_TIMEOUT_S = 3.0
"""How long the connection to the hub's endpoint may take before the hub counts as unreachable."""


class HubUnavailable(UserError):
    """Data or files that only the hub has could not be had (offline, refused, missing): one
    line naming the flag that points to local files. `vigor train --dry-run` reads it as
    'not checked here', a run as an error."""


def quiet() -> None:
    """Silence the hub client's per-retry warnings (the loaders report failures in one line)."""
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)


def offline_mode() -> bool:
    """HF_HUB_OFFLINE is set: the hub clients read only their caches."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def unreachable() -> str | None:
    """Why the hub cannot be reached ('HF_HUB_OFFLINE is set', or the endpoint refuses or does
    not resolve), or None when a connection to it opens."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=PROBE_TIMEOUT_S).close()
    except OSError:
        return f"the hub ({constants.ENDPOINT}) cannot be reached (offline?)"
    return None

"""Names for the holders of a lease, from which a dead holder on this machine can be told.

A lease (a batch of documents an indexer embeds) runs out after a while, so that a process
killed while holding one does not keep its documents from every other indexer for ever. On the
machine that holds the store, a dead holder need not be waited for at all: its name carries
the host and the process id, and a process that no longer exists holds nothing. A name from
another host, or a process id now reused by a live process, waits for the lease to run out.

    >>> name = lease_owner()
    >>> is_dead_here(name), is_dead_here("somewhere-else/1/abc"), is_dead_here("an-old-style-name")
    (False, False, False)
"""
from __future__ import annotations

import os
import socket
import uuid

__all__ = ["is_dead_here", "lease_owner"]

_HOST = socket.gethostname().replace("/", "_")


def lease_owner() -> str:
    """A name no other lease holder has: ``host/pid/random``."""
    return f"{_HOST}/{os.getpid()}/{uuid.uuid4().hex}"


def is_dead_here(owner: str) -> bool:
    """Whether ``owner`` names a process of this host that no longer exists."""
    host, _, rest = owner.partition("/")
    pid_text, _, _ = rest.partition("/")
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # alive under another user, or unknown: wait for the lease to run out
    return False

"""A lease lock on a Redis key: one compactor per session across every process sharing Redis.

``SET key token NX PX lease`` takes the lease; a thread renews it every third of the lease while
the holder works (an LLM summary can take longer than any fixed lease), and only the holder's
own token can renew or release it. A holder that dies stops renewing, so the lease expires and
another process takes over. Losing the lease is not a correctness problem: the compaction
commit re-checks the token and the data it read (see ``_redis_scripts.COMMIT``).
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any

__all__ = ["Lease"]


class Lease:
    def __init__(self, client: Any, key: str, seconds: float, renew: Any, release: Any, expire_if_none: Any):
        """
        Args:
            client: a ``redis.Redis``.
            key: the lock key.
            seconds: the lease length; renewed every ``seconds / 3`` while held.
            renew, release, expire_if_none: the registered ``RENEW``, ``RELEASE`` and
                ``EXPIRE_IF_NONE`` scripts.
        """
        self.key = key
        self.token = uuid.uuid4().hex
        self._client = client
        self._ms = max(1, int(seconds * 1000))
        self._renew = renew
        self._release = release
        self._expire_if_none = expire_if_none
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def acquire(self, wait: float = 0.0) -> bool:
        """Take the lease, polling up to ``wait`` seconds; True if it is ours."""
        deadline = time.monotonic() + wait
        while not self._client.set(self.key, self.token, nx=True, px=self._ms):
            # Every lease is set with an expiry: a lock key without one (written by hand, or
            # restored without its TTL) would stop compaction for good. It expires in one lease.
            self._expire_if_none(keys=[self.key], args=[self._ms])
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        self._thread = threading.Thread(target=self._keep, name=f"lease:{self.key}", daemon=True)
        self._thread.start()
        return True

    def release(self) -> None:
        """Stop renewing and delete the key if it still holds our token (errors are ignored)."""
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        try:
            self._release(keys=[self.key], args=[self.token])
        except Exception:  # noqa: BLE001 - an unreleased lease simply expires
            pass

    def _keep(self) -> None:
        while not self._stop.wait(self._ms / 3000):
            try:
                if not self._renew(keys=[self.key], args=[self.token, self._ms]):
                    self.lost = True
                    return
            except Exception:  # noqa: BLE001 - a blip: try again at the next period
                continue

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

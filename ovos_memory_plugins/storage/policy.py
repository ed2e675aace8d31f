"""What a window keeps: a count and an age."""
from __future__ import annotations

import dataclasses
import time

__all__ = ["WindowPolicy"]


@dataclasses.dataclass(frozen=True)
class WindowPolicy:
    """How much of a session a window store keeps.

    Attributes:
        max_messages: the newest messages kept; 0 keeps all.
        max_age: seconds after which a message is dropped; ``None`` keeps them forever.
        normalise: apply the hanging-USER and consecutive-ASSISTANT rules on append.
    """

    max_messages: int = 0
    max_age: float | None = None
    normalise: bool = True

    def cutoff(self, now: float | None = None) -> float | None:
        """The oldest timestamp still kept, or ``None`` when age does not matter."""
        if self.max_age is None:
            return None
        return (time.time() if now is None else now) - self.max_age

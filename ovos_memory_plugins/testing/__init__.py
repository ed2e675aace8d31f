"""Test helpers for this package and for third-party backends.

* :func:`check_backend` runs the memory-plugin contract (seed 002's two rules, session
  isolation, input handling) against any ``AgentContextManager`` factory.
"""
from __future__ import annotations

from .contract import CONTRACT_CHECKS, check_backend

__all__ = ["CONTRACT_CHECKS", "check_backend"]

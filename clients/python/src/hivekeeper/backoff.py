"""Exponential backoff with full jitter, for reconnects and request resends.

The bound of the n-th delay is ``min(cap, first * 2**n)``; the delay itself is drawn uniformly
from ``[0, bound]`` ("full jitter", as in the Rust SDK's ``backoff.rs``): it spreads a swarm
that lost its broker at the same instant better than any other variant.
"""

from __future__ import annotations

import random
from typing import Optional


class Backoff:
    """A sequence of jittered, growing delays, in seconds. Each retry loop owns one."""

    def __init__(self, first_ms: int, cap_ms: int, rng: Optional[random.Random] = None) -> None:
        #: Bound of the first delay, seconds.
        self._first_s = first_ms / 1000.0
        #: Largest delay, seconds.
        self._cap_s = max(cap_ms, first_ms) / 1000.0
        #: How many delays were drawn since the last reset.
        self._step = 0
        #: Seeded from the OS per backoff, so agents started together draw different delays.
        self._rng = rng if rng is not None else random.Random()

    def next_bound_s(self) -> float:
        """The next bound without jitter: first, 2 x first, ... up to the cap."""
        bound: float = min(self._cap_s, self._first_s * float(2 ** min(self._step, 62)))
        self._step += 1
        return bound

    def next_delay_s(self) -> float:
        """The next delay: uniform in ``[0, bound]``, the bound doubling each call."""
        return self._rng.uniform(0.0, self.next_bound_s())

    def reset(self) -> None:
        """Starts over from the first step, after a success."""
        self._step = 0

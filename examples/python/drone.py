#!/usr/bin/env python3
"""A drone reserves its landing pad, lands, and releases it; a second drone lands after it.

    pip install ./clients/python
    hivekeeper serve &                                   # or: cargo run --release -- serve
    python examples/python/drone.py                      # two drones, one pad, in turn
    python examples/python/drone.py --chaos              # the first drone dies mid-landing

The pad is a waypoint reservation with a 3 m cylinder, bound to the drone's session (a lease
kept alive in the background). The pad itself (here a small class) remembers the highest
fencing token it has seen and refuses a lower one: that, not the lease, is what keeps two
drones off one pad.

With ``--chaos`` the first drone runs as a separate process and SIGKILLs itself halfway
through its landing: no release, no revoke, its MQTT connection just drops. The second drone
is already queued for the pad; the service grants it when the dead drone's lease expires (one
TTL after its last keepalive), and the pad then refuses the dead drone's stale token. The run
prints how long the reclaim took and exits non-zero if anything went wrong.

Needs nothing but the installed ``hivekeeper`` package and a running service.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional

import hivekeeper

#: The pad's position: a field beside a hive, 3 m radius, from the ground to 30 m.
PAD_LAT, PAD_LON, PAD_RADIUS_M = 47.3769, 8.5417, 3.0


class Pad:
    """The protected resource: refuses a landing with a token older than the newest it saw."""

    def __init__(self, name: str) -> None:
        #: The pad's name, also the waypoint's.
        self.name = name
        #: The highest fencing token that touched the pad.
        self.highest_token = 0
        #: Who is on the pad now, for the double-occupancy check.
        self.occupant: Optional[str] = None
        #: Guards the fields above: drones land from several threads.
        self.lock = threading.Lock()

    def land(self, drone: str, token: int) -> bool:
        """Accepts the landing if ``token`` is not stale; ``False`` otherwise."""
        with self.lock:
            if token < self.highest_token:
                return False
            if self.occupant is not None and self.occupant != drone:
                raise SystemExit(f"double occupancy: {drone} landed on {self.occupant}'s pad")
            self.highest_token = token
            self.occupant = drone
            return True

    def take_off(self, drone: str) -> None:
        with self.lock:
            if self.occupant == drone:
                self.occupant = None


def reserve_pad(
    session: hivekeeper.Session, pad: str, wait_ms: Optional[int] = None
) -> hivekeeper.Guard:
    return session.waypoint(
        pad, PAD_LAT, PAD_LON, radius_m=PAD_RADIUS_M, alt_min_m=0, alt_max_m=30, wait_ms=wait_ms
    )


def fly(brokers: List[str], drone: str, pad: Pad, ttl_ms: int, landing_s: float) -> int:
    """One drone: session, reserve, land, release. Returns the token it landed with."""
    with hivekeeper.Agent(drone, brokers) as agent:
        with agent.session(ttl_ms=ttl_ms) as session:
            with reserve_pad(session, pad.name) as guard:
                print(f"{drone}: reserved {pad.name} with fencing token {guard.token}", flush=True)
                if not pad.land(drone, guard.token):
                    raise SystemExit(f"{drone}: the pad refused token {guard.token}")
                print(f"{drone}: landing", flush=True)
                # Stop at once if the session is lost mid-landing (jeopardy or expiry).
                if session.lost.wait(landing_s):
                    raise SystemExit(f"{drone}: session lost mid-landing ({session.state})")
                pad.take_off(drone)
                print(f"{drone}: landed and released {pad.name}", flush=True)
                return guard.token


def crash_mid_landing(brokers: List[str], drone: str, pad: str, ttl_ms: int) -> None:
    """The ``--chaos`` victim (a child process): reserves, prints its token, dies."""
    agent = hivekeeper.Agent(drone, brokers)
    session = agent.session(ttl_ms=ttl_ms)
    guard = reserve_pad(session, pad)
    print(f"{drone}: reserved {pad} with fencing token {guard.token}", flush=True)
    print(f"TOKEN {guard.token}", flush=True)
    time.sleep(0.2)
    print(f"{drone}: crashing mid-landing", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def chaos(brokers: List[str], pad: Pad, ttl_ms: int) -> int:
    """drone-1 dies on the pad; drone-2, queued, reclaims it after the lease expires."""
    victim = subprocess.Popen(
        [
            sys.executable,
            "-u",
            os.path.abspath(__file__),
            "--victim",
            "--pad",
            pad.name,
            "--ttl-ms",
            str(ttl_ms),
            "--brokers",
            ",".join(brokers),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert victim.stdout is not None
    dead_token = 0
    for line in victim.stdout:
        if line.startswith("TOKEN "):
            dead_token = int(line.split()[1])
            if not pad.land("drone-1", dead_token):
                raise SystemExit("the pad refused drone-1's first token")
        else:
            print(line, end="", flush=True)
    victim.wait(timeout=30)
    if dead_token == 0:
        raise SystemExit("drone-1 never reserved the pad")
    died_at = time.monotonic()
    pad.take_off("drone-1")  # the wreck is cleared; its reservation is not
    with hivekeeper.Agent("drone-2", brokers) as agent:
        with agent.session(ttl_ms=ttl_ms) as session:
            print("drone-2: waiting for the pad", flush=True)
            with reserve_pad(session, pad.name) as guard:
                reclaim_ms = (time.monotonic() - died_at) * 1000
                print(
                    f"drone-2: reclaimed {pad.name} {reclaim_ms:.0f} ms after drone-1 died "
                    f"(TTL {ttl_ms} ms), token {guard.token}",
                    flush=True,
                )
                if not pad.land("drone-2", guard.token):
                    raise SystemExit("the pad refused drone-2")
                check = agent.fence_check(pad.name, dead_token, kind="waypoint")
                stale_refused = not pad.land("drone-1", dead_token)
                print(
                    f"drone-1 reboots with token {dead_token}: the pad "
                    f"{'refuses' if stale_refused else 'ACCEPTS'} it; "
                    f"fence.check valid={check.valid}",
                    flush=True,
                )
                if check.valid or not stale_refused or guard.token <= dead_token:
                    raise SystemExit("the stale token was not refused")
                pad.take_off("drone-2")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--brokers", default="127.0.0.1:1883", help="comma-separated host:port list"
    )
    parser.add_argument("--pad", default="pad-3", help="the pad's (waypoint's) name")
    parser.add_argument("--ttl-ms", type=int, default=2000, help="each drone's lease TTL")
    parser.add_argument("--chaos", action="store_true", help="the first drone dies mid-landing")
    parser.add_argument("--victim", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    brokers = args.brokers.split(",")
    if args.victim:
        crash_mid_landing(brokers, "drone-1", args.pad, args.ttl_ms)
        return 1  # not reached: it kills itself
    pad = Pad(args.pad)
    if args.chaos:
        return chaos(brokers, pad, args.ttl_ms)
    first = fly(brokers, "drone-1", pad, args.ttl_ms, landing_s=0.3)
    second = fly(brokers, "drone-2", pad, args.ttl_ms, landing_s=0.3)
    if second <= first:
        raise SystemExit(f"tokens did not grow: {first} then {second}")
    print(f"both drones landed on {args.pad}; tokens {first} < {second}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

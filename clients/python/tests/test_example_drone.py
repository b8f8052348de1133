"""examples/python/drone.py runs against a real node, with and without --chaos."""

from __future__ import annotations

import subprocess
import sys

from conftest import WORKSPACE

DRONE = WORKSPACE / "examples" / "python" / "drone.py"


def run_drone(node, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(DRONE), "--brokers", node.broker, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"drone.py {args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_two_drones_land_in_turn(node, names):
    out = run_drone(node, "--pad", names("pad"))
    assert "drone-1: landed and released" in out
    assert "drone-2: landed and released" in out
    assert "both drones landed" in out


def test_chaos_the_pad_is_reclaimed_and_the_stale_token_refused(node, names):
    out = run_drone(node, "--chaos", "--pad", names("pad"), "--ttl-ms", "1000")
    assert "drone-1: crashing mid-landing" in out
    assert "drone-2: reclaimed" in out
    assert "the pad refuses it; fence.check valid=False" in out

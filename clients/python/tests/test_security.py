"""Credentials and TLS: an agent with a secret over TLS on a node with authentication, and
mutual TLS with a client certificate."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import hivekeeper
from conftest import FAST


@pytest.fixture
def certs(binary: Path, tmp_path: Path) -> Path:
    out = tmp_path / "certs"
    subprocess.run(
        [str(binary), "certs", "dev", "--out", str(out), "--clients", "admin,drone-7"],
        check=True,
        capture_output=True,
    )
    return out


def test_secret_over_tls_on_a_node_with_authentication(start_node, certs):
    node = start_node(
        "--auth",
        "--mqtt-tls-cert",
        str(certs / "server.crt"),
        "--mqtt-tls-key",
        str(certs / "server.key"),
    )
    ca = str(certs / "ca.crt")
    admin_secret = (node.data_dir / "admin.secret").read_text().strip()
    with hivekeeper.Agent("admin", [node.broker], secret=admin_secret, tls_ca=ca, **FAST) as admin:
        account = admin.request("admin.agent.add", name="drone-7")
    assert account["agent"] == "drone-7" and account["role"] == "agent"
    with hivekeeper.Agent(
        "drone-7", [node.broker], secret=account["secret"], tls_ca=ca, **FAST
    ) as drone:
        with drone.session(ttl_ms=5_000) as session:
            with session.lock("pad-3", wait_ms=0) as guard:
                assert guard.token > 0
            # The agent role may not send operator ops.
            with pytest.raises(hivekeeper.Forbidden) as forbidden:
                drone.request("admin.leases")
            assert "admin" in forbidden.value.message or "observer" in forbidden.value.message
    # A wrong secret: the CONNACK's refusal is final, raised at once (the deadline is far
    # beyond the suite's patience, and would raise Unreachable).
    with pytest.raises(hivekeeper.CredentialsRefused) as refused:
        hivekeeper.Agent(
            "drone-7",
            [node.broker],
            secret="0" * 64,
            tls_ca=ca,
            request_timeout_ms=300,
            request_deadline_ms=600_000,
        )
    assert str(refused.value) == f"credentials refused by {node.broker}: bad username or password"
    assert (refused.value.broker, refused.value.reason) == (
        node.broker,
        "bad username or password",
    )
    # Plain TCP to a TLS listener gets nowhere either.
    with pytest.raises(hivekeeper.Unreachable):
        hivekeeper.Agent(
            "drone-7",
            [node.broker],
            secret=account["secret"],
            request_timeout_ms=300,
            request_deadline_ms=1_000,
        )


def test_client_certificate_on_a_mutual_tls_node(start_node, certs):
    node = start_node(
        "--mqtt-tls-cert",
        str(certs / "server.crt"),
        "--mqtt-tls-key",
        str(certs / "server.key"),
        "--mqtt-client-ca",
        str(certs / "ca.crt"),
    )
    tls = {
        "tls_ca": str(certs / "ca.crt"),
        "tls_cert": str(certs / "client-drone-7.crt"),
        "tls_key": str(certs / "client-drone-7.key"),
    }
    with hivekeeper.Agent("drone-7", [node.broker], **tls, **FAST) as drone:
        with drone.session(ttl_ms=5_000) as session, session.lock("pad-3", wait_ms=0) as guard:
            assert guard.token > 0
    # The certificate's CN is the identity: another client id is refused ("not authorized"),
    # at once.
    with pytest.raises(hivekeeper.CredentialsRefused) as refused:
        hivekeeper.Agent(
            "drone-8", [node.broker], **tls, request_timeout_ms=300, request_deadline_ms=600_000
        )
    assert str(refused.value) == f"credentials refused by {node.broker}: not authorized"

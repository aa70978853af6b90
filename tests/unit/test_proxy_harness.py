"""The generated HAProxy and CoreDNS configurations (harness/haproxy.py, harness/coredns.py) take only checked
values: text that could add a line, a block or a directive is refused before any config is written. Pure:
nothing is started (tests/component/test_haproxy_dns.py runs both for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.coredns import CoreDNS, service_fqdn
from harness.haproxy import HAProxy

FQDN = "streaming-headless.ml.svc.cluster.local"


def haproxy(tmp_path: Path, **kwargs: object) -> HAProxy:
    args: dict[str, object] = {"workdir": tmp_path, "resolver": "127.0.0.1:5353", "fqdn": FQDN, **kwargs}
    return HAProxy(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"header": "x-triton-sequence-id\n    server evil 10.0.0.1:80"},
        {"header": "x seq"},
        {"header": "x-seq)"},
        {"resolver": "dns.example:53"},
        {"resolver": "127.0.0.1:53 extra"},
        {"resolver": "127.0.0.1"},
        {"fqdn": "svc.ns.svc.cluster.local resolvers other"},
        {"fqdn": "Svc.ns.svc.cluster.local"},
        {"flavour": "source"},
        {"slots": 0},
        {"slots": True},
        {"host": "localhost"},
        {"http_port": 70000},
        {"backend_http_port": "8000"},
    ],
)
def test_haproxy_refuses_unchecked_values(tmp_path, kwargs):
    with pytest.raises(ValueError):
        haproxy(tmp_path, **kwargs)


def test_haproxy_refuses_a_workdir_that_cannot_go_into_the_config(tmp_path):
    with pytest.raises(ValueError, match="unquoted"):
        haproxy(tmp_path / "two words").config()


def test_haproxy_flavours_balance_on_the_header(tmp_path):
    hashed = haproxy(tmp_path, header="X-Triton-Sequence-Id").config()
    assert "balance hdr(x-triton-sequence-id)" in hashed
    assert "hash-type consistent" in hashed
    assert "stick" not in hashed
    stuck = haproxy(tmp_path, flavour="stick").config()
    assert "balance roundrobin" in stuck
    assert "stick on req.hdr(x-triton-sequence-id)" in stuck
    assert "hash-type" not in stuck
    for config in (hashed, stuck):  # both backends resolve the headless name through the resolvers
        assert f"server-template pod 8 {FQDN}:8000 resolvers cluster init-addr none" in config
        assert f"{FQDN}:8001 resolvers cluster init-addr none resolve-prefer ipv4 proto h2" in config
        assert "nameserver coredns 127.0.0.1:5353" in config


def test_haproxy_without_grpc_has_one_frontend(tmp_path):
    lb = haproxy(tmp_path, backend_grpc_port=None)
    assert "frontend grpc_in" not in lb.config() and "proto h2" not in lb.config()
    with pytest.raises(RuntimeError, match="no gRPC frontend"):
        _ = lb.grpc_url


@pytest.mark.parametrize(
    "kwargs",
    [{"host": "0.0.0.0 {"}, {"ttl": -1}, {"ttl": 3601}, {"ttl": 1.5}, {"port": 0}],
)
def test_coredns_refuses_unchecked_values(tmp_path, kwargs):
    with pytest.raises(ValueError):
        CoreDNS(tmp_path, tmp_path / "kubeconfig", **kwargs)


def test_coredns_refuses_a_kubeconfig_path_that_cannot_go_into_the_corefile(tmp_path):
    for name in ("kube config", "kubeconfig}", 'kube"config'):
        with pytest.raises(ValueError, match="unquoted"):
            CoreDNS(tmp_path, tmp_path / name).corefile()


def test_coredns_serves_the_cluster_domain_from_the_kubeconfig(tmp_path):
    dns = CoreDNS(tmp_path, tmp_path / "kubeconfig", host="127.0.0.1", port=5353, ttl=2)
    corefile = dns.corefile()
    assert corefile.startswith("cluster.local:5353 {\n    bind 127.0.0.1\n")
    assert f"kubeconfig {tmp_path / 'kubeconfig'}\n" in corefile
    assert "ttl 2\n" in corefile
    assert dns.address == "127.0.0.1:5353"


def test_service_fqdn_is_checked():
    assert service_fqdn("vision-headless", "ml") == "vision-headless.ml.svc.cluster.local"
    with pytest.raises(ValueError):
        service_fqdn("vision headless", "ml")

"""How to write an address in tritonserver's listen flags, and a host in a URL (pure).

tritonserver's endpoints read their address two ways (measured on the wheel's tritonserver 2.51):

- HTTP and metrics take an IPv4 address, or an IPv6 one written `ipv6:ADDRESS`: `--http-address=::`
  binds 255.255.255.255 (nothing answers), `--http-address=ipv6:::` binds IPv6 alone (then 127.0.0.1 no
  longer answers: one family per endpoint);
- gRPC joins address and port as ADDRESS:PORT, so an IPv6 address needs brackets: `--grpc-address=[::1]`
  binds it, `::1` fails ("Socket '::1:8001' already in use"). Its default, 0.0.0.0, listens on both
  families.
"""

from __future__ import annotations

IPV6_ANY = "::"
IPV4_LOOPBACK, IPV6_LOOPBACK = "127.0.0.1", "::1"


def bare(host: str) -> str:
    """`host` without the brackets a URL puts around an IPv6 address."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_ipv6(host: str) -> bool:
    return ":" in bare(host)


def url_host(host: str) -> str:
    """`host` as a URL or HOST:PORT writes it: an IPv6 address in brackets."""
    return f"[{bare(host)}]" if is_ipv6(host) else host


def loopback(ip_family: str) -> str:
    """The loopback address of a pod network of `ip_family` (IPv4 or IPv6)."""
    return IPV6_LOOPBACK if ip_family == "IPv6" else IPV4_LOOPBACK


def listen_args(host: str) -> list[str]:
    """tritonserver's flags that bind its HTTP, gRPC and metrics endpoints to `host`."""
    plain = bare(host)
    evhtp = f"ipv6:{plain}" if is_ipv6(plain) else plain
    return [f"--http-address={evhtp}", f"--grpc-address={url_host(plain)}", f"--metrics-address={evhtp}"]

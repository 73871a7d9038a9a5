"""Reading what an xover metrics endpoint serves, for the tests of the exporter and the turn servers:
a scrape as Prometheus makes it (HTTPS, the certificate checked for the name xover's credentials are
made for, the bearer token sent), parsed with prometheus_client's own parser, one sample picked out by
its labels, and free ports to serve on."""

import http.client
import socket
import ssl

from prometheus_client.parser import text_string_to_metric_families

from xover.turns.credentials import CERTIFICATE_NAME, MetricsCredentials, metrics_credentials


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to an address, checking the certificate for CERTIFICATE_NAME (Prometheus' tls_config server_name)."""

    def connect(self):
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=CERTIFICATE_NAME)


def get(port: int, path: str = "/metrics", host: str = "127.0.0.1", token: str | None = "",
        credentials: MetricsCredentials | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a GET as Prometheus makes it, with the session's credentials (or
    `credentials`): `token` "" sends their token, None none, anything else that text."""
    credentials = credentials or metrics_credentials()
    context = ssl.create_default_context(cadata=credentials.certificate)
    connection = _PinnedHTTPS(host, port, timeout=10, context=context)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token or credentials.token}"
    try:
        connection.request("GET", path, headers=sent)
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def scrape(port: int, host: str = "127.0.0.1") -> dict[tuple[str, frozenset], float]:
    """Every sample at https://HOST:PORT/metrics, by (name, labels)."""
    status, _, body = get(port, host=host)
    assert status == 200, (status, body)
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode()) for sample in family.samples}


def value(samples, name, **labels):
    """The one sample of `name` whose labels include `labels` (an AssertionError unless exactly one)."""
    found = [v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def _free_on_both(port: int) -> bool:
    """Whether `port` can be bound on every address of IPv4 and of IPv6 now."""
    probes = []
    try:
        for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            probe = socket.socket(family)
            probes.append(probe)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            probe.bind((address, port))
        return True
    except OSError:
        return False
    finally:
        for probe in probes:
            probe.close()


def free_port() -> int:
    """A TCP port free on this machine now, on IPv4 and IPv6 (what xover's metrics listen on)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        if _free_on_both(port):
            return port
    raise AssertionError("no port free on both families")


def free_ports(count: int) -> int:
    """The first of `count` consecutive TCP ports free on this machine now (IPv4 and IPv6)."""
    for _ in range(50):
        first = free_port()
        if all(_free_on_both(port) for port in range(first, first + count)):
            return first
    raise AssertionError(f"no {count} consecutive free ports")

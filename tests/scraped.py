"""Reading what an xover metrics endpoint serves, for the tests of the exporter and the turn servers:
a scrape parsed with prometheus_client's own parser, one sample picked out by its labels, and free ports
to serve on."""

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int, host: str = "127.0.0.1") -> dict[tuple[str, frozenset], float]:
    """Every sample at http://HOST:PORT/metrics, by (name, labels)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples, name, **labels):
    """The one sample of `name` whose labels include `labels` (an AssertionError unless exactly one)."""
    found = [v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def free_ports(count: int) -> int:
    """The first of `count` consecutive TCP ports free on this machine now."""
    for _ in range(50):
        first, probes = free_port(), []
        try:
            for port in range(first, first + count):
                probes.append(socket.socket())
                probes[-1].bind(("", port))
            return first
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError(f"no {count} consecutive free ports")

"""--bandwidth spellings: bits in lower case or spelt out, bytes with a capital B; one canonical key."""

import pytest

from xover.rates import RateError, canonical_rate, describe_rate


@pytest.mark.parametrize("given, canonical", [
    ("1gbit", "1gbit"), ("1000mbit", "1gbit"), ("100mbps", "100mbit"), ("100Mbps", "100mbit"),
    ("125MB/s", "1gbit"), ("100MBps", "800mbit"), ("12.5MB/s", "100mbit"), ("1500mbit", "1500mbit"),
    ("10 kbyte/s", "80kbit"),
])
def test_a_rate_has_one_canonical_form(given, canonical):
    assert canonical_rate(given) == canonical


@pytest.mark.parametrize("given", ["fast", "100", "100mb/s", "1bit", "20tbit", "-1gbit"])
def test_a_bad_rate_says_what_to_write(given):
    with pytest.raises(RateError, match="--bandwidth"):
        canonical_rate(given)


def test_rates_are_described_for_people():
    assert describe_rate("1gbit") == "1 Gbit/s"
    assert describe_rate(None) == "host network"


def test_host_means_the_unshaped_network_for_every_command():
    from xover.links import HOST, Link

    # --bandwidth host is the host network, nothing to shape; no --bandwidth is "not given" (the command's default)
    assert Link.parse("host") is HOST and HOST.shaped_rate is None and HOST.key == "host"
    assert Link.parse(None) is None and Link.parse("") is None
    assert Link.parse("1000mbit").shaped_rate == "1gbit"
    with pytest.raises(RateError):
        Link.parse("fast")


def test_a_link_carries_its_key_label_and_how_to_ask_for_it_again():
    from xover.links import HOST, Link, LinkKind

    shaped, cluster = Link.parse("125MB/s"), Link.cluster("1gbit")
    assert (shaped.kind, shaped.key, shaped.label, shaped.flag) == (LinkKind.SHAPED, "1gbit", "1 Gbit/s", " --bandwidth 1gbit")
    # the emulated cluster's NICs: keyed by their rate like a shaped loopback, but nothing to shape or ask for here
    assert (cluster.key, cluster.label, cluster.shaped_rate, cluster.flag) == ("1gbit", "1 Gbit/s", None, "")
    assert (HOST.key, HOST.label, HOST.bits_per_s, HOST.flag) == ("host", "host network", None, "")
    assert Link.cluster(None) is HOST and Link.of_key("host") is HOST and Link.of_key(None) is HOST
    assert Link.of_key("1000mbit") == Link.parse("1gbit") and shaped.bits_per_s == 10**9

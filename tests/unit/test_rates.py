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
    from xover.emulation.network import requested_rate

    assert requested_rate("host") is None and requested_rate(None) is None and requested_rate("") is None
    assert requested_rate("1000mbit") == "1gbit"
    with pytest.raises(RateError):
        requested_rate("fast")

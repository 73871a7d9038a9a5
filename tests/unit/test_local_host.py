"""Which host names are this machine (hosts.is_local): a plan or -H naming it twice, under two spellings, would
give one device to two groups at once."""

import pytest

from xover.hosts import LOCAL, canonical_host, is_local


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "LocalHost", "127.0.0.1", "127.0.0.2", "127.1.2.3", "::1",
                                  "[::1]", "127.1", "0x7f.1", "2130706433", "0.0.0.0", "0", "::"])
def test_every_spelling_of_this_machine_is_local(host):
    assert is_local(host) and canonical_host(host) == LOCAL


@pytest.mark.parametrize("host", ["xo-h1", "192.0.2.7", "example.org", "128.0.0.1", "", "192.0.2", "8ball", "1e100.net"])
def test_other_hosts_are_not(host):
    assert not is_local(host)

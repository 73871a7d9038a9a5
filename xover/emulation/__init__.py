"""A test bench on one machine: the emulated cluster (`xover cluster up`: hosts as network namespaces,
each with its sshd, hostname, cores and a shaped NIC) and the shaped link of `--bandwidth` (tc in a
network namespace). Launchers (xover.run.external) reach its hosts as any others, by ssh."""

"""Database servers the tests and benchmarks start for themselves, each on loopback only."""

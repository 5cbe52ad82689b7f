"""Shared pytest setup. Fixtures live in tests/plugins/, one module per real part."""

pytest_plugins = [
    "tests.plugins.etcd_server",
    "tests.plugins.netns",
    "tests.plugins.ipv6_loopback",
]

"""The etcd configuration file (Cilium's shape) and the options around it (pure)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.kvstore.etcd_config import (
    EtcdAuth,
    EtcdConfigError,
    EtcdConfigFile,
    TlsFiles,
    etcd_access,
    parse_etcd_config,
    parse_yaml_subset,
    read_etcd_config_file,
)

CILIUM = """\
# written by clustermesh-apiserver
endpoints:
- https://cluster1.mesh.cilium.io:2379
trusted-ca-file: /var/lib/cilium/clustermesh/cluster1-ca.crt
key-file: '/var/lib/cilium/clustermesh/cluster1.key'
cert-file: "/var/lib/cilium/clustermesh/cluster1.crt"
"""


def test_cilium_file() -> None:
    config = parse_etcd_config(CILIUM, source="f")
    assert config == EtcdConfigFile(
        endpoints=("https://cluster1.mesh.cilium.io:2379",),
        tls=TlsFiles(
            "/var/lib/cilium/clustermesh/cluster1-ca.crt",
            "/var/lib/cilium/clustermesh/cluster1.crt",
            "/var/lib/cilium/clustermesh/cluster1.key",
        ),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "endpoints: [https://a:1, 'https://b:2']\n",
            {"endpoints": ["https://a:1", "https://b:2"]},
        ),
        (
            "endpoints:\n  - https://a:1  # first\n  - https://b:2\n",
            {"endpoints": ["https://a:1", "https://b:2"]},
        ),
        ("---\nendpoints: https://a:1\n...\n", {"endpoints": "https://a:1"}),
        ("endpoints:\n- http://a#b:1\n", {"endpoints": ["http://a#b:1"]}),
        (
            "other:\n  nested: 1\n  deeper:\n    - x\nendpoints: [a]\n",
            {"other": [], "endpoints": ["a"]},
        ),
        ("unknown: value\ncert-file: c.pem\n", {"cert-file": "c.pem"}),
        ("", {}),
    ],
)
def test_yaml_subset(text: str, expected: dict[str, object]) -> None:
    assert parse_yaml_subset(text, source="f") == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("endpoints:\n  https://a:1\n", "f line 2: expected '- value' under 'endpoints:'"),
        ("  endpoints: [a]\n", "f line 1: unexpected indentation"),
        ("endpoints: [a\n", "f line 1: unterminated '[' list"),
        ("cert-file: 'c.pem\n", "f line 1: unterminated quote"),
        ("cert-file: &anchor c.pem\n", "f line 1: YAML '&' is not supported"),
        ("cert-file: a\ncert-file: b\n", "f line 2: 'cert-file' is given twice"),
        ("just text\n", "f line 1: expected 'key: value'"),
        ("endpoints:\n\t- a\n", "f line 2: tab in indentation"),
    ],
)
def test_yaml_subset_refuses(text: str, error: str) -> None:
    with pytest.raises(EtcdConfigError, match=re.escape(error)):
        parse_yaml_subset(text, source="f")


def test_relative_files_start_at_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "etcd.yml"
    path.write_text("endpoints: [https://a:1]\ntrusted-ca-file: ca.crt\n")
    config = read_etcd_config_file(str(path))
    assert config.tls.ca_file == str(tmp_path / "ca.crt")


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EtcdConfigError, match=r"etcd config .*nope.yml: No such file"):
        read_etcd_config_file(str(tmp_path / "nope.yml"))


def test_options_override_the_file() -> None:
    config = parse_etcd_config(CILIUM, source="f")
    access = etcd_access(
        "https://127.0.0.1:2379", config=config, tls=TlsFiles(ca_file="/other/ca.crt")
    )
    assert [e.url for e in access.endpoints] == ["https://127.0.0.1:2379"]
    assert access.tls == TlsFiles(
        "/other/ca.crt",
        "/var/lib/cilium/clustermesh/cluster1.crt",
        "/var/lib/cilium/clustermesh/cluster1.key",
    )
    assert access.watched_files() == access.tls.paths()


def test_bare_endpoints_become_https_with_tls_files() -> None:
    access = etcd_access("127.0.0.1:2379", tls=TlsFiles(ca_file="ca.crt"))
    assert access.endpoints[0].url == "https://127.0.0.1:2379"
    plain = etcd_access("127.0.0.1:2379")
    assert plain.endpoints[0].url == "http://127.0.0.1:2379" and plain.tls is None


@pytest.mark.parametrize(
    ("endpoints", "tls", "auth", "error"),
    [
        (
            "http://a:1",
            TlsFiles(ca_file="ca"),
            None,
            "TLS files are given but the endpoint is http://",
        ),
        ("https://a:1", TlsFiles(cert_file="c"), None, "certificate and key go together"),
        (None, None, None, "no etcd endpoint given"),
        ("a:1", None, EtcdAuth("root"), "etcd user root: no password"),
        ("a:1", None, EtcdAuth(""), "user name is empty"),
        ("ftp://a", None, None, "unknown scheme"),
    ],
)
def test_access_refuses(
    endpoints: str | None, tls: TlsFiles | None, auth: EtcdAuth | None, error: str
) -> None:
    with pytest.raises(EtcdConfigError, match=re.escape(error)):
        etcd_access(endpoints, tls=tls, auth=auth)


def test_password_is_not_in_repr() -> None:
    auth = EtcdAuth("root", password="s3cret")
    assert "s3cret" not in repr(auth)
    access = etcd_access("a:1", auth=auth)
    assert "s3cret" not in repr(access)


_plain = st.text(
    alphabet=st.characters(
        min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="#'\",[]&*!|>{%@`:-"
    ),
    min_size=1,
    max_size=20,
)


@given(st.lists(_plain, min_size=1, max_size=4), st.sampled_from(["block", "flow"]), _plain)
def test_yaml_round_trip(urls: list[str], style: str, ca: str) -> None:
    if style == "block":
        body = "endpoints:\n" + "".join(f"- {u}\n" for u in urls)
    else:
        body = "endpoints: [" + ", ".join(f"'{u}'" for u in urls) + "]\n"
    values = parse_yaml_subset(f'{body}trusted-ca-file: "{ca}"\n', source="f")
    assert values == {"endpoints": urls, "trusted-ca-file": ca}


def test_a_user_over_plain_http_is_warned_about() -> None:
    from meshhealth.kvstore.etcd_config import EtcdAuth, clear_text_password_warning, etcd_access

    plain = etcd_access("http://10.0.0.1:2379", auth=EtcdAuth("agent", password="pw"))
    assert clear_text_password_warning(plain) == (
        "etcd user agent over http://10.0.0.1:2379: the password and every token cross "
        "the network in clear text; use https:// with --etcd-ca"
    )
    assert clear_text_password_warning(etcd_access("http://10.0.0.1:2379")) is None
    secure = etcd_access("https://10.0.0.1:2379", auth=EtcdAuth("agent", password="pw"))
    assert clear_text_password_warning(secure) is None

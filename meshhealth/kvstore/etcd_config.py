"""How to reach one etcd cluster: endpoints, TLS files, user. Pure (no I/O but reading
the configuration file in `read_etcd_config_file`).

    access = etcd_access("https://10.0.0.5:2379", tls=TlsFiles("ca.crt", "c.crt", "c.key"))
    access = etcd_access(None, config_file="/var/lib/cilium/etcd-config.yml")

Cilium's etcd configuration file (also the shape of one clustermesh remote's file):

    endpoints:
    - https://cluster1.mesh.example:2379
    trusted-ca-file: /var/lib/etcd-secrets/ca.crt
    cert-file: /var/lib/etcd-secrets/client.crt
    key-file: /var/lib/etcd-secrets/client.key

Only this small subset of YAML is read (top-level `key: value`, `key:` followed by
`- item` lines, `key: [a, b]`, quotes and `#` comments), by a parser of our own: the
files are a handful of lines, and a full YAML library would be a new dependency whose
features (tags, anchors, nested documents) these files never use. Anything outside
the subset is refused with the file and line; unknown keys (and what is indented
under them) are skipped, as Cilium skips them. Relative file names are taken relative
to the configuration file's directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from meshhealth import defaults
from meshhealth.kvstore.endpoints import EtcdEndpoint, parse_endpoints

MAX_CONFIG_FILE_BYTES = defaults.ETCD_CONFIG_MAX_BYTES

KNOWN_KEYS = ("endpoints", "trusted-ca-file", "cert-file", "key-file")


class EtcdConfigError(ValueError):
    """A bad etcd configuration (file or options); the message names where."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for TLS: the CA that signs etcd's certificate (None: the system's
    roots) and this client's certificate and key (both or neither)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.ca_file, self.cert_file, self.key_file) if p)


@dataclass(frozen=True, slots=True)
class EtcdAuth:
    """etcd user authentication: the password comes from `password_file` (read at every
    authentication, so a changed file is used at the next token refresh) or is given
    as `password` (from the environment). Never from the command line."""

    user: str
    password_file: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class EtcdAccess:
    """Everything needed to talk to one etcd cluster."""

    endpoints: tuple[EtcdEndpoint, ...]
    tls: TlsFiles | None = None
    auth: EtcdAuth | None = None

    def watched_files(self) -> tuple[str, ...]:
        """The files whose change means reconnecting (certificates, password file)."""
        files = self.tls.paths() if self.tls else ()
        if self.auth and self.auth.password_file:
            files = (*files, self.auth.password_file)
        return files


@dataclass(frozen=True, slots=True)
class EtcdConfigFile:
    """What an etcd configuration file says (paths already made absolute)."""

    endpoints: tuple[str, ...] = ()
    tls: TlsFiles = TlsFiles()


# --- the YAML subset -------------------------------------------------------------------------

_KEY_RE = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?:\s+(.*))?$")
_ITEM_RE = re.compile(r"^-(?:\s+(.*))?$")


def _strip_comment(line: str) -> str:
    """`line` without a `#` comment (a `#` at the start or after a blank, outside
    quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str, where: str) -> str:
    text = text.strip()
    if text[:1] in ("'", '"'):
        if len(text) < 2 or text[-1] != text[0]:
            raise EtcdConfigError(f"{where}: unterminated quote in {text!r}")
        return text[1:-1]
    if text[:1] in ("&", "*", "!", "|", ">", "{", "%", "@", "`"):
        raise EtcdConfigError(f"{where}: YAML {text[:1]!r} is not supported here")
    return text


def _flow_list(text: str, where: str) -> list[str]:
    inner = text.strip()
    if not inner.endswith("]"):
        raise EtcdConfigError(f"{where}: unterminated '[' list")
    return [_scalar(item, where) for item in inner[1:-1].split(",") if item.strip()]


def parse_yaml_subset(text: str, *, source: str) -> dict[str, str | list[str]]:
    """The top-level keys of `text`: a string, or a list of strings. Unknown keys are
    kept (the caller skips them); what is indented under a key without a value is
    that key's `- item` list, or skipped when the key is unknown."""
    values: dict[str, str | list[str]] = {}
    current: str | None = None  # a key whose value is the indented lines below it
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source} line {number}"
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise EtcdConfigError(f"{where}: tab in indentation")
        line = _strip_comment(raw)
        stripped = line.strip()
        if not stripped or stripped in ("---", "..."):
            continue
        indented = line[0] in " "
        item = _ITEM_RE.match(stripped)
        if current is not None and (indented or item):
            if current not in KNOWN_KEYS:
                continue  # under an unknown key
            if item is None:
                raise EtcdConfigError(f"{where}: expected '- value' under '{current}:'")
            listed = values.setdefault(current, [])
            if not isinstance(listed, list):
                raise EtcdConfigError(f"{where}: '{current}' has a value already")
            listed.append(_scalar(item.group(1) or "", where))
            continue
        if indented:
            raise EtcdConfigError(f"{where}: unexpected indentation")
        match = _KEY_RE.match(stripped)
        if match is None:
            raise EtcdConfigError(f"{where}: expected 'key: value', got {stripped!r}")
        key, value = match.group(1), (match.group(2) or "").strip()
        if key in values:
            raise EtcdConfigError(f"{where}: '{key}' is given twice")
        current = None
        if not value:
            current = key
            values[key] = []
        elif value.startswith("["):
            values[key] = _flow_list(value, where)
        elif key in KNOWN_KEYS:
            values[key] = _scalar(value, where)
    return values


def parse_etcd_config(text: str, *, source: str, base_dir: str = "") -> EtcdConfigFile:
    """An etcd configuration file's endpoints and TLS files; EtcdConfigError names the
    file and line. `base_dir`: where relative file names start."""
    values = parse_yaml_subset(text, source=source)
    raw_endpoints = values.get("endpoints", [])
    endpoints = [raw_endpoints] if isinstance(raw_endpoints, str) else raw_endpoints
    files: dict[str, str | None] = {}
    for key in ("trusted-ca-file", "cert-file", "key-file"):
        value = values.get(key)
        if isinstance(value, list):
            if value:
                raise EtcdConfigError(f"{source}: '{key}' must be a file name, not a list")
            value = None
        files[key] = os.path.join(base_dir, value) if value else None
    return EtcdConfigFile(
        endpoints=tuple(e for e in endpoints if e),
        tls=TlsFiles(files["trusted-ca-file"], files["cert-file"], files["key-file"]),
    )


def read_etcd_config_file(path: str) -> EtcdConfigFile:
    """Read and parse an etcd configuration file; EtcdConfigError when it cannot."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_FILE_BYTES + 1)
    except OSError as error:
        raise EtcdConfigError(f"etcd config {path}: {error.strerror or error}") from None
    if len(data) > MAX_CONFIG_FILE_BYTES:
        raise EtcdConfigError(f"etcd config {path}: larger than {MAX_CONFIG_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EtcdConfigError(f"etcd config {path}: not UTF-8 text") from None
    return parse_etcd_config(
        text, source=f"etcd config {path}", base_dir=os.path.dirname(os.path.abspath(path))
    )


# --- options and file together ---------------------------------------------------------------


def etcd_access(
    endpoints: str | Sequence[str] | None,
    *,
    config: EtcdConfigFile | None = None,
    tls: TlsFiles | None = None,
    auth: EtcdAuth | None = None,
) -> EtcdAccess:
    """Endpoints and TLS files from the options (`endpoints`, `tls`), each falling back
    to the configuration file's. `host:port` endpoints are https when a TLS file is
    given. EtcdConfigError for a cert without its key, http:// with TLS files, or no
    endpoint at all."""
    files = TlsFiles()
    if config is not None:
        files = config.tls
    if tls is not None:
        files = replace(
            files,
            ca_file=tls.ca_file or files.ca_file,
            cert_file=tls.cert_file or files.cert_file,
            key_file=tls.key_file or files.key_file,
        )
    if bool(files.cert_file) != bool(files.key_file):
        raise EtcdConfigError(
            "etcd client certificate and key go together: give both "
            "(--etcd-cert and --etcd-key, or cert-file and key-file) or neither"
        )
    use_tls = bool(files.paths())
    spec: str | Sequence[str] | None = endpoints
    if not spec and config is not None:
        spec = config.endpoints
    if not spec:
        raise EtcdConfigError("no etcd endpoint given (expected e.g. https://127.0.0.1:2379)")
    try:
        parsed = parse_endpoints(spec, default_scheme="https" if use_tls else "http")
    except ValueError as error:
        raise EtcdConfigError(str(error)) from None
    if use_tls and not parsed[0].secure:
        raise EtcdConfigError(
            f"etcd {parsed[0].url}: TLS files are given but the endpoint is http://; use https://"
        )
    if auth is not None and not auth.user:
        raise EtcdConfigError("etcd user name is empty")
    if auth is not None and auth.password_file is None and auth.password is None:
        raise EtcdConfigError(
            f"etcd user {auth.user}: no password (give a password file, or set it in "
            "the environment)"
        )
    return EtcdAccess(parsed, files if parsed[0].secure else None, auth)


def clear_text_password_warning(access: EtcdAccess) -> str | None:
    """A warning when an etcd user's password would cross the network in clear text
    (a user over http://), or None."""
    if access.auth is None or access.endpoints[0].secure:
        return None
    return (
        f"etcd user {access.auth.user} over {access.endpoints[0].url}: the password and "
        "every token cross the network in clear text; use https:// with --etcd-ca"
    )

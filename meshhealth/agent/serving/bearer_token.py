"""The bearer token of the web page and /metrics (`--web-token-file`,
`--metrics-token-file`): who may read them, checked in one place (pure but for reading
the file at start).

    token = BearerToken.from_file("/etc/mh/web.token")   # or TokenFileError
    token.refusal(request.headers)   # None, or the 401 to answer

A request is let in when it carries `Authorization: Bearer <token>` (Prometheus'
`authorization: credentials_file:`, curl -H, scripts) or, for the web page in a browser,
the cookie that `GET /?token=<token>` sets once (`login`): HttpOnly (the page's scripts
cannot read it), SameSite=Strict (another site's page does not send it), Secure over
TLS, then a redirect to `/` so that the token leaves the address bar. Comparisons are
constant-time (hmac.compare_digest). Anything else is 401 with `WWW-Authenticate:
Bearer`.

The file holds the token alone (surrounding whitespace ignored): 16 to 4096 characters
of letters, digits and `-._~+/=` (what `openssl rand -hex 32` or `-base64 32` prints);
like a key, it must be readable by its owner only. It is read at start: restart the
agent to change it.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs

from meshhealth.http_server import HttpResponse
from meshhealth.kvstore.secret_files import read_small_file

COOKIE_NAME = "meshhealth_token"
MAX_TOKEN_FILE_BYTES = 8192
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{16,4096}")
TEXT = "text/plain; charset=utf-8"


class TokenFileError(ValueError):
    """The token file cannot be used; the message names it (one line)."""


def parse_token(text: str) -> str:
    """The token in a token file's text; ValueError when it is not one (pure)."""
    token = text.strip()
    if not _TOKEN.fullmatch(token):
        raise ValueError(
            "not a token: 16 to 4096 characters of letters, digits and -._~+/= "
            "(e.g. openssl rand -hex 32)"
        )
    return token


def _header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    return next((value for key, value in headers if key == name), None)


def _cookie(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key != "cookie":
            continue
        for part in value.split(";"):
            cookie_name, sep, cookie_value = part.strip().partition("=")
            if sep and cookie_name == name:
                return cookie_value
    return None


@dataclass(frozen=True, slots=True)
class BearerToken:
    """The token one server asks for; `what` names the server in messages."""

    token: str
    what: str  # "web", "metrics"

    @staticmethod
    def from_file(path: str, what: str) -> BearerToken:
        try:
            data = read_small_file(path, MAX_TOKEN_FILE_BYTES, secret=True)
            token = parse_token(data.decode("ascii"))
        except UnicodeDecodeError:
            raise TokenFileError(f"token file {path}: not ASCII text") from None
        except ValueError as error:
            raise TokenFileError(f"token file {path}: {error}") from None
        return BearerToken(token, what)

    def matches(self, candidate: str | None) -> bool:
        """Whether `candidate` is the token (constant-time)."""
        if candidate is None:
            return False
        return hmac.compare_digest(candidate.encode("latin-1", "replace"), self.token.encode())

    def allows(self, headers: Sequence[tuple[str, str]]) -> bool:
        """Whether a request with `headers` (names lower-case) carries the token."""
        authorization = _header(headers, "authorization")
        if authorization is not None:
            scheme, _, credentials = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and self.matches(credentials.strip()):
                return True
        return self.matches(_cookie(headers, COOKIE_NAME))

    def refusal(self, headers: Sequence[tuple[str, str]]) -> HttpResponse | None:
        """None when the request carries the token, else the 401 to answer."""
        if self.allows(headers):
            return None
        hint = (
            "open the page once as /?token=TOKEN (docs/ui.md)"
            if self.what == "web"
            else "scrape with authorization: credentials_file (docs/metrics.md)"
        )
        return HttpResponse(
            401,
            f"{self.what}: a bearer token is required: send Authorization: Bearer TOKEN, "
            f"or {hint}\n".encode(),
            TEXT,
            headers=(("WWW-Authenticate", f'Bearer realm="meshhealth {self.what}"'),),
        )

    def login(self, query: str, *, secure: bool) -> HttpResponse | None:
        """`?token=` on the page: the right token sets the cookie and redirects to `/`
        (303), a wrong one is refused (401); None when the query names no token."""
        offered = parse_qs(query).get("token")
        if offered is None:
            return None
        if not self.matches(offered[0]):
            refused = self.refusal(())
            assert refused is not None
            return refused
        cookie = f"{COOKIE_NAME}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        return HttpResponse(
            303,
            b"the token is set: the page is at /\n",
            TEXT,
            headers=(
                ("Location", "/"),
                ("Set-Cookie", f"{cookie}; Secure" if secure else cookie),
                ("Cache-Control", "no-store"),
                ("Referrer-Policy", "no-referrer"),
            ),
        )

"""etcd user authentication: the token every call carries, asked for when needed.

etcd answers `Authenticate(user, password)` with a token that calls carry as `token`
metadata. Tokens expire (etcd's `--auth-token-ttl`, counted from the last use) and are
dropped when the user's password changes; etcd then answers UNAUTHENTICATED "invalid
auth token", the transport calls `drop()` and the next call asks for a new one, reading
the password file again. Used from worker threads: a lock guards the token.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc
from etcd3 import etcdrpc

from meshhealth import defaults
from meshhealth.kvstore.endpoints import EtcdEndpoint
from meshhealth.kvstore.errors import RpcFailed
from meshhealth.kvstore.etcd_config import EtcdAuth
from meshhealth.kvstore.health import EtcdStats
from meshhealth.kvstore.secret_files import secret_file_problem

log = logging.getLogger(__name__)

MAX_PASSWORD_BYTES = defaults.ETCD_PASSWORD_MAX_BYTES


class Tokens:
    """The token of one etcd client (none without a user)."""

    def __init__(self, auth: EtcdAuth | None, stats: EtcdStats) -> None:
        self.auth = auth
        self.stats = stats
        self.lock = threading.Lock()  # guards the token and the counters bumped in threads
        self._token: str | None = None
        self._disabled = False  # etcd said auth is not enabled: send no token

    @property
    def needed(self) -> bool:
        """A call must ask for a token first."""
        return self.auth is not None and self._token is None and not self._disabled

    def reset(self) -> None:
        """New channels: ask again (etcd may have changed too)."""
        with self.lock:
            self._token = None
            self._disabled = False

    def drop(self) -> None:
        """Forget the token (etcd refused it): the next call asks for a new one."""
        with self.lock:
            self._token = None

    def refused(self) -> None:
        """etcd refused the token of a call that will be retried once."""
        self.drop()
        with self.lock:
            self.stats.token_refreshes += 1

    def metadata(self) -> dict[str, Any]:
        """Keyword arguments for a gRPC call: the token, when there is one."""
        token = self._token
        return {"metadata": (("token", token),)} if token else {}

    def _password(self, endpoint: EtcdEndpoint) -> str:
        auth = self.auth
        assert auth is not None
        if auth.password_file is None:
            return auth.password or ""
        try:
            with open(auth.password_file, encoding="utf-8") as handle:
                problem = secret_file_problem(handle.fileno())
                if problem is not None:
                    raise PermissionError(problem)
                return handle.read(MAX_PASSWORD_BYTES).rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            detail = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            reason = f"password file {auth.password_file}: {detail or error}"
            raise RpcFailed(endpoint.url, error, reason=reason, down=True) from None

    def ensure(self, channel: Any, endpoint: EtcdEndpoint, timeout_s: float) -> None:
        """Make sure a token is there, asking `endpoint` for one (worker thread).
        grpc.RpcError from Authenticate propagates (the caller explains it)."""
        if self.auth is None:
            return
        with self.lock:
            if self._token is not None or self._disabled:
                return
            request = etcdrpc.AuthenticateRequest(
                name=self.auth.user, password=self._password(endpoint)
            )
            try:
                response = etcdrpc.AuthStub(channel).Authenticate(request, timeout_s)
            except grpc.RpcError as error:
                if "authentication is not enabled" in str(error.details() or ""):
                    log.warning("etcd %s: authentication is not enabled; no token", endpoint.url)
                    self._disabled = True
                    return
                raise
            self._token = str(response.token)
            self.stats.authentications += 1

"""A file that holds a secret (the etcd client key, the etcd user's password, a served
TLS key, a bearer token) must be private: readable by its owner only.

    problem = secret_file_problem(handle.fileno())   # None, or why it is refused
    data = read_small_file(path, limit, secret=True) # ValueError saying why
    data = read_pem_file(path, "key", secret=True)   # PemFileError naming the file

A key or password that other users of the host can read is no secret: the file is
refused with the fix in the message (`chmod 600 FILE`), before anything is sent.
"""

from __future__ import annotations

import os
import stat

from meshhealth import defaults


class PemFileError(ValueError):
    """A PEM file cannot be used: the message names it and says why (one line)."""


def secret_file_problem(fd: int) -> str | None:
    """Why the open file `fd` may not hold a secret (group or others may read or write
    it), or None."""
    mode = os.fstat(fd).st_mode
    if stat.S_IMODE(mode) & 0o077:
        return f"readable by group or others (mode {stat.S_IMODE(mode):04o}): chmod 600 it"
    return None


def read_small_file(path: str, limit: int, *, secret: bool) -> bytes:
    """The bytes of file `path`; `secret`: refused unless only its owner may read it.
    ValueError saying why (the caller's message names the file) when it cannot be read,
    is refused or is larger than `limit` bytes."""
    try:
        with open(path, "rb") as handle:
            problem = secret_file_problem(handle.fileno()) if secret else None
            data = handle.read(limit + 1)
    except OSError as error:
        raise ValueError(error.strerror or str(error)) from None
    if problem is not None:
        raise ValueError(problem)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return data


def read_pem_file(path: str, what: str, *, secret: bool) -> bytes:
    """The bytes of PEM file `path` (`what`: certificate, key, CA, for the message);
    `secret` (a private key): refused unless only its owner may read it. PemFileError
    when it cannot be read, is larger than ETCD_PEM_MAX_BYTES or holds no PEM block."""
    try:
        data = read_small_file(path, defaults.ETCD_PEM_MAX_BYTES, secret=secret)
    except ValueError as error:
        raise PemFileError(f"{what} {path}: {error}") from None
    if b"-----BEGIN " not in data:
        raise PemFileError(f"{what} {path}: not a PEM file")
    return data

"""A file that holds a secret (the etcd client key, the etcd user's password) must be
private: readable by its owner only. Pure but for one `fstat` of an open file.

    problem = secret_file_problem(handle.fileno())   # None, or why it is refused

A key or password that other users of the host can read is no secret: the file is
refused with the fix in the message (`chmod 600 FILE`), before anything is sent.
"""

from __future__ import annotations

import os
import stat


def secret_file_problem(fd: int) -> str | None:
    """Why the open file `fd` may not hold a secret (group or others may read or write
    it), or None."""
    mode = os.fstat(fd).st_mode
    if stat.S_IMODE(mode) & 0o077:
        return f"readable by group or others (mode {stat.S_IMODE(mode):04o}): chmod 600 it"
    return None

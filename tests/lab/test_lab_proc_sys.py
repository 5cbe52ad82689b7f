"""A read-only /proc/sys/net (a container) made writable for the lab, and back.

The mount commands run for real, in a private mount namespace of a child process
(`unshare --mount`), on a read-only bind mount of a temporary directory standing in for
/proc/sys/net: nothing changes outside that child.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from meshhealth.lab import proc_sys
from tests.plugins.netns import require_root

CHILD = textwrap.dedent(
    """
    import subprocess, sys
    from pathlib import Path
    from meshhealth.lab import proc_sys

    net = Path(sys.argv[1])
    probe = net / proc_sys.PROBE_KEY
    subprocess.run(["mount", "--bind", str(net), str(net)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(net)], check=True)
    steps = [proc_sys.read_only(net)]
    proc_sys.make_writable(net)
    steps.append(proc_sys.read_only(net))
    probe.write_text("1\\n")
    proc_sys.undo(net)
    steps.append(proc_sys.read_only(net))
    print(steps, probe.read_text().strip())
    """
)


@pytest.mark.netns
def test_read_only_net_is_made_writable_then_restored(tmp_path: Path) -> None:
    require_root()
    (tmp_path / "ipv4").mkdir()
    (tmp_path / proc_sys.PROBE_KEY).write_text("0\n")
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", CHILD,
         str(tmp_path)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[True,", "False,", "True]", "1"]


def test_writable_or_missing_is_not_read_only(tmp_path: Path) -> None:
    assert not proc_sys.read_only(tmp_path)  # no probe key: not a /proc/sys/net
    (tmp_path / "ipv4").mkdir()
    (tmp_path / proc_sys.PROBE_KEY).write_text("0\n")
    assert not proc_sys.read_only(tmp_path)

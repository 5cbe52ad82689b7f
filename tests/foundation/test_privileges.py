"""meshhealth.privileges: /proc status parsing (pure) and the drops, each in a child
process of its own (a drop cannot be undone)."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys

import pytest

from meshhealth.privileges import (
    CAPABILITY_NUMBERS,
    capability_mask,
    capability_names,
    parse_status,
)

STATUS = """\
Name:\tpython3
Uid:\t65534\t65534\t65534\t65534
Gid:\t65534\t65534\t65534\t65534
Groups:\t
NoNewPrivs:\t1
CapInh:\t0000000000000000
CapPrm:\t0000000000000000
CapEff:\t0000000000000000
CapBnd:\t0000000000000000
CapAmb:\t0000000000000000
"""


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, set()),
        (1 << 13, {"CAP_NET_RAW"}),
        (0x3000, {"CAP_NET_ADMIN", "CAP_NET_RAW"}),
        (1 << 21 | 1 << 41, {"CAP_SYS_ADMIN", "CAP_41"}),
    ],
)
def test_capability_names(mask: int, names: set[str]) -> None:
    assert capability_names(mask) == names


def test_every_capability_round_trips() -> None:
    assert len(CAPABILITY_NUMBERS) == 41
    every = frozenset(CAPABILITY_NUMBERS)
    assert capability_names(capability_mask(every)) == every
    assert capability_mask(every) == 0x1FFFFFFFFFF


def test_parse_status() -> None:
    dropped = parse_status(STATUS)
    assert dropped.uids == dropped.gids == (65534,) * 4
    assert dropped.groups == ()
    assert dropped.no_new_privs
    assert dropped.effective == dropped.bounding == frozenset()
    root = parse_status(
        STATUS.replace("65534", "0")
        .replace("Groups:\t", "Groups:\t0 4")
        .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
        .replace("CapEff:\t0000000000000000", "CapEff:\t0000000000003000")
    )
    assert root.uids == (0, 0, 0, 0)
    assert root.groups == (0, 4)
    assert not root.no_new_privs
    assert root.effective == {"CAP_NET_ADMIN", "CAP_NET_RAW"}
    assert root.permitted == frozenset()


def _in_child(code: str) -> dict[str, object]:
    """Run `code` (it sets `result`) in a fresh interpreter; its JSON result."""
    probe = (
        f"import json\nfrom meshhealth import privileges as p\n{code}\nprint(json.dumps(result))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_drop_to_user_leaves_no_capability_and_no_root() -> None:
    nobody = pwd.getpwnam("nobody")
    found = _in_child(
        "after = p.drop_to_user('nobody')\n"
        "again = p.read_privileges()\n"
        "try:\n    import os; os.setuid(0); regained = True\n"
        "except PermissionError:\n    regained = False\n"
        "result = {'uids': again.uids, 'gids': again.gids, 'groups': again.groups,\n"
        "  'caps': sorted(again.effective | again.permitted | again.bounding\n"
        "                 | again.inheritable | again.ambient),\n"
        "  'nnp': again.no_new_privs, 'same': after == again, 'regained': regained}"
    )
    assert found == {
        "uids": [nobody.pw_uid] * 4,
        "gids": [nobody.pw_gid] * 4,
        "groups": [],
        "caps": [],
        "nnp": True,
        "same": True,
        "regained": False,
    }


def test_drop_to_root_keeps_uid_0_without_capabilities() -> None:
    found = _in_child(
        "after = p.drop_to_user('root')\n"
        "result = {'uid': after.uids[1], 'caps': sorted(after.effective | after.bounding)}"
    )
    assert found == {"uid": 0, "caps": []}


def test_limit_capabilities_keeps_only_the_set_asked_for() -> None:
    found = _in_child(
        "after = p.limit_capabilities(frozenset({'CAP_NET_RAW', 'CAP_SETPCAP'}))\n"
        "result = {'eff': sorted(after.effective), 'bnd': sorted(after.bounding),\n"
        "          'inh': sorted(after.inheritable), 'uid': after.uids[1]}"
    )
    assert found == {
        "eff": ["CAP_NET_RAW", "CAP_SETPCAP"],
        "bnd": ["CAP_NET_RAW", "CAP_SETPCAP"],
        "inh": [],
        "uid": 0,
    }


def test_drop_to_an_unknown_user_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from meshhealth import privileges as p\n"
         "try:\n    p.drop_to_user('no-such-user-mh')\n"
         "except p.PrivilegeError as e:\n    print(e)"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "no such user: no-such-user-mh"

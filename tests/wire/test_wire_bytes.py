"""The bytes on the wire are a public contract (docs/kvstore.md): a fixed value of every
kind encodes to exactly the bytes recorded here, and decodes back to what encodes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from meshhealth.model import (
    ClusterConfig,
    HealthReport,
    IPEntry,
    Node,
    PathHealth,
    PlanInfo,
    ProbeStatus,
    RetainedNode,
    TargetHealth,
    TraceStop,
)
from meshhealth.wire.claim import AggregatorClaim, decode_claim, encode_claim
from meshhealth.wire.cluster_config import decode_cluster_config, encode_cluster_config
from meshhealth.wire.event import FindingEvent, decode_event, encode_event
from meshhealth.wire.health import decode_health_report, encode_health_report
from meshhealth.wire.ip_entry import decode_ip_entry, encode_ip_entry
from meshhealth.wire.maintenance import (
    MaintenanceWindow,
    decode_maintenance,
    encode_maintenance,
)
from meshhealth.wire.node import decode_node, encode_node
from meshhealth.wire.retained import decode_retained, encode_retained
from meshhealth.wire.rollup import (
    NodeRollups,
    PathRollup,
    Window,
    decode_rollups,
    encode_rollups,
)
from meshhealth.wire.summary import (
    ClusterSummary,
    DiscountedObserver,
    NodeCounts,
    SummaryFinding,
    decode_summary,
    encode_summary,
)

NODE = Node(
    "node-1.example",
    "c1",
    "10.0.0.1",
    "10.1.0.1",
    ("10.1.0.0/24", "fd00::/64"),
    4240,
    "1.2.3",
    1_700_000_000.25,
)
NODE_BARE = Node("n2", "c1", "2001:DB8::0:1", None, (), 1, "", 0)
NODE_DUAL = Node(
    "n3",
    "c2",
    "10.0.0.3",
    "10.1.0.3",
    ("10.1.0.0/24",),
    65535,
    "v",
    1_700_000_001.5,
    node_ip_secondary="fd00::3",
    health_ip_secondary="fd01::3",
)
OK = PathHealth(ProbeStatus.OK, 0.00123, 0.0)
BAD = PathHealth(
    ProbeStatus("timeout"), None, 1.0, state="unreachable", state_since=1_700_000_002.0
)
SUS = PathHealth(ProbeStatus.OK, 2.5, 0.25, state="suspect")
VALUES = {
    "node": ("node", NODE),
    "node_bare": ("node", NODE_BARE),
    "node_dual": ("node", NODE_DUAL),
    "retained_alive": ("retained", RetainedNode(NODE)),
    "retained_down": ("retained", RetainedNode(NODE_DUAL, 1_700_000_100.0)),
    "ip_entry": (
        "ip_entry",
        IPEntry("10.1.0.9", "10.0.0.1", "node-1.example", 4242, ("k8s:app=web", "reserved:health")),
    ),
    "ip_entry_v6": ("ip_entry", IPEntry("FD00::0:9", "fd00::1", "n", 2**32 - 1)),
    "cluster_config": ("cluster_config", ClusterConfig("c1", 7, ("health", "summary"))),
    "cluster_config_bare": ("cluster_config", ClusterConfig("c-2", 255)),
    "health_bare": ("health", HealthReport("n1", "c1", 1_700_000_000.0, 5.0, ())),
    "health_full": (
        "health",
        HealthReport(
            "n1",
            "c1",
            1_700_000_000.5,
            2,
            (
                TargetHealth(
                    "c1",
                    "n2",
                    {"node/http": OK, "node/icmp": BAD, "endpoint/icmp": SUS, "node/icmp-df": OK},
                ),
                TargetHealth(
                    "c1", "n3", {"node/icmp": OK}, {"node/icmp": SUS, "endpoint/http": OK}, "ipv6"
                ),
                TargetHealth("c2", "n3", {"node/icmp": OK}, {"node/icmp": OK}, "ipv6"),
                TargetHealth("c2", "n4", {"node/icmp": OK}, {"node/icmp": OK}, "ipv4"),
                TargetHealth("c2", "n5", {}, {}, None),
            ),
            plan=PlanInfo(12, 3, 10, False, 16, 40),
            health_score=3,
            degraded_since=1_699_999_990.0,
            degraded_reasons=("cpu-starved", "x-1"),
        ),
    ),
    "health_traced": (
        "health",
        HealthReport(
            "n1",
            "c1",
            1_700_000_000.0,
            5.0,
            (
                TargetHealth("c1", "n2", {}, trace=TraceStop("10.77.0.254", 1, 1_700_000_000.5)),
                TargetHealth("c1", "n3", {}, trace=TraceStop(None, 0, 1_700_000_000.5)),
            ),
        ),
    ),
    "claim": ("claim", AggregatorClaim("c1", "n1", 1_700_000_000.75)),
    "event_open": (
        "event",
        FindingEvent(
            "c1",
            "1700000000500-f2d381903abc",
            "node-down",
            ("c1/n2",),
            0.9,
            "4 of 4 fail",
            1_700_000_000.5,
            opened_by="n1",
        ),
    ),
    "event_closed": (
        "event",
        FindingEvent(
            "c1",
            "1700000000000-0123456789ab",
            "partition",
            ("c1/n2",),
            1,
            "split",
            1_700_000_000.0,
            1_700_000_060.25,
            (("c1/n2",), ("c1/n3",)),
            "n1",
            "n4",
        ),
    ),
    "maintenance_bare": ("maintenance", MaintenanceWindow("c1", "n2", 1.0, 2.0)),
    "maintenance_full": (
        "maintenance",
        MaintenanceWindow(
            "c1", "n2", 1_700_000_000.0, 1_700_007_200.0, "kernel upgrade", "alice@host"
        ),
    ),
    "summary_bare": ("summary", ClusterSummary("c1", "n1", 1_700_000_000.0, NodeCounts(), 0, 0.0)),
    "summary_full": (
        "summary",
        ClusterSummary(
            "c1",
            "n1",
            1_700_000_000.0,
            NodeCounts(5, 1, 1, 2),
            3,
            3.5,
            failing_observers={"c1/n9": 2, "c1/n2": 4},
            findings=(
                SummaryFinding("node-down", ("c1/n2",), 0.9, 1_699_999_000.0, "4 of 4 fail"),
                SummaryFinding(
                    "partition",
                    ("c1/n2", "c1/n3"),
                    1,
                    1_699_999_001,
                    "split",
                    (("c1/n2",), ("c1/n3", "c2/n4")),
                ),
            ),
            node_states={"c1/n9": "unknown", "c1/n2": "unreachable", "c1/n3": "suspect"},
            discounted={
                "c1/n7": DiscountedObserver("egress-blocked", 5, 6, 0, 4),
                "c1/n6": DiscountedObserver("degraded"),
            },
        ),
    ),
    "rollup_bare": ("rollup", NodeRollups("c1", "n1", 1_700_000_000.0)),
    "rollup_full": (
        "rollup",
        NodeRollups(
            "c1",
            "n1",
            1_700_001_000.5,
            (
                PathRollup(
                    "c1",
                    "n2",
                    "node/icmp",
                    (
                        Window(1_699_999_800.0, 60, 0, 0.000123, 0.00045, 0.0021),
                        Window(1_700_000_400.0, 59, 59, None, None, None),
                    ),
                    (Window(1_699_999_200.0, 360, 1, 0.0001, 0.0002, 0.5),),
                ),
                PathRollup("c2", "n3", "endpoint/tcp@secondary", (), ()),
            ),
        ),
    ),
}

ENCODERS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "node": (encode_node, decode_node),
    "retained": (encode_retained, decode_retained),
    "ip_entry": (encode_ip_entry, decode_ip_entry),
    "cluster_config": (encode_cluster_config, decode_cluster_config),
    "health": (encode_health_report, decode_health_report),
    "claim": (encode_claim, decode_claim),
    "maintenance": (encode_maintenance, decode_maintenance),
    "summary": (encode_summary, decode_summary),
    "event": (encode_event, decode_event),
    "rollup": (encode_rollups, decode_rollups),
}

GOLDEN = {
    "node": (
        "89a17601a46e616d65ae6e6f64652d312e6578616d706c65a7636c7573746572a26331a76e6f64655f6970a8"
        "31302e302e302e31a96865616c74685f6970a831302e312e302e31a5636964727392ab31302e312e302e302f"
        "3234a9666430303a3a2f3634ab6865616c74685f706f7274cd1090a776657273696f6ea5312e322e33aa7374"
        "61727465645f6174cb41d954fc40100000"
    ),
    "node_bare": (
        "89a17601a46e616d65a26e32a7636c7573746572a26331a76e6f64655f6970ab323030313a6462383a3a31a9"
        "6865616c74685f6970c0a5636964727390ab6865616c74685f706f727401a776657273696f6ea0aa73746172"
        "7465645f6174cb0000000000000000"
    ),
    "node_dual": (
        "8ba17601a46e616d65a26e33a7636c7573746572a26332a76e6f64655f6970a831302e302e302e33a9686561"
        "6c74685f6970a831302e312e302e33a5636964727391ab31302e312e302e302f3234ab6865616c74685f706f"
        "7274cdffffa776657273696f6ea176aa737461727465645f6174cb41d954fc40600000b16e6f64655f69705f"
        "7365636f6e64617279a7666430303a3a33b36865616c74685f69705f7365636f6e64617279a7666430313a3a"
        "33"
    ),
    "retained_alive": (
        "8aa17601a46e616d65ae6e6f64652d312e6578616d706c65a7636c7573746572a26331a76e6f64655f6970a8"
        "31302e302e302e31a96865616c74685f6970a831302e312e302e31a5636964727392ab31302e312e302e302f"
        "3234a9666430303a3a2f3634ab6865616c74685f706f7274cd1090a776657273696f6ea5312e322e33aa7374"
        "61727465645f6174cb41d954fc40100000aa646f776e5f73696e6365c0"
    ),
    "retained_down": (
        "8ca17601a46e616d65a26e33a7636c7573746572a26332a76e6f64655f6970a831302e302e302e33a9686561"
        "6c74685f6970a831302e312e302e33a5636964727391ab31302e312e302e302f3234ab6865616c74685f706f"
        "7274cdffffa776657273696f6ea176aa737461727465645f6174cb41d954fc40600000b16e6f64655f69705f"
        "7365636f6e64617279a7666430303a3a33b36865616c74685f69705f7365636f6e64617279a7666430313a3a"
        "33aa646f776e5f73696e6365cb41d954fc59000000"
    ),
    "ip_entry": (
        "86a17601a26970a831302e312e302e39a7686f73745f6970a831302e302e302e31a46e6f6465ae6e6f64652d"
        "312e6578616d706c65a86964656e74697479cd1092a66c6162656c7392ab6b38733a6170703d776562af7265"
        "7365727665643a6865616c7468"
    ),
    "ip_entry_v6": (
        "86a17601a26970a7666430303a3a39a7686f73745f6970a7666430303a3a31a46e6f6465a16ea86964656e74"
        "697479ceffffffffa66c6162656c7390"
    ),
    "cluster_config": (
        "84a17601a46e616d65a26331a2696407ac6361706162696c697469657392a66865616c7468a773756d6d617279"
    ),
    "cluster_config_bare": ("84a17601a46e616d65a3632d32a26964ccffac6361706162696c697469657390"),
    "health_bare": (
        "86a17601a46e6f6465a26e31a7636c7573746572a26331aa70726f62655f74696d65cb41d954fc40000000aa"
        "696e74657276616c5f73cb4014000000000000a77461726765747390"
    ),
    "health_full": (
        "8ba17601a46e6f6465a26e31a7636c7573746572a26331aa70726f62655f74696d65cb41d954fc40200000aa"
        "696e74657276616c5f73cb4000000000000000a7746172676574739584a7636c7573746572a26331a46e6f64"
        "65a26e32a5706174687383ad656e64706f696e742f69636d7084a6737461747573a26f6ba57274745f73cb40"
        "04000000000000a46c6f7373cb3fd0000000000000a57374617465a773757370656374a96e6f64652f687474"
        "7083a6737461747573a26f6ba57274745f73cb3f5426fe718a86d7a46c6f7373cb0000000000000000a96e6f"
        "64652f69636d7085a6737461747573a774696d656f7574a57274745f73c0a46c6f7373cb3ff0000000000000"
        "a57374617465ab756e726561636861626c65ab73746174655f73696e6365cb41d954fc40800000ab65787472"
        "615f706174687381ac6e6f64652f69636d702d646683a6737461747573a26f6ba57274745f73cb3f5426fe71"
        "8a86d7a46c6f7373cb000000000000000084a7636c7573746572a26331a46e6f6465a26e33a5706174687381"
        "a96e6f64652f69636d7083a6737461747573a26f6ba57274745f73cb3f5426fe718a86d7a46c6f7373cb0000"
        "000000000000af7365636f6e646172795f706174687382ad656e64706f696e742f6874747083a67374617475"
        "73a26f6ba57274745f73cb3f5426fe718a86d7a46c6f7373cb0000000000000000a96e6f64652f69636d7084"
        "a6737461747573a26f6ba57274745f73cb4004000000000000a46c6f7373cb3fd0000000000000a573746174"
        "65a77375737065637484a7636c7573746572a26332a46e6f6465a26e33a5706174687381a96e6f64652f6963"
        "6d7083a6737461747573a26f6ba57274745f73cb3f5426fe718a86d7a46c6f7373cb0000000000000000af73"
        "65636f6e646172795f706174687381a96e6f64652f69636d7083a6737461747573a26f6ba57274745f73cb3f"
        "5426fe718a86d7a46c6f7373cb000000000000000085a7636c7573746572a26332a46e6f6465a26e34a57061"
        "74687381a96e6f64652f69636d7083a6737461747573a26f6ba57274745f73cb3f5426fe718a86d7a46c6f73"
        "73cb0000000000000000af7365636f6e646172795f706174687381a96e6f64652f69636d7083a67374617475"
        "73a26f6ba57274745f73cb3f5426fe718a86d7a46c6f7373cb0000000000000000b07365636f6e646172795f"
        "66616d696c79a46970763483a7636c7573746572a26332a46e6f6465a26e35a5706174687380b07365636f6e"
        "646172795f66616d696c79a469707636a4706c616e86a565706f63680ca16b03af726f746174696f6e5f726f"
        "756e64730aa966756c6c5f6d657368c2b366756c6c5f6d6573685f6d61785f6e6f64657310a56e6f64657328"
        "ac6865616c74685f73636f726503ae64656772616465645f73696e6365cb41d954fc3d800000b06465677261"
        "6465645f726561736f6e7392ab6370752d73746172766564a3782d31"
    ),
    "health_traced": (
        "86a17601a46e6f6465a26e31a7636c7573746572a26331aa70726f62655f74696d65cb41d954fc40000000aa"
        "696e74657276616c5f73cb4014000000000000a7746172676574739284a7636c7573746572a26331a46e6f64"
        "65a26e32a5706174687380a5747261636583a761646472657373ab31302e37372e302e323534a3686f7001a2"
        "6174cb41d954fc4020000084a7636c7573746572a26331a46e6f6465a26e33a5706174687380a57472616365"
        "83a761646472657373c0a3686f7000a26174cb41d954fc40200000"
    ),
    "claim": ("84a17601a7636c7573746572a26331a46e6f6465a26e31a573696e6365cb41d954fc40300000"),
    "event_open": (
        "89a17601a7636c7573746572a26331a26964ba313730303030303030303530302d6632643338313930336162"
        "63a46b696e64a96e6f64652d646f776ea56e6f64657391a563312f6e32aa636f6e666964656e6365cb3feccc"
        "cccccccccda865766964656e6365ab34206f662034206661696ca96f70656e65645f6174cb41d954fc402000"
        "00a96f70656e65645f6279a26e31"
    ),
    "event_closed": (
        "8ca17601a7636c7573746572a26331a26964ba313730303030303030303030302d3031323334353637383961"
        "62a46b696e64a9706172746974696f6ea56e6f64657391a563312f6e32aa636f6e666964656e6365cb3ff000"
        "0000000000a865766964656e6365a573706c6974a96f70656e65645f6174cb41d954fc40000000a9636c6f73"
        "65645f6174cb41d954fc4f100000a667726f7570739291a563312f6e3291a563312f6e33a96f70656e65645f"
        "6279a26e31a9636c6f7365645f6279a26e34"
    ),
    "maintenance_bare": (
        "85a17601a7636c7573746572a26331a46e6f6465a26e32a57374617274cb3ff0000000000000a3656e64cb40"
        "00000000000000"
    ),
    "maintenance_full": (
        "87a17601a7636c7573746572a26331a46e6f6465a26e32a57374617274cb41d954fc40000000a3656e64cb41"
        "d9550348000000a6726561736f6eae6b65726e656c2075706772616465a26279aa616c69636540686f7374"
    ),
    "summary_bare": (
        "8aa17601a7636c7573746572a26331aa61676772656761746f72a26e31ac67656e6572617465645f6174cb41"
        "d954fc40000000a56e6f64657384a9726561636861626c6500ab756e726561636861626c6500a77375737065"
        "637400a7756e6b6e6f776e00a96f627365727665727382a36d696e00a66d656469616ecb0000000000000000"
        "b16661696c696e675f6f627365727665727380a866696e64696e677390ab6e6f64655f73746174657380aa64"
        "6973636f756e74656480"
    ),
    "summary_full": (
        "8aa17601a7636c7573746572a26331aa61676772656761746f72a26e31ac67656e6572617465645f6174cb41"
        "d954fc40000000a56e6f64657384a9726561636861626c6505ab756e726561636861626c6501a77375737065"
        "637401a7756e6b6e6f776e02a96f627365727665727382a36d696e03a66d656469616ecb400c000000000000"
        "b16661696c696e675f6f627365727665727382a563312f6e3204a563312f6e3902a866696e64696e67739285"
        "a46b696e64a96e6f64652d646f776ea56e6f64657391a563312f6e32aa636f6e666964656e6365cb3feccccc"
        "cccccccda573696e6365cb41d954fb46000000a865766964656e6365ab34206f662034206661696c86a46b69"
        "6e64a9706172746974696f6ea56e6f64657392a563312f6e32a563312f6e33aa636f6e666964656e6365cb3f"
        "f0000000000000a573696e6365cb41d954fb46400000a865766964656e6365a573706c6974a667726f757073"
        "9291a563312f6e3292a563312f6e33a563322f6e34ab6e6f64655f73746174657383a563312f6e32ab756e72"
        "6561636861626c65a563312f6e33a773757370656374a563312f6e39a7756e6b6e6f776eaa646973636f756e"
        "74656482a563312f6e3685a6726561736f6ea86465677261646564a56661696c7300a77461726765747300aa"
        "726561636865645f627900a96f627365727665727300a563312f6e3785a6726561736f6eae6567726573732d"
        "626c6f636b6564a56661696c7305a77461726765747306aa726561636865645f627900a96f62736572766572"
        "7304"
    ),
    "rollup_bare": (
        "85a17601a7636c7573746572a26331a46e6f6465a26e31aa7772697474656e5f6174cb41d954fc40000000a5"
        "706174687390"
    ),
    "rollup_full": (
        "85a17601a7636c7573746572a26331a46e6f6465a26e31aa7772697474656e5f6174cb41d954fd3a200000a5"
        "70617468739284a6746172676574a563312f6e32a470617468a96e6f64652f69636d70a36d31309cce002b3b"
        "b53c007bcd01c2cd0834013b3bc0c0c0a2683196ce0007349ecd01680164ccc8ce0007a12084a67461726765"
        "74a563322f6e33a470617468b6656e64706f696e742f746370407365636f6e64617279a36d313090a2683190"
    ),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_encodes_to_the_recorded_bytes(name: str) -> None:
    kind, value = VALUES[name]
    encode, decode = ENCODERS[kind]
    data = encode(value)
    assert data.hex() == GOLDEN[name]
    assert encode(decode(data)) == data

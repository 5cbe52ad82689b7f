"""The one table of defaults and tunables. Each value says why it is what it is.

One section per module (or group of modules) that uses the values, named in the section
header; the comment above a value (or above a group of values) is its reason. A new
tunable goes into the section of its module, with its reason, and the module imports it
from here. docs/configuration.md is generated from this file and from the agent's option
table (`python -m meshhealth.agent.config.doc`); tests/agent/test_configuration_doc.py fails
when it is out of step, and when a value has no reason.
"""

from __future__ import annotations

from typing import Final

# --- probing (meshhealth.probe: scheduler, ICMP, stats) -------------------------------
# Short enough to notice breakage within seconds, cheap at small N. cilium-health used
# ~60 s; operators asked for faster feedback.
PROBE_INTERVAL_S: Final = 10.0
# One timeout per dead target per round, not per node: a dead node costs 1 s, never 30.
PROBE_TIMEOUT_S: Final = 1.0
# An unwell agent stretches its probe timeout (local health), never past this share of
# the interval: the round must still fit in it.
PROBE_TIMEOUT_MAX_FRACTION: Final = 0.5
# Bounds sockets and memory whatever the cluster size.
MAX_PROBES_IN_FLIGHT: Final = 1024
# Starts of a round are spread (with jitter) over this fraction of the interval, so a
# round is not one burst of packets.
ROUND_SPREAD_FRACTION: Final = 0.2
# ICMP echo requests per probe and their spacing: the same as Cilium 1.17+.
ICMP_COUNT: Final = 3
ICMP_INTERVAL_S: Final = 0.1
# `meshhealth probe --trace`: the highest TTL tried, as traceroute's default.
TRACE_MAX_HOPS: Final = 30
# The agent's own trace (agent/path_tracer.py) when a NodeIP ICMP path turns unreachable:
# one echo per hop, 16 hops (one window: a cluster's nodes are a few routers apart),
# answers awaited 1 s, so a trace costs at most 16 packets and about a second.
AGENT_TRACE_MAX_HOPS: Final = 16
AGENT_TRACE_TIMEOUT_S: Final = 1.0
# At most one trace per target per 5 minutes (a flapping path is not traced every
# round) and 6 per minute in all (a node cut off from everyone does not trace the whole
# cluster at once: the first few already say where its way stops).
AGENT_TRACE_PER_TARGET_S: Final = 300.0
AGENT_TRACES_PER_MINUTE: Final = 6
# The don't-fragment MTU probe (one big echo per round to each NodeIP): its IP packet
# size. MTU_PROBE_AUTO (the default) takes the MTU of the route to each target, so a
# path that cannot carry full-size packets shows however the link is configured;
# MTU_PROBE_OFF skips the probe. The route's MTU is looked up again after this long, so
# a changed link MTU is followed without a lookup per probe.
MTU_PROBE_AUTO: Final = -1
MTU_PROBE_OFF: Final = 0
MTU_PROBE_SIZE: Final = MTU_PROBE_AUTO
MTU_ROUTE_CACHE_S: Final = 60.0
# `auto` never probes bigger than a jumbo frame: a route over loopback (a node probing
# itself) reports 65536, which no network path between nodes carries.
MTU_PROBE_AUTO_MAX_BYTES: Final = 9000
# `meshhealth probe --loop`: a round every second, as `fping -l` sends; a summary every
# 10 s, often enough to follow a long run without drowning the per-round lines.
PROBE_LOOP_PERIOD_S: Final = 1.0
PROBE_LOOP_SUMMARY_S: Final = 10.0
# Host names given to `meshhealth probe` resolved at once in worker threads: a file of
# names resolves in about one resolver round trip, without flooding the resolver.
RESOLVE_CONCURRENCY: Final = 16
# Results kept per path for loss and percentiles (5 minutes at the default interval).
STATS_WINDOW: Final = 30
# Extra time a probe gets past its own budget before the round gives up on it. Probe
# functions keep their own deadlines; this only stops a bug from hanging a round.
PROBE_DEADLINE_MARGIN_S: Final = 0.2
# Probes the round scheduler starts together: one task and one safety-net deadline per
# batch (a cancel scope per probe costs ~6 us), and the ICMP probes of a batch are one
# Pinger.ping_batch call. Large enough to amortise, small enough that a batch's start
# stays within a few hundred microseconds.
PROBE_DISPATCH_BATCH: Final = 128
# A probe that starts late (a busy loop) still gets at least this fraction of its
# timeout: its deadline stays where the plan put it, unless that leaves too little.
PROBE_MIN_TIMEOUT_FRACTION: Final = 0.5

# --- HTTP responder (meshhealth.probe.responder, `meshhealth responder`) --------------
# Same port and path as Cilium, so firewall rules written for it keep working.
HTTP_PORT: Final = 4240
HTTP_PATH: Final = "/hello"
# A client that has not sent a full request within this time is dropped (slowloris).
RESPONDER_READ_TIMEOUT_S: Final = 2.0
# Bounds file descriptors used by peers' probes (and by a flood).
RESPONDER_MAX_CONNECTIONS: Final = 512
# ... at most this many from one address: a peer holds one per probed path and a few
# indirect requests; an outsider cannot take every slot.
RESPONDER_MAX_PER_SOURCE: Final = 32
# ... and the last of them only for registered nodes' NodeIPs (the agent's responder):
# outsiders from many addresses still leave room for peers' probes.
RESPONDER_RESERVED_FOR_NODES: Final = 128
# Largest request line + headers; a probe sends ~100 bytes.
RESPONDER_MAX_HEAD_BYTES: Final = 8 * 1024
# Nothing we serve takes a body; a small one is read and ignored, more gets 413.
RESPONDER_MAX_BODY_BYTES: Final = 4 * 1024
# Bytes asked of the socket per read: a whole probe request fits in one.
RESPONDER_RECEIVE_CHUNK_BYTES: Final = 4 * 1024
# After an error reply, what the client still sends is read and discarded for this long
# (and at most this much) before closing, so the reply is not lost to a TCP reset.
RESPONDER_LINGER_S: Final = 0.5
RESPONDER_LINGER_MAX_BYTES: Final = 256 * 1024
# `meshhealth responder --exit-with-parent` without a pidfd (old kernels): how often the
# parent PID is checked (an orphaned endpoint exits within this).
RESPONDER_PARENT_POLL_S: Final = 0.5

# --- UDP echo and TCP connect probes (meshhealth.probe.udp_*, .tcp_connect) ---------
# The UDP echo responder listens on the /hello port's number over UDP: one number for
# firewall rules to open, for both transports.
UDP_ECHO_PORT: Final = HTTP_PORT
# Echo datagrams per node/udp probe, each from its own source port (a different 5-tuple,
# so they can take different ECMP paths). A few cover the usual 2 - 8 way ECMP fan-out
# over a handful of rounds; 0 turns the UDP probe off.
UDP_PROBE_SOURCE_PORTS: Final = 4
UDP_PROBE_MAX_SOURCE_PORTS: Final = 64
# Datagrams one source may have answered per second, and in a burst: a peer sends
# UDP_PROBE_SOURCE_PORTS per round (and an indirect round's); ten times that in a burst.
UDP_ECHO_RATE_PER_S: Final = 20.0
UDP_ECHO_BURST: Final = 64
# All sources together: a full mesh of 5,000 nodes at the default interval sends 2,000
# a second; past this the responder drops rather than spends the node's CPU.
UDP_ECHO_TOTAL_RATE_PER_S: Final = 10_000.0
# Sources whose token buckets are remembered (bounds memory under a spoofed flood).
UDP_ECHO_MAX_SOURCES: Final = 8192
# TCP connect probes (`--probe-tcp-ports`): none by default (the operator names the ports
# that matter: 10250 for the kubelet, 22, ...). At most this many, so a health entry
# stays bounded (docs/kvstore.md, "Size": each port is one more path per target).
TCP_PROBE_MAX_PORTS: Final = 8

# --- indirect probes (meshhealth.agent.indirect.server, .indirect.probes) -------------
# Helpers asked when a direct probe fails: Lifeguard's (SWIM's) k = 3 indirect probes.
# Three independent paths make "target down" believable without asking everyone.
INDIRECT_HELPERS: Final = 3
# Requests a registered node may make of one helper per second, and in a burst: a
# requester with a few dozen failing targets is served within one round; a runaway one
# costs the helper at most this many probes a second.
INDIRECT_RATE_PER_S: Final = 2.0
INDIRECT_BURST: Final = 20
# Requesters whose buckets a helper keeps (only registered NodeIPs get one): memory stays
# bounded in a mesh of thousands of nodes.
INDIRECT_MAX_REQUESTERS: Final = 4096
# Indirect requests a helper serves at once; more are refused at once (429), so a burst
# of failures somewhere never queues probes behind each other past their deadline.
INDIRECT_MAX_CONCURRENT: Final = 16
# The requester waits for answers the helper's probe budget plus this: one round trip to
# the helper and its scheduling, on a loaded node.
INDIRECT_ANSWER_MARGIN_S: Final = 0.5
# Targets checked through helpers at once by one requester; failures beyond this in one
# round wait for the next round (counted), so a node whose link died does not open
# hundreds of connections at once.
INDIRECT_MAX_CHECKS: Final = 32

# --- HTTP server of the admin API and /metrics (meshhealth.http_server) ---------------
# Largest request line + headers; the admin API's requests are a few hundred bytes.
HTTP_SERVER_MAX_HEAD_BYTES: Final = 16 * 1024
# Bytes asked of the socket per read: a whole admin request fits in one.
HTTP_SERVER_RECEIVE_CHUNK_BYTES: Final = 16 * 1024
# accept() failing for lack of resources (EMFILE, ENOBUFS...): pause this long instead
# of spinning, then try again.
HTTP_SERVER_ACCEPT_BACKOFF_S: Final = 0.1

# --- etcd client (meshhealth.kvstore) -------------------------------------------------
# A node whose agent stops refreshing its lease loses its entries within ~TTL.
LEASE_TTL_S: Final = 15
# A node whose lease expired without a clean leave stays in every view as agent-down this
# long (meshhealth.agent.membership.retained_nodes): long enough for an operator to see
# a crashed agent, short enough that a node taken away for good leaves by itself.
AGENT_DOWN_RETENTION_S: Final = 600.0
# Every etcd request has a deadline; a stuck etcd must not stall the agent.
ETCD_REQUEST_TIMEOUT_S: Final = 5.0
# How often the liveness check asks etcd something cheap, and how long it may take: a
# SIGSTOPped etcd makes watches hang silently, this is how we notice. It asks only when no
# other request (a keep-alive, a write) answered within the interval.
ETCD_LIVENESS_INTERVAL_S: Final = 2.0
ETCD_LIVENESS_TIMEOUT_S: Final = 2.0
# A worker thread blocked in a grpc call wakes this often with nothing to do (grpc's own
# slice is 0.1 s); responses, cancels and deadlines wake it at once whatever this is.
GRPC_WAIT_SLICE_S: Final = 5.0
# After an error an endpoint is retried this soon (etcd3's own default is 300 s).
ETCD_ENDPOINT_RETRY_S: Final = 1.0
# Back-off between reconnect attempts, doubling up to the maximum.
ETCD_RECONNECT_MIN_S: Final = 0.2
ETCD_RECONNECT_MAX_S: Final = 5.0
# Threads used for blocking gRPC calls (our own CapacityLimiter, not trio's default).
ETCD_THREADS: Final = 8
# Where the agent and the commands look for etcd without --etcd: a local one, as the
# quick start runs it.
DEFAULT_ETCD: Final = "http://127.0.0.1:2379"
# Largest value we accept from etcd; bigger ones are skipped as invalid.
MAX_VALUE_BYTES: Final = 1024 * 1024
# The largest answer read from etcd (gRPC's receive limit, set explicitly): etcd refuses
# writes over 1.5 MiB by default, so one value always fits. A prefix is listed in pages
# of this many keys (meshhealth.kvstore.client.get_prefix); a page over the receive limit
# (a few junk values) is asked for again with fewer keys, so a few big values never stop
# a listing. 256 health entries of a subset plan are well under 1 MiB.
ETCD_MAX_RECEIVE_BYTES: Final = 4 * 1024 * 1024
ETCD_LIST_PAGE_KEYS: Final = 256
# gRPC's own reconnect back-off grows to 120 s: after an etcd restart the agent would
# wait that long. Capped so a restarted etcd is used again within about a second.
ETCD_CHANNEL_RECONNECT_MAX_S: Final = 1.0
# The trio deadline of a request is its gRPC deadline plus this margin: gRPC should
# always fire first, trio's deadline only catches a call stuck outside gRPC's control.
ETCD_TRIO_DEADLINE_MARGIN_S: Final = 1.0
# Concurrent watch streams per etcd client (each holds a thread while it waits); an
# agent needs one per meshed cluster and kind of entry.
ETCD_MAX_WATCHES: Final = 64
# How often the agent looks at its etcd TLS and password files (inode, mtime, size):
# a rotated certificate is used within this time, at the cost of a few stat calls.
ETCD_FILES_POLL_S: Final = 2.0
# Largest PEM file (CA, certificate or key; etcd's and the served TLS's) read: a chain is
# a few kilobytes.
ETCD_PEM_MAX_BYTES: Final = 1024 * 1024
# Largest etcd configuration file (--etcd-config) read: a real one is a few hundred bytes.
ETCD_CONFIG_MAX_BYTES: Final = 64 * 1024
# The most of an etcd password file read: a password is one line.
ETCD_PASSWORD_MAX_BYTES: Final = 4096

# --- registration and discovery (meshhealth.agent.membership.registrar, .discovery) ------
# The lease revoke on shutdown may take this long; after it the lease's TTL cleans up.
REGISTRAR_REVOKE_TIMEOUT_S: Final = 1.0
# While another agent's entry holds our name, its lease's remaining TTL is read every
# granted TTL / 10, within these bounds: a refresh shows up well within one TTL.
REGISTRAR_HOLDER_CHECK_MIN_S: Final = 0.1
REGISTRAR_HOLDER_CHECK_MAX_S: Final = 0.5
# ... for at most its granted TTL plus this slack (a lease nobody refreshes is gone by then).
REGISTRAR_HOLDER_SLACK_S: Final = 1.5
# Probe-set changes queued per subscriber; one that falls this far behind is dropped and
# re-reads the whole set (a slow reader never blocks discovery).
DISCOVERY_SUBSCRIBER_BUFFER: Final = 1024
# Node entries (their CIDRs, for --route-cidrs) are followed by a watch per cluster; which
# clusters (this one and the admitted remotes) is looked at this often (no etcd read).
PEER_NODES_SOURCES_CHECK_S: Final = 5.0

# --- agent (meshhealth.agent, its admin API; `meshhealth status`) ---------------------
# The cluster of an agent started without --cluster: a one-cluster setup needs no name.
DEFAULT_CLUSTER: Final = "default"
# Where `meshhealth status` finds the agent without flags: under /run, like Cilium's.
ADMIN_SOCKET: Final = "/run/meshhealth/health.sock"
# Owner and group may talk to the agent (give operators the group), nobody else.
ADMIN_SOCKET_MODE: Final = 0o660
# An existing socket file at the admin (or feed) path is in use when something accepts a
# connection on it within this time; otherwise it is a crashed agent's, and replaced.
ADMIN_SOCKET_LIVE_CHECK_TIMEOUT_S: Final = 1.0
# Connections the kernel queues on the admin and feed unix sockets before we accept them.
UNIX_SOCKET_BACKLOG: Final = 128
# A client must send a whole request within this time (the admin API and /metrics).
ADMIN_READ_TIMEOUT_S: Final = 5.0
# Connections served at once on the admin socket; more are closed at once.
ADMIN_MAX_CONNECTIONS: Final = 64
# `PUT /v1/status/probe` waits at most this long for its round (a round takes about
# spread + timeout; a running one is finished first), then answers 504.
ADMIN_PROBE_TIMEOUT_S: Final = 30.0
# `meshhealth status` waits this long for a GET answer (the agent answers in ms).
ADMIN_REQUEST_TIMEOUT_S: Final = 5.0
# The environment variable both the agent and `meshhealth status` read the socket from.
ADMIN_SOCKET_ENV: Final = "MESHHEALTH_SOCKET"
# Largest answer the CLI accepts from the admin API (meshhealth.admin_client): a status
# document of thousands of nodes fits; a runaway answer does not eat the memory.
ADMIN_MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024
# /metrics: a scrape is one short request; a few scrapers at once are plenty.
METRICS_READ_TIMEOUT_S: Final = 5.0
METRICS_MAX_CONNECTIONS: Final = 16
# ... and from one address: a scraper or two, so one host cannot hold them all.
METRICS_MAX_PER_SOURCE: Final = 4
# Buckets of meshhealth_node_connectivity_latency_seconds (meshhealth.agent.agent_metrics):
# 50 µs (loopback, same rack) to 5 s (beyond the probe timeout) in 1-2.5-5 steps.
LATENCY_BUCKETS_S: Final = (
    50e-6, 100e-6, 250e-6, 500e-6,
    1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
    1.0, 2.5, 5.0,
)  # fmt: skip
# Buckets of meshhealth_round_duration_seconds: a round takes spread + timeout, 0.1 s in
# a small lab to about a minute for thousands of nodes.
ROUND_BUCKETS_S: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0)

# --- health endpoint (meshhealth.agent.health_endpoint.supervisor) --------------------
# How often the netns endpoint's namespace and veth are checked: "re-created within a few
# seconds" of being deleted, for one stat + one interface-name lookup (an ioctl in the
# node's namespace) per second.
ENDPOINT_CHECK_INTERVAL_S: Final = 1.0
# Restart back-off of the endpoint's responder: doubles from min to max, back to min once
# a responder stayed up for ENDPOINT_STABLE_S (a crash loop does not spin the CPU).
ENDPOINT_RESTART_MIN_S: Final = 0.2
ENDPOINT_RESTART_MAX_S: Final = 5.0
ENDPOINT_STABLE_S: Final = 10.0
# A python responder starts in ~0.3 s; generous for a 100-agent lab starting at once.
ENDPOINT_READY_TIMEOUT_S: Final = 20.0
# SIGTERM, then SIGKILL after this long, when the endpoint stops.
ENDPOINT_STOP_GRACE_S: Final = 2.0
# Stopping the endpoint (child, namespace, veth) is shielded from cancellation but must
# end: after this long the agent exits anyway and logs what was left.
ENDPOINT_TEARDOWN_TIMEOUT_S: Final = 10.0
# Last lines of a dead endpoint's stderr that the agent logs: enough for a traceback's
# message, not a flood.
ENDPOINT_STDERR_TAIL_LINES: Final = 3
# Longest line read from the endpoint's output; a longer one is cut.
ENDPOINT_MAX_LINE_BYTES: Final = 4096
# Host side of the endpoint's veth: Cilium's name, so its users find it.
ENDPOINT_HOST_IFACE: Final = "lxc_health"
# The user the health endpoint's responder runs as once its sockets are open (when the
# agent is root); its primary group (nogroup) goes with it. docs/security.md.
ENDPOINT_USER: Final = "nobody"
# One `ip` command (meshhealth.agent.health_endpoint.ip_command) answers in
# milliseconds; a batch of 100 route changes in well under a second. Ten seconds is
# only there so that a hung `ip` fails the step with a message instead of hanging it.
IP_TIMEOUT_S: Final = 10.0

# --- routes to peers' CIDRs (meshhealth.agent.health_endpoint.routes) -----------------
# Route protocol number marking routes the agent programs (`ip route show proto 164`):
# crash leftovers are found and removed by it, other routes are never touched.
ROUTE_PROTO: Final = 0xA4
# Routes are re-read and repaired this often even without peer changes (a repair of
# what someone else removed; peer changes sync at once). Each re-read dumps every route
# of the node (100 at 100 nodes).
ROUTE_RESYNC_INTERVAL_S: Final = 60.0
# Peer changes that arrive within this of each other (a lab's start, churn) make one sync.
ROUTE_DEBOUNCE_S: Final = 1.0
# After a failed route change, retry this soon.
ROUTE_RETRY_S: Final = 1.0
# Without --route-cidrs-within, a peer CIDR broader than this is refused: a pod CIDR is
# a /24 or a /64 in practice, and a forged node entry must not take a /8 or a default
# route (docs/security.md).
ROUTE_MIN_PREFIX_V4: Final = 16
ROUTE_MIN_PREFIX_V6: Final = 48

# --- publisher and matrix (meshhealth.agent.reporting.publisher, meshhealth.documents.matrix) ---
# A node whose paths keep their status rewrites its health entry after this long (a
# liveness refresh, on the first round past it): readers tell a live prober from a hung
# one, for one write per node per minute at most (1,000 nodes: 17 writes/s at most;
# with the rotating plan the epoch's new targets write anyway, bench/etcd_load.py).
PUBLISH_REFRESH_S: Final = 60.0
# Readers call a report stale when it is older than the refresh (or the interval, when
# that is longer) plus this many of its source's intervals: the refresh waits for the
# first round past it (up to an interval and the loop's lag later) and is written when
# that round ends (one more interval), so a live node's report never looks stale.
STALE_MARGIN_INTERVALS: Final = 3
# ... plus this much, for the write itself on a loaded etcd and small intervals.
STALE_MARGIN_S: Final = 5.0
# Status changes are written this long after the first one is seen, so changes that come
# together (a round's results, a probe-now round right after) make one write.
PUBLISH_DEBOUNCE_S: Final = 0.5

# --- etcds of the labs and tests (meshhealth.lab.ram_disk) ----------------------------
# Their data goes to RAM (/dev/shm) only with this much free: etcd preallocates a 64 MB
# log segment, and a container's default /dev/shm is 64 MB in all; a few etcds at once
# (a lab's members, a test's servers) need room for one segment each.
ETCD_RAM_MIN_FREE_BYTES: Final = 512 * 1024 * 1024

# --- cluster view (meshhealth.agent.cluster_view: aggregator, summary follower) -------
# After a health report changed, the aggregator waits this long before it diagnoses: the
# reports of one round arrive within a fraction of a second of each other, one summary.
SUMMARY_DEBOUNCE_S: Final = 1.0
# A `path` finding is published in the summary (status, watch, diagnose, the web page)
# once diagnosis has given it this long. When a node-level fault starts or clears, its
# observers see it one at a time: for a second or two the matrix holds one failing path
# per observer that sees it already, then the node's own finding (or nothing). Published
# at once, each flashed up as a path fault and went. A real path fault shows this much
# later, after the suspicion and indirect probes that took far longer; node-level
# findings are never held.
SUMMARY_PATH_SETTLE_S: Final = 5.0
# The aggregator wakes this long after the time a report turns stale, so the report is
# past the bound (not on it) when it looks again.
SUMMARY_STALE_MARGIN_S: Final = 0.1
# An agent that is itself unwell (degraded: loop lag, etcd trouble, its own probes
# failing) for this long gives up the aggregator claim (a shorter blip keeps it: under
# load agents turn degraded for a second and the claim would flap), and waits this long
# after seeing it free before it claims it again, so a healthy agent takes it (a cut-off
# aggregator published 0/4 for the whole cluster); past it, an unwell agent aggregates
# rather than nobody.
AGGREGATOR_UNFIT_GRACE_S: Final = 5.0
# How often a follower looks at the list of clusters to follow (a local list: admitted
# clustermesh remotes have no event); a new remote's summary is followed within this.
SUMMARY_SOURCES_RECHECK_S: Final = 5.0

# --- findings timeline (meshhealth.diagnosis.timeline, agent/cluster_view/timeline.py)
# Closed events are kept this long: a week covers "what broke over the weekend" and the
# usual incident review, and at one event per opened finding it stays small.
EVENTS_MAX_AGE_S: Final = 7 * 24 * 3600.0
# ... and at most this many events per cluster (the oldest closed ones go first): about
# 3 MB in etcd at ~300 bytes an event, listed in one `meshhealth events` in well under a
# second; a flapping cluster cannot fill etcd with its history.
EVENTS_MAX_COUNT: Final = 10_000
# An open event is written again while it lasts only when its confidence grew by this
# much since it was written (at most 10 writes per event): its evidence at its strongest
# reaches etcd without one write per round; the strongest of all is written when it
# closes.
EVENTS_STRONGER_STEP: Final = 0.1
# A finding becomes an event only once it has been in the aggregator's summaries this
# long (then opened at its `since`, when its evidence began). Observers publish one probe
# interval apart, so while a node-level fault starts or clears, diagnosis gives for a
# second or two one `path` finding per failing observer instead of the node's finding (or
# one kind of node finding before another); a fault's onset and recovery settle well
# within this. Without it those transients were most of a soak's timeline (580 of 847
# events), each shown lasting since the fault began. The live views hold back only new
# `path` findings (SUMMARY_PATH_SETTLE_S); the per-path roll-ups count every failure.
EVENTS_SETTLE_S: Final = 10.0
# Events written (or deleted) in one transaction at most: etcd refuses a transaction of
# more than 128 operations (--max-txn-ops) and the claim check is one more.
EVENTS_TXN_OPS: Final = 64

# --- planned maintenance (meshhealth.cli.maintenance_cmd, wire.maintenance) ----------
# `meshhealth maintenance start` without --for: a reboot or a drain takes minutes to an
# hour; two hours covers it with room, and a forgotten window ends the same day.
MAINTENANCE_DEFAULT_S: Final = 2 * 3600.0
# The longest window: a week covers a planned hardware swap; past that a node is not "in
# maintenance" but gone, and it should leave the cluster rather than hide from alerts.
MAINTENANCE_MAX_S: Final = 7 * 24 * 3600.0
# The longest --reason: a ticket reference and a sentence; the value stays small.
MAINTENANCE_REASON_MAX_CHARS: Final = 500
# etcd deletes a window's key this long after its end (its lease: ceil(end - now) plus
# this): readers already treat it as over at its end, so the lease only cleans up.
MAINTENANCE_LEASE_SLACK_S: Final = 5

# --- clustermesh (meshhealth.agent.membership.clustermesh) ----------------------------
# A remote cluster refused (id clash, wrong name) or without a cluster-config entry yet
# is checked again this often: fixing the remote needs no agent restart.
MESH_RECHECK_S: Final = 5.0
# Largest --mesh-dir file read: an endpoint list is a few hundred bytes.
MESH_FILE_MAX_BYTES: Final = 64 * 1024
# How often the agent looks at the --mesh-dir files (listing, inode, mtime, size): an
# added or removed remote cluster takes effect within this time.
MESH_DIR_POLL_S: Final = 2.0
# `GET /v1/matrix` reads each cluster's health entries with this deadline: a remote etcd
# that is down costs the answer this long at most.
MATRIX_READ_TIMEOUT_S: Final = 2.0

# --- live feed (meshhealth.agent.serving.feed_server, `meshhealth watch`) -------------
# Viewers at once on one agent (each costs a task and a queue); more are answered 503.
FEED_MAX_CLIENTS: Final = 256
# Connections to the feed at once, before their handshake too (a viewer past
# FEED_MAX_CLIENTS is answered 503 after it), and from one address over TCP.
FEED_MAX_CONNECTIONS: Final = 2 * FEED_MAX_CLIENTS
FEED_MAX_PER_SOURCE: Final = 32
# A viewer that has not received a round message for this many rounds is told it is
# lagging and disconnected (with the default interval: ~40 s of not reading).
FEED_MAX_ROUNDS_BEHIND: Final = 3
# Pending updates per viewer (one per path after coalescing: 4 per node); past this the
# viewer is lagging. Bounds memory per viewer whatever it does.
FEED_MAX_PENDING: Final = 16384
# A lagging viewer gets this long to take its `lagging` message and the close frame;
# then its connection is cut.
FEED_LAGGING_GRACE_S: Final = 2.0
# The WebSocket opening handshake must be done within this time.
FEED_HANDSHAKE_TIMEOUT_S: Final = 5.0
# Connections the kernel queues for the feed's TCP listener before we accept them.
FEED_LISTEN_BACKLOG: Final = 128
# After a failed accept (out of file descriptors) the feed waits this long: no busy loop.
FEED_ACCEPT_RETRY_S: Final = 0.1
# `meshhealth watch` retries a lost feed with back-off from min to max.
WATCH_RETRY_MIN_S: Final = 0.2
WATCH_RETRY_MAX_S: Final = 2.0
# RTTs kept per path for the view's sparkline.
WATCH_SPARKLINE_POINTS: Final = 20

# --- web page (meshhealth.agent.serving.web_server, meshhealth.agent.path_history) ----
# One-minute summaries kept per own path for the page's sparkline: one hour, ~1.6 KB a path.
PATH_HISTORY_MINUTES: Final = 60
# The port the labs give `--web-listen` (next to the metrics' 9962).
WEB_PORT: Final = 9963
# Page viewers' HTTP connections at once (a page holds 1-2 plus its WebSocket).
WEB_MAX_CONNECTIONS: Final = 64
# ... and from one address: a few viewers behind one NAT, not every slot for one host.
WEB_MAX_PER_SOURCE: Final = 16
# A request (its head) must arrive within this time; idle keep-alive connections close.
WEB_READ_TIMEOUT_S: Final = 10.0
# The matrix the page shows is read from etcd at most once per this share of the probe
# interval, however many viewers ask: viewers add no etcd load beyond that.
WEB_MATRIX_MAX_AGE_FRACTION: Final = 0.5
# The page's timeline strip shows the findings of the last day (the question after a
# night's incident), read from etcd at most once per this long however many viewers ask:
# events change when a finding opens or closes, a minute late is early enough.
WEB_EVENTS_WINDOW_S: Final = 24 * 3600.0
WEB_EVENTS_MAX_AGE_S: Final = 30.0

# --- suspicion (meshhealth.diagnosis.suspicion, docs/diagnosis.md) --------------------
# Shortest suspicion time, in probe intervals, scaled by max(1, log10(N)): half an interval
# at N <= 10 (5 s), so the second failure in a row (one interval later, whatever the round
# jitter) settles a confirmed path; 10 s at 100 nodes, 15 s at 1,000.
SUSPICION_FLOOR_INTERVALS: Final = 0.5
# Longest suspicion time = this x the shortest (Lifeguard's 6): with no confirmation a path
# must fail for 30 s (4 rounds at 10 s) before it reads unreachable.
SUSPICION_CEILING_FACTOR: Final = 6.0
# Independent confirmations that bring the time down to the shortest (Lifeguard's K = 3):
# three other observers seeing the same target fail are hard to explain by our own path.
SUSPICION_CONFIRMATIONS: Final = 3
# Failures in a row before "unreachable", whatever the time: one lost probe never is.
SUSPICION_MIN_FAILURES: Final = 2
# The agent's suspicion timer waits at least this long: a path due by a rounding error
# only is settled on the next turn instead of in a busy loop (meshhealth.agent.path_verdicts).
SUSPICION_TIMER_MIN_WAIT_S: Final = 0.001

# --- local health awareness (meshhealth.diagnosis.local_health) -----------------------
# Timeouts of an unwell agent stretch up to this factor (Lifeguard's 8); score 0..factor-1.
LOCAL_HEALTH_MAX_MULTIPLIER: Final = 8
# Event-loop lag below this is ordinary jitter on a busy node; from it each doubling adds
# a point to the score (0.25 s: 1, 0.5 s: 2, >= 1 s: 3).
LOCAL_HEALTH_LAG_S: Final = 0.25
# This share of our own targets failing at once (with at least LOCAL_HEALTH_MIN_TARGETS)
# points at us rather than at them: 3 points. Kept high so that both sides of a 2-vs-2
# partition (2 of 3 failing) do not discount themselves.
LOCAL_HEALTH_FAILING_SHARE: Final = 0.8
LOCAL_HEALTH_MIN_TARGETS: Final = 3
# Points when etcd is unreachable: our reports cannot be published, our view is cut off.
LOCAL_HEALTH_ETCD_POINTS: Final = 2
# From this score an agent marks its reports degraded (others discount its failures).
LOCAL_HEALTH_DEGRADED_SCORE: Final = 2

# --- diagnosis (meshhealth.diagnosis.diagnose, docs/diagnosis.md) ---------------------
# Share of a node's assessed row or column that must fail to blame the node rather than
# single paths: tolerates one odd cell in four (a path still suspect, a late report).
DIAGNOSIS_FAIL_SHARE: Final = 0.75
# Distinct failing observers needed before a finding names a node other than the observer
# itself: one observer's report is never evidence against another node.
DIAGNOSIS_MIN_OBSERVERS: Final = 2
# Each independent failing cell halves the doubt: confidence = share x (1 - 0.5^cells).
DIAGNOSIS_DOUBT_PER_CELL: Final = 0.5
# Confidence of observer-degraded when an agent says so itself: its own word is good
# evidence, but lag can be a passing burst.
DIAGNOSIS_DEGRADED_CONFIDENCE: Final = 0.9

# --- garbage collector (meshhealth.gc_tuning) -----------------------------------------
# Young-generation threshold of the agent and `meshhealth probe` (CPython's default is
# 700): a round allocates a few short-lived containers per probe; with the default a
# 20,000-probe round spent 20-30 % of its CPU in the collector (docs/performance.md).
GC_GEN0_THRESHOLD: Final = 10_000

# --- lab (meshhealth.lab, `meshhealth lab`) -------------------------------------------
# `lab up` says how far it got at most this often while it waits (sockets, convergence).
LAB_PROGRESS_EVERY_S: Final = 5.0
# How long `lab up` waits for node1 to read every node reachable, per node on top of
# three rounds: the aggregator's summary needs every node's first report (100 nodes on a
# 2-core machine take about a minute to start).
LAB_CONVERGE_PER_NODE_S: Final = 0.6
# Namespace and lab prefix when --prefix is not given; a prefix keeps labs apart.
LAB_PREFIX: Final = "mh"
# A lab big enough to show a matrix and a fault, small enough to start in seconds.
LAB_NODES: Final = 4
LAB_CLUSTERS: Final = 1
# Probe interval of the lab's agents: short, so faults show within seconds.
LAB_INTERVAL_S: Final = 2.0
# ...but every agent of a lab shares one host: when longer, the lab's interval is this
# per node of the lab (10 s, the agent's own default, at 100 nodes), so the lab's probes
# cost the host O(nodes / interval), which stays bounded.
LAB_INTERVAL_PER_NODE_S: Final = 0.1
# Each lab agent serves /metrics on NodeIP:this port (Cilium's agent metrics port).
LAB_METRICS_PORT: Final = 9962
# The lab's etcd runs at this niceness. In a cluster etcd has machines of its own; in the
# lab it shares the host's cores with every agent, and 100 agents starting at once (about
# a second of CPU each) starved it: requests timed out ("waiting for the applied index
# took too long"), leases expired and nodes registered again, slowing the start further.
LAB_ETCD_NICE: Final = -10
# `lab up` waits this long for a cluster's etcd to answer.
LAB_ETCD_READY_TIMEOUT_S: Final = 20.0
# `lab up` waits this long, plus LAB_AGENT_READY_PER_NODE_S per node, for every agent
# to answer on its admin socket: each agent's start costs about a second of CPU, so on
# a 2-core machine 100 agents need about 50 s when nothing else runs.
LAB_AGENT_READY_TIMEOUT_S: Final = 30.0
LAB_AGENT_READY_PER_NODE_S: Final = 0.8
# Validity of the lab's etcd TLS certificates, days (meshhealth.lab.certs): a lab lives
# hours; the CA outlives its leaves.
LAB_CA_DAYS: Final = 3650
LAB_CERT_DAYS: Final = 365
# `lab fault starve`: the agent is SIGSTOPped this long of every LAB_STARVE_PERIOD_S,
# as a node whose CPU is taken runs its agent in fits (3 s of 4 outlasts a probe timeout).
LAB_STARVE_STOP_S: Final = 3.0
LAB_STARVE_PERIOD_S: Final = 4.0

# --- probe plan (meshhealth.probe.assignment, docs/scale.md) -------------------------
# Targets per node past the full-mesh size, and so probers per node. 5 observers let a
# diagnosis outvote two bad ones, or one bad one while two are silent (restarting);
# costs 2 probes/s per node at 10 s whatever N (bench/plan_sim.py).
PLAN_PROBE_TARGETS: Final = 5
# Probe intervals one plan lasts (1 minute at 10 s): each path gets 6 results before the
# ring is redrawn; shorter covers pairs sooner, longer churns per-target stats less.
PLAN_ROTATION_ROUNDS: Final = 6
# Lists up to this size are a full mesh (every pair every round, as before subset
# probing): at most 6 probes/s per node and 15 targets (about 3.6 KB) per health entry.
PLAN_FULL_MESH_MAX_NODES: Final = 16
# The pair-coverage bound reported by docs and bench: every ordered pair is probed
# within the bound but with this probability.
PLAN_COVER_MISS_PROBABILITY: Final = 1e-6

# --- per-pair roll-ups (meshhealth/agent/path_rollups.py, docs/report.md) --------------
# 10-minute windows are kept a day: "what was broken at 03:12" is asked about last night.
ROLLUP_KEEP_MINUTES10_S: Final = 24 * 3600
# Hourly windows are kept a week: an SLA is read over days and weeks, and an hour costs
# what a 10-minute window costs (about 12 bytes).
ROLLUP_KEEP_HOURS_S: Final = 7 * 24 * 3600
# The bound of one node's roll-up value (wire/rollup.py, about 12 bytes a window): 64 MB
# of etcd at 1,000 nodes, 320 MB at 5,000 (etcd's default quota is 2 GiB). It holds a
# day of 10-minute windows and a week of hours for 12 paths (a full mesh of 3 nodes);
# past that the oldest windows go first, each kind keeping about half of the bytes: a
# full mesh of 16 nodes keeps 7 h of 10-minute windows and 42 h of hours.
ROLLUP_MAX_BYTES: Final = 64 * 1024
# A node writes its value this node's share of this long after a window closed (a hash
# of its name): N nodes write N / 600 values a second, evenly, instead of N at once
# after each boundary; half the window, so a value is never more than 5 minutes late.
ROLLUP_WRITE_SPREAD_S: Final = 300.0

# A kernel receive stamp older than this is not a delay but the wall clock stepped
# (NTP): the pinger ignores it and takes its own clock (probe/icmp_socket.py).
ICMP_MAX_RECEIVE_DELAY_S: Final = 10.0
# bench/chaos_soak.py: after a fault is cleared its nodes stay out of the next faults
# this long, so one fault's traces are not taken for the next one's (a show bound: 20 s
# + 5 intervals at the soak's interval).
CHAOS_SETTLE_S: Final = 45.0

#!/bin/sh
# meshhealth-node: start `meshhealth agent` for one node of the compose lab.
#
# Works out what the agent needs from the container itself, so a node service needs no
# more than a name (and a static IP); every value can also be given explicitly:
#   node name  MESHHEALTH_NODE, else the host name (the compose service sets nodeN)
#   NodeIP     MESHHEALTH_NODE_IP, else this container's IPv4 address on eth0
#   index N    MH_NODE_INDEX, else the digits at the end of the node name (node3 -> 3),
#              else the last byte of the NodeIP (with `--scale`, names are random)
#   CIDR       MESHHEALTH_CIDR, else ${MH_POD_NET:-10.80}.N.0/24
#   HealthIP   MESHHEALTH_HEALTH_IP, else ${MH_POD_NET:-10.80}.N.2
#   metrics    MESHHEALTH_METRICS_LISTEN, else NodeIP:9962 (as in the netns lab)
# With MH_HEALTH_FROM_NODE_IP=true (the Kubernetes DaemonSet, deploy/kubernetes/: node
# names say nothing there) the index is not used: for NodeIP A.B.C.D the HealthIP is
# ${MH_POD_NET:-10.80}.C.D and the CIDR that HealthIP/32, unique among NodeIPs of one /16.
# Everything else comes from MESHHEALTH_* variables (see `meshhealth agent --help`);
# arguments are passed on to the agent.
set -eu

say() { echo "meshhealth-node: $*" >&2; }

# /proc/sys is read-only in a container, but the agent sets sysctls of the veth it makes
# for the health endpoint (proxy_arp, proxy_delay) and ip_forward. Make /proc/sys/net
# alone writable (a bind mount of itself, remounted read-write): those values belong to
# this container's network namespace only. Needs SYS_ADMIN, which netns mode needs anyway.
if [ ! -w /proc/sys/net/ipv4/ip_forward ]; then
    if ! { mount --bind /proc/sys/net /proc/sys/net \
        && mount -o remount,bind,rw /proc/sys/net; } 2>/dev/null; then
        say "cannot make /proc/sys/net writable (the container needs cap_add SYS_ADMIN)"
        exit 1
    fi
fi

node="${MESHHEALTH_NODE:-$(hostname)}"
node_ip="${MESHHEALTH_NODE_IP:-}"
if [ -z "$node_ip" ]; then
    # The first global IPv4 address on eth0; wait a little in case the network is late.
    tries=0
    while :; do
        node_ip="$(ip -4 -o addr show dev eth0 scope global 2>/dev/null \
            | awk '{ split($4, a, "/"); print a[1]; exit }')"
        [ -n "$node_ip" ] && break
        tries=$((tries + 1))
        if [ "$tries" -ge 50 ]; then
            say "no IPv4 address on eth0 after 5 s; set MESHHEALTH_NODE_IP"
            exit 1
        fi
        sleep 0.1
    done
fi

pod_net="${MH_POD_NET:-10.80}"
if [ "${MH_HEALTH_FROM_NODE_IP:-false}" = true ]; then
    case "$node_ip" in
        *:* | '') say "MH_HEALTH_FROM_NODE_IP needs an IPv4 NodeIP, got '$node_ip'"; exit 1 ;;
    esac
    low="${node_ip#*.*.}" # A.B.C.D -> C.D
    cidr="${MESHHEALTH_CIDR:-$pod_net.$low/32}"
    health_ip="${MESHHEALTH_HEALTH_IP:-$pod_net.$low}"
else
    index="${MH_NODE_INDEX:-}"
    if [ -z "$index" ]; then
        index="$(printf '%s' "$node" | sed -n 's/^.*[^0-9]\([0-9][0-9]*\)$/\1/p')"
    fi
    if [ -z "$index" ]; then
        index="${node_ip##*.}"
    fi
    case "$index" in
        '' | *[!0-9]*) say "node index '$index' is not a number; set MH_NODE_INDEX"; exit 1 ;;
    esac
    index=$((index + 0))
    if [ "$index" -lt 1 ] || [ "$index" -gt 254 ]; then
        say "node index $index is outside 1..254; set MH_NODE_INDEX or MESHHEALTH_CIDR"
        exit 1
    fi

    cidr="${MESHHEALTH_CIDR:-$pod_net.$index.0/24}"
    health_ip="${MESHHEALTH_HEALTH_IP:-$pod_net.$index.2}"
fi
metrics_listen="${MESHHEALTH_METRICS_LISTEN:-$node_ip:9962}"
web_listen="${MESHHEALTH_WEB_LISTEN:-$node_ip:9963}"

# The pod range is reachable only through the routes the agent programs from etcd
# (--route-cidrs): without one, a CIDR is unreachable here instead of following the
# default route out of the lab network.
pod_range="${MH_POD_RANGE:-$pod_net.0.0/16}"
if ! ip route replace unreachable "$pod_range" 2>/dev/null; then
    say "cannot add the route 'unreachable $pod_range' (the container needs cap_add NET_ADMIN)"
    exit 1
fi

say "node $node: NodeIP $node_ip, CIDR $cidr, HealthIP $health_ip"
exec meshhealth agent \
    --node "$node" \
    --node-ip "$node_ip" \
    --cidr "$cidr" \
    --health-ip "$health_ip" \
    --metrics-listen "$metrics_listen" \
    --web-listen "$web_listen" \
    "$@"

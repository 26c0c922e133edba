#!/usr/bin/env bash
# Runs an MPI program on an emulated cluster of hosts on this one machine (as root).
#
#   scripts/emulated-cluster.sh [--hosts 2] [--ranks-per-host 2] [--rate 1gbit]
#                               [--cpus per-host|shared] [--detect] [--mpi-arg ARG]...
#                               -- PROGRAM [ARGS...]
#
# Every host is a network namespace (trc-<pid>-h<i>) with its own hostname and one
# address on 10.77.0.0/24, joined to a bridge in a switch namespace (trc-<pid>-sw,
# 10.77.0.254), where mpirun runs. Each host's egress is shaped to --rate with a tbf
# qdisc ("none": unshaped). OpenMPI starts one daemon per host through a launch agent
# that enters the host's namespace, so ranks of one host talk through shared memory
# (vader) and ranks of different hosts through TCP over the shaped links.
# --cpus per-host (the default) gives every host its own share of this machine's CPUs,
# as separate machines have: the CPUs this script may run on are split into --hosts
# contiguous blocks and a host's daemon and ranks are confined to its block (with more
# hosts than CPUs, host i gets CPU i mod the count). --cpus shared leaves placement to
# the kernel, which may then run ranks of different hosts on one CPU while another
# host's ranks share the other.
# mpirun gets -np hosts×ranks-per-host, ranks laid out host-major, and
# TOWERREC_RANKS_PER_HOST (unless --detect: then the program must find the hosts
# itself); every TOWERREC_* and RUST_BACKTRACE variable is passed to the ranks.
# --mpi-arg adds an argument to mpirun (repeatable). When mpirun ends, one line per
# host on stderr gives the bytes and packets its eth0 sent and received during the run
#   emulated-cluster: host I tx_bytes N rx_bytes N tx_packets N rx_packets N
# (Ethernet frames, headers included). Everything created is removed on exit, on
# failure and on SIGINT/SIGTERM. Exit status: the program's (mpirun's); 2 for usage or
# set-up errors. See docs/CLUSTER.md.
set -euo pipefail

die() {
    echo "emulated-cluster: $*" >&2
    exit 2
}

usage() {
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
}

hosts=2
rph=2
rate=1gbit
cpus=per-host
detect=0
mpi_args=()
while (($#)); do
    case $1 in
    --hosts | --ranks-per-host | --rate | --cpus | --mpi-arg)
        (($# >= 2)) || die "$1 needs a value"
        case $1 in
        --hosts) hosts=$2 ;;
        --ranks-per-host) rph=$2 ;;
        --rate) rate=$2 ;;
        --cpus) cpus=$2 ;;
        --mpi-arg) mpi_args+=("$2") ;;
        esac
        shift 2
        ;;
    --detect)
        detect=1
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    --)
        shift
        break
        ;;
    *) die "unknown option '$1' (the program goes after --)" ;;
    esac
done
(($#)) || {
    usage >&2
    die "no program given"
}
[[ $hosts =~ ^[1-9][0-9]*$ ]] && ((hosts <= 250)) || die "--hosts must be 1 to 250, not '$hosts'"
[[ $rph =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-host must be a positive integer, not '$rph'"
[[ $cpus == per-host || $cpus == shared ]] || die "--cpus must be per-host or shared, not '$cpus'"

# tbf rate and a burst of 1 ms at that rate (at least 128 KiB: a GSO packet is 64 KiB).
burst=0
if [[ $rate != none ]]; then
    shopt -s nocasematch
    [[ $rate =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] ||
        die "--rate must look like 100mbit, 1gbit, 10gbit or be 'none', not '$rate'"
    case ${BASH_REMATCH[2]} in
    bit) mult=1 ;; kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;;
    esac
    shopt -u nocasematch
    bits=$((BASH_REMATCH[1] * mult))
    ((bits > 0)) || die "--rate must be positive"
    burst=$((bits / 8 / 1000))
    ((burst >= 131072)) || burst=131072
fi

[[ $(id -u) == 0 ]] || die "must run as root: it creates network namespaces, links and qdiscs"
for cmd in ip tc mpirun unshare taskset; do
    command -v "$cmd" >/dev/null ||
        die "'$cmd' not found (apt-get install -y iproute2 openmpi-bin util-linux)"
done
program=$(command -v "$1") || die "program '$1' not found"
[[ $program == /* ]] || program=$PWD/$program
shift

prefix=trc-$$
sw=$prefix-sw
tmp=$(mktemp -d "/tmp/$prefix.XXXXXX")
created=()
made_etc_netns=0
mpirun_pid=

cleanup() {
    set +e
    trap - INT TERM
    [[ -n $mpirun_pid ]] && kill -TERM "$mpirun_pid" 2>/dev/null && wait "$mpirun_pid" 2>/dev/null
    local ns pids
    for ns in "${created[@]}"; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [[ -n $pids ]] && kill -TERM $pids 2>/dev/null
    done
    for ns in "${created[@]}"; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [[ -n $pids ]] && sleep 0.5 && kill -KILL $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null
        ip netns del "$ns" 2>/dev/null # also deletes its veth ends and the bridge
        rm -rf "/etc/netns/$ns"
    done
    ((made_etc_netns)) && rmdir /etc/netns 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

new_ns() {
    ip netns add "$1" || die "cannot create network namespace $1"
    created+=("$1")
    ip -n "$1" link set lo up
}

[[ -d /etc/netns ]] || made_etc_netns=1
hosts_file="127.0.0.1 localhost
10.77.0.254 $sw"
for ((i = 0; i < hosts; i++)); do
    hosts_file+=$'\n'"10.77.0.$((i + 1)) $prefix-h$i"
done

new_ns "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" addr add 10.77.0.254/24 dev br0
ip -n "$sw" link set br0 up
mkdir -p "/etc/netns/$sw" && echo "$hosts_file" >"/etc/netns/$sw/hosts"
for ((i = 0; i < hosts; i++)); do
    ns=$prefix-h$i
    new_ns "$ns"
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$i" master br0 up
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [[ $rate != none ]]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
    fi
    mkdir -p "/etc/netns/$ns" && echo "$hosts_file" >"/etc/netns/$ns/hosts"
    echo "$ns slots=$rph" >>"$tmp/hostfile"
done

# The CPUs this script may use, one per line, expanded from a list such as "0-3,8".
allowed_cpus() {
    local part list
    list=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    for part in ${list//,/ }; do
        if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
    done
}
# Host i's CPUs under --cpus per-host, as a taskset list, and the agent's case arms
# that pin each host to them (none under --cpus shared).
host_cpus=()
cpu_cases=""
if [[ $cpus == per-host ]]; then
    mapfile -t all_cpus < <(allowed_cpus)
    n=${#all_cpus[@]}
    ((n > 0)) || die "cannot read the CPUs this script may use from /proc/self/status"
    for ((i = 0; i < hosts; i++)); do
        if ((hosts <= n)); then
            block=("${all_cpus[@]:i * n / hosts:(i + 1) * n / hosts - i * n / hosts}")
            host_cpus[i]=$(IFS=,; echo "${block[*]}")
        else
            host_cpus[i]=${all_cpus[i % n]}
        fi
        cpu_cases+="$prefix-h$i) pin=(taskset -c ${host_cpus[i]}) ;; "
    done
fi

# OpenMPI's rsh launcher calls `agent HOST COMMAND...` (COMMAND for a remote shell, as
# ssh would); run it in HOST's namespace under HOST's own hostname, on HOST's CPUs.
cat >"$tmp/agent" <<EOF
#!/usr/bin/env bash
host=\$1
shift
[[ \$host == $prefix-h* ]] || { echo "emulated-cluster agent: unknown host \$host" >&2; exit 1; }
pin=()
case \$host in $cpu_cases esac
exec "\${pin[@]}" ip netns exec "\$host" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$host" "\$*"
EOF
chmod +x "$tmp/agent"

env_args=()
((detect)) || env_args+=(-x "TOWERREC_RANKS_PER_HOST=$rph")
while IFS='=' read -r name _; do
    [[ $name == TOWERREC_RANKS_PER_HOST ]] && continue
    [[ $name == TOWERREC_* || $name == RUST_BACKTRACE ]] && env_args+=(-x "$name")
done < <(env)

# A host's eth0 counters: "tx_bytes rx_bytes tx_packets rx_packets".
counters() {
    ip netns exec "$1" sh -c 'cd /sys/class/net/eth0/statistics &&
        echo $(cat tx_bytes rx_bytes tx_packets rx_packets)'
}
before=()
for ((i = 0; i < hosts; i++)); do
    before[i]=$(counters "$prefix-h$i") || die "cannot read the counters of $prefix-h$i"
done

cpu_note="CPUs shared"
[[ $cpus == per-host ]] && cpu_note="CPUs per host: ${host_cpus[*]}"
echo "emulated-cluster: $hosts hosts × $rph ranks, egress ${rate} per host ($prefix-h0..h$((hosts - 1)), 10.77.0.0/24), $cpu_note" >&2
ip netns exec "$sw" mpirun --allow-run-as-root -np $((hosts * rph)) \
    --hostfile "$tmp/hostfile" --map-by slot --bind-to none \
    --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl self,vader,tcp \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    --mca mpi_yield_when_idle 1 \
    "${env_args[@]}" "${mpi_args[@]}" "$program" "$@" &
mpirun_pid=$!
rc=0
wait "$mpirun_pid" || rc=$?
mpirun_pid=
for ((i = 0; i < hosts; i++)); do
    if after=$(counters "$prefix-h$i"); then
        read -r tb rb tp rp <<<"${before[i]}"
        read -r ta ra tq rq <<<"$after"
        echo "emulated-cluster: host $i tx_bytes $((ta - tb)) rx_bytes $((ra - rb))" \
            "tx_packets $((tq - tp)) rx_packets $((rq - rp))" >&2
    else
        echo "emulated-cluster: host $i: cannot read the counters of $prefix-h$i" >&2
    fi
done
exit "$rc"

#!/usr/bin/env bash
# A one-node SLURM for the test suite, from Debian's packages: slurmctld and slurmd (and, with
# --accounting, MariaDB and slurmdbd) as this script's own processes, in one directory, stopped by PID.
#
#   tests/slurm/cluster.sh start [--accounting]   # install what is missing, write the config, start
#   tests/slurm/cluster.sh accounting-db          # MariaDB and slurmdbd only, ahead of --accounting
#   tests/slurm/cluster.sh stop                   # stop every daemon it started, by PID
#   tests/slurm/cluster.sh status                 # sinfo of the running cluster
#
# The directory is $LLM_UTILITY_SLURM_DIR (default /tmp/llm-utility-slurm); its `env` file exports
# SLURM_CONF, which every SLURM command reads instead of /etc/slurm. Nothing outside it is written
# but Debian's packages. The node is this machine (`slurmd -C`), in two partitions, `cpu` (default)
# and `gpu`, with two fake GPUs: SLURM 22.05 drops a GPU GRES declared without `File=` and refuses a
# regular file, so they are character devices (the null device's numbers, `mknod c 1 3`). Without
# cgroups, jobs are tracked by their process tree and `JobAcctGatherParams=OverMemoryKill` kills a
# job that exceeds its memory. MinJobAge keeps a finished job in `squeue` for 10 minutes (SLURM's
# default is 5), long enough for the plugin's `squeue` status checks and the tests' `scontrol show job`.
#
# Needs root (CI and the sessions that run `make test` are root): apt-get install, and slurmd runs
# jobs as their users.
set -euo pipefail

DIR=${LLM_UTILITY_SLURM_DIR:-/tmp/llm-utility-slurm}
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)
SYSTEM_CONF=/etc/slurm/slurm.conf
SYSTEM_DBD_CONF=/etc/slurm/slurmdbd.conf
MUNGE_SOCKET=/run/munge/munge.socket.2
# Ports of their own, so that a SLURM or MariaDB already on the machine is left alone.
CTLD_PORT=${LLM_UTILITY_SLURM_PORT:-16817}
SLURMD_PORT=$((CTLD_PORT + 1))
DBD_PORT=$((CTLD_PORT + 2))
DB_PORT=$((CTLD_PORT + 3))

log() { echo "cluster.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

install_missing() {
	local packages=() command package
	for command in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge "$@"; do
		package=${command#*:}
		command -v "${command%%:*}" >/dev/null || packages+=("$package")
	done
	[ ${#packages[@]} -eq 0 ] && return
	[ "$(id -u)" -eq 0 ] || die "needs root to install ${packages[*]} (apt-get)"
	log "installing ${packages[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}

running() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

# Start "$@" in the background as daemon $name, its output in $name.log, its PID in $name.pid.
spawn() {
	local name=$1
	shift
	"$@" >>"$DIR/$name.log" 2>&1 &
	echo $! >"$DIR/$name.pid"
}

wait_for() { # seconds, description, command...
	local seconds=$1 what=$2
	shift 2
	for _ in $(seq $((seconds * 5))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "$what did not come up in ${seconds} s; logs in $DIR"
}

write_config() {
	local accounting=$1 node
	node=$(slurmd -C | head -1)
	# slurmd -C: "NodeName=<host> CPUs=2 Boards=1 ... RealMemory=24105"; the node's address is
	# this machine's loopback, so no name has to resolve.
	local host=${node#NodeName=}
	host=${host%% *}
	mkdir -p "$DIR/state" "$DIR/spool" "$DIR/gpus"
	for i in 0 1; do
		[ -c "$DIR/gpus/fakegpu$i" ] || mknod "$DIR/gpus/fakegpu$i" c 1 3
	done
	{
		echo "ClusterName=llmutility"
		echo "SlurmctldHost=$host(127.0.0.1)"
		echo "SlurmctldPort=$CTLD_PORT"
		echo "SlurmdPort=$SLURMD_PORT"
		echo "SlurmUser=root"
		echo "SlurmdUser=root"
		echo "AuthType=auth/munge"
		# cred_expire: how long a requeued job waits before it may start again (SLURM's default: 120 s).
		echo "AuthInfo=cred_expire=10"
		echo "StateSaveLocation=$DIR/state"
		echo "SlurmdSpoolDir=$DIR/spool"
		echo "SlurmctldPidFile=$DIR/slurmctld.slurm-pid"
		echo "SlurmdPidFile=$DIR/slurmd.slurm-pid"
		echo "SlurmctldLogFile=$DIR/slurmctld.log"
		echo "SlurmdLogFile=$DIR/slurmd.log"
		echo "ProctrackType=proctrack/linuxproc"
		echo "TaskPlugin=task/none"
		echo "JobAcctGatherType=jobacct_gather/linux"
		echo "JobAcctGatherFrequency=task=1"
		echo "JobAcctGatherParams=OverMemoryKill"
		echo "SelectType=select/cons_tres"
		echo "SelectTypeParameters=CR_Core_Memory"
		echo "SchedulerType=sched/backfill"
		echo "GresTypes=gpu"
		echo "MinJobAge=600"
		echo "ReturnToService=2"
		echo "MpiDefault=none"
		echo "SwitchType=switch/none"
		echo "LaunchParameters=use_interactive_step"
		if [ "$accounting" = 1 ]; then
			echo "AccountingStorageType=accounting_storage/slurmdbd"
			echo "AccountingStorageHost=127.0.0.1"
			echo "AccountingStoragePort=$DBD_PORT"
			echo "AccountingStorageTRES=gres/gpu"
			echo "JobCompType=jobcomp/none"
		else
			echo "AccountingStorageType=accounting_storage/none"
		fi
		echo "$node Gres=gpu:2 NodeAddr=127.0.0.1 State=UNKNOWN" | sed 's/ UpTime=[^ ]*//'
		echo "PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP"
		echo "PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP"
	} >"$DIR/slurm.conf"
	echo "NodeName=$host Name=gpu File=$DIR/gpus/fakegpu[0-1]" >"$DIR/gres.conf"
	echo "export SLURM_CONF=$DIR/slurm.conf" >"$DIR/env"
	# Job steps read the default place: snakemake-executor-plugin-slurm-jobstep drops SLURM_* (and
	# so SLURM_CONF) from the environment of the `srun` inside each job. A link there, unless the
	# machine has a SLURM configuration of its own.
	local linked
	if [ -L "$SYSTEM_CONF" ]; then
		linked=$(readlink "$SYSTEM_CONF")
		# Another cluster of this script's, still running: leave it be.
		if [ "$linked" != "$DIR/slurm.conf" ] && [ -f "$(dirname "$linked")/slurmctld.pid" ] &&
			kill -0 "$(cat "$(dirname "$linked")/slurmctld.pid")" 2>/dev/null; then
			die "$SYSTEM_CONF is the configuration of another running test cluster ($linked)"
		fi
	elif [ -e "$SYSTEM_CONF" ]; then
		die "$SYSTEM_CONF exists: a SLURM is configured on this machine already"
	fi
	mkdir -p "$(dirname "$SYSTEM_CONF")"
	ln -sfn "$DIR/slurm.conf" "$SYSTEM_CONF"
}

# MUNGE on its default socket: SLURM's clients (sacct among them) and slurmctld's connection to
# slurmdbd use that one whatever AuthInfo says. A munged already serving it is used as it is.
start_munge() {
	running munged && return
	munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && return
	[ -f "$DIR/munge.key" ] || {
		dd if=/dev/urandom of="$DIR/munge.key" bs=1024 count=1 status=none
		chmod 400 "$DIR/munge.key"
	}
	mkdir -p "$(dirname "$MUNGE_SOCKET")"
	rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
	spawn munged munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$DIR/munge.key" \
		--pid-file="$DIR/munged.munge-pid" --seed-file="$DIR/munged.seed" --log-file="$DIR/munged.log"
	wait_for 10 munged test -S "$MUNGE_SOCKET"
}

start_accounting() {
	install_missing mariadbd:mariadb-server slurmdbd:slurmdbd
	if ! running mariadbd; then
		if [ ! -d "$DIR/mysql/mysql" ]; then
			mysql_install_db --no-defaults --auth-root-authentication-method=normal --datadir="$DIR/mysql" \
				--user=root >"$DIR/mariadb-install.log" 2>&1 || die "mysql_install_db failed; see $DIR/mariadb-install.log"
		fi
		spawn mariadbd mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$DIR/mysql.socket" \
			--port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$DIR/mariadbd.mysql-pid" --skip-log-error
		wait_for 30 MariaDB mysqladmin --no-defaults --socket="$DIR/mysql.socket" -uroot ping
	fi
	cat >"$DIR/slurmdbd.conf" <<-EOF
		AuthType=auth/munge
		DbdHost=localhost
		DbdAddr=127.0.0.1
		DbdPort=$DBD_PORT
		SlurmUser=root
		LogFile=$DIR/slurmdbd.log
		PidFile=$DIR/slurmdbd.slurm-pid
		StorageType=accounting_storage/mysql
		StorageHost=127.0.0.1
		StoragePort=$DB_PORT
		StorageUser=root
		StorageLoc=slurm_acct_db
	EOF
	chmod 600 "$DIR/slurmdbd.conf"
	# slurmdbd reads /etc/slurm/slurmdbd.conf only (no option names another file).
	ln -sfn "$DIR/slurmdbd.conf" "$SYSTEM_DBD_CONF"
	if ! running slurmdbd; then
		spawn slurmdbd slurmdbd -D
		wait_for 30 slurmdbd bash -c "exec 3<>/dev/tcp/127.0.0.1/$DBD_PORT"
	fi
}

start() {
	local accounting=0 name
	[ "${1:-}" = --accounting ] && accounting=1
	install_missing
	# The configuration (accounting or not) decides how slurmctld and slurmd start: restart them on a
	# change (their jobs have ended; MariaDB and slurmdbd stay up).
	if running slurmctld && ! grep -q "accounting_storage/$([ $accounting = 1 ] && echo slurmdbd || echo none)" \
		"$DIR/slurm.conf"; then
		for name in slurmd slurmctld; do stop_daemon $name; done
	fi
	write_config "$accounting"
	export SLURM_CONF=$DIR/slurm.conf
	start_munge
	[ "$accounting" = 1 ] && start_accounting
	if ! running slurmctld; then
		# -i: ignore state files of an earlier cluster in this directory (jobs, node states)
		spawn slurmctld slurmctld -D -i -f "$SLURM_CONF"
		wait_for 30 slurmctld scontrol ping
	fi
	if ! running slurmd; then
		spawn slurmd slurmd -D -f "$SLURM_CONF"
	fi
	wait_for 60 "the node" bash -c "sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)'"
	log "up: $(sinfo -h -o '%P %D %t %G' | tr '\n' ';') (source $DIR/env)"
}

stop_daemon() {
	local name=$1 pid
	running "$name" || {
		rm -f "$DIR/$name.pid"
		return 0
	}
	pid=$(cat "$DIR/$name.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
	rm -f "$DIR/$name.pid"
}

stop() {
	local name
	# Jobs still running end with the cluster: their processes are slurmstepd's, not the daemons'.
	running slurmctld && SLURM_CONF=$DIR/slurm.conf scancel --quiet --user "$(id -un)" 2>/dev/null || true
	# All at once: each takes a few seconds to save its state and exit.
	for name in "${DAEMONS[@]}"; do stop_daemon "$name" & done
	wait
	[ "$(readlink "$SYSTEM_CONF" 2>/dev/null)" = "$DIR/slurm.conf" ] && rm -f "$SYSTEM_CONF"
	[ "$(readlink "$SYSTEM_DBD_CONF" 2>/dev/null)" = "$DIR/slurmdbd.conf" ] && rm -f "$SYSTEM_DBD_CONF"
	log "stopped"
}

case "${1:-}" in
start)
	shift
	start "$@"
	;;
accounting-db)
	# MariaDB and slurmdbd alone, ahead of `start --accounting` (which then only restarts slurmctld
	# and slurmd): they take ~30 s to install and start, which can overlap other work.
	[ -f "$DIR/slurm.conf" ] || die "start the cluster first"
	export SLURM_CONF=$DIR/slurm.conf
	start_munge
	start_accounting
	;;
stop) stop ;;
status)
	export SLURM_CONF=$DIR/slurm.conf
	sinfo
	;;
*) die "usage: $0 start [--accounting] | accounting-db | stop | status" ;;
esac

#!/usr/bin/env bash
# Run two tracks of a long target at once: a background command beside a foreground one (`make test`: the
# kind node image and the kind tests beside lint and the rest of pytest, which leave most of the 2 cores
# idle while they wait on servers):
#
#   tools/beside.sh NAME 'BACKGROUND SHELL COMMAND' FOREGROUND COMMAND [ARG...]
#
# The background track's lines come as they are written, each prefixed "[NAME] ". When the foreground ends,
# the background one is waited for (its prefixing too), and the wait is a phase of its own ("NAME (waited)"),
# so the phase table's total stays the wall time. Ctrl-C or SIGTERM is passed on to the background track's
# process group, which cleans up as it does on a terminal's Ctrl-C. The exit status is the foreground's
# when it failed, else the background's. With TRITONPIPELINE_PHASE_LOG set, the table of every phase is
# printed at the end (the foreground's pytest printed it before the background track had finished).
set -uo pipefail

[ $# -ge 3 ] || { echo "usage: $0 NAME 'BACKGROUND COMMAND' FOREGROUND COMMAND [ARG...]" >&2; exit 2; }
name="$1" background="$2"
shift 2
HERE="$(cd "$(dirname "$0")" && pwd)"

# INT: the terminal sent it to the foreground's group already; TERM (a CI timeout): to the foreground too.
# The background track gets SIGINT either way, the signal its clean-up is written for. Set before either
# track starts: a signal that came before the traps ended this script and left the track running.
fg="" bg="" sed_pid=""
stop_both() {
  echo ">> $name: $1: passing SIGINT to process group ${bg:-(not started)} and waiting for both tracks to clean up"
  # the foreground by the jobs list, not only $fg: a signal can come before `fg=$!` ran
  if [ "$1" = SIGTERM ]; then
    for job in $(jobs -p); do [ "$job" = "$bg" ] || [ "$job" = "$sed_pid" ] || kill -TERM "$job" 2>/dev/null; done
  fi
  [ -z "$bg" ] || kill -INT -- "-$bg" 2>/dev/null
  wait  # every job: the foreground and the side track
  [ -z "$sed_pid" ] || wait "$sed_pid" 2>/dev/null  # and the prefixing, so the track's last lines come out
  exit 130
}
trap 'stop_both SIGINT' INT
trap 'stop_both SIGTERM' TERM

# setsid: the track gets a process group of its own (a terminal's Ctrl-C reaches only the foreground's group,
# and the trap above passes it on); env --default-signal: a command started with & in a script has SIGINT
# ignored, and so would the track's Python (no KeyboardInterrupt, so no clean-up on Ctrl-C)
# The prefixing sed ignores SIGINT: it must outlive a Ctrl-C to pass on what the track says while cleaning up
exec {prefixed}> >(trap '' INT; exec sed -u "s/^/[$name] /")
sed_pid=$!
env --default-signal=INT,QUIT setsid bash -c "$background" >&"$prefixed" 2>&1 </dev/null &
bg=$!
exec {prefixed}>&-  # the sed ends when the track has, after its last line
echo ">> $name: started beside the rest (process group $bg); its lines are prefixed [$name]"

# the foreground runs as a child waited for, so that a signal is handled at once, not after it ends
env --default-signal=INT,QUIT "$@" &
fg=$!
wait "$fg"
fg_rc=$?

echo ">> $name: the rest ended (exit $fg_rc); waiting for $name"
t0=$SECONDS
wait "$bg"
bg_rc=$?
wait "$sed_pid"
trap - INT TERM
bash "$HERE/phase.sh" --record "$name (waited)" "$((SECONDS - t0))" "$bg_rc"

[ -z "${TRITONPIPELINE_PHASE_LOG:-}" ] || bash "$HERE/phase.sh" --table "$TRITONPIPELINE_PHASE_LOG"
if [ "$fg_rc" != 0 ]; then exit "$fg_rc"; fi
exit "$bg_rc"

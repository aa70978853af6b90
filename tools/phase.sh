#!/usr/bin/env bash
# Run one phase of a long target (`make test`: the venv, each Go build, the images, lint, the tests) and
# say how long it took, so a slow or failing phase stands out in a CI log:
#
#   tools/phase.sh NAME COMMAND [ARG...]     ->   ">> phase NAME: 73s"  (or "FAILED (exit 2) after 73s")
#   tools/phase.sh --record NAME SECONDS RC  ->   the same for a phase its caller timed
#
# With TRITONPIPELINE_PHASE_LOG set (.ci/run sets it), each phase also appends "NAME<TAB>SECONDS<TAB>ok|failed"
# there; `tools/phase.sh --table FILE` prints those lines as a table with their total. The pytest phase adds
# one line per test group itself (tests/phases.py), so the table shows unit, tritonserver, apiserver and
# real-pod tests apart. The exit status is the command's.
set -uo pipefail

if [ "${1:-}" = --table ]; then
  [ -s "${2:-}" ] || exit 0
  awk -F'\t' '
    { name[NR] = $1; secs[NR] = $2; st[NR] = $3
      if ($1 ~ /^pytest\//) parts += $2; else if ($1 !~ /\//) total += $2; if ($1 == "pytest") whole = 1 }
    END {
      if (!whole) total += parts  # printed by pytest itself, before its own line is written
      print ">> phases (seconds; a NAME/part is not added to the total: part of a phase, or run beside others):"
      for (i = 1; i <= NR; i++) printf "   %-28s %6d  %s\n", name[i], secs[i], st[i]
      printf "   %-28s %6d  (%dm%02ds)\n", "total", total, total / 60, total % 60
    }' "$2"
  exit 0
fi

USAGE="usage: $0 NAME COMMAND [ARG...] | --table FILE | --record NAME SECONDS EXIT_STATUS"
if [ "${1:-}" = --record ]; then  # a phase timed by its caller (tools/beside.sh's wait for a child of its own)
  [ $# = 4 ] || { echo "$USAGE" >&2; exit 2; }
  name="$2" secs="$3" rc="$4"
else
  [ $# -ge 2 ] || { echo "$USAGE" >&2; exit 2; }
  name="$1"; shift
  t0=$SECONDS
  "$@"
  rc=$?
  secs=$((SECONDS - t0))
fi
if [ "$rc" = 0 ]; then
  echo ">> phase $name: ${secs}s"
  status=ok
else
  echo ">> phase $name: FAILED (exit $rc) after ${secs}s"
  status="failed (exit $rc)"
fi
if [ -n "${TRITONPIPELINE_PHASE_LOG:-}" ]; then
  printf '%s\t%s\t%s\n' "$name" "$secs" "$status" >> "$TRITONPIPELINE_PHASE_LOG"
fi
exit "$rc"

#!/usr/bin/env bash
# A logging nvcc stand-in for the GPU probe: records every invocation, then runs the real nvcc,
# or refuses compiles (exit 97) when DGP_PROBE_DENY=1. `--version` always goes through.
echo "$(date +%s.%N) $*" >> "${DGP_PROBE_LOG:-/tmp/nvcc-probe.log}"
real="${DGP_REAL_NVCC:-/usr/local/cuda/bin/nvcc}"
for a in "$@"; do [ "$a" = "--version" ] && exec "$real" "$@"; done
[ "${DGP_PROBE_DENY:-0}" = 1 ] && { echo "probe: compile refused" >&2; exit 97; }
exec "$real" "$@"

#!/usr/bin/env bash
# Snapshot this checkout's committed dgprecompile package into .whl-gen/dgprecompile.tgz, so a device run made from
# another checkout (the device tool sends the session's own checkout) plans and warms with this code.
# usage: bash tests/gpu/pack_dgprecompile.sh [REV]        (default HEAD)
set -euo pipefail
rev=${1:-HEAD}
mkdir -p .whl-gen
tmp=$(mktemp -d)
git archive --format=tar "$rev" dgprecompile | tar xf - -C "$tmp"
echo "$(git rev-parse --short "$rev") ($(git log -1 --format=%s "$rev" | cut -c1-80))" > "$tmp/DGP_COMMIT"
tar czf .whl-gen/dgprecompile.tgz -C "$tmp" .
rm -rf "$tmp"
ls -la .whl-gen/dgprecompile.tgz; cat .whl-gen/DGP_COMMIT 2>/dev/null || true

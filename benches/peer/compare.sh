#!/usr/bin/env bash
# Peer comparison: our bulk writer (`cloud-writer import`) against the official @azure/cosmos
# SDK's executeBulkOperations, the same 100,000 documents to the same local endpoint.
# Builds the release binaries, checks the Node SDK is installed, runs compare.py.
# Usage: benches/peer/compare.sh [--documents N] [--partitions N] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p cosmos-sim -p cloud-writer
if [ ! -d tools/node/node_modules/@azure/cosmos ]; then
  npm ci --prefix tools/node --no-audit --no-fund --loglevel=error
fi
exec python3 benches/peer/compare.py "$@"

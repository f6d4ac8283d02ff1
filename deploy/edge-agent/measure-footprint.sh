#!/bin/sh
# Footprint of the edge agent: a 5 s interval against a local Mosquitto, sim source.
# Run from the workspace root after the musl release build; WINDOW seconds of measurement.
set -eu
BIN=${BIN:-target/x86_64-unknown-linux-musl/release/edge-agent}
PORT=${PORT:-18839}
WINDOW=${WINDOW:-120}
WORK=$(mktemp -d)
/usr/sbin/mosquitto -p "$PORT" > "$WORK/mosquitto.log" 2>&1 &
BROKER=$!
sleep 1
MQTT_URL=mqtt://127.0.0.1:$PORT DEVICE_ID=drone-perf BUFFER_DIR=$WORK/buffer \
  POSITION_SOURCE=sim REPORT_INTERVAL=5 STATUS_FILE=$WORK/status.json RUST_LOG=warn \
  "$BIN" run > "$WORK/agent.log" 2>&1 &
AGENT=$!
sleep 15   # warm-up: connected, first messages acknowledged
TICKS=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' /proc/$AGENT/stat; }
START_CPU=$(cpu); START=$(date +%s.%N)
sleep "$WINDOW"
END_CPU=$(cpu); END=$(date +%s.%N)
echo "binary_bytes $(stat -c %s "$BIN")"
grep -E 'VmRSS|VmHWM|Threads' /proc/$AGENT/status
echo "cpu_ticks $((END_CPU - START_CPU)) over $(echo "$END - $START" | bc) s at $TICKS ticks/s"
echo "cpu_percent_of_one_core $(echo "scale=4; ($END_CPU - $START_CPU) / $TICKS / ($END - $START) * 100" | bc)"
cat "$WORK/status.json"
kill -TERM "$AGENT"; wait "$AGENT" || true
kill "$BROKER"; wait "$BROKER" 2>/dev/null || true
rm -rf "$WORK"

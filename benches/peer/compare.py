#!/usr/bin/env python3
"""Peer comparison: the same documents written to the same local Cosmos endpoint by our bulk
writer (`cloud-writer import FILE.jsonl`) and by the official JavaScript SDK's bulk API
(`executeBulkOperations`, @azure/cosmos as pinned in tools/node), one after the other in one
run. Prints throughput and CPU seconds of each and their ratios; exits 1 when the floor is not
met (ours at least 3x the SDK's throughput with at most a third of its CPU seconds).

Run through compare.sh, which builds the release binaries first. Python 3 standard library only.
"""

import argparse
import base64
import datetime
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# A fresh account key for this run's local endpoint.
KEY = base64.b64encode(os.urandom(64)).decode()
DATABASE = "telemetry"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def documents(count, path):
    """Writes `count` latest-position documents of distinct drones (the layout the
    cloud-writer stores), timed now, spread over a 5 km area around Seattle."""
    rng = random.Random(42)
    now = datetime.datetime.now(datetime.timezone.utc)
    ms = int(now.timestamp() * 1000)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    with open(path, "w") as out:
        for i in range(count):
            device = f"peer-{i:06d}"
            lat = 47.6062 + rng.uniform(-0.045, 0.045)
            lon = -122.3321 + rng.uniform(-0.066, 0.066)
            doc = {
                "id": device,
                "deviceId": device,
                "kind": "latest",
                "schemaVersion": 1,
                "seq": rng.randrange(1, 100_000),
                "deviceTime": stamp,
                "deviceTimeMs": ms,
                "location": {"type": "Point", "coordinates": [round(lon, 7), round(lat, 7)]},
                "altM": round(rng.uniform(80, 140), 1),
                "headingDeg": round(rng.uniform(0, 360), 1),
                "speedMps": round(rng.uniform(5, 15), 2),
                "batteryPct": rng.randrange(20, 101),
            }
            out.write(json.dumps(doc, separators=(",", ":")))
            out.write("\n")


def measured(argv, env):
    """Runs `argv` to completion; returns (exit code, stdout, wall seconds, CPU seconds),
    the CPU time being user + system of the process and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
    return proc.returncode, proc.stdout, wall, cpu


def stats(endpoint):
    with urllib.request.urlopen(endpoint + "_admin/stats", timeout=30) as r:
        return json.load(r)


def stored(endpoint, container):
    for c in stats(endpoint)["containers"]:
        if c["database"] == DATABASE and c["container"] == container:
            return sum(p["documents"] for p in c["partitions"] if p["live"])
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--target", default=os.path.join(ROOT, "target", "release"))
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    args = parser.parse_args()

    sim_bin = os.path.join(args.target, "cosmos-sim")
    writer_bin = os.path.join(args.target, "cloud-writer")
    node = shutil.which("node")
    for path in (sim_bin, writer_bin):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run benches/peer/compare.sh (it builds it)")
    if node is None:
        sys.exit("node is missing: install Node.js 20+, then npm ci --prefix tools/node")
    if not os.path.isdir(os.path.join(ROOT, "tools", "node", "node_modules", "@azure", "cosmos")):
        sys.exit("@azure/cosmos is missing: run npm ci --prefix tools/node")

    work = tempfile.mkdtemp(prefix="peer-")
    data = os.path.join(work, "documents.jsonl")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/"
    env = dict(os.environ, COSMOS_SIM_KEY=KEY, RUST_LOG="warn")
    sim = subprocess.Popen(
        [sim_bin, "--port", str(port), "--partitions", str(args.partitions),
         "--ru-per-sec", "inf", "--latency-ms", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        if "listening" not in (sim.stdout.readline() or ""):
            sys.exit("cosmos-sim did not start")
        documents(args.documents, data)
        size_mb = os.path.getsize(data) / 1e6

        ours_env = dict(
            os.environ,
            COSMOS_ENDPOINT=endpoint,
            COSMOS_KEY=KEY,
            COSMOS_DATABASE=DATABASE,
            COSMOS_CONTAINER="ours",
            COSMOS_CREATE_IF_MISSING="true",
            RUST_LOG="warn",
        )
        code, out, ours_wall, ours_cpu = measured([writer_bin, "import", data], ours_env)
        if code != 0:
            sys.exit(f"cloud-writer import failed ({code}):\n{out}")
        ours_stored = stored(endpoint, "ours")

        sdk_env = dict(os.environ, COSMOS_KEY=KEY)
        code, out, sdk_wall, sdk_cpu = measured(
            [node, os.path.join(HERE, "sdk-bulk.mjs"), "--endpoint", endpoint,
             "--database", DATABASE, "--container", "sdk", data],
            sdk_env,
        )
        if code != 0:
            sys.exit(f"the SDK's bulk run failed ({code}):\n{out}")
        sdk_report = json.loads(out.strip().splitlines()[-1])
        sdk_stored = stored(endpoint, "sdk")
    finally:
        sim.send_signal(signal.SIGINT)
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
        shutil.rmtree(work, ignore_errors=True)

    n = args.documents
    ours_tput, sdk_tput = n / ours_wall, n / sdk_wall
    figures = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, {platform_line()}",
        "documents": n,
        "file_mb": round(size_mb, 1),
        "partitions": args.partitions,
        "ours": {"wall_s": ours_wall, "cpu_s": ours_cpu, "docs_per_s": ours_tput, "stored": ours_stored},
        "sdk": {"wall_s": sdk_wall, "cpu_s": sdk_cpu, "docs_per_s": sdk_tput, "stored": sdk_stored,
                "bulk_call_s": sdk_report.get("wallSecs")},
        "throughput_ratio": ours_tput / sdk_tput,
        "cpu_ratio": ours_cpu / sdk_cpu,
    }
    print(f"{n} documents ({size_mb:.1f} MB JSONL), local endpoint with {args.partitions} partitions, unthrottled")
    print(f"{'':<34}{'wall s':>8}{'docs/s':>10}{'CPU s':>8}{'stored':>9}")
    print(f"{'ours: cloud-writer import':<34}{ours_wall:>8.2f}{ours_tput:>10.0f}{ours_cpu:>8.2f}{ours_stored:>9}")
    print(f"{'SDK: executeBulkOperations':<34}{sdk_wall:>8.2f}{sdk_tput:>10.0f}{sdk_cpu:>8.2f}{sdk_stored:>9}")
    print(f"throughput ours/SDK {figures['throughput_ratio']:.2f}x   CPU seconds ours/SDK {figures['cpu_ratio']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    ok = ours_stored == n and sdk_stored == n
    floor = figures["throughput_ratio"] >= 3.0 and figures["cpu_ratio"] <= 1 / 3
    print("floor (>= 3x throughput, <= 1/3 CPU):", "met" if floor else "NOT met")
    if not ok:
        print(f"documents stored: ours {ours_stored}, SDK {sdk_stored}, expected {n}")
    sys.exit(0 if ok and floor else 1)


def platform_line():
    import platform
    return f"{platform.machine()} {platform.system()} {platform.release()}"


if __name__ == "__main__":
    main()

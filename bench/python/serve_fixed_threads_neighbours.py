#!/usr/bin/env python3
# `ipj serve --threads 2` (a fixed plan: never shrinks) of one fp32 model, full batches posted back to back:
# quiet first, then beside busy loops that arrive after the load. Prints p50/p90 latency per phase and what
# the server logged about XNNPACK's batch runtime. Each IPJ binary in turn, alternating, ROUNDS times.
# Usage: serve_fixed_threads_neighbours.py MODEL.pt C,H,W MEAN STD BATCH IPJ [IPJ ...] [--rounds N]
#   [--loops 4] [--seconds 10]   (stdlib only; Debian's python3)
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request


def start_server(ipj, repo, log_path):
    log = open(log_path, "w")
    process = subprocess.Popen([ipj, "serve", "--model-repo", repo, "--port", "0", "--no-energy", "--threads", "2"],
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline:
        text = open(log_path).read()
        for port in re.findall(r"127\.0\.0\.1:(\d+)", text):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return process, int(port)
            except OSError:
                pass
        if process.poll() is not None:
            raise RuntimeError("server exited:\n" + text)
        time.sleep(0.3)
    process.kill()
    raise RuntimeError("server never became ready")


def post_for(port, body, seconds):
    latencies = []
    end = time.time() + seconds
    while time.time() < end:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/m/infer", data=body,
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as reply:
            reply.read()
        latencies.append((time.perf_counter() - start) * 1e3)
    latencies.sort()
    return statistics.median(latencies), latencies[int(0.9 * (len(latencies) - 1))], len(latencies)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("shape")
    parser.add_argument("mean", type=float)
    parser.add_argument("std", type=float)
    parser.add_argument("batch", type=int)
    parser.add_argument("ipj", nargs="+")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loops", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    shape = [int(value) for value in args.shape.split(",")]
    repo = tempfile.mkdtemp(prefix="ipj-neighbours-")
    os.makedirs(f"{repo}/m/1")
    shutil.copy(args.model, f"{repo}/m/1/model.pt")
    config = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1] + shape}],
              "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, -1]}], "max_batch_size": args.batch,
              "mean": [args.mean], "std": [args.std], "energy_in_response": False}
    json.dump(config, open(f"{repo}/m/config.json", "w"))
    count = args.batch
    for size in shape:
        count *= size
    values = [((index * 7919) % 1000) / 1000.0 for index in range(count)]  # pixels in [0, 1)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [args.batch] + shape,
                                   "data": values}]}).encode()
    print(f"{'round':5} {'ipj':40} {'phase':9} {'p50_ms':>8} {'p90_ms':>8} {'calls':>6}")
    try:
        for round_index in range(1, args.rounds + 1):
            for ipj in args.ipj:
                log_path = f"{repo}/server.log"
                server, port = start_server(ipj, repo, log_path)
                loops = []
                try:
                    p50, p90, calls = post_for(port, body, args.seconds)
                    print(f"{round_index:<5} {ipj:40} {'quiet':9} {p50:8.2f} {p90:8.2f} {calls:6}", flush=True)
                    loops = [subprocess.Popen(["bash", "-c", "while :; do :; done"]) for _ in range(args.loops)]
                    time.sleep(1.0)
                    p50, p90, calls = post_for(port, body, args.seconds)
                    print(f"{round_index:<5} {ipj:40} {'neighbours':9} {p50:8.2f} {p90:8.2f} {calls:6}", flush=True)
                finally:
                    for loop in loops:
                        loop.kill()
                        loop.wait()
                    server.send_signal(signal.SIGTERM)
                    server.wait(60)
                text = open(log_path).read()
                choice = re.search(r"XNNPACK runtime at batch \d+ (runs it|kept out)[^;)]*", text)
                switches = re.findall(r"batch \d+: [^(]* now runs it \([^)]*\)", text)
                print(f"      log: {choice.group(0) if choice else 'no XNNPACK batch runtime'}; "
                      f"{len(switches)} switch(es){': first ' + switches[0] if switches else ''}")
    finally:
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()

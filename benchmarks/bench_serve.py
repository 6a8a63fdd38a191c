"""Benchmark the TEXT2SPARQL API under concurrent load, over real HTTP on localhost.

Creates a demo workspace in a temporary directory (bundled demo dataset, seed spec v1), deploys
v1, starts the server with uvicorn in a background thread and lets N clients (httpx, one thread
each) ask the demo questions in a loop for a bounded time. Prints throughput, latency
percentiles, errors (non-200 replies, connection failures) and fallback answers.

    python benchmarks/bench_serve.py [--seconds 20] [--clients 8] [--workers 8] [--timeout 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from researcher.serve import FALLBACK_HEADER, STATUS_HEADER, BackgroundServer, create_app, deploy
from researcher.workspace import init_workspace


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _client(url: str, dataset: str, questions: list[str], offset: int, stop_at: float,
            latencies: list[float], outcomes: Counter[str], lock: threading.Lock) -> None:
    i = offset
    with httpx.Client(timeout=120) as http:
        while time.perf_counter() < stop_at:
            question = questions[i % len(questions)]
            i += 1
            start = time.perf_counter()
            try:
                r = http.get(url, params={"question": question, "dataset": dataset})
                kind = "ok" if r.status_code == 200 and r.json().get("query") else f"http_{r.status_code}"
                if kind == "ok" and FALLBACK_HEADER in r.headers:
                    kind = f"fallback:{r.headers.get(STATUS_HEADER, '?')}"
            except (httpx.HTTPError, ValueError) as exc:
                kind = f"error_{type(exc).__name__}"
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                outcomes[kind] += 1


def run(seconds: float, clients: int, workers: int, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        ws = init_workspace(Path(tmp) / "demo")
        deploy(ws, "v1")
        dataset = ws.data.questions.dataset_id
        questions = [q.text for q in ws.data.questions.questions]
        app = create_app(ws, timeout_s=timeout_s, max_workers=workers)
        latencies: list[float] = []
        outcomes: Counter[str] = Counter()
        lock = threading.Lock()
        with BackgroundServer(app) as server:
            url = server.url + "text2sparql"
            httpx.get(url, params={"question": questions[0], "dataset": dataset}, timeout=120)  # warm-up
            start = time.perf_counter()
            stop_at = start + seconds
            threads = [threading.Thread(target=_client, args=(url, dataset, questions, k * 7, stop_at,
                                                             latencies, outcomes, lock)) for k in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - start
    fallbacks = sum(n for kind, n in outcomes.items() if kind.startswith("fallback:"))
    errors = sum(outcomes.values()) - outcomes.get("ok", 0) - fallbacks
    return {
        "seconds": round(wall, 2),
        "clients": clients,
        "workers": workers,
        "requests": len(latencies),
        "throughput_rps": round(len(latencies) / wall, 2) if wall else 0.0,
        "latency_ms": {
            "p50": round(percentile(latencies, 50) * 1000, 1) if latencies else None,
            "p95": round(percentile(latencies, 95) * 1000, 1) if latencies else None,
            "p99": round(percentile(latencies, 99) * 1000, 1) if latencies else None,
            "mean": round(statistics.fmean(latencies) * 1000, 1) if latencies else None,
            "max": round(max(latencies) * 1000, 1) if latencies else None,
        },
        "errors": errors,
        "fallbacks": fallbacks,
        "outcomes": dict(outcomes),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="How long the clients send requests.")
    parser.add_argument("--clients", type=int, default=8, help="Concurrent HTTP clients.")
    parser.add_argument("--workers", type=int, default=8, help="Agent threads in the server.")
    parser.add_argument("--timeout", type=float, default=30.0, help="Per-request time limit of the server.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    out = run(args.seconds, args.clients, args.workers, args.timeout)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        lat = out["latency_ms"]
        print(f"{out['requests']} requests in {out['seconds']} s from {out['clients']} clients "
              f"({out['workers']} agent threads): {out['throughput_rps']} req/s")
        print(f"latency ms: p50 {lat['p50']}  p95 {lat['p95']}  p99 {lat['p99']}  mean {lat['mean']}  max {lat['max']}")
        print(f"errors: {out['errors']}  fallback answers (agent found no query or timed out): {out['fallbacks']}  outcomes: {out['outcomes']}")
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

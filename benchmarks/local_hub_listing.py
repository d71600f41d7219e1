"""How long tools/local_hub/ takes to list a large repository, and whether the listing blocks other requests.

    .venv/bin/python benchmarks/local_hub_listing.py                       # this tree's server
    .venv/bin/python benchmarks/local_hub_listing.py --hub-tree /tmp/base  # a server from another checkout

A repository of `--files` small files (in folders two deep, added over `--commits` commits) is listed with
`tree/main?recursive=true&expand=true` (what `list_repo_tree(recursive=True, expand=True)` asks), `--repeats`
times. While each listing runs, a second client fetches a small file over and over; the slowest of those fetches
shows whether the listing holds a lock that other requests wait on. Prints the median and spread of each.

    .venv/bin/python benchmarks/local_hub_listing.py --scaling 3000 6000 12000 24000

times the same listing in this process (no HTTP) on repositories of those sizes (same history length), the sizes
interleaved within each repeat: how the listing's time grows with the file count.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

TOKEN = "hf_benchmark_0123456789abcdef"


def call(port: int, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        connection.request(method, target, body=body, headers={"Authorization": f"Bearer {TOKEN}"})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def populate(port: int, files: int, commits: int) -> None:
    assert call(port, "POST", "/api/repos/create", b'{"name": "big"}')[0] == 200
    per_commit = -(-files // commits)
    for start in range(0, files, per_commit):
        lines = [{"key": "header", "value": {"summary": f"files {start}+"}}]
        for i in range(start, min(start + per_commit, files)):
            content = base64.b64encode(f"file {i}\n".encode()).decode()
            path = f"d{i % 30}/s{i % 7}/f{i}.txt"
            lines.append({"key": "file", "value": {"path": path, "content": content, "encoding": "base64"}})
        body = "\n".join(json.dumps(line) for line in lines).encode()
        status, answer = call(port, "POST", "/api/models/bench/big/commit/main", body)
        assert status == 200, answer[:300]


def measure(port: int, repeats: int) -> tuple[list[float], list[float], int]:
    """(listing seconds, slowest concurrent small fetch per listing, entries listed)."""
    listings, slowest = [], []
    entries = 0
    for _ in range(repeats):
        done = threading.Event()
        fetches: list[float] = []

        def fetch_while_listing() -> None:
            while not done.is_set():
                start = time.perf_counter()
                assert call(port, "GET", "/bench/big/resolve/main/d0/s0/f0.txt")[0] == 200
                fetches.append(time.perf_counter() - start)

        other = threading.Thread(target=fetch_while_listing)
        start = time.perf_counter()
        other.start()
        status, body = call(port, "GET", "/api/models/bench/big/tree/main?recursive=true&expand=true")
        listings.append(time.perf_counter() - start)
        done.set()
        other.join()
        assert status == 200, body[:300]
        entries = len(json.loads(body))
        slowest.append(max(fetches))
    return listings, slowest, entries


def scaling(sizes: list[int], commits: int, repeats: int) -> None:
    """The listing alone, in this process, on repositories built in memory: seconds per size, interleaved."""
    from tools.local_hub import Commit, FileEntry, HubApp, Repo, Request, git_blob_oid

    app = HubApp(tempfile.mkdtemp(), {}, {})
    for size in sizes:
        files: dict = {}
        history: dict = {}
        parents: list[str] = []
        for c in range(commits):
            files = dict(files)  # each commit a snapshot, as the server keeps them
            for i in range(c * size // commits, (c + 1) * size // commits):
                files[f"d{i % 30}/s{i % 7}/f{i}.txt"] = FileEntry(size=10, oid=git_blob_oid(f"file {i}\n".encode()))
            commit_id = f"{size:08x}{c:032x}"
            history[commit_id] = Commit(commit_id, parents, f"c{c}", "", "2026-01-01T00:00:00.000Z", "bench", files)
            parents = [commit_id]
        app.repos[("model", f"bench/r{size}")] = Repo("model", f"bench/r{size}", False, "2026-01-01T00:00:00.000Z",
                                                      {"main": parents[0]}, {}, {}, history)
    seconds: dict[int, list[float]] = {size: [] for size in sizes}
    query = {"recursive": ["true"], "expand": ["true"]}
    for _ in range(repeats):
        for size in sizes:
            request = Request("GET", ["api", "models", "bench", f"r{size}", "tree", "main"], query, {}, b"")
            start = time.perf_counter()
            app.handle(request)
            seconds[size].append(time.perf_counter() - start)
    for size in sizes:
        per_thousand = statistics.median(seconds[size]) / size * 1000
        print(f"{size} files, {commits} commits: {spread(seconds[size])}; {per_thousand:.3f} s per 1,000 files")


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=6000)
    parser.add_argument("--commits", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hub-tree", help="a checkout whose tools/local_hub (package, or the older one-file module) "
                                           "to measure (default: this one)")
    parser.add_argument("--scaling", type=int, nargs="+", help="file counts to time the listing at, in process")
    args = parser.parse_args()
    sys.path.insert(0, args.hub_tree or str(Path(__file__).resolve().parents[1]))
    if args.scaling:
        scaling(args.scaling, args.commits, args.repeats)
        return
    from tools.local_hub import LocalHub

    with tempfile.TemporaryDirectory() as root, LocalHub(root, token=TOKEN, user="bench") as hub:
        port = int(hub.endpoint.rsplit(":", 1)[1])
        start = time.perf_counter()
        populate(port, args.files, args.commits)
        print(f"server: {sys.modules['tools.local_hub'].__file__}")
        print(f"populated {args.files} files in {args.commits} commits in {time.perf_counter() - start:.1f} s")
        listings, slowest, entries = measure(port, args.repeats)
    print(f"tree?recursive=true&expand=true ({entries} entries): {spread(listings)}")
    print(f"slowest small fetch during a listing: {spread(slowest)}")


if __name__ == "__main__":
    main()

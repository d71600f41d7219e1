"""How long tools/local_hub/ takes to list a large repository, and whether the listing blocks other requests.

    python -m lab.local_hub_listing                        # this tree's server
    python -m lab.local_hub_listing --hub_tree /tmp/base   # a server from another checkout

A repository of `--files` small files (in folders two deep, added over `--commits` commits) is listed with
`tree/main?recursive=true&expand=true` (what `list_repo_tree(recursive=True, expand=True)` asks), `--repeats`
times. While each listing runs, a second client fetches a small file over and over; the slowest of those fetches
shows whether the listing holds a lock that other requests wait on. Prints the median and spread of each.

    python -m lab.local_hub_listing --scaling 3000 6000 12000 24000

times the same listing in this process (no HTTP) on repositories of those sizes (same history length), the sizes
interleaved within each repeat: how the listing's time grows with the file count.
"""

from __future__ import annotations

import base64
import http.client
import importlib
import importlib.util
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser

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


def scaling(hub, sizes: list[int], commits: int, repeats: int) -> None:
    """The listing alone, in this process, on repositories built in memory: seconds per size, interleaved."""
    Commit, FileEntry, HubApp, Repo, Request = hub.Commit, hub.FileEntry, hub.HubApp, hub.Repo, hub.Request
    git_blob_oid = hub.git_blob_oid
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
        app.repos[("model", f"bench/r{size}")] = Repo(
            "model", f"bench/r{size}", False, "2026-01-01T00:00:00.000Z", {"main": parents[0]}, {}, {}, history
        )
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


def load_hub(tree: str | None):
    """tools.local_hub of this checkout, or (`tree`) of another one: its package, or the older one-file module,
    imported under its own name so that its modules import each other as they do at home."""
    if tree is None:
        return importlib.import_module("tools.local_hub")
    package = Path(tree) / "tools" / "local_hub"
    if package.is_dir():
        spec = importlib.util.spec_from_file_location(
            "tools.local_hub", package / "__init__.py", submodule_search_locations=[str(package)]
        )
    else:
        spec = importlib.util.spec_from_file_location("tools.local_hub", package.with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["tools.local_hub"] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class ListingArguments:
    files: int = 6000
    commits: int = 6
    repeats: int = 5
    hub_tree: str | None = field(
        default=None,
        metadata={
            "help": "a checkout whose tools/local_hub (package, or the older one-file module) to measure (default: this one)"
        },
    )
    scaling: list[int] | None = field(
        default=None, metadata={"help": "file counts to time the listing at, in process"}
    )


def main(argv: list[str] | None = None) -> None:
    (args,) = parser(ListingArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    hub = load_hub(args.hub_tree)
    if args.scaling:
        scaling(hub, args.scaling, args.commits, args.repeats)
        return
    with tempfile.TemporaryDirectory() as root, hub.LocalHub(root, token=TOKEN, user="bench") as server:
        port = int(server.endpoint.rsplit(":", 1)[1])
        start = time.perf_counter()
        populate(port, args.files, args.commits)
        print(f"server: {hub.__file__}")
        print(f"populated {args.files} files in {args.commits} commits in {time.perf_counter() - start:.1f} s")
        listings, slowest, entries = measure(port, args.repeats)
    print(f"tree?recursive=true&expand=true ({entries} entries): {spread(listings)}")
    print(f"slowest small fetch during a listing: {spread(slowest)}")


if __name__ == "__main__":
    main()

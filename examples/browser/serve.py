"""Serve the transformers.js example page, a model folder and the npm package on 127.0.0.1 (loopback only).

    python examples/browser/serve.py MODEL_FOLDER --node_modules PATH [--port 8000]

MODEL_FOLDER is a `minibert export-onnx ... --format transformers.js` output; PATH the `node_modules` folder that
holds `@huggingface/transformers` (`npm install @huggingface/transformers`; `bash .ci/setup dev` puts it in
.ci/node/node_modules). Then open http://127.0.0.1:8000/. The page cannot run from file://: browsers refuse
`fetch` and WebAssembly from file URLs. Python's own `http.server` serves one folder; the page needs three, so
this maps a URL prefix to each (ROUTES).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import posixpath
import urllib.parse
from pathlib import Path

PAGE = Path(__file__).resolve().parent


def routes(model: Path, node_modules: Path) -> dict[str, Path]:
    """URL prefix -> folder. The page loads transformers.js' bundle (which carries onnxruntime-web's JavaScript)
    from /transformers/, onnxruntime-web's WebAssembly from /ort/ (transformers.js would fetch it from a CDN) and
    the model from /model/."""
    return {
        "/model/": model,
        "/transformers/": node_modules / "@huggingface" / "transformers" / "dist",
        "/ort/": node_modules / "onnxruntime-web" / "dist",
        "/": PAGE,
    }


class Handler(http.server.SimpleHTTPRequestHandler):
    # Module scripts and WebAssembly are only run when served with these types.
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".wasm": "application/wasm",
        ".onnx": "application/octet-stream",
    }

    def __init__(self, *args, routes: dict[str, Path], **kwargs):
        self.routes = routes
        super().__init__(*args, **kwargs)

    def translate_path(self, path: str) -> str:
        """The file under the route whose prefix `path` starts with; `..` cannot climb out of it."""
        path = posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(path).path))
        for prefix, folder in self.routes.items():
            if (path + "/").startswith(prefix):
                parts = [p for p in path[len(prefix) :].split("/") if p not in ("", ".", "..")]
                return str(folder.joinpath(*parts))
        return str(PAGE / "missing")

    def log_message(self, format: str, *args) -> None:
        pass  # one line per file is noise here; errors still reach the browser


def make_server(model: Path, node_modules: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1:`port` (0: a free port; read it from `server.server_address`), not yet serving."""
    for folder in (model, node_modules / "@huggingface" / "transformers"):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} does not exist")
    handler = functools.partial(Handler, routes=routes(Path(model), Path(node_modules)))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a folder written by export-onnx --format transformers.js")
    parser.add_argument("--node_modules", type=Path, default=PAGE.parents[1] / ".ci" / "node" / "node_modules")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    try:
        server = make_server(args.model, args.node_modules, args.port)
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    print(f"serving on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

"""Tests for `tools.local_hub`: the real huggingface_hub client against the local server, over HTTP.

These run in this process with an explicit `endpoint=`, which every HfApi call accepts; the two settings
huggingface_hub reads at import (Xet uploads, offline mode) are switched for the duration of each test.
The end-to-end push/pull checks through transformers, in fresh processes, are in test_hub.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading

import httpx2
import pytest
from huggingface_hub import CommitOperationAdd, HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tools.local_hub import DEFAULT_GITATTRIBUTES, LocalHub, git_blob_oid

TOKEN = "hf_localtest_0123456789abcdef"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    # Plain LFS uploads (the server does not speak Xet) and network allowed, whatever the environment says.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)  # no request to huggingface.co
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice", orgs=("team",)) as server:
        yield server


@pytest.fixture
def api(hub):
    return HfApi(endpoint=hub.endpoint, token=TOKEN)


def upload(api: HfApi, repo_id: str, files: dict[str, bytes], revision: str | None = None, message: str = "up"):
    operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=data) for path, data in files.items()]
    return api.create_commit(repo_id, operations=operations, commit_message=message, revision=revision)


def download(hub: LocalHub, tmp_path, repo_id: str, filename: str, **kwargs) -> bytes:
    path = hf_hub_download(
        repo_id, filename, endpoint=hub.endpoint, token=TOKEN, cache_dir=tmp_path / "cache", **kwargs
    )
    with open(path, "rb") as f:
        return f.read()


def test_accounts_and_repository_creation(hub, api):
    assert api.whoami()["name"] == "alice"
    url = api.create_repo("model-a")
    assert url.repo_id == "alice/model-a"
    assert str(url) == f"{hub.endpoint}/alice/model-a"
    # A new repository has the Hub's initial commit with its .gitattributes.
    assert api.list_repo_files("alice/model-a") == [".gitattributes"]
    assert download(hub, hub.root_dir, "alice/model-a", ".gitattributes") == DEFAULT_GITATTRIBUTES.encode()

    with pytest.raises(HfHubHTTPError, match="You already created this model repo") as err:
        api.create_repo("alice/model-a")
    assert err.value.response.status_code == 409
    assert api.create_repo("alice/model-a", exist_ok=True).repo_id == "alice/model-a"
    assert api.create_repo("team/shared").repo_id == "team/shared"  # an organisation alice belongs to
    with pytest.raises(HfHubHTTPError, match="rights to create a model under the namespace 'bob'") as err:
        api.create_repo("bob/model")
    assert err.value.response.status_code == 403

    api.delete_repo("alice/model-a")
    assert not api.repo_exists("alice/model-a")
    with pytest.raises(RepositoryNotFoundError, match="Repository not found: alice/model-a"):
        api.delete_repo("alice/model-a")


def test_tokens_are_checked(hub):
    with pytest.raises(HfHubHTTPError, match="Invalid user token") as err:
        HfApi(endpoint=hub.endpoint, token="hf_wrong").whoami()
    assert err.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError, match="Invalid credentials in Authorization header") as err:
        HfApi(endpoint=hub.endpoint, token="hf_wrong").create_repo("x")
    assert err.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError, match="Authentication required: send a write token") as err:
        HfApi(endpoint=hub.endpoint, token=False).create_repo("x")
    assert err.value.response.status_code == 401


def test_upload_and_download_regular_and_lfs_files(hub, api, tmp_path):
    api.create_repo("alice/files")
    weights = os.urandom(70_000)
    config = b'{"model_type": "minibert"}'
    info = upload(api, "alice/files", {"config.json": config, "model.safetensors": weights, "sub/notes.txt": b"hi"})
    assert info.oid == api.model_info("alice/files").sha

    tree = {f.path: f for f in api.list_repo_tree("alice/files", recursive=True)}
    assert set(tree) == {".gitattributes", "config.json", "model.safetensors", "sub", "sub/notes.txt"}
    assert tree["config.json"].lfs is None and tree["config.json"].blob_id == git_blob_oid(config)
    # *.safetensors goes to LFS (the .gitattributes rule), as on the Hub.
    assert tree["model.safetensors"].lfs.sha256 == hashlib.sha256(weights).hexdigest()
    assert tree["model.safetensors"].size == len(weights)
    assert [f.path for f in api.list_repo_tree("alice/files", path_in_repo="sub")] == ["sub/notes.txt"]
    assert download(hub, tmp_path, "alice/files", "model.safetensors") == weights
    assert download(hub, tmp_path, "alice/files", "sub/notes.txt") == b"hi"

    paths = api.get_paths_info("alice/files", ["config.json", "sub", "missing"], expand=True)
    assert [(p.path, type(p).__name__) for p in paths] == [("config.json", "RepoFile"), ("sub", "RepoFolder")]
    assert paths[0].last_commit.oid == info.oid

    # The headers hf_hub_download relies on, and byte ranges for resumed downloads.
    url = f"{hub.endpoint}/alice/files/resolve/main/model.safetensors"
    head = httpx2.head(url)
    assert head.headers["X-Repo-Commit"] == info.oid
    assert head.headers["X-Linked-Etag"] == f'"{hashlib.sha256(weights).hexdigest()}"'
    assert int(head.headers["X-Linked-Size"]) == len(weights)
    part = httpx2.get(url, headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == weights[100:200]
    assert part.headers["Content-Range"] == f"bytes 100-199/{len(weights)}"
    assert httpx2.get(url, headers={"Range": "bytes=-10"}).content == weights[-10:]
    assert httpx2.get(url, headers={"Range": f"bytes={len(weights)}-"}).status_code == 416


def test_unchanged_files_are_not_committed_again(api):
    api.create_repo("alice/same")
    first = upload(api, "alice/same", {"a.txt": b"a", "w.bin": b"\0" * 100})
    again = upload(api, "alice/same", {"a.txt": b"a", "w.bin": b"\0" * 100})
    # The preupload answer carries each file's remote oid, so the client sees nothing changed.
    assert again.oid == first.oid
    assert len(api.list_repo_commits("alice/same")) == 2


def test_branches_tags_and_commits_pin_revisions(hub, api, tmp_path):
    api.create_repo("alice/revs")
    v1 = upload(api, "alice/revs", {"config.json": b"1"}, message="first")
    api.create_tag("alice/revs", tag="v1")
    api.create_branch("alice/revs", branch="dev")
    dev = upload(api, "alice/revs", {"config.json": b"dev"}, revision="dev", message="on dev")
    v2 = upload(api, "alice/revs", {"config.json": b"2"}, message="second")

    for revision, content in (("main", b"2"), ("dev", b"dev"), ("v1", b"1"), (v1.oid, b"1"), (dev.oid, b"dev")):
        # A cache per revision: a file cached for one ref would be served for a commit id without asking the server.
        assert download(hub, tmp_path / revision, "alice/revs", "config.json", revision=revision) == content
    refs = api.list_repo_refs("alice/revs")
    assert {b.name: b.target_commit for b in refs.branches} == {"main": v2.oid, "dev": dev.oid}
    assert {t.name: t.target_commit for t in refs.tags} == {"v1": v1.oid}
    assert [c.title for c in api.list_repo_commits("alice/revs")] == ["second", "first", "initial commit"]
    assert [c.title for c in api.list_repo_commits("alice/revs", revision="dev")] == [
        "on dev",
        "first",
        "initial commit",
    ]

    with pytest.raises(HfHubHTTPError, match="Reference already exists: branch 'dev'"):
        api.create_branch("alice/revs", branch="dev")
    api.create_branch("alice/revs", branch="dev", exist_ok=True)
    with pytest.raises(HfHubHTTPError, match="Cannot commit to 'v1': it is a tag or a commit, not a branch"):
        upload(api, "alice/revs", {"x": b"x"}, revision="v1")
    # A commit based on an outdated head is refused rather than silently overwriting the newer one.
    with pytest.raises(HfHubHTTPError, match=f"A commit has happened since {v1.oid}") as err:
        api.create_commit(
            "alice/revs", operations=[CommitOperationAdd("x", b"x")], commit_message="m", parent_commit=v1.oid
        )
    assert err.value.response.status_code == 412
    api.delete_branch("alice/revs", branch="dev")
    api.delete_tag("alice/revs", tag="v1")
    assert api.list_repo_refs("alice/revs").tags == []


def test_missing_repo_revision_and_file_raise_the_clients_errors(hub, api, tmp_path):
    api.create_repo("alice/errs")
    with pytest.raises(RepositoryNotFoundError, match="Repository not found: alice/nope"):
        api.model_info("alice/nope")
    with pytest.raises(RepositoryNotFoundError, match="Repository not found: alice/nope"):
        download(hub, tmp_path, "alice/nope", "config.json")
    with pytest.raises(RevisionNotFoundError, match="Invalid rev id: nope"):
        download(hub, tmp_path, "alice/errs", "config.json", revision="nope")
    with pytest.raises(RevisionNotFoundError, match="Invalid rev id: nope"):
        api.list_repo_files("alice/errs", revision="nope")
    with pytest.raises(EntryNotFoundError, match="Entry not found: config.json does not exist at revision main"):
        download(hub, tmp_path, "alice/errs", "config.json")
    with pytest.raises(EntryNotFoundError, match="a file with this name doesn't exist|Entry not found: gone.txt"):
        api.delete_file("gone.txt", "alice/errs")
    # Nothing half-downloaded is left in the cache.
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.name.endswith(".incomplete")]


def test_private_repositories_are_hidden_from_others(hub, api, tmp_path):
    api.create_repo("alice/secret", private=True)
    upload(api, "alice/secret", {"config.json": b"{}"})
    assert api.model_info("alice/secret").private is True
    anonymous = HfApi(endpoint=hub.endpoint, token=False)
    with pytest.raises(RepositoryNotFoundError, match="Repository not found: alice/secret"):
        anonymous.model_info("alice/secret")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("alice/secret", "config.json", endpoint=hub.endpoint, token=False, cache_dir=tmp_path / "c")
    assert download(hub, tmp_path, "alice/secret", "config.json") == b"{}"


def test_card_metadata_is_validated_and_served(api):
    api.create_repo("alice/card")
    with pytest.raises(ValueError, match="Invalid metadata in README.md.\n- Invalid YAML in the card metadata"):
        upload(api, "alice/card", {"README.md": b"---\nlicense: [unclosed\n---\n# card\n"})
    card = (
        b"---\nlicense: apache-2.0\nlibrary_name: transformers\npipeline_tag: fill-mask\ntags:\n- minibert\n---\n# x\n"
    )
    upload(api, "alice/card", {"README.md": card})
    info = api.model_info("alice/card")
    assert (info.pipeline_tag, info.library_name, info.tags) == ("fill-mask", "transformers", ["minibert"])
    assert info.card_data.license == "apache-2.0"


def test_lfs_uploads_are_checked(hub, api):
    api.create_repo("alice/lfs")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    data = b"weights" * 100
    oid = hashlib.sha256(data).hexdigest()
    batch = httpx2.post(
        f"{hub.endpoint}/alice/lfs.git/info/lfs/objects/batch",
        json={"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]},
        headers=headers,
    ).json()
    href = batch["objects"][0]["actions"]["upload"]["href"]
    wrong = httpx2.put(href, content=b"tampered")
    assert wrong.status_code == 400 and "expected " + oid in wrong.json()["error"]
    # A commit may not point at an LFS object that never arrived.
    commit = (
        json.dumps({"key": "header", "value": {"summary": "s"}})
        + "\n"
        + json.dumps(
            {"key": "lfsFile", "value": {"path": "w.safetensors", "algo": "sha256", "oid": oid, "size": len(data)}}
        )
    )
    refused = httpx2.post(f"{hub.endpoint}/api/models/alice/lfs/commit/main", content=commit, headers=headers)
    assert refused.status_code == 422 and "was never uploaded" in refused.json()["error"]
    assert httpx2.put(href, content=data[:-1]).status_code == 400  # a short upload
    assert httpx2.put(href, content=data).status_code == 200
    assert httpx2.put(href, content=data).status_code == 403  # the upload URL works once
    # Uploads stream to a file beside the store; refused ones leave nothing behind.
    assert sorted(p.name for p in (hub.root_dir / "lfs").iterdir()) == [oid]
    assert httpx2.post(f"{hub.endpoint}/api/models/alice/lfs/commit/main", content=commit, headers=headers).is_success
    assert hub.repo_files("alice/lfs")["w.safetensors"] == data


def test_xet_clients_get_told_to_disable_xet(hub, api):
    api.create_repo("alice/xet")
    answer = httpx2.get(
        f"{hub.endpoint}/api/models/alice/xet/xet-write-token/main", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 501 and "set HF_HUB_DISABLE_XET=1" in answer.json()["error"]


def test_concurrent_commits_all_land(api):
    # Trainer pushes from a background thread while the main thread saves: the server must serialise commits.
    api.create_repo("alice/busy")
    errors: list[BaseException] = []

    def commit(i: int) -> None:
        try:
            upload(
                api, "alice/busy", {f"file{i}.txt": str(i).encode(), f"w{i}.bin": bytes([i]) * 2000}, message=f"c{i}"
            )
        except BaseException as err:  # collected: an exception in a thread would otherwise be lost
            errors.append(err)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    titles = [c.title for c in api.list_repo_commits("alice/busy")]
    assert sorted(titles[:-1]) == [f"c{i}" for i in range(8)] and titles[-1] == "initial commit"
    files = api.list_repo_files("alice/busy")
    assert all(f"file{i}.txt" in files and f"w{i}.bin" in files for i in range(8))


def test_repositories_survive_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice") as first:
        api = HfApi(endpoint=first.endpoint, token=TOKEN)
        api.create_repo("alice/kept")
        sha = upload(api, "alice/kept", {"model.safetensors": b"\1" * 500, "config.json": b"{}"}).oid
        api.create_tag("alice/kept", tag="v1")
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice") as second:
        api = HfApi(endpoint=second.endpoint, token=TOKEN)
        assert api.model_info("alice/kept", revision="v1").sha == sha
        assert second.repo_files("alice/kept")["model.safetensors"] == b"\1" * 500


def test_server_logs_never_contain_the_token(hub, api, caplog):
    with caplog.at_level(logging.DEBUG):
        api.create_repo("alice/logged")
        upload(api, "alice/logged", {"model.safetensors": b"\2" * 300})
        with pytest.raises(HfHubHTTPError):
            HfApi(endpoint=hub.endpoint, token=TOKEN + "x").create_repo("y")
    assert "local hub: " in caplog.text  # request lines are logged...
    assert TOKEN not in caplog.text  # ...never a header


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="Invalid user name 'a b'"):
        LocalHub(tmp_path, user="a b")
    with pytest.raises(RuntimeError, match="LocalHub is not running"):
        LocalHub(tmp_path).endpoint


def test_configure_clients_points_this_process_here_and_back(hub, tmp_path):
    # For notebooks that imported transformers before starting the hub: module-level functions, no endpoint=.
    import huggingface_hub

    before = (constants.ENDPOINT, os.environ.get("HF_ENDPOINT"), os.environ.get("HF_TOKEN"))
    hub.configure_clients()
    assert os.environ["HF_ENDPOINT"] == hub.endpoint and os.environ["HF_TOKEN"] == TOKEN
    huggingface_hub.create_repo("configured")
    huggingface_hub.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="alice/configured")
    assert open(huggingface_hub.hf_hub_download("alice/configured", "config.json", cache_dir=tmp_path)).read() == "{}"
    hub.stop()
    assert (constants.ENDPOINT, os.environ.get("HF_ENDPOINT"), os.environ.get("HF_TOKEN")) == before
    assert huggingface_hub.hf_api.api.endpoint == constants.ENDPOINT


def test_tree_listing_gives_each_file_and_folder_its_last_commit(api):
    # The listing walks the history once for every path at once; each item's lastCommit is the commit since
    # which the file (or anything in the folder) is unchanged, as the Hub reports it.
    api.create_repo("alice/history")
    first = upload(api, "alice/history", {"a.txt": b"a", "sub/x.txt": b"x", "sub/deep/y.txt": b"y"}, message="first")
    second = upload(api, "alice/history", {"b.txt": b"b"}, message="second")
    third = upload(api, "alice/history", {"sub/deep/y.txt": b"y2"}, message="third")
    upload(api, "alice/history", {"a.txt": b"a"}, message="unchanged")  # the same bytes: no commit
    tree = {item.path: item for item in api.list_repo_tree("alice/history", recursive=True, expand=True)}
    last = {path: item.last_commit.oid for path, item in tree.items()}
    initial = api.list_repo_commits("alice/history")[-1].commit_id
    assert last == {
        ".gitattributes": initial,
        "a.txt": first.oid,
        "b.txt": second.oid,
        "sub": third.oid,
        "sub/x.txt": first.oid,
        "sub/deep": third.oid,
        "sub/deep/y.txt": third.oid,
    }
    assert tree["sub/deep"].tree_id != tree["sub"].tree_id
    paths = api.get_paths_info("alice/history", ["sub/x.txt", "sub", "missing"], expand=True)
    assert [(p.path, p.last_commit.oid) for p in paths] == [("sub/x.txt", first.oid), ("sub", third.oid)]

#!/usr/bin/env python3
"""A fake GitLab for scripts/ci-local-check: REST API v4 and the generic
package registry, on 127.0.0.1, standard library only.

The repository endpoints answer from a real git repository (--repo), so heads
and blob ids are the ones git sees; every JSON body is a copy of a fixture in
fixtures/gitlab/ (shaped after GitLab's documented bodies) with the values
filled in. The generic package registry keeps each uploaded file under
--store and serves the newest upload of a name; it wants a JOB-TOKEN header.
A scenario switches GitLab's behaviours on in --store/settings.json:
`reject_duplicates` answers a second upload of a file name with GitLab's
400 "Duplicate package is not allowed" (the group setting "Do not allow
duplicates"), and the project's packages can then be listed and deleted
with the job token, as GitLab allows; `redirect` answers a download with a
302 to an object-storage address that refuses a JOB-TOKEN header; and
`fail_put` answers every upload with the given status and body, and
`fail_delete` every package deletion (a job token without the Maintainer
role).
The group `fleet` (`GET /groups/fleet/projects`, one page) holds the
projects `fleet/p1` to `fleet/p6`, ids 2001 to 2006, each served from the
same repository, for the fleet component.
Every request is appended to --log as one JSON line (method, path, status),
so a scenario can count what a job asked for.

Usage: fake_gitlab.py --repo DIR --store DIR --log FILE --port-file FILE
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gitlab"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
LOCK = threading.Lock()
# The group the fleet component ticks: id -> path with namespace.
FLEET_GROUP = "fleet"
FLEET_PROJECTS = {str(2000 + i): f"fleet/p{i}" for i in range(1, 7)}


def fixture(name: str):
    return json.loads((FIXTURES / name).read_text())


def error_body(name: str) -> bytes:
    return (FIXTURES / "errors" / name).read_bytes()


class Git:
    def __init__(self, repo: str):
        self.repo = repo

    def run(self, *args: str) -> str | None:
        done = subprocess.run(
            ["git", "-C", self.repo, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout if done.returncode == 0 else None

    def resolve(self, rev: str) -> str | None:
        out = self.run("rev-parse", "--verify", "--quiet", rev + "^{commit}")
        return out.strip() if out else None

    def log(self, rev: str, path: str | None, n: int) -> list[dict] | None:
        sha = self.resolve(rev)
        if sha is None:
            return None
        fmt = "%H%x1f%P%x1f%an%x1f%ae%x1f%cI%x1f%s%x1e"
        args = ["log", f"-{n}", f"--format={fmt}", sha]
        if path:
            args += ["--", path]
        out = self.run(*args) or ""
        commits = []
        for rec in out.split("\x1e"):
            rec = rec.strip("\n")
            if not rec:
                continue
            sha, parents, an, ae, date, subject = rec.split("\x1f")
            commits.append(
                {
                    "id": sha,
                    "parents": parents.split(),
                    "author_name": an,
                    "author_email": ae,
                    "date": date,
                    "title": subject,
                }
            )
        return commits


def commit_json(c: dict, origin: str) -> dict:
    body = fixture("commits.json")[0]
    body.update(
        id=c["id"],
        short_id=c["id"][:11],
        title=c["title"],
        message=c["title"],
        author_name=c["author_name"],
        author_email=c["author_email"],
        authored_date=c["date"],
        committed_date=c["date"],
        created_at=c["date"],
        parent_ids=c["parents"],
        web_url=f"{origin}/group/project/-/commit/{c['id']}",
    )
    return body


class Handler(BaseHTTPRequestHandler):
    server_version = "fake-gitlab"
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args):
        pass

    # -- plumbing ---------------------------------------------------------

    def reply(self, status: int, body: bytes, ctype="application/json", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        with LOCK, open(self.server.log_path, "a") as log:
            log.write(
                json.dumps(
                    {"method": self.command, "path": self.path.split("?")[0], "status": status}
                )
                + "\n"
            )

    def json(self, status: int, value, headers=None):
        self.reply(status, json.dumps(value).encode(), headers=headers)

    def segments(self) -> list[str]:
        raw = urllib.parse.urlsplit(self.path).path
        return [urllib.parse.unquote(s) for s in raw.strip("/").split("/")]

    def params(self) -> dict:
        q = urllib.parse.urlsplit(self.path).query
        return {k: v[0] for k, v in urllib.parse.parse_qs(q).items()}

    # -- the package registry --------------------------------------------

    def package_file(self, seg: list[str]) -> Path | None:
        # api v4 projects :id packages generic :name :version :file
        if len(seg) != 9 or seg[4:6] != ["packages", "generic"]:
            return None
        if any(s in ("", ".", "..") or "/" in s for s in seg[6:]):
            return None
        project = urllib.parse.quote(seg[3], safe="")
        return Path(self.server.store, project, seg[6], seg[7], seg[8])

    def settings(self) -> dict:
        try:
            return json.loads(Path(self.server.store, "settings.json").read_text())
        except (OSError, ValueError):
            return {}

    def object_storage(self, seg: list[str]) -> bool:
        # /object-storage/<project>/<name>/<version>/<file>: a presigned
        # address; a JOB-TOKEN header here would be a leaked token.
        if seg[:1] != ["object-storage"] or len(seg) != 5:
            return False
        if self.headers.get("JOB-TOKEN"):
            self.reply(403, b"<Error><Code>AccessDenied</Code></Error>", ctype="application/xml")
            return True
        target = Path(self.server.store, *seg[1:])
        if target.is_file():
            self.reply(200, target.read_bytes(), ctype="application/octet-stream")
        else:
            self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>", ctype="application/xml")
        return True

    def packages_api(self, seg: list[str]) -> bool:
        # GET /projects/:id/packages?package_name=N and
        # DELETE /projects/:id/packages/:package_id, with the job token.
        if seg[:3] != ["api", "v4", "projects"] or len(seg) not in (5, 6) or seg[4] != "packages":
            return False
        if not self.headers.get("JOB-TOKEN"):
            self.reply(401, error_body("401.json"))
            return True
        root = Path(self.server.store, urllib.parse.quote(seg[3], safe=""))
        packages = sorted(p for p in root.glob("*/*") if p.is_dir()) if root.is_dir() else []
        ids = {str(1000 + i): p for i, p in enumerate(packages)}
        if self.command == "GET" and len(seg) == 5:
            wanted = self.params().get("package_name", "")
            body = fixture("package.json")
            listing = []
            for pid, p in ids.items():
                if wanted in p.parent.name:
                    entry = dict(body)
                    entry.update(id=int(pid), name=p.parent.name, version=p.name)
                    listing.append(entry)
            self.json(200, listing)
        elif self.command == "DELETE" and len(seg) == 6 and self.settings().get("fail_delete"):
            status, body = self.settings()["fail_delete"]
            self.json(status, body)
        elif self.command == "DELETE" and len(seg) == 6 and seg[5] in ids:
            import shutil

            shutil.rmtree(ids[seg[5]])
            self.reply(204, b"")
        else:
            self.reply(404, error_body("404-route.json"))
        return True

    def registry(self, seg: list[str]) -> bool:
        target = self.package_file(seg)
        if target is None:
            return False
        if not self.headers.get("JOB-TOKEN"):
            self.reply(401, error_body("401.json"))
            return True
        settings = self.settings()
        if self.command == "PUT":
            length = int(self.headers.get("Content-Length", "0"))
            data = self.rfile.read(length)
            if settings.get("fail_put"):
                status, body = settings["fail_put"]
                self.json(status, body)
                return True
            if settings.get("reject_duplicates") and target.is_file():
                self.reply(400, error_body("400-duplicate-package.json"))
                return True
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(target.suffix + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            self.json(201, {"message": "201 Created"})
        elif target.is_file() and settings.get("redirect"):
            rel = target.relative_to(self.server.store)
            origin = f"http://127.0.0.1:{self.server.server_port}"
            self.reply(302, b"", headers={"Location": f"{origin}/object-storage/{rel.as_posix()}"})
        elif target.is_file():
            self.reply(200, target.read_bytes(), ctype="application/octet-stream")
        else:
            self.reply(404, error_body("404-file.json"))
        return True

    # -- the repository ---------------------------------------------------

    def do_PUT(self):
        if not self.registry(self.segments()):
            self.reply(404, error_body("404-route.json"))

    def do_DELETE(self):
        if not self.packages_api(self.segments()):
            self.reply(404, error_body("404-route.json"))

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        seg = self.segments()
        if self.registry(seg) or self.object_storage(seg) or self.packages_api(seg):
            return
        if seg[:3] not in (["api", "v4", "projects"], ["api", "v4", "groups"]) or len(seg) < 4:
            self.reply(404, error_body("404-route.json"))
            return
        token = self.headers.get("PRIVATE-TOKEN") or (
            self.headers.get("Authorization", "").removeprefix("Bearer ")
        )
        if token != self.server.token:
            self.reply(401, error_body("401.json"))
            return
        if seg[2] == "groups":
            self.group(seg)
            return
        if seg[3] not in ("group/project", "42", self.server.project, *FLEET_PROJECTS):
            self.reply(404, error_body("404-project.json"))
            return
        rest = seg[4:]
        p = self.params()
        git: Git = self.server.git
        origin = f"http://127.0.0.1:{self.server.server_port}"
        if rest == []:
            body = fixture("project.json")
            body["web_url"] = f"{origin}/group/project"
            self.json(200, body)
        elif rest == ["repository", "commits"]:
            path = p.get("path", "").strip("/") or None
            commits = git.log(p.get("ref_name", "main"), path, int(p.get("per_page", "20")))
            if commits is None:
                self.reply(404, error_body("404-ref.json"))
            else:
                self.json(200, [commit_json(c, origin) for c in commits])
        elif len(rest) == 3 and rest[:2] == ["repository", "commits"]:
            commits = git.log(rest[2], None, 1)
            if not commits:
                self.reply(404, error_body("404-commit.json"))
            else:
                self.json(200, commit_json(commits[0], origin))
        elif rest == ["repository", "tree"]:
            self.tree(git, p)
        elif len(rest) == 4 and rest[0] == "repository" and rest[1] == "blobs" and rest[3] == "raw":
            out = subprocess.run(
                ["git", "-C", git.repo, "cat-file", "blob", rest[2]], capture_output=True
            )
            if out.returncode != 0:
                self.reply(404, error_body("404-blob.json"))
            else:
                self.reply(200, out.stdout, ctype="text/plain")
        elif len(rest) == 4 and rest[:2] == ["repository", "files"] and rest[3] == "raw":
            sha = git.resolve(p.get("ref", "main"))
            out = subprocess.run(
                ["git", "-C", git.repo, "show", f"{sha}:{rest[2]}"], capture_output=True
            )
            if sha is None or out.returncode != 0:
                self.reply(404, error_body("404-file.json"))
            else:
                self.reply(200, out.stdout, ctype="text/plain")
        elif rest == ["repository", "compare"]:
            self.compare(git, p, origin)
        else:
            self.reply(404, error_body("404-route.json"))

    def group(self, seg: list[str]):
        # GET /groups/:id/projects: one page, no Link header (the last page).
        if seg[3] != FLEET_GROUP or seg[4:] != ["projects"]:
            self.reply(404, error_body("404-route.json"))
            return
        origin = f"http://127.0.0.1:{self.server.server_port}"
        listing = []
        for pid, path in FLEET_PROJECTS.items():
            body = fixture("project.json")
            body.update(
                id=int(pid),
                name=path.rsplit("/", 1)[-1],
                path=path.rsplit("/", 1)[-1],
                path_with_namespace=path,
                web_url=f"{origin}/{path}",
            )
            listing.append(body)
        self.json(200, listing)

    def tree(self, git: Git, p: dict):
        sha = git.resolve(p.get("ref", "main"))
        path = p.get("path", "").strip("/")
        args = ["ls-tree", "-r" if p.get("recursive") == "true" else "--full-tree", sha or ""]
        if path:
            args += ["--", path + "/"]
        out = git.run(*args) if sha else None
        if out is None or (path and not out):
            self.reply(404, error_body("404-tree.json"))
            return
        template = fixture("tree-page.json")[0]
        entries = []
        for line in out.splitlines():
            meta, name = line.split("\t", 1)
            mode, kind, oid = meta.split()
            e = dict(template)
            e.update(id=oid, name=name.rsplit("/", 1)[-1], type=kind, path=name, mode=mode)
            entries.append(e)
        # One page: the repositories of the scenarios are small.
        assert len(entries) <= int(p.get("per_page", "20")), "more entries than one page"
        self.json(200, entries)

    def compare(self, git: Git, p: dict, origin: str):
        frm, to = git.resolve(p.get("from", "")), git.resolve(p.get("to", ""))
        if frm is None or to is None:
            self.reply(404, error_body("404-ref.json"))
            return
        body = fixture("compare.json")
        commits = git.log(f"{frm}..{to}", None, 1000) or []
        tip = commits[0] if commits else (git.log(to, None, 1) or [None])[0]
        c_tpl = body["commits"][0]

        def short(c):
            d = dict(c_tpl)
            d.update(
                id=c["id"],
                short_id=c["id"][:11],
                title=c["title"],
                author_name=c["author_name"],
                author_email=c["author_email"],
                created_at=c["date"],
            )
            return d

        d_tpl = body["diffs"][0]
        diffs = []
        for line in (git.run("diff-tree", "-r", "--no-renames", frm, to) or "").splitlines():
            meta, name = line.split("\t", 1)
            old_mode, new_mode, _, _, status = meta.lstrip(":").split()
            d = dict(d_tpl)
            d.update(
                old_path=name,
                new_path=name,
                a_mode=old_mode,
                b_mode=new_mode,
                diff="",
                new_file=status == "A",
                deleted_file=status == "D",
                renamed_file=False,
            )
            diffs.append(d)
        body.update(
            commit=short(tip) if tip else None,
            commits=[short(c) for c in commits],
            diffs=diffs,
            compare_timeout=False,
            compare_same_ref=frm == to,
            web_url=f"{origin}/group/project/-/compare/{frm[:8]}...{to[:8]}",
        )
        self.json(200, body)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--token", default="glpat-ci-local-0001")
    ap.add_argument("--project", default="1217")
    a = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.git = Git(a.repo)
    server.store = a.store
    server.log_path = a.log
    server.token = a.token
    server.project = a.project
    Path(a.port_file).write_text(str(server.server_port))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

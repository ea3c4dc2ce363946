#!/usr/bin/env python3
# A local stand-in for the Hugging Face Hub that tests start on 127.0.0.1: it serves repos from a
# folder (ROOT/ORG/NAME/...) the way the Hub does, with switches that inject faults. Standard
# library only. Add a fault = one more argument and one check in send_body/handle_resolve.
#
# Routes (as on huggingface.co):
#   HEAD|GET /ORG/NAME/resolve/REV/PATH  small files: 200 + ETag (git blob sha1); LFS files: 302 to
#            /cdn/SHA256 with X-Linked-Etag (sha256) and X-Linked-Size. Both carry X-Repo-Commit.
#   HEAD|GET /cdn/SHA256                  the bytes, with Range support
#   GET /api/models/ORG/NAME[/revision/REV]   {"id", "sha", "siblings": [{"rfilename"}]}
# Faults (KEY is a repo-relative file name, or "api" for the listing):
#   --drop KEY=N       cut the connection mid-body N times (each time after part of the rest)
#   --corrupt KEY      serve the file with one byte changed (metadata still announces the truth)
#   --fail500 KEY=N    answer 500 to the first N requests that touch KEY
#   --slow BYTES_PER_S throttle every body
#   --gated REPO=TOKEN 401 unless "Authorization: Bearer TOKEN"
#   --ignore-range     answer 200 with the whole file even when a Range was asked
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_THRESHOLD = 64 * 1024
CHUNK = 16 * 1024


class Hub:
    def __init__(self, args):
        self.root = os.path.abspath(args.root)
        self.lock = threading.Lock()
        self.log_path = args.log
        self.drops = dict(self._pairs(args.drop))
        self.fail500 = dict(self._pairs(args.fail500))
        self.corrupt = set(args.corrupt or [])
        self.slow = args.slow
        self.ignore_range = args.ignore_range
        self.gated = {k: v for k, v in (p.split("=", 1) for p in (args.gated or []))}
        self.commits = {k: v for k, v in (p.split("=", 1) for p in (args.repo_commit or []))}
        self.repos = {}   # repo id -> {rel path: info}
        self.by_sha = {}  # sha256 -> (repo, rel path)
        for org in sorted(os.listdir(self.root)):
            for name in sorted(os.listdir(os.path.join(self.root, org))):
                repo = org + "/" + name
                base = os.path.join(self.root, org, name)
                files = {}
                for dirpath, _, names in os.walk(base):
                    for n in names:
                        full = os.path.join(dirpath, n)
                        rel = os.path.relpath(full, base)
                        data = open(full, "rb").read()
                        info = {
                            "path": full,
                            "size": len(data),
                            "sha256": hashlib.sha256(data).hexdigest(),
                            "git": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
                            "lfs": len(data) >= LFS_THRESHOLD,
                        }
                        files[rel] = info
                        self.by_sha[info["sha256"]] = (repo, rel)
                self.repos[repo] = files
                self.commits.setdefault(repo, hashlib.sha1(("commit:" + repo).encode()).hexdigest())

    @staticmethod
    def _pairs(items):
        for p in items or []:
            k, v = p.rsplit("=", 1)
            yield k, int(v)

    def take(self, table, key):
        with self.lock:
            if table.get(key, 0) > 0:
                table[key] -= 1
                return True
            return False

    def log(self, line):
        if not self.log_path:
            return
        with self.lock:
            with open(self.log_path, "a") as f:
                f.write(line + "\n")

    def content(self, rel, info):
        data = open(info["path"], "rb").read()
        if rel in self.corrupt and data:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
        return data


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None  # set in main

    def log_message(self, fmt, *args):  # keep test output clean; the --log file has the story
        pass

    def do_HEAD(self):
        self.route(head=True)

    def do_GET(self):
        self.route(head=False)

    def reply(self, status, headers=None, body=b"", head=False):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        self.close_connection = True
        self.hub.log("%s %s %d %s" % (self.command, self.path, status, self.headers.get("Range", "-")))

    def error(self, status, code, message, head):
        self.reply(status, {"X-Error-Code": code, "X-Error-Message": message,
                            "Content-Type": "application/json"},
                   json.dumps({"error": message}).encode(), head)

    def authorized(self, repo, head):
        token = self.hub.gated.get(repo)
        if token is None or self.headers.get("Authorization") == "Bearer " + token:
            return True
        self.error(401, "GatedRepo", "Access to model %s is restricted." % repo, head)
        return False

    def route(self, head):
        path = unquote(urlsplit(self.path).path)
        parts = path.strip("/").split("/")
        if len(parts) >= 3 and parts[0] == "api" and parts[1] == "models":
            return self.handle_api(parts[2:], head)
        if len(parts) == 2 and parts[0] == "cdn":
            return self.handle_cdn(parts[1], head)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.handle_resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), head)
        self.error(404, "RepoNotFound", "not found", head)

    def resolve_revision(self, repo, rev, head):
        """The commit `rev` names in `repo`, or None once an error reply has been sent."""
        if repo not in self.hub.repos:
            self.error(404, "RepoNotFound", "Repository not found", head)
            return None
        if not self.authorized(repo, head):
            return None
        commit = self.hub.commits[repo]
        if rev not in ("main", commit):
            self.error(404, "RevisionNotFound", "Invalid rev id: " + rev, head)
            return None
        return commit

    def handle_api(self, rest, head):
        if self.hub.take(self.hub.fail500, "api"):
            return self.reply(500, body=b"injected failure", head=head)
        repo = "/".join(rest[:2])
        rev = rest[3] if len(rest) >= 4 and rest[2] == "revision" else "main"
        commit = self.resolve_revision(repo, rev, head)
        if commit is None:
            return
        body = json.dumps({"id": repo, "modelId": repo, "sha": commit,
                           "siblings": [{"rfilename": r} for r in sorted(self.hub.repos[repo])]})
        self.reply(200, {"Content-Type": "application/json"}, body.encode(), head)

    def handle_resolve(self, repo, rev, rel, head):
        commit = self.resolve_revision(repo, rev, head)
        if commit is None:
            return
        info = self.hub.repos[repo].get(rel)
        if info is None:
            return self.error(404, "EntryNotFound", "Entry not found", head)
        if self.hub.take(self.hub.fail500, rel):
            return self.reply(500, body=b"injected failure", head=head)
        if info["lfs"]:
            host = "http://%s:%d" % self.server.server_address[:2]
            return self.reply(302, {"Location": host + "/cdn/" + info["sha256"],
                                    "X-Repo-Commit": commit,
                                    "X-Linked-Etag": '"%s"' % info["sha256"],
                                    "X-Linked-Size": str(info["size"]),
                                    "ETag": '"%s"' % info["git"]}, head=head)
        self.send_file(rel, info, {"X-Repo-Commit": commit, "ETag": '"%s"' % info["git"]}, head)

    def handle_cdn(self, sha, head):
        found = self.hub.by_sha.get(sha)
        if found is None:
            return self.error(404, "EntryNotFound", "no such object", head)
        repo, rel = found
        if self.hub.take(self.hub.fail500, rel):
            return self.reply(500, body=b"injected failure", head=head)
        self.send_file(rel, self.hub.repos[repo][rel], {"ETag": '"%s"' % sha}, head)

    def send_file(self, rel, info, headers, head):
        data = self.hub.content(rel, info)
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and not self.hub.ignore_range and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                return self.reply(416, {"Content-Range": "bytes */%d" % len(data)}, head=head)
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if head:
            self.hub.log("HEAD %s %d %s" % (self.path, status, rng or "-"))
            return
        limit = len(body)
        drop = len(body) > 1 and self.hub.take(self.hub.drops, rel)
        if drop:
            with self.hub.lock:
                left = self.hub.drops.get(rel, 0)
            limit = max(1, len(body) // (left + 2))
        sent = 0
        try:
            while sent < limit:
                piece = body[sent:min(limit, sent + CHUNK)]
                self.wfile.write(piece)
                sent += len(piece)
                if self.hub.slow:
                    self.wfile.flush()
                    time.sleep(len(piece) / self.hub.slow)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.hub.log("GET %s %d %s sent=%d%s" % (self.path, status, rng or "-", sent,
                                                 " dropped" if drop else ""))
        if drop:
            # Abort without completing the body: the client sees a short transfer.
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    ap.add_argument("--drop", action="append")
    ap.add_argument("--fail500", action="append")
    ap.add_argument("--corrupt", action="append")
    ap.add_argument("--slow", type=float, default=0)
    ap.add_argument("--gated", action="append")
    ap.add_argument("--repo-commit", action="append")
    ap.add_argument("--ignore-range", action="store_true")
    args = ap.parse_args()
    Handler.hub = Hub(args)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A throwaway real S3 server: Ceph RADOS Gateway (one mon + one memstore OSD + radosgw) on 127.0.0.1.

Everything lives in one private directory (config, mon store, logs, pid files) with its own cluster name,
fsid and free ports, so several runs on one machine never collide. No cephx: ``auth_*_required = none``
and, just as important, ``ms_mon_client_mode = crc`` / ``ms_client_mode = crc`` (otherwise msgr2 insists on
"secure" mode, which needs cephx keys, and radosgw loops on auth error -13). Objects live in the OSD's
memory (``memstore``), so stopping the daemons frees everything.

Needs root (or at least permission to run the Ceph daemons) and the Debian packages
``ceph-mon ceph-osd radosgw``. Starting takes ~10-15 s.

From Python::

    server = S3Server.start()          # raises S3ServerError with the log tail if it cannot start
    server.endpoint_url, server.access_key, server.secret_key
    server.stop()

From a shell (prints ``export AWS_...`` lines to eval; state is kept in the directory)::

    eval "$(python -m tests.support.s3server start --dir /tmp/paravt-s3)"
    python -m tests.support.s3server stop --dir /tmp/paravt-s3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.ports import free_port

STATE_FILE = "server.json"
RGW_NAME = "client.rgw.paravt"
REQUIRED_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool")


class S3ServerError(RuntimeError):
    """The server could not be started; the message carries the reason and the daemon log tail."""


def ceph_conf(root: Path, cluster: str, fsid: str, mon_port: int, rgw_port: int) -> str:
    """The whole cluster configuration; every path points inside ``root``."""
    return f"""[global]
fsid = {fsid}
mon_host = v2:127.0.0.1:{mon_port}
public_addr = 127.0.0.1
ms_bind_msgr1 = false
ms_bind_ipv6 = false
# no cephx at all; the crc modes are required too, or msgr2 demands "secure" mode (which needs keys)
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
ms_client_mode = crc
ms_mon_cluster_mode = crc
ms_mon_service_mode = crc
ms_cluster_mode = crc
ms_service_mode = crc
# one OSD holds every replica; place pgs across OSDs, not hosts
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
run_dir = {root}/run
crash_dir = {root}/crash
admin_socket = {root}/run/$cluster-$name.asok
pid_file = {root}/run/$cluster-$name.pid
log_file = {root}/log/$cluster-$name.log
log_to_stderr = false
err_to_stderr = true
keyring = /dev/null

[mon]
mon_data = {root}/mon/$cluster-$id
mon_allow_pool_delete = true
mon_cluster_log_file = {root}/log/$cluster-cluster.log

[osd]
osd_data = {root}/osd/$cluster-$id
osd_objectstore = memstore
memstore_device_bytes = 4294967296
osd_crush_update_on_start = true

[{RGW_NAME}]
rgw_frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw_data = {root}/rgw
rgw_thread_pool_size = 64
rgw_enable_usage_log = false
"""


@dataclass
class S3Server:
    """A running cluster: where it lives, how to reach it, and the daemon pids to kill."""

    root: str
    cluster: str
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    pids: dict[str, int] = field(default_factory=dict)

    def __repr__(self) -> str:  # never show the secret key
        return f"S3Server(endpoint_url={self.endpoint_url!r}, root={self.root!r}, pids={self.pids})"

    # ---------------------------------------------------------------- start / stop

    @classmethod
    def start(
        cls, root: str | os.PathLike[str] | None = None, timeout: float = 90.0, owner_pid: int | None = None
    ) -> S3Server:
        """Bootstrap a fresh cluster in ``root`` (a new temp dir when None) and return once S3 answers.

        With ``owner_pid``, a small watchdog process stops the cluster when that process dies, so a killed
        test run never leaves daemons behind.
        """
        missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
        if missing:
            raise S3ServerError(
                f"Ceph binaries not found: {', '.join(missing)}; install the Debian packages "
                "ceph-mon ceph-osd radosgw (scripts/setup.sh does)"
            )
        base = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="paravt-s3-"))
        base.mkdir(parents=True, exist_ok=True)
        if (base / STATE_FILE).exists():
            raise S3ServerError(f"{base} already holds a server ({STATE_FILE}); stop it first")
        if any(base.iterdir()):
            raise S3ServerError(f"{base} is not empty (left over from an earlier run?); remove it first")
        for sub in ("run", "log", "crash", "mon", "osd", "rgw"):
            (base / sub).mkdir(exist_ok=True)
        # short unique names: admin socket paths must stay under the 107-byte unix socket limit
        server = cls(
            root=str(base),
            cluster="pvt" + secrets.token_hex(3),
            endpoint_url="",
            access_key="PARAVT" + secrets.token_hex(7).upper(),
            secret_key=secrets.token_urlsafe(30),
        )
        try:
            server._bootstrap(timeout)
        except BaseException as exc:
            tail = server.log_tail()
            server.stop(remove=False)
            raise S3ServerError(
                f"radosgw test server did not start: {exc}\n(cluster directory kept for inspection: {base})\n{tail}"
            ) from exc
        server._save()
        if owner_pid is not None:
            server._spawn_watchdog(owner_pid)
        return server

    def _spawn_watchdog(self, owner_pid: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "tests.support.s3server",
            "watch",
            "--dir",
            self.root,
            "--pid",
            str(owner_pid),
        ]
        repo = str(ROOT)
        env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
        subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, env=env, cwd=repo)  # fmt: skip

    def _bootstrap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        base = Path(self.root)
        mon_port, rgw_port = free_port(), free_port()
        while rgw_port == mon_port:
            rgw_port = free_port()
        fsid = str(uuid.uuid4())
        self.endpoint_url = f"http://127.0.0.1:{rgw_port}"
        (base / "ceph.conf").write_text(ceph_conf(base, self.cluster, fsid, mon_port, rgw_port))

        monmap = base / "monmap"
        self._run(["monmaptool", "--create", "--fsid", fsid, "--addv", "a", f"[v2:127.0.0.1:{mon_port}]",
                   str(monmap)])  # fmt: skip
        self._run(["ceph-mon", *self._common("mon.a"), "--mkfs", "-i", "a", "--monmap", str(monmap)])
        self._spawn("mon", ["ceph-mon", *self._common("mon.a"), "-f", "-i", "a"])

        osd_uuid = str(uuid.uuid4())
        osd_id = self._ceph(["osd", "new", osd_uuid], deadline).strip()
        (base / "osd" / f"{self.cluster}-{osd_id}").mkdir()  # memstore keeps only its fsid/meta files here
        self._run(
            ["ceph-osd", *self._common(f"osd.{osd_id}"), "--mkfs", "-i", osd_id, "--osd-uuid", osd_uuid]
        )
        self._spawn("osd", ["ceph-osd", *self._common(f"osd.{osd_id}"), "-f", "-i", osd_id])
        self._wait_osd_up(deadline)

        self._spawn("rgw", ["radosgw", *self._common(RGW_NAME), "-f"])
        self._wait_http(deadline)
        self._run(
            ["radosgw-admin", *self._common("client.admin"), "user", "create", "--uid", "paravt",
             "--display-name", "paravt tests", "--access-key", self.access_key, "--secret", self.secret_key],
            timeout=max(5.0, deadline - time.monotonic()),
        )  # fmt: skip

    def stop(self, remove: bool = True) -> None:
        """Kill every daemon and delete the directory.

        SIGKILL straight away: the cluster is throwaway (objects live in memstore, i.e. RAM) and a graceful
        radosgw shutdown alone takes ~5 s.
        """
        for pid in self.pids.values():
            if self._is_ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        for pid in self.pids.values():
            while _alive(pid) and self._is_ours(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.pids.clear()
        (Path(self.root) / STATE_FILE).unlink(missing_ok=True)  # nothing left to stop (ends the watchdog)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def _is_ours(self, pid: int) -> bool:
        """Only kill a pid whose command line names our cluster (a recorded pid may have been reused)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return self.cluster.encode() in fh.read()
        except OSError:
            return False

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> S3Server:
        """The server recorded in ``root`` by ``start`` (for the command-line ``stop``)."""
        state = Path(root) / STATE_FILE
        if not state.exists():
            raise S3ServerError(f"no server recorded in {root} ({STATE_FILE} missing)")
        return cls(**json.loads(state.read_text()))

    def env(self) -> dict[str, str]:
        """The AWS_* variables that point boto3 at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of every daemon log, for error messages."""
        out = []
        for log in sorted((Path(self.root) / "log").glob("*.log")):
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(out) if out else f"(no daemon logs under {self.root}/log)"

    # ---------------------------------------------------------------- helpers

    def _common(self, name: str) -> list[str]:
        return ["--cluster", self.cluster, "-c", str(Path(self.root) / "ceph.conf"), "-n", name]

    def _run(self, cmd: list[str], timeout: float = 30.0) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            err = proc.stderr.strip()[-2000:] or "(no output)"
            shown = " ".join(cmd).replace(self.secret_key, "***")  # `user create` carries the secret
            raise S3ServerError(
                f"`{shown}` exited with {proc.returncode}: {err.replace(self.secret_key, '***')}"
            )
        return proc.stdout

    def _ceph(self, args: list[str], deadline: float) -> str:
        remaining = max(1, int(deadline - time.monotonic()))
        cmd = ["ceph", *self._common("client.admin"), "--connect-timeout", str(remaining), *args]
        return self._run(cmd, timeout=remaining + 5)

    def _spawn(self, key: str, cmd: list[str]) -> None:
        log = open(Path(self.root) / "log" / f"{key}.stderr.log", "ab")  # noqa: SIM115 - owned by the child
        # own session: survives the launcher (CLI use) and never gets our terminal's signals
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.pids[key] = proc.pid
        self._save()  # record pids as soon as they exist, so `stop` can always clean up

    def _check_alive(self) -> None:
        for key, pid in self.pids.items():
            if not _alive(pid):
                raise S3ServerError(f"ceph daemon {key!r} (pid {pid}) exited during startup")

    def _wait_osd_up(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            stat = json.loads(self._ceph(["osd", "stat", "--format", "json"], deadline))
            if stat.get("num_up_osds", stat.get("osdmap", {}).get("num_up_osds", 0)) >= 1:
                return
            time.sleep(0.3)
        raise S3ServerError("timed out waiting for the OSD to come up")

    def _wait_http(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(self.endpoint_url, timeout=2) as resp:
                    resp.read()
                return
            except urllib.error.HTTPError:
                return  # any HTTP answer (403 for anonymous) means radosgw serves requests
            except OSError:
                time.sleep(0.2)
        raise S3ServerError(f"timed out waiting for radosgw to answer on {self.endpoint_url}")

    def _save(self) -> None:
        path = Path(self.root) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the secret key
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(self), fh)
        os.replace(tmp, path)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by whoever is its parent now) counts as dead."""
    _reap(pid)  # if it is our child, reap it
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.s3server", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start a server; prints `export AWS_...=...` lines for eval")
    start.add_argument("--dir", required=True, help="private directory for the cluster (created)")
    stop = sub.add_parser("stop", help="kill the server recorded in --dir and delete the directory")
    stop.add_argument("--dir", required=True)
    stop.add_argument("--keep", action="store_true", help="keep the directory (logs) after stopping")
    watch = sub.add_parser("watch", help="stop the server in --dir once process --pid has exited")
    watch.add_argument("--dir", required=True)
    watch.add_argument("--pid", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "start":
            server = S3Server.start(args.dir)
            for key, value in server.env().items():
                print(f"export {key}={value}")
            # the pytest fixture reuses a server announced through these
            print(f"export PARAVT_S3_ENDPOINT={server.endpoint_url}")
            print(f"export PARAVT_S3_ACCESS_KEY={server.access_key}")
            print(f"export PARAVT_S3_SECRET_KEY={server.secret_key}")
            print(
                f"# radosgw on {server.endpoint_url}; stop: python -m tests.support.s3server stop --dir {args.dir}"
            )
        elif args.cmd == "watch":
            while _alive(args.pid) and (Path(args.dir) / STATE_FILE).exists():
                time.sleep(1.0)
            if (Path(args.dir) / STATE_FILE).exists():
                S3Server.load(args.dir).stop()
        else:
            S3Server.load(args.dir).stop(remove=not args.keep)
    except S3ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

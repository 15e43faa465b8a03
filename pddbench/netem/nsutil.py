"""Low-level network-namespace plumbing: enter, spawn into, find processes of, remove.

This module owns the syscalls (``setns``, ``prctl``) and ``/proc`` scans that the rest of
``netem`` builds on. It must not decide names or policy: callers pass namespace names
that ``plan`` made, and ``cleanup`` decides what to remove.

* ``spawn`` starts a process inside a named namespace with ``PR_SET_PDEATHSIG=SIGKILL``, so
  it dies with the thread that started it (start long-lived children from the main thread).
* ``run_in_netns`` runs a function in a short-lived thread that has entered the namespace:
  sockets it creates belong to that namespace, and ``/proc/sys/net`` there is the
  namespace's own. The thread's reference to the namespace ends with the thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, TypeVar

from pddbench.errors import UserError

NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def netns_path(name: str) -> str:
    return os.path.join(NETNS_RUN_DIR, name)


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def prctl(option: int, value: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def require_net_admin() -> None:
    """Raise a one-line UserError unless we may create namespaces and shape links."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
                break
        else:
            caps = 0
    needed = (1 << CAP_NET_ADMIN) | (1 << CAP_SYS_ADMIN)
    if caps & needed != needed:
        raise UserError(
            "network emulation needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run it with sudo,"
            " or in a container started with --cap-add NET_ADMIN --cap-add SYS_ADMIN"
        )


def current_netns_inode() -> int:
    """The network namespace of the calling thread (threads may have entered another one)."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def in_named_netns(prefix: str) -> bool:
    """Whether the calling thread is inside one of the named namespaces starting with ``prefix``.

    (Comparing with PID 1's namespace does not work where /proc/1/ns is unreadable.)
    """
    mine = current_netns_inode()
    for name in list_netns(prefix):
        try:
            if netns_inode(name) == mine:
                return True
        except OSError:
            continue
    return False


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def netns_inode(name: str) -> int:
    return os.stat(netns_path(name)).st_ino


def list_netns(prefix: str) -> list[str]:
    try:
        names = os.listdir(NETNS_RUN_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def _prepare_run_dir() -> None:
    """Make /run/netns a shared mount point, as iproute2 does (once per boot)."""
    os.makedirs(NETNS_RUN_DIR, exist_ok=True)
    run_dir = NETNS_RUN_DIR.encode()
    if _libc.mount(b"", run_dir, b"none", MS_SHARED | MS_REC, None) == 0:
        return
    if _libc.mount(run_dir, run_dir, b"none", MS_BIND | MS_REC, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind-mounting {NETNS_RUN_DIR}: {os.strerror(err)}")
    if _libc.mount(b"", run_dir, b"none", MS_SHARED | MS_REC, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sharing {NETNS_RUN_DIR}: {os.strerror(err)}")


def create_netns(name: str) -> int:
    """Create a named namespace (fails if it exists); returns its inode.

    A short-lived thread unshares its own network namespace and bind-mounts it at
    /run/netns/NAME: no fork (unlike pyroute2.netns.create), no process left inside.
    """
    if netns_exists(name):
        raise UserError(f"network namespace {name!r} already exists; run `pddbench netem cleanup`")
    _prepare_run_dir()
    path = netns_path(name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            if _libc.unshare(CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"unshare: {os.strerror(err)}")
            source = b"/proc/thread-self/ns/net"
            if _libc.mount(source, path.encode(), b"none", MS_BIND, None) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mounting {path}: {os.strerror(err)}")
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-create-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise box["error"]
    return netns_inode(name)


def remove_netns(name: str) -> None:
    """Unmount and unlink a named namespace; it vanishes once nothing else holds it."""
    path = netns_path(name)
    _libc.umount2(path.encode(), MNT_DETACH)  # EINVAL when not mounted: fine
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def with_iproute(name: str, fn: Callable[[Any], T]) -> T:
    """Call ``fn(ipr)`` with a pyroute2 ``IPRoute`` whose socket lives in namespace ``name``."""

    def work() -> T:
        from pyroute2 import IPRoute  # imported lazily: slow to import

        with IPRoute() as ipr:
            return fn(ipr)

    return run_in_netns(name, work)


def pids_in_netns(inodes: set[int]) -> dict[int, int]:
    """Every process (pid → namespace inode) whose network namespace is one of ``inodes``.

    The caller's own process is never included.
    """
    found: dict[int, int] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        try:
            ino = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        if ino in inodes:
            found[pid] = ino
    return found


def kill_pids(pids: Sequence[int], *, timeout_s: float = 3.0) -> list[int]:
    """SIGKILL each pid and wait until they are gone; returns pids still alive."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        still = []
        for pid in alive:
            # Reap our own children; others are reaped by their parent (or init).
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if is_alive(pid):
                still.append(pid)
        alive = still
        if alive:
            time.sleep(0.01)
    return alive


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def run_in_netns(name: str, fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(*args)`` in a fresh thread that has entered namespace ``name``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
            try:
                setns(fd)
            finally:
                os.close(fd)
            box["value"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def write_sysctls(name: str, values: Mapping[str, str]) -> dict[str, str]:
    """Write ``/proc/sys`` keys (dotted) inside namespace ``name``; returns key → error text."""

    def apply() -> dict[str, str]:
        errors: dict[str, str] = {}
        for key, value in values.items():
            path = "/proc/sys/" + key.replace(".", "/")
            try:
                with open(path, "w") as f:
                    f.write(value)
            except OSError as exc:
                errors[key] = exc.strerror or str(exc)
        return errors

    return run_in_netns(name, apply)


def read_sysctls(name: str, keys: Sequence[str]) -> dict[str, str]:
    def read() -> dict[str, str]:
        out = {}
        for key in keys:
            try:
                with open("/proc/sys/" + key.replace(".", "/")) as f:
                    out[key] = f.read().strip()
            except OSError as exc:
                out[key] = f"<{exc.strerror}>"
        return out

    return run_in_netns(name, read)


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    cwd: str | None = None,
    text: bool = False,
) -> subprocess.Popen[Any]:
    """Start ``argv`` inside namespace ``name``; it gets SIGKILL when its parent thread dies."""
    fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    parent = os.getpid()

    def enter() -> None:  # runs in the child between fork and exec
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        setns(fd)

    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            text=text,
            preexec_fn=enter,
            close_fds=True,
        )
    finally:
        os.close(fd)


def run(name: str, argv: Sequence[str], *, timeout_s: float = 30.0) -> str:
    """Run a short command inside namespace ``name``; returns stdout, raises on failure."""
    proc = spawn(name, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, list(argv), out, err)
    return out

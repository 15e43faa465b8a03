"""Nothing happens before the inputs are checked: a bad trace, scenario, option or output
folder is refused in one line (exit 2) before any network namespace, probe or run folder.

The root cases run ``pddbench`` in a private mount namespace whose ``/run/netns`` (what
``ip netns`` lists) is a fresh folder watched with inotify: a namespace that lives even
for a millisecond (the emulation probe's scratch one) is seen, and other processes'
namespaces on the machine are not.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.badinput.files import good_rows
from tests.netem.conftest import needs_root

ROOT = Path(__file__).resolve().parents[2]
needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
IN_CREATE = 0x100
IN_MOVED_TO = 0x80


def _trace(path: Path, arrivals: list[float] | None = None) -> Path:
    from pddbench.workloads.traceio import build_table, write_trace

    rows = good_rows()
    if arrivals is not None:
        rows["arrival_s"] = arrivals
    return write_trace(build_table(**rows), path)


class NetnsWatch:
    """Names created in one folder, seen by inotify (however briefly they lived)."""

    def __init__(self, folder: Path):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        wd = libc.inotify_add_watch(self.fd, str(folder).encode(), IN_CREATE | IN_MOVED_TO)
        assert wd >= 0, os.strerror(ctypes.get_errno())

    def created(self) -> list[str]:
        names: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            at = 0
            while at < len(data):
                _wd, _mask, _cookie, size = struct.unpack_from("iIII", data, at)
                names.append(data[at + 16 : at + 16 + size].rstrip(b"\0").decode())
                at += 16 + size
        os.close(self.fd)
        return names


def _watched_python(
    tmp: Path, args: list[str], timeout: float = 120
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``python ARGS`` with /run/netns replaced (for it alone) by a watched folder; what it
    ran and the namespaces created meanwhile."""
    netns = tmp / "netns"
    netns.mkdir()
    watch = NetnsWatch(netns)
    inner = f'mkdir -p /run/netns && mount --bind {netns} /run/netns && exec "$@"'
    unshare = ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh"]
    res = subprocess.run(
        [*unshare, sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return res, watch.created()


def _run_watched(tmp: Path, argv: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``pddbench ARGV`` with /run/netns replaced (for it alone) by a watched folder."""
    return _watched_python(tmp, ["-m", "pddbench", *argv])


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    good = str(_trace(tmp / "good.parquet"))
    (tmp / "a-file").write_text("not a folder")
    return {
        "missing-trace": (["--trace", "missing.parquet"], "missing.parquet not found"),
        "unreadable-trace": (["--trace", str(tmp / "a-file")], "a-file"),
        "out-is-a-file": (["--trace", good, "--out", str(tmp / "a-file")], "is a file"),
        "bad-scenario": (["--trace", good, "--scenario", "no-such"], "no-such"),
        "bad-option": (["--trace", good, "--speedup", "-3"], "speedup"),
        # a long trace and no selection: `replay` is the main job (every system's ladder)
        "main-job-out-is-a-file": (
            [
                "--trace",
                str(_trace(tmp / "long.parquet", [0.0, 1.0, 3700.0])),
                "--out",
                str(tmp / "a-file"),
            ],
            "is a file",
        ),
    }


@needs_root
@needs_unshare
@pytest.mark.root
@pytest.mark.parametrize("command", ["capacity", "replay"])
@pytest.mark.parametrize(
    "case",
    [
        "missing-trace",
        "unreadable-trace",
        "out-is-a-file",
        "bad-scenario",
        "bad-option",
        "main-job-out-is-a-file",
    ],
)
def test_bad_input_is_refused_before_any_namespace(tmp_path: Path, command: str, case: str) -> None:
    args, says = _bad_inputs(tmp_path)[case]
    if "--scenario" not in args:
        args = [*args, "--scenario", "pdd"]  # pdd has WAN links: emulation would be probed
    res, created = _run_watched(tmp_path, [command, *args])
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and says in lines[0], res.stderr
    assert created == [], f"namespaces made before the refusal: {created}"
    assert not (tmp_path / "results").exists()  # no run folder, not even the output root


@needs_root
@needs_unshare
@pytest.mark.root
def test_the_watch_sees_a_namespace_that_lived_briefly(tmp_path: Path) -> None:
    """The watch can fail: a namespace made and removed at once is seen."""
    code = (
        "from pddbench.netem import nsutil; nsutil.create_netns('pddbwatch-x');"
        " nsutil.remove_netns('pddbwatch-x')"
    )
    res, created = _watched_python(tmp_path, ["-c", code], timeout=60)
    assert res.returncode == 0, res.stderr
    assert created == ["pddbwatch-x"]

"""Launcher and test harness of the code sandbox (:mod:`trl_ext.rewards.sandbox`), run as ``python -I -S -B``.

stdin: one JSON config; stdout: the runner's verdict channel (fd 3 inside), lines ``<nonce> <record> ...``; stderr:
the launcher's own records (``sandbox_error``, ``exit``), out of the program's reach. The launcher applies the
isolation ``plan``, forks the *runner* and kills it (and its namespace) at the deadline. A test passes only on an
explicit pass record: exiting early, closing stdout or printing fake verdicts does not produce one. Input/output
cases each run in a forked *case process*; the runner is non-dumpable so that they (same uid) cannot read its memory.
"""

import base64
import ctypes
import json
import math
import os
import resource
import select
import signal
import sys
import time
from contextlib import suppress

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
PRIVATE_TMPFS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# Without a mount namespace the unprivileged uid may be unable to read the Python install (pyenv under /root):
# these standard modules are imported before the uid drop so that typical solutions still run; others then fail.
PRELOAD = (
    "array bisect collections copy dataclasses datetime decimal enum fractions functools hashlib heapq itertools "
    "json math operator queue random re socket statistics string textwrap time typing unicodedata"
).split()
VERDICT_FD = 3

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None):
    enc = [None if x is None else x.encode() for x in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _prctl(option, arg):
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _drop_capabilities():
    """capset(2) with empty effective, permitted and inheritable sets (version 3 header)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _first_blocked_ancestor(path):
    """The highest directory on ``path`` that "others" cannot traverse (``/root`` with mode 700), or None."""
    current = ""
    for part in os.path.abspath(path).split(os.sep)[1:]:
        current += os.sep + part
        try:
            if not os.stat(current).st_mode & 0o001:
                return current
        except OSError:
            return current
    return None


def _expose_python(paths):
    """Bind-mount read-only the ``paths`` (stdlib, site-packages) hidden under an untraversable directory, which an
    empty tmpfs covers so that the rest of it (``/root/.ssh`` ...) stays hidden."""
    paths = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
    paths = [p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths)]
    blocked = {}
    for path in paths:
        ancestor = _first_blocked_ancestor(path)
        if ancestor is not None and ancestor != path:
            blocked.setdefault(ancestor, []).append(path)
    for index, (ancestor, inside) in enumerate(sorted(blocked.items())):
        staged = []
        for j, path in enumerate(inside):
            stage = f"/tmp/.stage-{index}-{j}"
            os.mkdir(stage, 0o700)
            _mount(path, stage, None, MS_BIND | MS_REC)
            staged.append((stage, path))
        _mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        for stage, path in staged:
            os.makedirs(path, 0o755, exist_ok=True)
            _mount(stage, path, None, MS_MOVE)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
            os.rmdir(stage)


def _runner(config, alive_read):
    """Child of the launcher: isolate, drop privileges, then run the solution and its tests. Never returns."""
    nonce, plan, limits = config["nonce"], config["plan"], config["limits"]
    try:
        if not plan["pid_ns"]:
            os.setpgid(0, 0)
        workdir = config["workdir"]
        if plan["mount_ns"]:
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            if plan["pid_ns"]:
                _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            size = f"size={limits['tmpfs_mb']}m"
            for path in PRIVATE_TMPFS:
                if os.path.isdir(path):
                    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,{size}")
            if config["uid"] is not None:
                _expose_python(config["python_paths"])
            workdir = "/tmp/work"
            os.mkdir(workdir, 0o700)
        if config["uid"] is not None:
            os.chown(workdir, config["uid"], config["uid"])
            if not plan["mount_ns"]:
                for name in PRELOAD:
                    with suppress(ImportError):
                        __import__(name)
        cpu, nproc = int(limits["cpu_seconds"]), config["nproc"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_mb"] << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if config["uid"] is not None:
            os.setgroups([])
            os.setgid(config["uid"])
            os.setuid(config["uid"])
            if os.getuid() == 0 or os.geteuid() == 0:
                raise OSError("still root after setuid")
        _drop_capabilities()
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([alive_read], [], [], 0)[0]:  # the launcher died before PDEATHSIG was armed
            os._exit(1)
        os.chdir(workdir)
        os.dup2(1, VERDICT_FD, inheritable=False)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(VERDICT_FD + 1, 1 << 16)
        sys.path[:] = [p for p in config["python_paths"] if p]
        sys.argv[:] = ["solution"]
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8"})
    except BaseException as error:
        _sandbox_error(nonce, error)
        os._exit(1)
    _harness(config["code"], config["tests"], config.get("io"), nonce, VERDICT_FD)


def _sandbox_error(nonce, error):
    """The ``sandbox_error`` record on the launcher's channel (stderr)."""
    _verdict_writer(2, nonce)("sandbox_error", f"{type(error).__name__}:{error}".replace("\n", " ")[:300])


def _verdict_writer(fd, nonce):
    """``emit(*parts)``: one record on channel ``fd``, led by a newline so junk cannot glue itself to it."""
    write = os.write  # bound now: the solution may monkeypatch the os module
    prefix = b"\n" + nonce.encode() + b" "

    def emit(*parts):
        try:
            write(fd, prefix + " ".join(str(p) for p in parts).encode() + b"\n")
        except BaseException:
            pass

    return emit


def _harness(code, tests, io, nonce, fd):
    """Run the solution then each assert test, or (``io``) once per case in a case process; one record each, written
    as soon as known."""
    exit_now = os._exit  # bound now: the solution may monkeypatch the os module
    emit = _verdict_writer(fd, nonce)

    def error_name(error):
        try:
            return str(type(error).__name__)[:60].replace(" ", "_") or "?"
        except BaseException:
            return "?"

    del nonce
    import builtins

    try:
        compiled = compile(code, "<solution>", "exec")
    except BaseException as error:
        emit("syntax_error", error_name(error))
        exit_now(0)
    if io is not None:
        _prctl(PR_SET_DUMPABLE, 0)
        for index, case_input in enumerate(io["inputs"]):
            try:
                status, output = _run_case(compiled, case_input, io)
            except BaseException as error:  # the runner could not start the case (fd or process limit): not a pass
                status, output = "crashed", f"{type(error).__name__}".encode()
            emit("case", index, status, base64.b64encode(output).decode() or "-")
        emit("done")
        exit_now(0)
    namespace = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compiled, namespace)
    except BaseException as error:
        emit("solution_error", error_name(error))
        exit_now(0)
    for index, test in enumerate(tests):
        try:
            exec(compile(test, f"<test {index}>", "exec"), namespace)
        except BaseException as error:
            emit("test", index, "fail", error_name(error))
        else:
            emit("test", index, "pass")
    emit("done")
    exit_now(0)


def _stdin_file(data):
    """A readable descriptor positioned at the start of ``data``: a memory file (EOF after the input)."""
    try:
        stdin = os.memfd_create("stdin")
    except (AttributeError, OSError):
        path = f"stdin-{os.getpid()}"
        stdin = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)
    view = memoryview(data)
    while view:
        view = view[os.write(stdin, view) :]
    os.lseek(stdin, 0, os.SEEK_SET)
    return stdin


def _run_case(compiled, case_input, io):
    """``(status, output)`` of one case, run in a forked case process whose stdin holds exactly the input."""
    fn_name, timeout, cap = io["fn_name"], float(io["case_timeout"]), int(io["max_output_bytes"])
    stdin = _stdin_file(b"" if fn_name is not None else case_input.encode("utf-8", "surrogateescape"))
    out_read, out_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(stdin, 0)
            os.dup2(null if fn_name is not None else out_write, 1)
            os.dup2(null, 2)
            os.dup2(out_write if fn_name is not None else null, VERDICT_FD)  # the verdict channel is gone
            os.closerange(VERDICT_FD + 1, 1 << 16)
            cpu = max(1, math.ceil(timeout))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        except BaseException:
            os._exit(3)
        _case_main(compiled, fn_name, case_input)
    os.close(out_write)
    os.close(stdin)
    deadline = time.monotonic() + timeout
    chunks, size, status, code, timed_out = [], 0, None, None, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        if select.select([out_read], [], [], min(left, 0.01) if code is None else 0)[0]:
            chunk = os.read(out_read, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                status = "output_limit"
                break
            chunks.append(chunk)
        elif code is not None:  # the case process is gone and the pipe is drained (a daemon may still hold it open)
            break
        else:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(wait_status)
    if status is not None:
        _kill_group(pid)
    if code is None:
        code, timed_out = _wait(pid, max(0.0, deadline - time.monotonic()) + 0.05)
    os.close(out_read)
    _kill_group(pid)  # what the case process left in its group
    _reap_orphans()
    if status is None:
        if timed_out or code in (-signal.SIGXCPU, -signal.SIGKILL):
            status = "timeout"
        else:
            status = "ok" if code == 0 else "error" if code > 0 else "crashed"
    return status, b"".join(chunks)


def _kill_group(pgid):
    with suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def _reap_orphans(tries=20):
    """Reap the case's orphans, reparented to the runner (PID 1 of its namespace): unreaped zombies would count
    against the next case's process limit. Waits a few milliseconds at most for killed ones to die."""
    for _ in range(tries):
        try:
            while True:
                done, _ = os.waitpid(-1, os.WNOHANG)
                if done == 0:
                    break
        except ChildProcessError:
            return
        time.sleep(0.001)


def _case_main(compiled, fn_name, case_input):
    """Inside a case process: stdin/stdout bound to the case, run the solution (or call ``fn_name``, a method of
    ``Solution()`` when defined, with JSON arguments, its JSON result on fd 3), exit 0 (ran) or 1 (raised)."""
    import builtins
    import io

    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), "utf-8", "replace")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), "utf-8", "replace")
    for name in ("exit", "quit"):  # ``python -S`` has no site-defined exit()/quit(); solutions call them
        if not hasattr(builtins, name):
            setattr(builtins, name, sys.exit)
    namespace = {"__name__": "__main__" if fn_name is None else "solution", "__builtins__": builtins}
    status = 0
    try:
        exec(compiled, namespace)
        if fn_name is not None:
            owner = namespace.get("Solution")
            if isinstance(owner, type) and hasattr(owner, fn_name):
                function = getattr(owner(), fn_name)
            else:
                function = namespace[fn_name]
            result = json.dumps(function(*json.loads(case_input))).encode()
            view = memoryview(result)
            while view:
                view = view[os.write(VERDICT_FD, view) :]
    except SystemExit:
        pass
    except BaseException:
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:
        status = 1
    os._exit(status)


def _wait(pid, timeout):
    """``(exit code, timed out)`` of ``pid`` after at most ``timeout`` seconds, SIGKILLed on overrun."""
    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # kernel before 5.3
        pidfd = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        left = deadline - time.monotonic()
        if done or left <= 0:
            break
        if pidfd is not None:
            select.select([pidfd], [], [], left)
        else:
            time.sleep(min(left, 0.005))
    if pidfd is not None:
        os.close(pidfd)  # the runner waits for every case: a leaked descriptor per case would hit RLIMIT_NOFILE
    if done:
        return os.waitstatus_to_exitcode(status), False
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -9, True


def _sweep_uid(uid):
    """Kill every process of ``uid`` (for hosts without PID namespaces): a process of that uid calls kill(-1)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(50):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
                time.sleep(0.002)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def main():
    config = json.loads(sys.stdin.buffer.read())
    nonce, plan = config["nonce"], config["plan"]
    # -I -S leaves exactly the standard library on sys.path; site-packages come only if the host asked for them
    config["python_paths"] = [p for p in sys.path if p] + list(config.get("extra_paths", []))
    try:
        flags = (CLONE_NEWPID if plan["pid_ns"] else 0) | (CLONE_NEWNET if plan["net_ns"] else 0)
        flags |= (CLONE_NEWNS if plan["mount_ns"] else 0) | (CLONE_NEWUSER if plan["user_ns"] else 0)
        uid, gid = os.getuid(), os.getgid()
        if flags:
            _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
        if plan["user_ns"]:  # map our own uid and gid only
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        alive_read, alive_write = os.pipe()
        pid = os.fork()
    except BaseException as error:
        _sandbox_error(nonce, error)
        return
    if pid == 0:
        os.close(alive_write)
        _runner(config, alive_read)
    os.close(alive_read)
    status, timed_out = _wait(pid, config["limits"]["timeout"])
    if not plan["pid_ns"]:
        _kill_group(pid)
        if plan["uid_sweep"] and config["uid"] is not None:
            _sweep_uid(config["uid"])
    _verdict_writer(2, nonce)("exit", status, int(timed_out))


if __name__ == "__main__":
    main()

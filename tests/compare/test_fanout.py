"""The fan-out of a comparison's jobs over processes and GPUs, with plain Python tasks (no GPU or
solo-learn needed: each task only records the GPUs it was given and when it ran)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from solo_diet.compare.run.fanout import Task, run_tasks, visible_gpus

RECORD = (
    "import os, sys, time; start = time.time(); time.sleep(float(sys.argv[1])); "
    "print('RAN', os.environ['CUDA_VISIBLE_DEVICES'], start, time.time()); "
    "sys.exit(int(sys.argv[2]))"
)


def task(tmp_path: Path, name: str, gpus: int, seconds: float = 0.6, status: int = 0) -> Task:
    argv = (sys.executable, "-c", RECORD, str(seconds), str(status))
    return Task(name, argv, tmp_path / name / "job.log", gpus)


def recorded(task: Task) -> tuple[list[str], float, float]:
    line = next(li for li in task.log_path.read_text().splitlines() if li.startswith("RAN"))
    _, devices, start, end = line.split(" ")
    return [d for d in devices.split(",") if d], float(start), float(end)


def test_tasks_get_disjoint_gpus_and_at_most_workers_run_at_once(tmp_path):
    tasks = [
        task(tmp_path, "a", 2),
        task(tmp_path, "b", 1),
        task(tmp_path, "c", 1),
        task(tmp_path, "d", 0),
    ]
    said: list[str] = []
    statuses = run_tasks(tasks, workers=2, gpus=["g0", "g1", "g2"], say=said.append, poll_s=0.05)

    assert statuses == [0, 0, 0, 0]
    runs = {t.label: recorded(t) for t in tasks}
    assert [len(runs[name][0]) for name in "abcd"] == [2, 1, 1, 0]
    for name, (devices, start, end) in runs.items():
        running_then = [o for o, (_, s, e) in runs.items() if o != name and s <= start < e]
        assert len(running_then) <= 1  # two workers
        overlapping = [o for o, (_, s, e) in runs.items() if o != name and s < end and start < e]
        for other in overlapping:
            assert not set(devices) & set(runs[other][0])
    assert (
        sum("started" in line for line in said) == 4
        and sum("done in" in line for line in said) == 4
    )
    assert any(line.startswith("(1/4) a: started on GPU g0,g1 (log: ") for line in said)


def test_a_failed_task_is_reported_with_its_log_and_the_others_go_on(tmp_path):
    tasks = [task(tmp_path, "bad", 0, seconds=0.0, status=3), task(tmp_path, "good", 0)]
    said: list[str] = []
    statuses = run_tasks(tasks, workers=1, gpus=[], say=said.append, poll_s=0.05)
    assert statuses == [3, 0]
    failed = next(line for line in said if "FAILED" in line)
    assert failed.startswith("bad: FAILED with exit status 3") and str(tasks[0].log_path) in failed
    with pytest.raises(ValueError, match="need more GPUs"):
        run_tasks([task(tmp_path, "big", 2)], workers=1, gpus=["0"])


def test_jobs_per_gpu_shares_each_gpu_evenly_and_never_twice_within_one_task(tmp_path):
    tasks = [task(tmp_path, f"one{i}", 1, seconds=2.5) for i in range(4)]
    tasks += [task(tmp_path, "two", 2, seconds=0.3)]
    statuses = run_tasks(
        tasks, workers=5, gpus=["g0", "g1"], say=lambda _: None, poll_s=0.05, jobs_per_gpu=2
    )

    assert all(status == 0 for status in statuses)
    runs = {t.label: recorded(t) for t in tasks}
    assert sorted(d for name in runs if name.startswith("one") for d in runs[name][0]) == [
        "g0",
        "g0",
        "g1",
        "g1",
    ]  # the four one-GPU tasks ran at once, two on each GPU
    ones = [runs[f"one{i}"] for i in range(4)]
    assert max(start for _, start, _ in ones) < min(end for _, _, end in ones)
    devices, start, _ = runs["two"]
    assert sorted(devices) == ["g0", "g1"]  # distinct GPUs, after two slots had room again
    assert start >= min(end for _, _, end in ones)
    with pytest.raises(ValueError, match="jobs_per_gpu must be >= 1"):
        run_tasks(tasks, workers=1, gpus=["g0"], jobs_per_gpu=0)


def test_visible_gpus_reads_cuda_visible_devices_up_to_the_first_invalid_entry(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,-1,2")
    assert visible_gpus() == ["3", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


SCHEDULER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from solo_diet.compare.run.fanout import Task, run_tasks
    sleeper = "import os, sys, time; Path = __import__('pathlib').Path; "
    sleeper += "Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(120)"
    tasks = [Task("t", (sys.executable, "-c", sleeper, sys.argv[1]), Path(sys.argv[2]), 0)]
    run_tasks(tasks, workers=1, gpus=[], poll_s=0.05, grace_s=5.0)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_scheduler_stops_its_tasks(tmp_path, signum):
    pid_file = tmp_path / "task.pid"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    scheduler = subprocess.Popen(
        [sys.executable, "-c", SCHEDULER, str(pid_file), str(tmp_path / "task.log")],
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and scheduler.poll() is None
        time.sleep(0.05)
    task_pid = int(pid_file.read_text())
    scheduler.send_signal(signum)
    assert scheduler.wait(timeout=30) != 0
    with pytest.raises(ProcessLookupError):
        os.kill(task_pid, 0)


@pytest.mark.parametrize("preset", [None, "3"])
def test_each_task_gets_its_share_of_the_cores_unless_the_caller_chose(
    tmp_path, monkeypatch, preset
):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))  # a 64-core host
    if preset is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", preset)
    argv = (sys.executable, "-c", "import os; print('THREADS', os.environ['OMP_NUM_THREADS'])")
    tasks = [Task(name, argv, tmp_path / name / "job.log") for name in "abc"]
    run_tasks(tasks, workers=2, gpus=[], say=lambda _: None, poll_s=0.05)

    expected = preset or "32"
    for t in tasks:
        assert f"THREADS {expected}" in t.log_path.read_text().splitlines()


# A reusable worker of the served protocol: each request "<seconds> <status>" is a task that
# prints its pid and CUDA_VISIBLE_DEVICES into its log; a status other than 0 ends the worker.
SERVER = textwrap.dedent(
    """
    import json, os, sys, time
    replies = os.fdopen(int(sys.argv[1]), "w")
    for line in sys.stdin:
        request = json.loads(line)
        fd = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(fd, 1)
        seconds, status = request["request"].split()
        time.sleep(float(seconds))
        print("SERVED", os.getpid(), os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
        if int(status):
            sys.exit(int(status))
        replies.write("0\\n")
        replies.flush()
    """
)


def served_task(tmp_path: Path, name: str, gpus: int, seconds=0.2, status=0) -> Task:
    return Task(name, ("unused",), tmp_path / name / "job.log", gpus, f"{seconds} {status}")


def served_by(task: Task) -> tuple[int, str]:
    line = next(li for li in task.log_path.read_text().splitlines() if li.startswith("SERVED"))
    _, pid, devices = (line.split(" ") + [""])[:3]
    return int(pid), devices


def test_reusable_workers_run_task_after_task_and_a_failure_ends_only_its_worker(tmp_path):
    serve = (sys.executable, "-c", SERVER)
    tasks = [served_task(tmp_path, f"t{i}", 1) for i in range(4)]
    tasks.insert(2, served_task(tmp_path, "bad", 1, status=3))
    tasks.append(task(tmp_path, "fresh", 1))  # no request: its own process, as before
    said: list[str] = []
    statuses = run_tasks(
        tasks, workers=2, gpus=["g0", "g1"], say=said.append, poll_s=0.05, serve_argv=serve
    )

    assert statuses == [0, 0, 3, 0, 0, 0]
    assert any(line.startswith("bad: FAILED with exit status 3") for line in said)
    served = {t.label: served_by(t) for t in tasks if t.request}
    assert len({pid for pid, _ in served.values()}) < len(served)  # a worker ran several
    # started after "bad", t2 and t3 never ran in its worker, which the failure ended
    assert served["bad"][0] not in {served["t2"][0], served["t3"][0]}
    for pid in {pid for pid, _ in served.values()}:  # a worker keeps its GPU
        assert len({gpu for p, gpu in served.values() if p == pid}) == 1
    headers = [t.log_path.read_text().splitlines()[0] for t in tasks if t.request]
    assert all(h.startswith("### ") and " (in worker " in h for h in headers)
    assert any(h.endswith(", its task 2)") for h in headers)
    fresh_gpus, _, _ = recorded(tasks[-1])
    assert len(fresh_gpus) == 1 and not set(fresh_gpus) - {"g0", "g1"}
    for pid, _ in served.values():  # every worker has ended
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


SERVING_SCHEDULER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from solo_diet.compare.run.fanout import Task, run_tasks
    serve = (sys.executable, "-c", sys.argv[2])
    tasks = [Task("t", ("unused",), Path(sys.argv[1]), 0, "120 0")]
    run_tasks(tasks, workers=1, gpus=[], poll_s=0.05, grace_s=5.0, serve_argv=serve)
    """
)


def test_an_interrupted_scheduler_stops_its_reusable_workers(tmp_path):
    log = tmp_path / "task.log"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    scheduler = subprocess.Popen(
        [sys.executable, "-c", SERVING_SCHEDULER, str(log), SERVER],
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    deadline = time.monotonic() + 60
    while not log.is_file() or " (in worker " not in log.read_text():
        assert time.monotonic() < deadline and scheduler.poll() is None
        time.sleep(0.05)
    worker_pid = int(log.read_text().split(" (in worker ")[1].split(",")[0])
    scheduler.send_signal(signal.SIGINT)
    assert scheduler.wait(timeout=30) != 0
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)


def test_workers_started_before_the_fan_out_take_its_tasks_and_a_failed_start_is_logged(tmp_path):
    from solo_diet.compare.run.fanout import ServedWorker, task_env

    serve = (sys.executable, "-c", SERVER)
    early = ServedWorker(serve, ("g0",), task_env(("g0",), "1"), tmp_path / "early.log")
    broken = (sys.executable, "-c", "import sys; print('START-UP FAILED'); sys.exit(4)")
    failed = ServedWorker(broken, ("g1",), task_env(("g1",), "1"), tmp_path / "failed.log")
    tasks = [served_task(tmp_path, f"t{i}", 1) for i in range(2)]
    statuses = run_tasks(
        tasks,
        2,
        ["g0", "g1"],
        say=lambda _: None,
        poll_s=0.05,
        serve_argv=serve,
        started=[early, failed],
        retired=(held := []),
    )

    ran = [task for task, status in zip(tasks, statuses) if status == 0]
    failed_log = next(t.log_path for t, s in zip(tasks, statuses) if s == 4).read_text()
    assert len(ran) == 1 and served_by(ran[0])[0] == early.process.pid
    assert "### its worker's start-up\nSTART-UP FAILED" in failed_log
    assert early in held  # retired, its exit left to the caller (a fleet waits after the report)
    assert early.process.wait(timeout=30) == 0 and failed.process.poll() == 4

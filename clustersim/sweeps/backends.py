"""Where a sweep's points run: in this process, in a local process pool, or on Ray.

Every backend takes the tasks and yields ``(index, row)`` as points finish, in any order; a point's
row is whatever :func:`clustersim.sweeps.worker.run_point` returned, so the backend never changes a
result. A worker process that dies (killed, out of memory) fails only the points it held; the pool
is started again for the rest.

Ray (``pip install 'clustersim[ray]'``): ``address=None`` starts a local Ray; an address joins an
existing cluster. The points run in Ray workers into a temporary folder and their files come back
to this machine, so the cluster needs no shared file system; the base scenario and the files it
names (traces, profiles) must be readable at the same path on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Protocol

from clustersim.errors import ClusterSimError
from clustersim.sweeps.worker import PointTask, run_point

BackendName = Literal["local", "ray"]
DIED = "the worker process running this point died (killed, or out of memory?)"


class Backend(Protocol):
    """Runs tasks and yields ``(index, row)`` as each finishes."""

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, dict[str, Any]]]: ...


def default_jobs() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class SerialBackend:
    """Every point in this process, one after another (``--jobs 1``)."""

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, dict[str, Any]]]:
        for index, task in enumerate(tasks):
            yield index, run_point(task)


class LocalBackend:
    """A pool of ``jobs`` worker processes on this machine."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, dict[str, Any]]]:
        todo = list(range(len(tasks)))
        breaks = dict.fromkeys(todo, 0)  # how many broken pools each point was in
        while todo:
            pool = ProcessPoolExecutor(max_workers=min(self.jobs, len(todo)))
            running = {pool.submit(run_point, tasks[i]): i for i in todo}
            todo = []
            try:
                for index, row in self._drain(running):
                    if row is not None:
                        yield index, row
                    elif breaks[index] >= 1:  # broke a second pool: this point is the one dying
                        yield index, {"status": "failed", "error": DIED}
                    else:
                        breaks[index] += 1
                        todo.append(index)
            except BaseException:
                _stop(pool)
                raise
            pool.shutdown(wait=True)

    @staticmethod
    def _drain(running: dict[Future[dict[str, Any]], int]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """Yield each point as it finishes: its row, or None when the pool broke under it."""
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                index = running.pop(future)
                try:
                    yield index, future.result()
                except BrokenProcessPool:
                    yield index, None


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started and end the workers (an interrupted sweep)."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()


def run_point_collect(task: PointTask) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Run ``task`` in a temporary folder (on a Ray worker) and return its row and its files."""
    scratch = Path(tempfile.mkdtemp(prefix="clustersim-point-"))
    try:
        row = run_point(replace(task, run_dir=str(scratch / "run")))
        files = {p.name: p.read_bytes() for p in (scratch / "run").iterdir() if p.is_file() and p.name[0] != "."}
        return row, files
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def place_files(run_dir: Path, files: dict[str, bytes]) -> None:
    """Write a point's files into its run folder (``point.json`` last), each under a temporary name first."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in sorted(files, key=lambda n: n == "point.json"):
        partial = run_dir / f".{name}.partial"
        partial.write_bytes(files[name])
        os.replace(partial, run_dir / name)


class RayBackend:
    """Points as Ray tasks (one CPU each), on a local Ray or the cluster at ``address``."""

    def __init__(self, address: str | None, jobs: int | None) -> None:
        try:
            import ray
        except ImportError:
            raise ClusterSimError(
                "--backend ray needs Ray: python -m pip install 'clustersim[ray]' (or '.[ray]' from a source tree)"
            ) from None
        self._ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.ERROR,
            }
            if address is None and jobs is not None:
                options["num_cpus"] = jobs
            try:
                ray.init(address=address, **options)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise ClusterSimError(f"--address {address}: cannot join the Ray cluster: {exc}") from None

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, dict[str, Any]]]:
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(run_point_collect)
        pending = {remote.remote(task): index for index, task in enumerate(tasks)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                index = pending.pop(done[0])
                try:
                    row, files = ray.get(done[0])
                except ray.exceptions.RayError as exc:
                    yield index, {"status": "failed", "error": f"the Ray task failed: {str(exc).splitlines()[0]}"}
                    continue
                place_files(Path(tasks[index].run_dir), files)
                yield index, row
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise


def make_backend(name: BackendName, jobs: int | None, address: str | None, num_tasks: int) -> Backend:
    """The backend for ``--backend``/``--jobs``/``--address``."""
    if name == "ray":
        return RayBackend(address, jobs)
    if address is not None:
        raise ClusterSimError("--address is for --backend ray")
    workers = min(jobs if jobs is not None else default_jobs(), max(1, num_tasks))
    return SerialBackend() if workers <= 1 else LocalBackend(workers)

"""Running an ablation: one unit (train or resume, evaluate, benchmark), the untrained base, and
the process pool that runs the units `jobs` at a time. A finished unit (final/ written, eval.json
readable, its benchmarks' results complete) is skipped on a rerun; a run killed mid-way continues
from its latest checkpoint through the trainer's resume; a unit missing only benchmarks runs them.
With a plateau rule (AblationPlan.stop) a unit trains and is evaluated in chunks until it stops
(mapo.lab.ablate.plateau)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mapo.lab.ablate.benchmarks import load_items, pending, run_benchmarks
from mapo.lab.ablate.export import is_export
from mapo.lab.ablate.plan import AblationPlan, EvalBudget, Unit, unit_overrides
from mapo.lab.ablate.plateau import PAUSED, train_until_plateau
from mapo.lab.ablate.report import write_outputs
from mapo.lab.ablate.state import check_plan, curve_dir, eval_dir, last_logged_step, read_eval, run_dir, training_state


def eval_spec(budget: EvalBudget, system_prompt: str | None = None) -> Any:
    from mapo.evaluate.runner import EvalSpec

    spec = EvalSpec(**dataclasses.asdict(budget))  # EvalBudget's fields are a subset of EvalSpec's
    return dataclasses.replace(spec, system_prompt=system_prompt) if system_prompt is not None else spec


def run_unit(out: Path, plan: AblationPlan, unit: Unit | None, threads: int | None,
             extra: Sequence[str] = (), show_progress: bool = True, chunks: int | None = None) -> str:
    """Train (or resume), evaluate and benchmark one unit, doing only what is not done yet;
    `unit=None` is the untrained base (evaluated and benchmarked).

    Returns what was done: "skipped", or its steps joined by "+" ("trained+evaluated+benchmarked",
    "resumed+evaluated", "evaluated", "benchmarked", ...; with a plateau rule, where the unit
    stopped: "trained+evaluated+stopped at step 30 (plateau)"). Training now makes the eval and the
    benchmarks of an earlier final policy stale: they are run again. `chunks`: a plateau unit trains at
    most that many chunks and, if it has not stopped, returns "...+paused at step N" (`train_until_plateau`).
    """
    from mapo.config import load_config
    from mapo.core.trainer import train
    from mapo.runtime import configure_threads

    configure_threads(threads)
    name = unit.name if unit is not None else "base"
    did: list[str] = []
    plateau = unit is not None and plan.stop.every > 0
    if plateau:  # trained and evaluated in chunks until it stops; its final evaluation is the stopping step's
        did = train_until_plateau(out, plan, unit, unit_overrides(plan, unit, threads, extra),
                                  lambda step: _evaluate_checkpoint(out, plan, unit, step, plan.eval, required=True),
                                  show_progress, chunks)
        if did and did[-1].startswith(PAUSED):
            return "+".join(did)
    state = "done" if unit is None or plateau else training_state(run_dir(out, unit), plan.steps)
    if unit is not None and state == "partial":
        _keep_final_eval_as_check(out, plan, unit)
    # trained now (`did`): the benchmarks of an earlier final policy are stale
    benchmarks = list(plan.benchmarks.names) if state != "done" or did else pending(out, name, plan.benchmarks)
    benchmarks = benchmarks if plan.benchmarked(unit) else []
    evaluate = not plateau and (state != "done" or read_eval(eval_dir(out, name)) is None)
    checks = [] if unit is None else [  # a resumed run's checkpoints up to its latest are the ones already checked
        s for s in plan.curve.steps(plan.steps) if state == "new" or read_eval(curve_dir(out, name, s)) is None]
    if not did and not evaluate and not benchmarks and not checks:
        return "skipped"
    if unit is not None and state == "new":
        train(load_config(None, unit_overrides(plan, unit, threads, extra)), output=run_dir(out, unit),
              show_progress=show_progress)
        did.append("trained")
    elif unit is not None and state == "partial":
        train(resume=run_dir(out, unit), overrides=[f"steps={plan.steps}"], show_progress=show_progress)
        did.append("resumed")
    if evaluate or benchmarks:
        policy, system_prompt = _policy_to_test(out, plan, unit, extra)
        if evaluate:
            from mapo.evaluate.runner import run_eval

            run_eval(policy, eval_spec(plan.eval, system_prompt), eval_dir(out, name), name)
            did.append("evaluated")
        if benchmarks:
            run_benchmarks(policy, name, out, name, plan.benchmarks, benchmarks)
            did.append("benchmarked")
        del policy  # one model in memory at a time
    if checks and unit is not None and _held_out_curve(out, plan, unit, checks):
        did.append("curve")
    return "+".join(did) or "skipped"  # "skipped": only checks of a run that kept no checkpoints for them


def _keep_final_eval_as_check(out: Path, plan: AblationPlan, unit: Unit) -> None:
    """A finished run grown to more steps: its final evaluation becomes the held-out check of the
    step it was made at (with the final evaluation's dialogues) before training on replaces it."""
    run, final = run_dir(out, unit), eval_dir(out, unit.name)
    if not (run / "final").is_dir() or read_eval(final) is None:
        return  # a run cut before its end: nothing evaluated yet
    step = last_logged_step(run)
    target = curve_dir(out, unit.name, step)
    if step not in plan.curve.steps(plan.steps) or read_eval(target) is not None:
        return
    target.mkdir(parents=True, exist_ok=True)
    for path in final.iterdir():
        if path.is_file():  # eval.json and its transcripts; curve/ and bench/ stay
            path.rename(target / path.name)


def _held_out_curve(out: Path, plan: AblationPlan, unit: Unit, steps: Sequence[int]) -> int:
    """Evaluate the unit's kept checkpoints at `steps` with the curve's budget; returns how many were.
    A run trained before the plan had a curve has no such checkpoints: named, skipped."""
    budget = dataclasses.replace(plan.eval, samples=plan.curve.samples)
    return sum(_evaluate_checkpoint(out, plan, unit, step, budget) for step in steps)


def _evaluate_checkpoint(out: Path, plan: AblationPlan, unit: Unit, step: int, budget: EvalBudget,
                         required: bool = False) -> bool:
    """Evaluate the unit's checkpoint at `step` held out with `budget` into its curve folder; False
    when the run kept none there (an error if `required`)."""
    from mapo.config import load_config
    from mapo.evaluate.checkpoints import load_eval_policy
    from mapo.evaluate.runner import run_eval
    from mapo.run_folder import RunFolder

    run = RunFolder(run_dir(out, unit))
    checkpoint = run.checkpoint_dir(step)
    if not checkpoint.is_dir():
        if required:
            raise FileNotFoundError(f"{unit.name}: no checkpoint of step {step} in {run.path} to evaluate")
        logging.getLogger(__name__).warning("%s: no checkpoint of step %d to put on the held-out curve", unit.name, step)
        return False
    system_prompt = load_config(run.path / "config.yaml").rollout.system_prompt
    policy, _ = load_eval_policy(str(checkpoint))
    run_eval(policy, eval_spec(budget, system_prompt), curve_dir(out, unit.name, step), f"{unit.name} step {step}")
    return True


def _policy_to_test(out: Path, plan: AblationPlan, unit: Unit | None, extra: Sequence[str]) -> tuple[Any, str | None]:
    """(policy in eval mode, the system prompt it was trained with): the unit's final policy, or
    for `unit=None` the base the plan's runs start from (without LoRA adapters)."""
    from mapo.config import load_config

    if unit is not None:
        from mapo.evaluate.checkpoints import load_eval_policy

        path = run_dir(out, unit)
        policy, _ = load_eval_policy(str(path))
        return policy, load_config(path / "config.yaml").rollout.system_prompt
    from mapo.policy import load_policy

    config = load_config(None, [*plan.train, *extra])
    if config.policy.lora.enabled:  # the base is the model the adapters start from
        config.policy.lora.enabled = False
    policy = load_policy(config.policy, seed=config.seed)
    policy.model.eval()
    return policy, config.rollout.system_prompt


def _stop_when_orphaned(grace_s: float = 300.0) -> None:
    """Stop this worker as a Ctrl-C would once its `mapo ablate` is gone (killed, not Ctrl-C'd, which
    reaches the whole process group): the run checkpoints at the end of its turn and exits, instead
    of training on unseen and meeting a second writer in its folder when the ablation is rerun."""
    import multiprocessing
    import threading
    import time

    parent = multiprocessing.parent_process()  # its sentinel closes when the parent dies
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(grace_s)  # a result nobody reads must not keep the process alive
        os._exit(130)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _raise_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops as Ctrl-C does: a training run saves a checkpoint (its trainer takes SIGTERM itself
    while it trains), an ablation stops its workers there."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_stops_the_ablation() -> Iterator[None]:
    """For `mapo ablate`'s process: `kill PID` (or a scheduler's pre-emption) stops the ablation as a
    Ctrl-C does, at checkpoints. An ablation started in the background (`cmd &`) ignores SIGINT, so
    SIGTERM is how to stop one; left to its default, it would end the parent at once, its workers
    stopping only once they notice (`_stop_when_orphaned`), and nothing would say how to resume."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_ABLATION_STOPPED: Any = None  # in a worker process: the event its ablation sets when interrupted


def core_sets(cores: Sequence[int], jobs: int) -> list[list[int]]:
    """`cores` split into `jobs` disjoint sets of max(1, len(cores) // jobs) (more jobs than cores:
    sets reused in turn). Each unit of a parallel ablation runs on its own set: the vLLM engine binds
    its threads, and so the trainer's, to the first of the cores its process may use, so units that
    all may use every core would all run on the first ones (two units on 2 cores: both on core 0)."""
    ordered = sorted(cores)
    if not ordered:
        raise ValueError("no CPU core to run on")
    size = max(1, len(ordered) // jobs)
    sets = [ordered[i:i + size] for i in range(0, size * (len(ordered) // size), size)]
    return [sets[i % len(sets)] for i in range(jobs)]


def _start_worker(stopped: Any) -> None:
    """Pool initializer: keep the ablation's stop event; an idle worker ignores Ctrl-C (the pool ends
    it). Workers start with SIGINT blocked (`run_ablation`), so one still importing is not killed by
    a Ctrl-C, which would break the pool and have it terminate the running units mid-step."""
    global _ABLATION_STOPPED
    _ABLATION_STOPPED = stopped
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _unit_job(out: str, plan: dict[str, Any], unit: tuple[str, int] | None, extra: list[str],
              cores: list[int], chunks: int | None = None) -> str:
    """Process-pool entry point (picklable arguments only): what `run_unit` did (at most `chunks`
    chunks of a plateau unit), on `cores` alone (a torch thread a core); output goes to the unit's
    log file."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # also how the pool ends its other workers when one dies
    try:
        os.sched_setaffinity(0, cores)
        threads = len(cores)
        if _ABLATION_STOPPED is not None and _ABLATION_STOPPED.is_set():
            raise KeyboardInterrupt  # queued before the ablation was interrupted: do not start it
        _stop_when_orphaned()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        chosen = Unit(*unit) if unit is not None else None
        name = chosen.name if chosen else "base"
        logs = Path(out) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "a", encoding="utf-8", buffering=1) as handle, \
                contextlib.redirect_stderr(handle), contextlib.redirect_stdout(handle):
            logging.basicConfig(stream=handle, level=logging.INFO, force=True)
            try:
                did = run_unit(Path(out), AblationPlan.from_dict(plan), chosen, threads, extra, show_progress=False,
                               chunks=chunks)
            except Exception:  # the traceback goes to the unit's log; the parent reports the error itself
                logging.getLogger(__name__).exception("%s failed", name)
                raise
        return did
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late Ctrl-C must not cut the result on its way back


class AblationStopped(RuntimeError):
    """A worker process died mid-unit, or units failed; the message says which and how to resume."""


def _failure(error: BaseException) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__


def run_ablation(
    plan: AblationPlan,
    out: str | Path,
    jobs: int = 1,
    extra: Sequence[str] = (),
    on_done: Callable[[str, str], None] | None = None,
    processes: bool | None = None,
) -> Path:
    """Run every unit not finished yet (`jobs` processes at a time), then write the table and curves.

    `extra` are overrides for every run and the base (e.g. policy.model=tiny in tests).
    Each process runs on its own max(1, cores // jobs) of the cores this process may use
    (`core_sets`), a torch thread a core. `processes` (default: jobs > 1) runs the units in worker
    processes, a plateau unit's chunks each in a fresh one, also with one job: a long unit in this
    process holds more memory with every chunk (`_submit`); `mapo ablate` sets it for plateau plans.
    """
    out = Path(out)
    if is_export(out):
        raise ValueError(f"{out} is an export (results without weights): --report reads it; "
                         "train and evaluate in the ablation it came from")
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    from mapo.config import load_config

    load_config(None, [*plan.train, *extra])  # a bad setting fails before anything is written
    if plan.benchmarks.targets:  # so does a missing or broken benchmark file
        from mapo.evaluate.bench import BenchmarkDataError

        for benchmark in plan.benchmarks.names:
            try:
                load_items(plan.benchmarks, benchmark)
            except BenchmarkDataError as err:
                raise BenchmarkDataError(f"{err} (the plan's benchmarks.data: set it with --bench-data FOLDER)") from None
    check_plan(out, plan)
    todo: list[tuple[str, Unit | None]] = [("base", None), *((u.name, u) for u in plan.units())]
    report = on_done or (lambda name, did: None)
    failed: dict[str, str] = {}  # a unit that fails is reported at once; the others go on

    def fail(name: str, error: Exception) -> None:
        failed[name] = _failure(error)
        report(name, f"failed ({failed[name]})")

    in_process = not (jobs > 1 if processes is None else processes)
    if in_process:
        for name, unit in todo:
            try:
                did = run_unit(out, plan, unit, None, extra)
            except Exception as err:  # not a Ctrl-C (KeyboardInterrupt): that stops the ablation
                logging.getLogger(__name__).exception("%s failed", name)
                fail(name, err)
                continue
            report(name, did)
    else:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        context = multiprocessing.get_context("spawn")  # fresh interpreters: no forked torch thread pools
        stopped = context.Event()
        free = core_sets(os.sched_getaffinity(0), jobs)  # a set for each running job, given back when it ends
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1,
                                 initializer=_start_worker, initargs=(stopped,)) as pool:
            try:
                waiting, running = collections.deque(todo), {}
                while waiting or running:
                    while waiting and len(running) < jobs:
                        name, unit = waiting.popleft()
                        cores = free.pop()
                        running[_submit(pool, out, plan, unit, extra, cores)] = (name, unit, cores)
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        name, unit, cores = running.pop(future)
                        free.append(cores)
                        try:
                            did = future.result()
                        except BrokenProcessPool:
                            raise
                        except Exception as err:  # raised in the unit (its traceback is in the unit's log)
                            fail(name, err)
                            continue
                        if did.rsplit("+", 1)[-1].startswith(PAUSED):  # its next chunk, before any unit not started
                            waiting.appendleft((name, unit))
                            continue
                        report(name, did)
            except KeyboardInterrupt:  # here or in a worker: stop the others at a checkpoint, start nothing new
                _stop_workers(pool, stopped)
                raise
            except BrokenProcessPool:  # the pool has sent the other workers SIGTERM: they checkpoint
                _stop_workers(pool, stopped)
                raise AblationStopped(f"a worker process of the ablation died (killed, or out of memory?); the "
                                      f"finished runs and the checkpoints are kept: continue with "
                                      f"mapo ablate --resume {out}") from None
    md = write_outputs(out, plan)
    if failed:
        where = "above" if in_process else f"in {out / 'logs'}/<unit>.log"
        raise AblationStopped(f"{len(failed)} of {len(todo)} units failed ({'; '.join(f'{n}: {e}' for n, e in failed.items())}); "
                              f"their tracebacks are {where}, the others' tables in {md}; once mended, continue "
                              f"with mapo ablate --resume {out}")
    return md


def _submit(pool: Any, out: Path, plan: AblationPlan, unit: Unit | None, extra: Sequence[str],
            cores: list[int]) -> Any:
    """A unit's job in the pool, on `cores`: a plateau unit one chunk at a time, each in a fresh process (the
    pool's workers take one job each), because a long run in one process holds more memory with every
    step (docs/results.md, 2026-12-03: two units side by side ran out of 24 GB by step 25)."""
    # the workers, and the pool's manager thread that starts the later ones, inherit this thread's
    # signal mask: each starts with SIGINT blocked and unblocks it once it ignores it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(_unit_job, str(out), plan.to_dict(), (unit.variant, unit.seed) if unit else None,
                           list(extra), cores, 1 if plan.stop.every > 0 else None)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl-C held back lands here


def _stop_workers(pool: Any, stopped: Any) -> None:
    """Let no queued unit start, Ctrl-C the running ones (a terminal's Ctrl-C reached them already;
    `kill -INT` of the ablation alone did not), then wait while they checkpoint and exit."""
    import multiprocessing

    stopped.set()
    print("Stopping: the running units save a checkpoint and exit ...", file=sys.stderr, flush=True)
    for worker in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):  # the pool may be reaping it
            os.kill(worker.pid, signal.SIGINT)  # the trainer stops once; idle and finishing workers ignore it
    pool.shutdown(wait=True, cancel_futures=True)

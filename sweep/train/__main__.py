"""Entry of every rank: ``python -m sweep.train DIR [--phase standalone]``, or the file
``sweep/train/__main__.py`` for msrun (which takes a script path).

``DIR`` is a job dir (``job.yaml``: run that job, then exit) or a pool dir
(``pool.yaml``: serve jobs from its queue until ``STOP``; see ``sweep.run.pool``).
"""

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

FAILED_RANK_GRACE_S = 1.0  # 10x torch elastic's monitor interval (0.1 s)


def user_path() -> None:
    """Append the sweep's working directory (``SWEEP_USER_PATH``, ``sweep.launch.supervise``) at the
    end of ``sys.path``: engines and models named in the config may live there, and it
    can never shadow an installed package."""
    path = os.environ.get("SWEEP_USER_PATH")
    if path and path not in sys.path:
        sys.path.append(path)


def stacks_on_signal() -> None:
    """On ``SIGUSR1`` write every thread's Python stack to stderr, which is the job's worker
    log (``sweep.train.redirect_output``): ``faulthandler``'s C-level handler, so a rank
    blocked inside a collective answers too. The supervisor sends it at a job's time limit,
    before the kill (``sweep.launch.supervise.dump_stacks``), so the job can say which rank
    hung and where (``sweep.run.failures.hung_ranks``)."""
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(pool_dir: Path, exit_process: bool = True, phase: str = "both") -> None:
    """Initialise once, then run each job posted to ``pool_dir/queue`` in order
    (``phase="standalone"``: the standalone pool's process, not distributed, training each
    job's standalone copy with its output in ``JOB_DIR/logs/standalone.log``).
    A failing job ends the process with its traceback in the job's worker log. A rank
    also leaves when its launcher (parent) or the sweep process that posts the jobs
    (pid in ``pool_dir/owner.pid``) is gone: nothing would ever stop it otherwise.
    ``exit_process=False``: return after ``STOP`` instead of leaving the process (a rank
    forked by ``sweep.launch.fork_launch``, whose launcher waits for the return)."""
    from omegaconf import OmegaConf

    from sweep.layout import STOP, PoolDir
    from sweep.layout import JobDir
    from sweep.train import load_job, rank_functions, redirect_output, redirect_to
    from sweep.train.heap import settle

    user_path()
    stacks_on_signal()
    launcher = os.getppid()
    paths = PoolDir(pool_dir)
    owner = int(paths.owner.read_text()) if paths.owner.exists() else None
    pool_cfg = OmegaConf.load(paths.config)
    module = rank_functions(pool_cfg)
    ctx = module.init_rank(pool_cfg, phase != "standalone")
    settle()  # what lives as long as this process: later collections skip it
    seq = 0
    gone = None
    while True:
        item = paths.item(seq)
        while not item.exists():
            gone = "launcher" if os.getppid() != launcher else "sweep" if owner and not _alive(owner) else None
            if gone == "launcher":
                print("the launcher process is gone; leaving", file=sys.stderr, flush=True)
                os._exit(1)
            if gone:
                # Leave as after STOP: a clean exit lets the launcher end at once (msrun
                # waits for a node time-out, tens of seconds, after a worker fails).
                print("the sweep process is gone; leaving", file=sys.stderr, flush=True)
                break
            time.sleep(0.02)
        if gone:
            break
        text = item.read_text()
        if text == STOP:
            break
        job_dir = Path(text)
        if phase == "standalone":
            redirect_to(JobDir(job_dir).logs / "standalone.log")
        else:
            redirect_output(job_dir, ctx.rank)
        try:
            module.run_job(load_job(job_dir), job_dir, ctx, phase)
        except BaseException as exc:
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            # a rank that raised (not one stopped by a signal, the kill at a time limit): the supervisor asks the
            # live ranks for their stacks meanwhile
            if isinstance(exc, Exception) and type(exc).__name__ != "SignalException":
                try:
                    JobDir(job_dir).failed(ctx.rank).touch()
                except OSError:
                    pass
            # Often this rank failed only because a peer vanished (gloo: connection closed).
            # Leave after the peer, so that a launcher which reports the first exit it sees
            # (elastic_launch with fork does) names the rank that failed first.
            time.sleep(FAILED_RANK_GRACE_S)
            os._exit(1)
        settle()  # the job's copies are gone: their memory leaves this waiting process too
        seq += 1
    module.close_rank(ctx, exit_process=exit_process)


def main(argv: list[str]) -> None:
    from sweep.layout import is_pool_dir
    from sweep.train import PHASES, load_job, rank_functions, standalone_config
    from sweep.train.heap import settle

    parser = argparse.ArgumentParser(prog="python -m sweep.train")
    parser.add_argument("dir", type=Path, help="a job dir (job.yaml) or a pool dir (pool.yaml)")
    parser.add_argument("--phase", choices=PHASES, default="both")
    args = parser.parse_args(argv)
    user_path()
    stacks_on_signal()
    if is_pool_dir(args.dir):
        serve(args.dir, phase=args.phase)
        return
    cfg = load_job(args.dir)
    if args.phase == "standalone":  # baseline.framework: maybe another framework's rank module
        cfg = standalone_config(cfg)
    module = rank_functions(cfg)
    settle()  # the imports: the collections during the job skip them (sweep.train.heap)
    module.run_rank(cfg, str(args.dir), args.phase)


if __name__ == "__main__":
    main(sys.argv[1:])

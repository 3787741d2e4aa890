"""Each framework's launcher command lines, and the launch handle."""

import sys
from pathlib import Path

import pytest

from sweep.frameworks.base import rank_script
from sweep.frameworks.mindspore import MindSporeFramework, msrun_argv
from sweep.frameworks.torch import TorchFramework, elastic_fork_argv, torchrun_argv
from sweep.launch import supervise
from sweep.launch.topology import topology_from_env


def test_torchrun_argv_runs_the_rank_module_on_n_local_processes():
    argv = torchrun_argv(4, Path("/tmp/job"), python="/py/bin/python")
    assert argv == [
        "/py/bin/python", "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=4",
        "-m", "sweep.train", "/tmp/job",
    ]


def test_msrun_argv_uses_the_venv_msrun_and_the_rank_script():
    argv = msrun_argv(2, Path("/tmp/job"), 12345, python="/py/bin/python")
    assert argv == [
        "/py/bin/msrun", "--worker_num=2", "--local_worker_num=2", "--master_port=12345",
        "--log_dir=/tmp/job/logs", "--join=True", rank_script(), "/tmp/job",
    ]
    assert Path(rank_script()).is_file()


def test_a_framework_refuses_a_launcher_it_has_not(tmp_path):
    with pytest.raises(ValueError, match="framework=torch has: torchrun, elastic_fork"):
        TorchFramework.argv("mpirun", 2, tmp_path)
    with pytest.raises(ValueError, match="framework=mindspore has: msrun"):
        MindSporeFramework.argv("torchrun", 2, tmp_path)


def test_elastic_fork_runs_the_fork_launcher_on_one_node_only(tmp_path):
    assert elastic_fork_argv(4, Path("/tmp/pool"), python="/py/bin/python") == [
        "/py/bin/python", "-m", "sweep.launch.fork_launch", "--nproc-per-node=4", "/tmp/pool",
    ]
    assert TorchFramework.argv("elastic_fork", 2, tmp_path) == elastic_fork_argv(2, tmp_path)
    two_nodes = {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a[1-2]", "SLURM_NODEID": "0"}
    with pytest.raises(ValueError, match="one node only"):
        TorchFramework.argv("elastic_fork", 4, tmp_path, topology=topology_from_env(two_nodes, 4))


def test_msrun_picks_a_free_port(tmp_path):
    argv = MindSporeFramework.argv("msrun", 2, tmp_path)
    port = int(next(a for a in argv if a.startswith("--master_port=")).split("=")[1])
    assert 1024 <= port <= 65535
    assert argv[0] == str(Path(sys.executable).parent / "msrun")


def test_a_launch_handle_polls_waits_and_kills(tmp_path):
    spec = supervise.LaunchSpec(argv=[sys.executable, "-c", "import time; time.sleep(60)"], env={"A": "1"},
                             log_path=tmp_path / "logs" / "launcher.log", timeout_s=1)
    handle = supervise.start(spec)
    assert handle.poll() is None and handle.kill_tag == spec.kill_tag
    assert [p.pid for p in supervise.tagged_processes(spec.kill_tag)] == [handle.pid]
    assert handle.kill() == 1 and handle.poll() is not None
    assert supervise.tagged_processes(spec.kill_tag) == []
    assert spec.log_path.read_text().startswith("$ ")
    outcome = supervise.run(spec)  # the same command to its 1 s time limit
    assert outcome.timed_out and outcome.returncode is None and outcome.killed == 1


def test_at_its_time_limit_a_launch_asks_its_ranks_for_their_stacks(tmp_path):
    """Issue 52: a timeout said no more than "no result". Before the kill, every process of
    the launch that registered for it (the ranks: sweep.train.__main__.stacks_on_signal)
    writes its Python stack into its log; the launcher itself is not asked."""
    rank = ("from sweep.train.__main__ import stacks_on_signal; stacks_on_signal()\n"
            "import time\ndef stuck():\n    time.sleep(60)\nstuck()")
    spec = supervise.LaunchSpec(argv=["sh", "-c", f'"{sys.executable}" -c "$0"; true', rank], env={},
                                log_path=tmp_path / "launcher.log", timeout_s=3)
    outcome = supervise.run(spec)
    assert outcome.timed_out and outcome.killed >= 1
    log = spec.log_path.read_text()
    assert "(most recent call first):" in log and 'line 4 in stuck' in log, log


def _worker_log(job_dir, rank, frames):
    """A worker log ending in the stack faulthandler writes (innermost frame first)."""
    lines = ["[W] some warning", "Thread 0x00007f0000000001 (most recent call first):",
             '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
             "", "Current thread 0x00007f0000000002 (most recent call first):"]
    lines += [f'  File "{file}", line {line} in {func}' for file, line, func in frames]
    (job_dir / "logs").mkdir(parents=True, exist_ok=True)
    (job_dir / "logs" / f"worker_{rank}.log").write_text("\n".join(lines) + "\n")


WAITING = [("/venv/site-packages/torch/distributed/distributed_c10d.py", 4394, "all_gather_single"),
           ("/venv/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", 210, "foreach_all_gather"),
           ("/repo/sweep/train/torch_step.py", 75, "train"), ("/repo/sweep/train/__main__.py", 120, "main")]


def test_the_rank_that_hung_is_named_from_the_stacks_the_ranks_wrote(tmp_path):
    from sweep.run.failures import hung_ranks

    _worker_log(tmp_path, 0, WAITING)
    _worker_log(tmp_path, 1, [("/repo/my_engine.py", 67, "fault"), ("/repo/sweep/train/torch_step.py", 80, "train"),
                              ("/repo/sweep/train/__main__.py", 120, "main")])
    assert hung_ranks(tmp_path) == ("rank 1 hung outside any collective, at fault (my_engine.py:67); rank 0 waits in "
                                    "all_gather_single (distributed_c10d.py:4394), called from train (torch_step.py:75)")
    _worker_log(tmp_path, 1, WAITING[1:])  # both in collectives: a collective one rank never joins
    assert hung_ranks(tmp_path).startswith("every rank waits in a collective (one that some rank never joins")
    for log in (tmp_path / "logs").glob("*.log"):
        log.write_text("no stack here\n")
    assert hung_ranks(tmp_path) is None


def test_a_rank_that_raised_is_not_the_one_that_hung_and_its_error_is_kept_above_the_tail(tmp_path):
    from sweep.layout import JobDir
    from sweep.run.failures import failure_cause, hung_ranks, log_tails

    # rank 0's collective gave up on rank 1 and raised (its log: the error, then its stack as it waits to exit);
    # rank 1 sleeps outside any collective
    _worker_log(tmp_path, 0, [("/repo/sweep/train/__main__.py", 109, "serve")])
    log = tmp_path / "logs" / "worker_0.log"
    log.write_text("Traceback (most recent call last):\nRuntimeError: \n---\n- Kernel error:\n---\n"
                   "Launch kernel failed: Default/AllReduce-op0\n\n" + "- C++ Call Stack:\n" + "padding\n" * 40
                   + log.read_text())
    _worker_log(tmp_path, 1, [("/usr/lib/python3.11/time.py", 1, "sleep"), ("/repo/my_engine.py", 89, "reduce_grads"),
                              ("/repo/sweep/train/__main__.py", 120, "serve")])
    JobDir(tmp_path).failed(0).touch()
    assert hung_ranks(tmp_path, outside_only=True) == "rank 1 hung outside any collective, at sleep (time.py:1) in " \
                                                      "reduce_grads (my_engine.py:89)"
    tails = log_tails(tmp_path)
    assert "RuntimeError:" in tails["worker_0.log"] and "[...]" in tails["worker_0.log"]
    assert "worker_0.log: RuntimeError: Kernel error: Launch kernel failed: Default/AllReduce-op0" in \
        failure_cause(None, tails)  # the collective's own failure, not its section header "- Kernel error:"
    _worker_log(tmp_path, 1, WAITING)  # a crash, the other rank waiting for it: nothing hung outside a collective
    assert hung_ranks(tmp_path, outside_only=True) is None
    # MindSpore's DistributedGradReducer all-reduces inside a compiled graph: no collective's frame, and the rank
    # is not "outside any collective" (a new user was pointed at their own code)
    jit = [("/venv/site-packages/mindspore/graph/api.py", 1907, "grad_jit"),
           ("/repo/sweep/engines/data_parallel.py", 102, "reduce_grads"), ("/repo/sweep/train/__main__.py", 120, "serve")]
    _worker_log(tmp_path, 1, jit)
    assert hung_ranks(tmp_path, outside_only=True) is None
    JobDir(tmp_path).failed(0).unlink()
    assert hung_ranks(tmp_path).endswith("rank 1 is in a compiled graph, grad_jit (api.py:1907), called from "
                                         "reduce_grads (data_parallel.py:102) (what runs inside it, a collective or "
                                         "not, has no Python frame)")
    JobDir(tmp_path).failed(0).touch()
    # at a time limit: the stack first, then the kill's signal raised in the rank (a marker or not), which
    # still counts as the rank that hung
    _worker_log(tmp_path, 1, [("/repo/my_engine.py", 89, "fault"), ("/repo/sweep/train/__main__.py", 120, "serve")])
    hung = tmp_path / "logs" / "worker_1.log"
    hung.write_text(hung.read_text() + "Traceback (most recent call last):\nSignalException: Process 9 got signal: 2\n")
    JobDir(tmp_path).failed(1).touch()
    assert hung_ranks(tmp_path, outside_only=True).startswith("rank 1 hung outside any collective, at fault")


# a MindSpore kernel error as its worker log shows it: the message is on the lines after "TypeError:"
MINDSPORE_KERNEL_ERROR = """\
Traceback (most recent call last):
  File "rank.py", line 1, in <module>
TypeError: 
----------------------------------------------------
- Kernel select failed:
----------------------------------------------------
Select CPU operator[AllReduce] fail! Unsupported data type!
The supported data types are input[Float32], output[Float32]; but get input[BFloat16 ]

----------------------------------------------------
- C++ Call Stack: (For framework developers)
----------------------------------------------------
mindspore/ccsrc/plugin/cpu/cpu_device_context.cc:469 SetOperatorInfo
"""


def test_torchruns_padded_summary_fields_read_with_one_space_in_the_reason():
    from sweep.run.failures import failure_cause

    box = "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 42)\n"
    cause = failure_cause(1, {"launcher.log": box})
    assert cause == "launcher exited with code 1; rank : 0 (local_rank: 0); exitcode : 1 (pid: 42)"


def test_a_crash_cause_keeps_an_exception_message_that_follows_its_line():
    from sweep.run.failures import failure_cause

    cause = failure_cause(1, {"worker_0.log": MINDSPORE_KERNEL_ERROR, "worker_1.log": "ValueError: bad shape\n"})
    assert cause == (
        "launcher exited with code 1; worker_0.log: TypeError: Kernel select failed: Select CPU operator[AllReduce] "
        "fail! Unsupported data type! The supported data types are input[Float32], output[Float32]; but get "
        "input[BFloat16 ]; worker_1.log: ValueError: bad shape"
    )
    # a factory's error wrapped by Hydra (its message on the next line), then the stacks the rank wrote when stopped
    wrapped = ("hydra.errors.InstantiationException: Error in call to target 'my_models.build':\n"
               "ValueError('refuses hidden_size=64')\n"
               "Current thread 0x00007f76e540bb80 (most recent call first):\n"
               '  File "/work/sweep/train/__main__.py", line 116 in serve\n')
    assert failure_cause(1, {"worker_0.log": wrapped}) == (
        "launcher exited with code 1; worker_0.log: hydra.errors.InstantiationException: Error in call to target "
        "'my_models.build': ValueError('refuses hidden_size=64')")


def test_a_rank_aborted_by_an_uncaught_cpp_exception_is_the_cause_not_its_peers_broken_connection(tmp_path):
    """A new user's model took a branch on one rank only (sharded data): FSDP2's reduce-scatters
    differ in size, gloo's ``EnforceNotMet`` aborts that rank (two lines at the top of its log,
    then its stacks), and its peer sees "Connection reset by peer". The reason quoted the peer."""
    from sweep.run.failures import failure_cause, log_tails

    logs = tmp_path / "logs"
    logs.mkdir()
    frames = "".join(f'  File "/x/torch/distributed/f{i}.py", line {i} in g{i}\n' for i in range(60))
    frames = '  File "/x/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", line 619 in foreach_reduce\n' \
        + frames
    (logs / "worker_1.log").write_text(
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 1208 vs 936. Received data size "
        "doesn't match expected size. Is there a distributed collective mismatch in your code?\n"
        "Fatal Python error: Aborted\n\nThread 0x00007f31bdff9b80 (most recent call first):\n" + frames)
    (logs / "worker_0.log").write_text("RuntimeError: [pair.cc:537] Read error [127.0.0.1]:23468: Connection reset "
                                       "by peer. This is typically caused by a remote worker hanging\n")
    cause = failure_cause(1, log_tails(tmp_path))
    assert cause.startswith(
        "launcher exited with code 1; worker_1.log: gloo::EnforceNotMet: [enforce fail at pair.cc:456] "
        "op.preamble.length <= op.nbytes. 1208 vs 936. Received data size doesn't match expected size. Is there a "
        "distributed collective mismatch in your code?; worker_0.log: RuntimeError: "), cause
    # what it means, where the mismatch was FSDP2's gradient reduction (a new user's MoE: an expert unused on a rank)
    assert cause.endswith("; the ranks' gradient reductions differ in size: some rank reduced other gradients than "
                          "the others (a parameter unused in the forward there, an expert no token of its shard "
                          "reached or a branch not taken, has no gradient on that rank; or an engine reduces "
                          "otherwise on one rank): give every parameter a gradient on every rank (a zero-weighted "
                          "use), or data.split=replicated"), cause


def test_a_forward_all_gather_of_other_sizes_says_a_rank_ran_another_unit(tmp_path):
    """A new user's model calls a module on a data-dependent branch (hsdp2x2, wrap=per_layer):
    the ranks' FSDP2 all-gathers in the forward differ in size. The reason said only gloo's
    words; it now says what they mean, as for a gradient reduction."""
    from sweep.run.failures import failure_cause, log_tails

    logs = tmp_path / "logs"
    logs.mkdir()
    frames = ('  File "/x/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", line 364 in foreach_all_gather\n'
              '  File "/x/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 407 in unshard\n'
              '  File "/x/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 551 in pre_forward\n')
    (logs / "worker_1.log").write_text(
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 408 vs 272. Received data size "
        "doesn't match expected size. Is there a distributed collective mismatch in your code?\n"
        "Fatal Python error: Aborted\n\nThread 0x00007f31bdff9b80 (most recent call first):\n" + frames)
    cause = failure_cause(1, log_tails(tmp_path))
    assert cause.endswith("; the ranks' parameter all-gathers differ in size: some rank's forward ran a fully_shard "
                          "unit the others' did not (a module on a branch its data took, called there only), so the "
                          "ranks gathered other units' parameters: run every unit on every rank (a zero-weighted "
                          "use), wrap=root, or data.split=replicated"), cause


def test_a_rank_that_dies_while_the_others_wait_ends_the_launch_at_once(tmp_path):
    """msrun logs a worker that died, then waits for the others (which wait for it): the
    launch ends at that line, not at its time limit (issue 28)."""
    script = "import time; print('[ERROR] ME(1): Worker' + ' process 7 exit with exception. Error code: 1.', " \
             "flush=True); time.sleep(60)"  # (the command line, first in the log, must not match)
    spec = supervise.LaunchSpec(argv=[sys.executable, "-c", script], env={}, log_path=tmp_path / "launcher.log",
                                timeout_s=50, fail_patterns=(r"Worker process \d+ exit with exception",))
    outcome = supervise.run(spec)
    assert outcome.failed_early == "Worker process 7 exit with exception. Error code: 1."
    assert outcome.wall_s < 10 and not outcome.timed_out and outcome.returncode is None and outcome.killed >= 1
    assert supervise.tagged_processes(spec.kill_tag) == []


def test_a_log_watch_reads_only_what_came_after_it(tmp_path):
    log = tmp_path / "pool.log"
    log.write_text("Worker process 1 exit with exception (an earlier job)\n")
    watch = supervise.LogWatch(log, (r"Worker process \d+ exit",), from_end=True)
    assert watch.match() is None
    with open(log, "a") as f:
        f.write("noise\nWorker process 2 exit with")
    assert watch.match() is None  # a line not finished yet
    with open(log, "a") as f:
        f.write(" exception\n")
    assert watch.match() == "Worker process 2 exit with exception"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped raise, on purpose
def test_an_interrupt_whose_raise_is_dropped_still_stops_a_running_launch(tmp_path, monkeypatch):
    # Python drops an exception raised inside a finalizer (it prints "Exception ignored in ...");
    # a signal handled there must still end the launch's wait, with its processes killed.
    import signal

    from sweep.launch import interrupts

    monkeypatch.setattr(interrupts, "RECEIVED", [])

    class Finalized:
        def __del__(self):
            interrupts.handle(signal.SIGINT, None)

    Finalized()  # the KeyboardInterrupt raised in __del__ goes no further than it
    assert interrupts.RECEIVED == ["SIGINT"]
    spec = supervise.LaunchSpec(argv=[sys.executable, "-c", "import time; time.sleep(60)"], env={},
                                log_path=tmp_path / "launcher.log", timeout_s=50)
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        supervise.run(spec)
    assert supervise.tagged_processes(spec.kill_tag) == []


def test_an_error_raised_once_a_signal_came_is_the_interrupt(monkeypatch):
    # A CI run saw Ctrl-C land inside OmegaConf: the half-made node then failed a lookup with a
    # ConfigKeyError, and the job was recorded as that error instead of as interrupted.
    import signal

    from omegaconf.errors import ConfigKeyError

    from sweep.launch import interrupts

    monkeypatch.setattr(interrupts, "RECEIVED", [])
    with pytest.raises(ConfigKeyError):  # no signal: the error is itself
        with interrupts.surfaced():
            raise ConfigKeyError("betas")
    with pytest.raises(KeyboardInterrupt):
        interrupts.handle(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt, match="SIGINT") as raised:
        with interrupts.surfaced():
            raise ConfigKeyError("'NoneType' object has no attribute '_invalidate_flags_cache'")
    assert isinstance(raised.value.__cause__, ConfigKeyError)
    assert interrupts.reason() == "interrupted (Ctrl-C)"

"""One exit-code contract (issue 28): 2 for any config, input or output-path error, in one
line naming the key and what is allowed, before Hydra starts; 1 is kept for numerics
(a failed comparison, ``gate=true``). Each case is the real command in a subprocess."""

import subprocess
import sys

import pytest

from sweep.config import CONF_DIR
from sweep.run.preflight import _variants, check_command_line
from tests.conftest import ROOT


def _sweep(args, cwd):
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("args, line", [
    (["stpes=10"], "error: stpes=10: no such key (did you mean steps?)"),
    (["model.hiden_size=3"], "error: model.hiden_size=3: no such key (did you mean model.hidden_size?)"),
    (["trian.batch_size=4"], "error: trian.batch_size=4: no such key (did you mean train.batch_size?)"),
    (["mp_policy=bf61"], "error: mp_policy=bf61: no such option; mp_policy is one of: bf16, bf16_bf16, "),
    # a key of another option of its group: that option named, the value as typed (false, not False)
    (["engine.options.skip_dtensor_dispatch=false"], "error: engine.options.skip_dtensor_dispatch=false: no such key "
     "under engine=torch_fsdp2 (engine=hyper_parallel and engine=hyper_parallel_report have it)"),
    (["model.args.num_heads=4"], "error: model.args.num_heads=4: no such key under model=mlp (model=transformer has it)"),
    (["-m", "optimizer=adam,lamb"], "error: optimizer=lamb: no such option; optimizer is one of: adam, adamw, sgd"),
    (["steps=abc"], "error: steps=abc: "),
    # a key a preset adds, misspelt: the close one from the config the other overrides make
    (["experiment=example_command", "runner.args.reduc=sum"],
     "error: runner.args.reduc=sum: no such key (did you mean runner.args.reduce?)"),
    (["mp_policy.param_dtype=bfloat61"], "error: mp_policy.param_dtype=bfloat61: Error merging override "
     "mp_policy.param_dtype=bfloat61 (Invalid value 'bfloat61', expected one of [float32, bfloat16, float16]) (did you "
     "mean mp_policy.param_dtype=bfloat16?)"),
    (["steps=[1"], "error: "),  # an override that does not parse
    # Hydra's own groups and this project's sweepers' settings (issue 52)
    (["-m", "hydra/sweeper=isolat"], "error: hydra/sweeper=isolat: no such option; hydra/sweeper is one of: basic, "
                                     "bisect, isolate (did you mean hydra/sweeper=isolate?)"),
    (["-m", "hydra/sweeper=isolate", 'hydra.sweeper.failing=["optimizer=sgd"]'],
     "error: hydra/sweeper=isolate: hydra.sweeper.failing is given without hydra.sweeper.passing: give both"),
    (["-m", "hydra/sweeper=isolate", 'hydra.sweeper.passing=["optimizer=adam"]'],
     "error: hydra/sweeper=isolate: hydra.sweeper.passing is given without hydra.sweeper.failing: give both"),
    (["-m", "hydra/sweeper=isolate", "hydra.sweeper.repeat=0"], "error: hydra.sweeper.repeat=0 must be >= 1"),
    # the isolation's own override lists, composed beside the command line's before any job (a new user's typos
    # there exited 1 with Hydra's error)
    (["-m", "hydra/sweeper=isolate", 'hydra.sweeper.failing=["mp_policy=bf61"]',
      'hydra.sweeper.passing=["mp_policy=fp32"]'],
     "error: hydra.sweeper.failing: mp_policy=bf61: no such option; mp_policy is one of: "),
    (["-m", "hydra/sweeper=isolate", 'hydra.sweeper.failing=["steps=5"]', 'hydra.sweeper.passing=["stpes=4"]'],
     "error: hydra.sweeper.passing: stpes=4: no such key (did you mean steps?)"),
    # each list composed whole, as its endpoint job runs it: overrides fine alone that clash together
    (["-m", "hydra/sweeper=isolate", 'hydra.sweeper.failing=["~compare","compare.rtol=1e-3"]',
      'hydra.sweeper.passing=["optimizer=adam"]'],
     "error: hydra.sweeper.failing: ~compare compare.rtol=1e-3: Could not override 'compare.rtol'"),
    (["-m", "hydra/sweeper=isolate", 'hydra.sweeper.failing=["steps=5"]', 'hydra.sweeper.passing=["steps=5"]'],
     "error: hydra.sweeper.failing and hydra.sweeper.passing are the same overrides: there is nothing to isolate"),
    (["-m", "hydra/sweeper=isolate", "hydra.sweeper.from_sweep=no/such/dir"],
     "error: hydra.sweeper.from_sweep=no/such/dir: no such dir"),
    (["-m", "hydra/launcher=submitit_locl"], "error: hydra/launcher=submitit_locl: no such option; hydra/launcher is"),
    # a placeholder copied from the docs, quoted for the shell but not for Hydra's grammar
    (["-m", "hydra/sweeper=isolate", "hydra.sweeper.from_sweep=outputs/multirun/<date_time>"],
     "error: hydra.sweeper.from_sweep=outputs/multirun/<date_time>: <date_time> is a placeholder from the docs: put "
     "the real value there"),
    (["note=a&b"], """error: LexerNoViableAltException: note=a&b (Hydra's grammar takes & only quoted: 'note="a&b"')"""),
])
def test_a_command_line_that_does_not_compose_exits_2_with_one_line(tmp_path, args, line):
    proc = _sweep(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(line) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "outputs").exists()  # nothing ran, nothing was written


def test_a_run_dir_under_a_file_or_in_a_read_only_place_exits_2_with_one_line(tmp_path):
    (tmp_path / "outputs").write_text("")
    proc = _sweep(["steps=1"], tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: hydra.run.dir=outputs/run/") and "is a file, not a folder" in proc.stderr
    proc = _sweep(["steps=1", "hydra.run.dir=/proc/sweep_run"], tmp_path)  # no one writes into /proc, root neither
    assert proc.returncode == 2 and proc.stderr.startswith("error: hydra.run.dir=/proc/sweep_run cannot be created")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_every_swept_value_is_composed_but_not_their_product():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(["a=1,2,3", "b=x,y", "~c", "d=4"])
    variants = _variants(parsed)
    assert variants[0] == (None, ["a=1", "b=x", "~c", "d=4"])
    assert [tried for tried, _ in variants[1:]] == ["a=2", "a=3", "b=y"]
    assert variants[-1][1] == ["a=1", "b=y", "~c", "d=4"]


def test_a_good_command_line_and_hydras_own_options_pass_untouched():
    assert check_command_line(["-m", "mp_policy=fp32,bf16", "mesh=dp2,hsdp2x2", "+mp_policy.overrides.x.param_dtype=float32"],
                              CONF_DIR) is None
    assert check_command_line(["--help"], CONF_DIR) is None
    assert check_command_line(["--cfg", "job", "steps=3"], CONF_DIR) is None
    assert check_command_line(["-m", "--cfg", "job"], CONF_DIR).startswith("-m and --cfg: only one of --run, ")
    assert check_command_line(["-m", "steps=5,5"], CONF_DIR) == (
        "steps=5,5: 5 given twice: the same job would run twice (repeat=N repeats a job on purpose)")
    assert check_command_line(["-m", "hydra/sweeper=isolate", 'hydra.sweeper.failing=["optimizer=sgd"]',
                               'hydra.sweeper.passing=["optimizer=adam"]'], CONF_DIR) is None
    unquoted = check_command_line(["-m", "hydra/sweeper=isolate", "hydra.sweeper.failing=[optimizer=sgd,mesh=dp4]",
                                   'hydra.sweeper.passing=["optimizer=adam"]'], CONF_DIR)
    assert unquoted.endswith("""each element of the list is an override, quoted: """
                             """'hydra.sweeper.failing=["optimizer=sgd","mesh=dp4"]'"""), unquoted
    assert check_command_line(["-m", "hydra/launcher=basic", "hydra.job.chdir=false"], CONF_DIR) is None
    # a key under ablation=none's null sweeper params: one line (it was omegaconf's AssertionError, exit 1)
    null = check_command_line(["-m", "ablation=none", "hydra.sweeper.params.steps=3"], CONF_DIR)
    assert null.startswith("hydra.sweeper.params.steps=3: hydra.sweeper.params is null in this config"), null
    assert check_command_line(["-m", "hydra.sweeper.params.steps=3"], CONF_DIR) is None  # the default grid's params


def test_a_factory_that_does_not_import_is_one_line_of_ours(tmp_path):
    """Hydra logs its own error before it raises (``hydra.utils.get_method``); the job says
    it once, in its words, and exits 2 (issue 52)."""
    proc = _sweep(["model._target_=no_such_module.build_model", "steps=1"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Error getting callable" not in out and "Are you sure" not in out, out
    assert out.count("does not import") == 1 and "model._target_=no_such_module.build_model does not import" in out


def test_help_piped_into_a_reader_that_leaves_ends_quietly(tmp_path):
    """``python -m sweep --help | head -0``: the reader is gone before the help is written;
    the command ends without a BrokenPipeError traceback (issue 38)."""
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "--help"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    proc.stdout.close()  # as a reader that leaves at once does
    _, err = proc.communicate(timeout=120)
    assert b"BrokenPipeError" not in err and b"Traceback" not in err, err.decode()


def test_a_job_stopped_by_a_signal_names_it(monkeypatch):
    """A scheduler's or timeout's SIGTERM is not a Ctrl-C (a new user's `timeout -s TERM`)."""
    from sweep.launch import interrupts

    monkeypatch.setattr(interrupts, "RECEIVED", [])
    assert interrupts.reason() == "interrupted (Ctrl-C)"
    monkeypatch.setattr(interrupts, "RECEIVED", ["SIGTERM"])
    assert interrupts.reason() == "interrupted (SIGTERM)"

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
    (["mp_policy=bf61"], "error: mp_policy=bf61: no such option; mp_policy is one of: bf16, bf16_bf16, "),
    (["-m", "optimizer=adam,lamb"], "error: optimizer=lamb: no such option; optimizer is one of: adam, adamw, sgd"),
    (["steps=abc"], "error: steps=abc: "),
    (["steps=[1"], "error: "),  # an override that does not parse
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
    assert check_command_line(["hydra/launcher=no_such_launcher"], CONF_DIR) is None  # Hydra's own groups: Hydra's


def test_help_piped_into_a_reader_that_leaves_ends_quietly(tmp_path):
    """``python -m sweep --help | head -0``: the reader is gone before the help is written;
    the command ends without a BrokenPipeError traceback (issue 38)."""
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "--help"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    proc.stdout.close()  # as a reader that leaves at once does
    _, err = proc.communicate(timeout=120)
    assert b"BrokenPipeError" not in err and b"Traceback" not in err, err.decode()

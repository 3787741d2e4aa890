"""Entry of every rank: ``python -m sweep.train JOB_DIR [--phase standalone]``, or the
file ``sweep/train/__main__.py`` for msrun (which takes a script path)."""

import argparse
import sys


def main(argv: list[str]) -> None:
    from sweep.train import PHASES, load_job

    parser = argparse.ArgumentParser(prog="python -m sweep.train")
    parser.add_argument("job_dir")
    parser.add_argument("--phase", choices=PHASES, default="both")
    args = parser.parse_args(argv)
    cfg = load_job(args.job_dir)
    if cfg.framework.name == "torch":
        from sweep.train.torch_rank import run_rank
    else:
        from sweep.train.mindspore_rank import run_rank
    run_rank(cfg, args.job_dir, args.phase)


if __name__ == "__main__":
    main(sys.argv[1:])

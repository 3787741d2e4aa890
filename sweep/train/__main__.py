"""Entry of every rank: ``python -m sweep.train JOB_DIR`` or ``python .../sweep/train/__main__.py JOB_DIR``."""

import sys


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m sweep.train JOB_DIR")
    from sweep.train import load_job

    cfg = load_job(argv[0])
    if cfg.framework.name == "torch":
        from sweep.train.torch_rank import run_rank
    else:
        from sweep.train.mindspore_rank import run_rank
    run_rank(cfg, argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])

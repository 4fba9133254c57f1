"""The train entry point: `python -m components.train ...`. The KFP component calls the
same function in-process; TFJob workers run this command."""
import argparse
import sys

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)
from components.errors import GpupipeError
from components.train.logic import run_train


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.train", description=__doc__.splitlines()[0])
    p.add_argument("--examples", required=True, help="ingest output (local path or gs://)")
    p.add_argument("--statistics", required=True, help="validate's statistics output")
    p.add_argument("--model-dir", required=True, help="where the chief writes the SavedModel")
    p.add_argument("--settings", required=True, help="TrainSettings as JSON")
    p.add_argument("--backup-dir", default="", help="BackupAndRestore directory a retry finds")
    p.add_argument("--log-dir", default="", help="TensorBoard logs")
    p.add_argument("--report-dir", default="", help="training report (JSON and Markdown)")
    args = p.parse_args(argv)
    try:
        run_train(args.examples, args.statistics, args.model_dir, args.settings, args.backup_dir, args.log_dir,
                  args.report_dir)
    except GpupipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

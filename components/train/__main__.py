"""The train entry point: `python -m components.train ...`. The KFP component calls the
same function in-process; the workers of a multi-worker job run this command."""
import argparse
import os
import sys

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)
from components.contracts.errors import CONFIG_ERROR_EXIT, GpupipeError, reports_errors
from components.contracts.storage import schemes
from components.kinds import Columns
from components.train.launch import tf_config_from_env
from components.train.logic import run_train
from components.train.phases import Phases
from components.train.settings import TrainSettings


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.train", description=__doc__.splitlines()[0])
    p.add_argument("--examples", required=True, help=f"ingest output (local path, {schemes.named()})")
    p.add_argument("--statistics", required=True, help="validate's statistics output")
    p.add_argument("--model-dir", required=True, help="where the chief writes the SavedModel")
    p.add_argument("--columns", required=True, help="the label and features (Columns as JSON)")
    p.add_argument("--settings", required=True, help="TrainSettings as JSON")
    p.add_argument("--backup-dir", default="", help="BackupAndRestore directory a retry finds")
    p.add_argument("--log-dir", default="", help="TensorBoard logs")
    p.add_argument("--report-dir", default="", help="training report (JSON and Markdown)")
    args = p.parse_args(argv)
    tf_config = tf_config_from_env()
    if tf_config:  # a JobSet worker: gpupipe, not an operator, gives TF_CONFIG
        os.environ["TF_CONFIG"] = tf_config
    try:
        # the workers' entry point (run_train_task is the task's): a GpupipeError is reported here, once
        train = reports_errors("train")(run_train)
        train(examples_dir=args.examples, statistics_dir=args.statistics, model_dir=args.model_dir,
              columns=Columns.from_json(args.columns), settings=TrainSettings.from_json(args.settings),
              backup_dir=args.backup_dir, log_dir=args.log_dir, report_dir=args.report_dir,
              phases=Phases(since_process_start=True))
    except GpupipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""KFP wrapper for notify, the pipeline's exit handler: maps KFP's final status to
`components.notify.logic.run_notify`."""
from kfp import dsl


def notify(status: dsl.PipelineTaskFinalStatus, settings: str, pipeline: str, run_id: str, serving_base: str,
           model_name: str):
    """Runs when the rest of the run has ended, however it ended: one message to the webhook
    (the Secret notify.webhook_secret names, as $GPUPIPE_WEBHOOK_URL) for a failed run, a model
    not blessed, or a pushed version, with the gate's figures and the run's link."""
    from components.notify.logic import run_notify
    from components.notify.settings import NotifySettings

    run_notify(settings=NotifySettings.model_validate_json(settings), state=status.state,
               error=status.error_message or "", pipeline=pipeline, run_id=run_id, serving_base=serving_base,
               model_name=model_name)

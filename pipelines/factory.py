"""The pure pipeline factory: a validated config in, a KFP `@dsl.pipeline` out.

Each step gets its settings as one JSON parameter, the config section as it is (the
section is the step's own settings model), and the table's columns; run-time knobs (data
location, epochs, learning rate, threshold, serving base) are pipeline parameters whose
defaults come from the config, so a Kubeflow UI user changes them per run without
recompiling. Every task takes its pod shape from pipelines/pods.py. Nothing here reads
files, the environment or the network.
"""

from kfp import dsl, kubernetes

from components.contracts.compat import kfp_setters_without_source
from components.contracts.errors import GpupipeError
from components.contracts.pods import PodShape
from components.contracts.storage import schemes
from components.kinds import Columns
from components.notify.settings import WEBHOOK_SECRET_KEY, WEBHOOK_URL_ENV
from components.train.launch import POD_NAME_ENV, POD_UID_ENV, WORKFLOW_ENV, WORKFLOW_LABEL, Launch
from pipelines import pods, steps
from pipelines.config import PipelineConfig
from pipelines.steps import P_DATA_SOURCE, P_EPOCHS, P_LEARNING_RATE, P_SERVING_BASE, P_THRESHOLD, Build, Step

URI_FIX = schemes.examples()  # where every pod can read and write (the storage layer's shared schemes)


def _cluster_uri(value: str, key: str, fix: str) -> str:
    declared = schemes.of(value)
    if declared is not None and declared.alias_of:
        rest = value[len(declared.prefix):]
        raise GpupipeError(f"{key}: '{value}': {declared.prefix} is KFP's name for its artifact store only; write the "
                           f"same objects as {declared.alias_of}{rest} (set storage.s3.endpoint to the MinIO URL)")
    if not value.startswith(schemes.SHARED) and not value.startswith("synthetic:"):
        raise GpupipeError(f"{key}: '{value}' is a path inside the pod, lost with it on the cluster; {fix}")
    return value


def cluster_locations(config: PipelineConfig) -> dict:
    """The data source and serving base a compiled pipeline runs with when nobody types
    them in: the cluster section's URIs (else the local ones, which must then be URIs).
    Raises GpupipeError, naming the key, for any location a pod would read or write that
    does not outlive the pod."""
    cluster = config.cluster
    locations = {
        P_DATA_SOURCE: _cluster_uri(cluster.data_source or config.data.source,
                                    "cluster.data_source" if cluster.data_source else "data.source",
                                    f"set cluster.data_source: {URI_FIX}"),
        P_SERVING_BASE: _cluster_uri(cluster.serving_base or config.serving.base,
                                     "cluster.serving_base" if cluster.serving_base else "serving.base",
                                     f"set cluster.serving_base: {URI_FIX}"),
    }
    for key, value in (("validation.schema_file", config.validation.schema_file),
                       ("validation.drift.baseline_statistics", config.validation.drift.baseline_statistics)):
        if value:
            _cluster_uri(value, key, f"upload the file and set {key}: {URI_FIX}")
    if config.pipeline_root and not config.pipeline_root.startswith(schemes.PIPELINE_ROOTS):
        raise GpupipeError(f"pipeline_root: '{config.pipeline_root}' is not an object-store URI; give "
                           f"{schemes.PIPELINE_ROOTS[0]}BUCKET/PATH (or {', '.join(schemes.PIPELINE_ROOTS[1:])}), or "
                           "remove it for the installation's default")
    return locations


def run_parameters(config: PipelineConfig, local: bool = True) -> dict:
    """The pipeline's parameters with their defaults: the config's local locations for a
    local run, its cluster locations for the compiled pipeline."""
    params = {
        P_DATA_SOURCE: config.data.source,
        P_EPOCHS: config.training.epochs,
        P_THRESHOLD: config.evaluation.threshold,
        P_SERVING_BASE: config.serving.base,
        P_LEARNING_RATE: config.training.learning_rate,
    }
    return params if local else {**params, **cluster_locations(config)}


def apply_pod_shape(task: dsl.PipelineTask, shape: PodShape) -> None:
    """The shape onto a KFP task through kfp-kubernetes (secrets by name, never values)."""
    task.set_cpu_request(shape.cpu_request).set_cpu_limit(shape.cpu_limit)
    task.set_memory_request(shape.memory_request).set_memory_limit(shape.memory_limit)
    if shape.gpus:
        task.set_accelerator_type(shape.accelerator).set_accelerator_limit(shape.gpus)
    for key, value in sorted(shape.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for tol in shape.tolerations:
        kubernetes.add_toleration(task, key=tol.key, operator=tol.operator, value=tol.value, effect=tol.effect)
    for name, value in sorted(shape.env.items()):
        task.set_env_variable(name, value)
    by_secret: dict = {}
    for name, ref in sorted(shape.secret_env.items()):
        by_secret.setdefault(ref.secret, {})[ref.key] = name
    for secret, key_to_env in sorted(by_secret.items()):
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env=key_to_env)
    for sv in shape.secret_volumes:
        kubernetes.use_secret_as_volume(task, secret_name=sv.secret, mount_path=sv.mount_path)
    for ed in shape.empty_dirs:
        kubernetes.empty_dir_mount(task, volume_name=ed.name, mount_path=ed.mount_path, size_limit=ed.size_limit)
    if shape.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(shape.image_pull_secrets))
    for key, value in sorted(shape.labels.items()):
        kubernetes.add_pod_label(task, label_key=key, label_value=value)
    kubernetes.set_timeout(task, shape.timeout_seconds)


# On the job: which pipeline it trains for (`gpupipe queue` tells runs apart by it where Kueue's
# labelKeysToCopy copies it onto the Workload).
PIPELINE_LABEL = "gpupipe/pipeline"


def launched(config: PipelineConfig) -> bool:
    """Whether the train task launches a job for the workers (GPU training on 1 to N workers,
    unless training.pods.launcher is pod) instead of training in its own pod."""
    t = config.training.pods
    return t.workers > 1 or (t.gpus > 0 and t.launcher != "pod")


def launch_json(config: PipelineConfig) -> str:
    """The job the train task launches (a JobSet or TFJob of training.pods.workers GPU workers);
    "" when the task trains in its own pod (CPU training, or launcher: pod)."""
    t = config.training.pods
    if not launched(config):
        return ""
    return Launch(kind=t.launcher, image=config.train_image, workers=t.workers, namespace=t.job_namespace or "",
                  shape=pods.training_shape(config, queued=False), max_restarts=t.retries,
                  labels={**pods.queue_labels(config), PIPELINE_LABEL: config.name}).model_dump_json()


def launch_argument(build: Build) -> str:
    """train's `launch` input: the job it launches on the cluster; none in a local run (no
    JobSet on one machine: it trains in its task)."""
    return "" if build.local else launch_json(build.config)


def push_lineage(build: Build) -> str:
    """What each pushed version records of the pipeline that made it (JSON): the pipeline,
    gpupipe's version, the image the tasks run in and a digest of the whole config."""
    import hashlib
    import json

    from pipelines.version import __version__

    config = build.config
    return json.dumps({"pipeline": config.name, "gpupipe_version": __version__, "image": config.images.cpu_image,
                       "config_digest": hashlib.sha256(config.model_dump_json().encode()).hexdigest()},
                      sort_keys=True)


class StepTask:
    """How a step's task is built beyond its registry entry: its image, any setting of the
    task the entry cannot say, and its pod shape. A step's `hook` names a subclass."""

    def image(self, build: Build) -> str:
        return build.config.images.cpu_image

    def configure(self, task: dsl.PipelineTask, build: Build) -> None:
        """Called after the display name and caching, before the pod shape."""

    def shape(self, step: Step, build: Build) -> PodShape:
        return pods.step_shape(build.config, step.name)


class TrainTask(StepTask):
    """train: retries with backoff; in its own pod it holds the GPUs (the GPU image, the
    training shape); when it launches a job for the workers, the workers hold them and the
    task only creates and follows their job (the CPU image, the launcher's shape, and its own
    pod's name, uid and workflow, which the job's owner reference and labels carry)."""

    def image(self, build: Build) -> str:
        return build.config.images.cpu_image if launch_argument(build) else build.config.train_image

    def configure(self, task: dsl.PipelineTask, build: Build) -> None:
        t = build.config.training.pods
        if not launch_argument(build):
            task.set_retry(num_retries=t.retries, backoff_duration=t.retry_backoff, backoff_factor=2.0)
        else:
            # The launcher gets no KFP retry: Argo retries a KFP task only OnFailure, never a
            # pod deleted (an eviction, a lost node: the node is Error), and the SDK caps
            # backoff_max_duration at 3600 s, which Argo makes a retried pod's deadline, so a
            # retry could never follow a job of more than an hour. The JobSet carries the
            # restarts (training.pods.retries) and outlives its launcher: the run's Retry
            # re-attaches to it by name (components/train/follow.py).
            kubernetes.use_field_path_as_env(task, env_name=POD_NAME_ENV, field_path="metadata.name")
            kubernetes.use_field_path_as_env(task, env_name=POD_UID_ENV, field_path="metadata.uid")
            kubernetes.use_field_path_as_env(task, env_name=WORKFLOW_ENV,
                                             field_path=f"metadata.labels['{WORKFLOW_LABEL}']")

    def shape(self, step: Step, build: Build) -> PodShape:
        launch = launch_argument(build)
        return pods.launcher_shape(build.config) if launch else pods.training_shape(build.config)


class NotifyTask(StepTask):
    """notify: the webhook's URL from the Secret notify.webhook_secret names, by reference."""

    def configure(self, task: dsl.PipelineTask, build: Build) -> None:
        kubernetes.use_secret_as_env(task, secret_name=build.config.notify.webhook_secret,
                                     secret_key_to_env={WEBHOOK_SECRET_KEY: WEBHOOK_URL_ENV})


def create_pipeline(config: PipelineConfig, local: bool = False):
    """Returns the `@dsl.pipeline` function for `config`: for the cluster (compile it; its
    defaults are the cluster locations) or, `local`, for kfp.local."""
    defaults = run_parameters(config, local=local)

    with kfp_setters_without_source():  # @dsl.pipeline runs the body here, where the tasks' setters are called
        return _pipeline(config, local, defaults)


def _pipeline(config: PipelineConfig, local: bool, defaults: dict):
    @dsl.pipeline(name=config.name, description=config.description or f"gpupipe pipeline {config.name}",
                  pipeline_root=None if local else config.pipeline_root)
    def pipeline(
        data_source: str = defaults[P_DATA_SOURCE],
        epochs: int = defaults[P_EPOCHS],
        eval_threshold: float = defaults[P_THRESHOLD],
        serving_base: str = defaults[P_SERVING_BASE],
        learning_rate: float = defaults[P_LEARNING_RATE],
    ):
        build = Build(config=config, local=local, params={
            P_DATA_SOURCE: data_source, P_EPOCHS: epochs, P_THRESHOLD: eval_threshold, P_SERVING_BASE: serving_base,
            P_LEARNING_RATE: learning_rate})
        with exit_handler(build):
            for step in steps.registered():
                build.tasks[step.name] = step_task(step, build)

    return pipeline


def step_task(step: Step, build: Build) -> dsl.PipelineTask:
    """One step's task from its registry entry: its component on its image, its inputs from
    their sources, after the steps it names, its display name, caching, hook and pod shape."""
    hook = steps.load(step.hook)() if step.hook else StepTask()
    op = dsl.component(step.function(), base_image=hook.image(build), install_kfp_package=False)
    task = op(**{name: source.value(build) for name, source in step.inputs.items()})
    for other in step.after:
        task.after(build.tasks[other])
    task.set_display_name(step.display_name).set_caching_options(step.cached)
    hook.configure(task, build)
    apply_pod_shape(task, hook.shape(step, build))
    return task


def exit_handler(build: Build):
    """With notify.webhook_secret, on the cluster: the steps run inside a dsl.ExitHandler whose
    exit task (the registry's EXIT_HANDLER, components/notify) reports the run's final status
    (kfp.local has no exit handlers: `gpupipe run` notifies from its summary)."""
    import contextlib

    if build.local or not build.config.notify.webhook_secret:
        return contextlib.nullcontext()
    return dsl.ExitHandler(step_task(steps.EXIT_HANDLER, build), name="gpupipe-run")


def create_scoring_pipeline(config: PipelineConfig):
    """The scoring pipeline (`gpupipe compile --scoring`): one task that scores the data with
    the served version (components/predict), scheduled like any pipeline. Its parameters: the
    data, the serving base, the output (.csv or .jsonl) and the version (stable or N)."""
    import json

    from components.predict.component import make_predict_op

    defaults = cluster_locations(config)
    predict_op = make_predict_op(config.images.cpu_image)
    data = config.data

    with kfp_setters_without_source():  # the body runs at decoration: the task's setters
        @dsl.pipeline(name=f"{config.name}-scoring", pipeline_root=config.pipeline_root,
                      description=f"gpupipe scoring with the served {config.serving.model_name}")
        def scoring(data_source: str = defaults[P_DATA_SOURCE], serving_base: str = defaults[P_SERVING_BASE],
                    output: str = f"{defaults[P_SERVING_BASE]}/predictions/{config.serving.model_name}.jsonl",
                    version: str = "stable"):
            task = predict_op(source=data_source, data_format=data.format, columns=Columns.part_of(data).model_dump_json(),
                              serving_base=serving_base, model_name=config.serving.model_name, output=output,
                              version=version, key=data.split.key or "", na_values=json.dumps(list(data.na_values)),
                              engine="beam" if data.engine == "beam" else "local",
                              beam_pipeline_args=json.dumps(list(data.beam_pipeline_args)))
            task.set_display_name("Score with the served model").set_caching_options(False)
            apply_pod_shape(task, pods.step_shape(config, steps.EVALUATE))  # the resources that score the eval split
    return scoring

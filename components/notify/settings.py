"""Notify's settings: the config's `notify:` section."""
from __future__ import annotations

from typing import List, Literal, Optional

from pydantic import Field, field_validator

from components.contracts.settings import Strict, check_secret_name

Outcome = Literal["failed", "not_blessed", "pushed"]
OUTCOMES = ("failed", "not_blessed", "pushed")
WEBHOOK_URL_ENV = "GPUPIPE_WEBHOOK_URL"  # on the cluster: from the Secret notify.webhook_secret names
WEBHOOK_SECRET_KEY = "url"


class NotifySettings(Strict):
    """Where a run's outcome goes: a webhook taking Slack's incoming-webhook JSON
    (`{"text": ..., "blocks": [...]}`; Mattermost and Rocket.Chat take the same)."""

    webhook_url: Optional[str] = Field(
        None, description="the webhook for local runs (gpupipe run); never compiled into a pipeline")
    webhook_secret: Optional[str] = Field(
        None, description="on the cluster: the Secret (in the run's namespace) whose key `url` holds the webhook; "
                          "the pipeline's exit handler sends the message with the run's final status")
    on: List[Outcome] = Field(list(OUTCOMES), description="the outcomes that send a message")
    ui_url: Optional[str] = Field(
        None, description="the Kubeflow Pipelines UI, e.g. https://kubeflow.example.com/pipeline: messages link "
                          "the run (<ui_url>/#/runs/details/<run id>)")
    timeout_seconds: float = Field(10.0, gt=0, description="each attempt's timeout (three attempts)")

    @field_validator("webhook_url", "ui_url")
    @classmethod
    def _http(cls, v: Optional[str], info) -> Optional[str]:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"'{v[:80]}' is not an http(s):// URL")
        return v

    @field_validator("webhook_secret")
    @classmethod
    def _secret(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None else check_secret_name(v)

    @property
    def enabled(self) -> bool:
        return bool(self.webhook_url or self.webhook_secret)

    def for_cluster(self) -> "NotifySettings":
        """What the compiled pipeline carries: everything but the local webhook."""
        return self.model_copy(update={"webhook_url": None})

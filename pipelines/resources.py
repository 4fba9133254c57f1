"""A step's pod resources and deadline: the defaults each step declares in the step
registry (pipelines/steps.py) and the config's cluster.resources.<step> keys over them
(pipelines/config.py). Apart from the config, so the registry and the config can both
import it."""
from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, field_validator, model_validator

from components.contracts.pods import check_quantity, quantity_value
from components.contracts.settings import Strict

_DURATION_RE = re.compile(r"^(\d+)(s|m|h)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


class StepResources(Strict):
    """CPU and memory requests and limits of one step's pod, and how long it may run."""

    cpu: str = Field(description="CPU request, e.g. 500m or 2")
    cpu_limit: Optional[str] = Field(None, description="CPU limit (default: the request)")
    memory: str = Field(description="memory request, e.g. 2Gi")
    memory_limit: Optional[str] = Field(None, description="memory limit (default: the request)")
    timeout: str = Field("6h", description="the task fails after this long, e.g. 90m or 24h")

    @field_validator("cpu", "cpu_limit", "memory", "memory_limit")
    @classmethod
    def _quantities(cls, v: Optional[str], info) -> Optional[str]:
        return check_quantity(v, info.field_name)

    @field_validator("timeout")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION_RE.match(v):
            raise ValueError(f"'{v}' is not a duration; write e.g. 900s, 90m or 24h")
        return v

    @property
    def timeout_seconds(self) -> int:
        number, unit = _DURATION_RE.match(self.timeout).groups()
        return int(number) * _SECONDS[unit]


class StepResourcesOverride(Strict):
    """Any of StepResources' keys, over the step's defaults (pipelines/steps.py)."""

    cpu: Optional[str] = None
    cpu_limit: Optional[str] = None
    memory: Optional[str] = None
    memory_limit: Optional[str] = None
    timeout: Optional[str] = Field(None, pattern=_DURATION_RE.pattern)

    @field_validator("cpu", "cpu_limit", "memory", "memory_limit")
    @classmethod
    def _quantities(cls, v: Optional[str], info) -> Optional[str]:
        return check_quantity(v, info.field_name)

    @model_validator(mode="after")
    def _limits_not_below_requests(self) -> "StepResourcesOverride":
        for request, limit in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
            wanted, cap = getattr(self, request), getattr(self, limit)
            if wanted and cap and quantity_value(cap) < quantity_value(wanted):
                raise ValueError(f"{limit} {cap} is below {request} {wanted}, and Kubernetes refuses a limit below "
                                 f"its request; raise {limit}, or leave it out (it follows {request})")
        return self

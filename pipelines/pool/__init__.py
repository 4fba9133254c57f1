"""The shared GPU pool as Kueue sees it, for `gpupipe queue` and `gpupipe usage`
(pipelines/cli/pool.py): api (the connection, Workloads, the visibility API), workloads
(reading one), queue (the queue view), usage (GPU-hours per team).

`queue CONFIG` lists the config's GPU workloads in its LocalQueue (`cluster.queue`) with
their Kueue status: the position from Kueue's visibility API, the pending or eviction
reason from the Workload's conditions, the admitted flavor. `usage` adds up GPU-hours
(and a cost) per team from the finished Workloads, and from local run reports.

What is read, and where its shape is defined (kubernetes-sigs/kueue v0.19.2, the version the
tenant manifests are checked against):

- Workloads, `kueue.x-k8s.io/v1beta2` where the API server serves it (API discovery; Kueue
  v0.15 on), else `v1beta1` (apis/kueue/{v1beta2,v1beta1}/workload_types.go; Kueue 0.19
  stores v1beta2 and still serves v1beta1, deprecated): `spec.queueName` (the job's
  kueue.x-k8s.io/queue-name label), `spec.podSets[].{name,count,template}`,
  `status.conditions[]` (metav1.Condition: type, status, reason, message,
  lastTransitionTime) of the types QuotaReserved, Admitted, Evicted, Preempted, Finished,
  `status.admission.{clusterQueue,podSetAssignments[].{name,flavors,resourceUsage,count}}`
  and `status.accumulatedPastExecutionTimeSeconds` (`accumulatedPastExexcutionTimeSeconds`, so
  spelled, in v1beta1: the admitted time of earlier admit-evict cycles,
  pkg/workload/admissionchecks.go SyncAdmittedCondition); the priority class is
  `spec.priorityClassRef.name` in v1beta2, `spec.priorityClassName` in v1beta1.
  The job framework names a Workload `<kind>-<job>-<hash>` and makes the job its controller
  owner (pkg/controller/jobframework/reconciler.go ConstructWorkload); it copies no job
  labels unless the Kueue configuration lists them (labelKeysToCopy).
- The visibility API, `visibility.kueue.x-k8s.io/v1beta2`, else `v1beta1` (the same fields;
  apis/visibility/{v1beta2,v1beta1}/types.go):
  `GET .../namespaces/<ns>/localqueues/<lq>/pendingworkloads` answers a
  PendingWorkloadsSummary whose items (PendingWorkload) carry metadata.name,
  positionInClusterQueue and positionInLocalQueue, both counted from 0
  (pkg/visibility/storage/pending_workloads_lq.go).
- Condition reasons: a workload that does not fit has QuotaReserved False with reason
  Pending and the flavor assigner's message ("couldn't assign flavors to pod set main:
  insufficient unused quota for nvidia.com/gpu in flavor gpupipe-spot, 1 more needed";
  pkg/scheduler/scheduler.go requeueAndUpdate, pkg/scheduler/flavorassigner); a preempted
  one has Evicted True with reason Preempted and a Preempted condition whose reason is
  InClusterQueue, InCohortReclamation, InCohortFairSharing or InCohortReclaimWhileBorrowing
  (pkg/scheduler/preemption/preemption.go); a finished one Finished True, reason Succeeded
  or Failed (pkg/workload/finish/finish.go). Readmission sets Evicted and Preempted back to
  False (pkg/workload/workload.go SetQuotaReservation).
"""
from __future__ import annotations

from pipelines.pool.api import (DOCS, KUEUE_GROUP, KUEUE_VERSION, VISIBILITY_PATH, Connection, connect,
                                list_workloads, pending_positions, transport_reason)
from pipelines.pool.queue import FINISHED_SHOWN, queue_rows, render_queue
from pipelines.pool.usage import local_usage, parse_when, render_usage, usage_by_team, workload_usage
from pipelines.pool.workloads import (GPU, JOB_KINDS, JOB_PREFIX, PIPELINE_LABEL, admitted_flavors, admitted_gpus,
                                      is_gpupipe_workload, owner, requested_gpus, workload_state)

__all__ = ["DOCS", "KUEUE_GROUP", "KUEUE_VERSION", "VISIBILITY_PATH", "Connection", "connect", "list_workloads",
           "pending_positions", "transport_reason", "FINISHED_SHOWN", "queue_rows", "render_queue", "local_usage",
           "parse_when", "render_usage", "usage_by_team", "workload_usage", "GPU", "JOB_KINDS", "JOB_PREFIX",
           "PIPELINE_LABEL", "admitted_flavors", "admitted_gpus", "is_gpupipe_workload", "owner", "requested_gpus",
           "workload_state"]

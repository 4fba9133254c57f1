"""`gpupipe queue` and `gpupipe usage` (issue #29, acceptance 3) against a Kubernetes API
FIXTURE (tests/fixtures/kueue_api.py: an HTTP server on loopback serving Kueue's Workloads
and its visibility API, shaped as Kueue v0.19.2 writes them; no cluster runs here). The
commands reach it through the real `kubernetes` client, from a kubeconfig written here."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from tests.fixtures.gcs import free_port
from tests.fixtures.kueue_api import condition, kueue_api, workload, write_kubeconfig

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
QUOTA = ("couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor "
         "gpupipe-spot, 1 more needed")
PREEMPTED = ("Preempted to accommodate a workload (UID: 5d1c4a8e-0c1e-4f7a-9d55-2f0c7e1b9a01, JobUID: "
             "0b8f5c36-3a0e-4c53-a7a4-6f1f2b8e4c02) due to reclamation within the cohort; preemptor path: "
             "/gpupipe-pool/team-b; preemptee path: /gpupipe-pool/team-a")


@pytest.fixture
def config(tmp_path) -> str:
    """configs/ctr.yaml queued in the LocalQueue gpus with the priority class nightly."""
    data = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text())
    data["cluster"].update(queue="gpus", priority="nightly")
    path = tmp_path / "ctr.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def gpupipe(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def pending(at="2026-12-01T10:00:00Z", message=QUOTA):
    return [condition("QuotaReserved", False, "Pending", message, at)]


def admitted(at: str):
    return [condition("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue team-a", at),
            condition("Admitted", True, "Admitted", "The workload is admitted", at)]


def finished(admitted_at: str, finished_at: str, cq: str = "team-a", outcome: str = "Succeeded"):
    return [condition("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", admitted_at),
            condition("Admitted", True, "Admitted", "The workload is admitted", admitted_at),
            condition("PodsReady", True, "Started", "All pods reached readiness and the workload is running",
                      admitted_at),
            condition("Finished", True, outcome, "jobset completed successfully" if outcome == "Succeeded"
                      else "jobset failed", finished_at)]


# ---------------------------------------------------------------- gpupipe queue

@pytest.mark.parametrize("served, version", [(["v1beta2", "v1beta1"], "v1beta2"), (["v1beta1"], "v1beta1")],
                         ids=["kueue-0.19", "kueue-before-0.15"])
def test_a_pending_workload_shows_its_position_and_kueues_quota_message(tmp_path, capsys, config, served, version):
    """Kueue's ClusterQueue team-a holds five pending workloads; ours is the fourth (index 3
    from 0) and the third of LocalQueue gpus (index 2): two others' are ahead of it there,
    and one of LocalQueue batch. Read in v1beta2 where API discovery says it is served (its
    priority class then in spec.priorityClassRef), else in v1beta1."""
    ours = workload("gpupipe-train-1a2b3c4d", "team-a", conditions=pending(), priority=100,
                    priority_class="nightly")
    other_job = dict(owner_kind="Job", pod_set="main", count=1, gpus_per_pod=1, conditions=pending())
    ahead = [workload("etl-0", "team-a", **other_job), workload("batch-0", "team-a", queue="batch", **other_job),
             workload("etl-1", "team-a", **other_job)]
    behind = workload("etl-2", "team-a", **other_job)
    with kueue_api() as (url, api):
        api.served = served
        api.add(*ahead, ours, behind)
        api.queue("team-a", "gpus", "team-a", *ahead, ours, behind)
        api.queue("team-a", "batch", "team-a")
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url, namespace="team-a")
        code, out, err = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig)
        code_json, out_json, _ = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--json")
    assert code == 0 and code_json == 0, err
    lines = out.splitlines()
    assert lines[0] == "ctr: 1 workload(s) in LocalQueue gpus of namespace team-a"  # the Job-owned ones are not ctr's
    name = ours["metadata"]["name"]
    assert lines[1].split() == ["workload", "state", "GPUs", "position", "flavor", "reason"]
    assert lines[2].split() == [name, "pending", "4", "2", "(cq", "3)", "-", "Pending:", *QUOTA.split()]
    assert lines[3] == ("position: the workloads ahead of it in the LocalQueue (in its ClusterQueue: cq), from "
                        "Kueue's visibility API; 0 is next")
    row = json.loads(out_json)["workloads"][0]
    assert (row["position_in_local_queue"], row["position_in_cluster_queue"]) == (2, 3)
    assert (row["state"], row["reason"], row["message"]) == ("pending", "Pending", QUOTA)
    assert row["owner"] == "JobSet/gpupipe-train-1a2b3c4d" and row["priority_class"] == "nightly"
    paths = [p for _, p in api.requests]
    discovered = ["/apis/kueue.x-k8s.io/v1beta2", *(["/apis/kueue.x-k8s.io/v1beta1"] if version == "v1beta1" else [])]
    assert paths[:len(discovered)] == discovered  # API discovery, the newest version first
    assert paths[len(discovered)].startswith(f"/apis/kueue.x-k8s.io/{version}/namespaces/team-a/workloads?")
    assert any(p.startswith(f"/apis/kueue.x-k8s.io/{version}/namespaces/team-a/workloads?") and "continue=" in p
               for p in paths)  # five workloads, two per page
    assert f"/apis/visibility.kueue.x-k8s.io/{version}/namespaces/team-a/localqueues/gpus/pendingworkloads?limit=1000" \
        in paths
    assert not [p for p in paths if "v1beta1" in p] if version == "v1beta2" else True
    assert set(api.authorization) == {"Bearer fixture-token"}


def test_an_admitted_workload_shows_its_spot_flavor(tmp_path, capsys, config):
    running = workload("gpupipe-train-5e6f7a8b", "team-a", conditions=admitted("2026-12-01T09:00:00Z"),
                       admitted_in="team-a", flavor="gpupipe-spot")
    pod = workload("ctr-x7k2p-system-container-impl-3141592653", "team-a", owner_kind="Pod", pod_set="main",
                   count=1, gpus_per_pod=1, conditions=pending(message="couldn't assign flavors to pod set main: "
                                                                       "insufficient unused quota for nvidia.com/gpu "
                                                                       "in flavor gpupipe-on-demand, 1 more needed"))
    with kueue_api() as (url, api):
        api.add(running, pod)
        api.queue("team-a", "gpus", "team-a", pod)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        code, out, err = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--context", "fixture",
                                 "--namespace", "team-a")
        _, out_json, _ = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--namespace", "team-a",
                                 "--json")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "ctr: 2 workload(s) in LocalQueue gpus of namespace team-a"
    assert lines[2].split() == [running["metadata"]["name"], "admitted", "4", "-", "gpupipe-spot", "Admitted:", "The",
                                "workload", "is", "admitted"]
    assert lines[3].split()[:7] == [pod["metadata"]["name"], "pending", "1", "0", "(cq", "0)", "-"]
    rows = json.loads(out_json)["workloads"]
    assert (rows[0]["state"], rows[0]["flavor"], rows[0]["cluster_queue"], rows[0]["gpus"]) == \
        ("admitted", "gpupipe-spot", "team-a", 4.0)
    assert rows[0]["position_in_local_queue"] is None
    assert rows[1]["owner"].startswith("Pod/ctr-")


def test_with_nothing_waiting_the_visibility_api_is_not_asked(tmp_path, capsys, config):
    running = workload("gpupipe-train-5e6f7a8b", "team-a", conditions=admitted("2026-12-01T09:00:00Z"),
                       admitted_in="team-a", flavor="gpupipe-on-demand")
    with kueue_api() as (url, api):
        done = [workload(f"gpupipe-train-done000{i}", "team-a", conditions=finished(
            f"2026-11-2{i}T10:00:00Z", f"2026-11-2{i}T11:00:00Z"), admitted_in="team-a", flavor="gpupipe-spot")
            for i in (3, 5, 4, 1)]
        api.add(running, *done)  # Kueue knows no LocalQueue here: asking would answer 404 and a needless note
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url, namespace="team-a")
        code, out, err = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig)
        _, out_json, _ = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--json")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "ctr: 5 workload(s) in LocalQueue gpus of namespace team-a" and "note:" not in out
    assert [line.split()[:2] for line in lines[2:6]] == [
        [running["metadata"]["name"], "admitted"], *([done[i]["metadata"]["name"], "finished"] for i in (1, 2, 0))]
    assert lines[5].endswith("Succeeded: jobset completed successfully")
    assert lines[6] == "... and 1 earlier finished workload(s) (--json lists every one)" and len(lines) == 8
    assert len(json.loads(out_json)["workloads"]) == 5
    assert {p.split("?")[0] for _, p in api.requests if "/workloads" in p} == {
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"}


def test_a_workload_evicted_by_preemption_shows_kueues_reason(tmp_path, capsys, config, monkeypatch):
    """As Kueue leaves it once the JobSet is stopped: Evicted and Preempted True, Requeued,
    its quota released (QuotaReserved False with the eviction's message), back in the queue."""
    at = "2026-12-01T11:00:00Z"
    evicted = workload("gpupipe-train-9c0d1e2f", "team-a", conditions=[
        condition("QuotaReserved", False, "Pending", PREEMPTED, at),
        condition("Admitted", False, "NoReservation", "The workload has no reservation", at),
        condition("Evicted", True, "Preempted", PREEMPTED, at),
        condition("Preempted", True, "InCohortReclamation", PREEMPTED, at),
        condition("Requeued", True, "Preempted", PREEMPTED, at)],
        extra_status={"accumulatedPastExexcutionTimeSeconds": 1800})
    with kueue_api() as (url, api):
        api.add(evicted)
        api.queue("team-a", "gpus", "team-a", evicted)
        # the kubeconfig from $KUBECONFIG, the namespace from its context, as kubectl takes them
        monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", url, namespace="team-a"))
        code, out, err = gpupipe(capsys, "queue", config)
        _, out_json, _ = gpupipe(capsys, "queue", config, "--json")
    assert code == 0, err
    line = out.splitlines()[2]
    assert line.split()[:7] == [evicted["metadata"]["name"], "evicted", "4", "0", "(cq", "0)", "-"]
    assert line.endswith(f"Preempted/InCohortReclamation: {PREEMPTED}")
    row = json.loads(out_json)["workloads"][0]
    assert (row["state"], row["reason"], row["message"]) == ("evicted", "Preempted/InCohortReclamation", PREEMPTED)


def test_a_namespace_without_workloads_says_so(tmp_path, capsys, config):
    with kueue_api() as (url, api):
        api.add(workload("gpupipe-train-1a2b3c4d", "team-a", conditions=pending()))
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        code, out, err = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--namespace", "team-c")
        usage = gpupipe(capsys, "usage", "--team", "team-c", "--kubeconfig", kubeconfig, "--since",
                        "2026-11-01", "--until", "2026-12-02")
    assert code == 0, err
    assert out.splitlines() == [
        "no workloads of ctr in LocalQueue gpus of namespace team-c: Kueue makes one for each queued train pod, "
        "JobSet or TFJob once the run reaches train; check --namespace (the team's namespace) and cluster.queue"]
    assert not any("pendingworkloads" in p for _, p in api.requests)
    assert usage[0] == 0 and "team-c          0      0.0000  (no finished workloads in the period)" in usage[1]


def test_without_the_visibility_api_the_rest_shows_and_a_note_says_why(tmp_path, capsys, config):
    """Kueue knows no LocalQueue gpus in team-a (or its visibility API is not served): 404."""
    with kueue_api() as (url, api):
        api.add(workload("gpupipe-train-1a2b3c4d", "team-a", conditions=pending()))
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url, namespace="team-a")
        code, out, err = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert out.splitlines()[2].split()[2:5] == ["4", "-", "-"]
    assert out.splitlines()[-1] == (
        "note: positions unknown: the visibility API knows no LocalQueue gpus in team-a (404), or is not served "
        "(APIService v1beta2 or v1beta1.visibility.kueue.x-k8s.io); see docs/queue.md")


# ---------------------------------------------------------------- gpupipe usage

def two_teams():
    """team-a: a JobSet of 2 pods x 2 GPUs admitted 1.5 h (6 GPU-hours); a pod of 1 GPU
    preempted after 30 min, readmitted, then 1 h more (1.5 GPU-hours). team-b: a TFJob of
    4 x 1 GPU for 45 min (3 GPU-hours). Not counted: one finished before the period, one
    still running."""
    return [
        workload("gpupipe-train-aaaa0001", "team-a", conditions=finished("2026-12-01T10:00:00Z",
                                                                          "2026-12-01T11:30:00Z"),
                 admitted_in="team-a", flavor="gpupipe-on-demand"),
        workload("ctr-abcde-system-container-impl-1", "team-a", owner_kind="Pod", pod_set="main", count=1,
                 gpus_per_pod=1, conditions=finished("2026-12-01T12:00:00Z", "2026-12-01T13:00:00Z"),
                 admitted_in="team-a", flavor="gpupipe-spot",
                 extra_status={"accumulatedPastExexcutionTimeSeconds": 1800}),
        workload("gpupipe-train-bbbb0001", "team-b", owner_kind="TFJob", count=4, gpus_per_pod=1,
                 conditions=finished("2026-12-01T09:00:00Z", "2026-12-01T09:45:00Z", cq="team-b", outcome="Failed"),
                 admitted_in="team-b", flavor="gpupipe-on-demand"),
        workload("gpupipe-train-old00001", "team-a", conditions=finished("2026-11-20T10:00:00Z",
                                                                          "2026-11-20T20:00:00Z"),
                 admitted_in="team-a", flavor="gpupipe-on-demand"),
        workload("gpupipe-train-run00001", "team-b", conditions=admitted("2026-12-01T08:00:00Z"),
                 admitted_in="team-b", flavor="gpupipe-on-demand"),
    ]


PERIOD = ("--since", "2026-11-30", "--until", "2026-12-02")


def test_usage_adds_up_gpu_hours_per_team_from_finished_workloads(tmp_path, capsys):
    with kueue_api() as (url, api):
        api.add(*two_teams())
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        code, out, err = gpupipe(capsys, "usage", "-A", *PERIOD, "--price-per-gpu-hour", "0.5",
                                 "--kubeconfig", kubeconfig)
        code_t, out_t, _ = gpupipe(capsys, "usage", "--team", "team-b", "--team", "team-a", *PERIOD,
                                   "--kubeconfig", kubeconfig, "--json")
    assert code == 0 and code_t == 0, err
    lines = out.splitlines()
    assert lines[0] == ("GPU-hours from the finished Kueue workloads, 2026-11-30T00:00:00Z to 2026-12-02T00:00:00Z, "
                        "at 0.5 per GPU-hour")
    assert lines[1].split() == ["team", "workloads", "GPU-hours", "cost", "by", "flavor"]
    assert lines[2].split() == ["team-a", "2", "7.5000", "3.7500", "gpupipe-on-demand", "6.0000,", "gpupipe-spot",
                                "1.5000"]
    assert lines[3].split() == ["team-b", "1", "3.0000", "1.5000", "gpupipe-on-demand", "3.0000"]
    assert lines[4].split() == ["total", "3", "10.5000", "5.2500"]
    assert len(lines) == 5
    assert any(p.startswith("/apis/kueue.x-k8s.io/v1beta2/workloads?") and "continue=" in p for _, p in api.requests)

    by_team = {t["team"]: t for t in json.loads(out_t)["teams"]}
    assert {k: t["gpu_hours"] for k, t in by_team.items()} == {"team-a": 7.5, "team-b": 3.0}
    assert "cost" not in by_team["team-a"]  # no price given, no config
    records = json.loads(out_t)["workloads"]
    assert [(r["owner"], r["seconds"], r["gpus"]) for r in records] == [
        ("JobSet/gpupipe-train-aaaa0001", 5400.0, 4.0), ("Pod/ctr-abcde-system-container-impl-1", 5400.0, 1.0),
        ("TFJob/gpupipe-train-bbbb0001", 2700.0, 4.0)]
    assert {p.split("?")[0] for _, p in api.requests if "team-" in p} == {
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-b/workloads"}


def test_usage_with_a_config_prices_at_its_gpu_hour_price_and_adds_its_local_runs(tmp_path, capsys, config):
    from tests.test_pool_view import train_report, write_run

    runs = tmp_path / "runs"
    write_run(runs, "ctr-2026-12-01-07-00-00-000001", train_report(gpus=2, gpu_hours=0.25))
    write_run(runs, "ctr-2026-11-01-07-00-00-000002", train_report(gpus=2, gpu_hours=9.0))  # before the period
    with kueue_api() as (url, api):
        api.add(*two_teams())
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        code, out, err = gpupipe(capsys, "usage", "--namespace", "team-b", *PERIOD, "--config", config,
                                 "--runs-dir", str(runs), "--kubeconfig", kubeconfig)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("at 0.35 per GPU-hour")  # training.gpu_hour_price in configs/ctr.yaml
    assert lines[2].split() == ["team-b", "1", "3.0000", "1.0500", "gpupipe-on-demand", "3.0000"]
    assert lines[-1] == (f"local runs of ctr under {runs}: 1 run(s), 0.2500 GPU-hours, cost 0.0875 (from their "
                         "training reports)")


# ---------------------------------------------------------------- what a user can get wrong

def test_an_unreachable_api_is_one_line_naming_the_kubeconfig_and_context(tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{free_port()}", context="team-a-gke")
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "usage", "--team", "team-a", "--kubeconfig",
                          kubeconfig], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        f"error: kubeconfig {kubeconfig}, context team-a-gke: the Kubernetes API at {_server(kubeconfig)} is "
        "unreachable (connection refused); check that the context names the right cluster and that it is reachable "
        "from here (kubectl --context ... get namespaces), or pass --kubeconfig/--context for another one"]


def _server(kubeconfig: str) -> str:
    return json.loads(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]


def test_kubeconfig_mistakes_are_one_line(tmp_path, capsys, config, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nowhere"
    assert gpupipe(capsys, "queue", config, "--kubeconfig", str(missing))[0:3:2] == (1, (
        f"error: kubeconfig {missing}: no such file; pass --kubeconfig PATH (or set KUBECONFIG) to the cluster's "
        "kubeconfig, e.g. from `gcloud container clusters get-credentials`\n"))
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    assert gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--context", "prod")[0:3:2] == (1, (
        f"error: kubeconfig {kubeconfig}: no context 'prod' (it has fixture); pass --context with one of them "
        "(kubectl config get-contexts)\n"))


def test_a_config_without_a_queue_is_refused_before_the_api_is_asked(tmp_path, capsys):
    with kueue_api() as (url, api):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        ctr = str(ROOT / "configs" / "ctr.yaml")
        assert gpupipe(capsys, "queue", ctr, "--kubeconfig", kubeconfig)[0:3:2] == (1, (
            f"error: {ctr}: cluster.queue is unset, so its train pods and jobs carry no "
            "kueue.x-k8s.io/queue-name label and Kueue queues none of them; set cluster.queue to the team's LocalQueue "
            "(gpupipe manifest tenant makes one named gpus)\n"))
    assert api.requests == []


def test_a_refused_list_names_the_rbac_it_needs(tmp_path, capsys, config):
    with kueue_api() as (url, api):
        api.forbidden.add("team-a")
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        code, _, err = gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig, "--namespace", "team-a")
        code_all, _, err_all = gpupipe(capsys, "usage", "-A", "--kubeconfig", kubeconfig)
    assert code == 1 and code_all == 1 and err.splitlines() == [
        f"error: kubeconfig {kubeconfig}, context fixture: the Kubernetes API at {url} refused to list workloads in "
        "namespace team-a (403: workloads.kueue.x-k8s.io is forbidden: User \"u\" cannot list resource \"workloads\" "
        "in API group \"kueue.x-k8s.io\" in the namespace \"team-a\"); ask the cluster's administrator for list on "
        "workloads.kueue.x-k8s.io in that namespace (a Role) (docs/queue.md), or use a context that has it"]
    assert err_all.splitlines() == [
        f"error: kubeconfig {kubeconfig}, context fixture: the Kubernetes API at {url} refused to list workloads in "
        "all namespaces (403: workloads.kueue.x-k8s.io is forbidden: User \"u\" cannot list resource \"workloads\" "
        "in API group \"kueue.x-k8s.io\" at the cluster scope); ask the cluster's administrator for list on "
        "workloads.kueue.x-k8s.io cluster-wide (a ClusterRole) (docs/queue.md), or use a context that has it"]


def test_usage_refuses_a_period_it_cannot_read(tmp_path, capsys):
    assert gpupipe(capsys, "usage", "-A", "--since", "7x")[0:3:2] == (1, (
        "error: usage --since 7x: neither a period nor a date; give e.g. 7d, 12h, 2w or 2026-11-01 (UTC)\n"))
    assert gpupipe(capsys, "usage", "-A", "--since", "2026-12-05", "--until", "2026-12-01")[0:3:2] == (1, (
        "error: usage --since 2026-12-05: the period starts at 2026-12-05T00:00:00Z, not before its end "
        "2026-12-01T00:00:00Z; give an earlier --since or a later --until\n"))


def _rbac(method: str, path: str) -> tuple:
    """(API group, resource, verb) of one request, as the API server's request info names it;
    None for API discovery (/apis/<group>/<version>: a non-resource URL that the default
    ClusterRole system:discovery grants every authenticated user)."""
    parts = path.split("?")[0].strip("/").split("/")
    assert method == "GET" and parts[0] == "apis"
    group, rest = parts[1], parts[3:]
    if not rest:
        return None
    if rest[0] == "namespaces":
        rest = rest[2:]
    if len(rest) == 3:  # <resource>/<name>/<subresource>
        return group, f"{rest[0]}/{rest[2]}", "get"
    return group, rest[0], "get" if len(rest) == 2 else "list"


def test_the_role_in_the_docs_grants_exactly_what_the_commands_ask(tmp_path, capsys, config):
    """Every request `queue` and `usage` send maps to an RBAC rule; docs/queue.md's Role
    grants those and no more."""
    import re

    page = (ROOT / "docs" / "queue.md").read_text()
    role = next(yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, re.S)
                if "kind: Role" in block)
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    with kueue_api() as (url, api):
        ours = workload("gpupipe-train-1a2b3c4d", "team-a", conditions=pending())
        api.add(ours, *two_teams())
        api.queue("team-a", "gpus", "team-a", ours)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url, namespace="team-a")
        assert gpupipe(capsys, "queue", config, "--kubeconfig", kubeconfig)[0] == 0
        assert gpupipe(capsys, "usage", "--team", "team-a", "--kubeconfig", kubeconfig)[0] == 0
    assert {_rbac(m, p) for m, p in api.requests} - {None} == granted == {
        ("kueue.x-k8s.io", "workloads", "list"), ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")}

"""The Slurm launcher (recipes/lib/slurm.sbatch) on a real one-host Slurm cluster.

The fixture starts munge, slurmctld and slurmd from Debian's packages (``munge``,
``slurm-wlm``) with a configuration of its own in a temporary directory (its own ports and
state), so it needs root; ``make test-all`` installs the packages when they are missing.
The test submits a 2-learner SYNC training job, sends its batch script SIGTERM mid-epoch
(what ``--signal=B:TERM@120`` does before the time limit), and checks that the job
requeued itself, resumed (after Slurm's two-minute hold on a requeued job) and ended with
the same ``model.pt`` as a run never stopped. About three minutes.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO, free_port
from tests.integration.test_signals import _prepare, _train

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(p) for p in ("munged", "slurmctld", "slurmd", "sbatch")),
        reason="needs root and Debian's munge + slurm-wlm (make test-all installs them)",
    ),
]


def _run(*args: str, env: dict, check: bool = True) -> str:
    result = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: {result.stderr}")
    return result.stdout


@pytest.fixture
def cluster(tmp_path: Path):
    """A one-node Slurm cluster on this host; yields the environment that reaches it."""
    root = tmp_path / "slurm"
    (root / "state").mkdir(parents=True)
    (root / "spool").mkdir()
    host = socket.gethostname().split(".")[0]
    (root / "slurm.conf").write_text(
        "\n".join(
            [
                "ClusterName=asrkittest",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd.log'}",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "JobRequeue=1",
                "ReturnToService=2",
                "MpiDefault=none",
                f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
                f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
                "",
            ]
        )
    )
    env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"), PYTHONPATH=str(REPO))
    ours_munge = subprocess.run(["pgrep", "-x", "munged"], capture_output=True, check=False).returncode != 0
    if ours_munge:
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["munged", "--force"], capture_output=True, check=True)
    _run("slurmctld", env=env)
    _run("slurmd", env=env)
    end = time.monotonic() + 60
    while "idle" not in _run("sinfo", "-h", "-o", "%t", env=env, check=False):
        assert time.monotonic() < end, (root / "slurmctld.log").read_text()[-3000:]
        time.sleep(0.5)
    yield env
    _run("scancel", "--user=root", env=env, check=False)
    for name in ("slurmd", "slurmctld"):
        pid_file = root / f"{name}.pid"
        if pid_file.is_file():
            subprocess.run(["kill", pid_file.read_text().strip()], check=False)
    if ours_munge:  # every daemon the fixture started stops with it (one already running stays)
        subprocess.run(["pkill", "-x", "munged"], check=False)
        end = time.monotonic() + 10
        while subprocess.run(["pgrep", "-x", "munged"], capture_output=True, check=False).returncode == 0:
            assert time.monotonic() < end, "munged did not stop"
            time.sleep(0.1)


def _job(job: str, env: dict) -> dict[str, str]:
    fields = _run("scontrol", "show", "job", job, "-o", env=env, check=False).split()
    return dict(f.split("=", 1) for f in fields if "=" in f)


def test_a_signalled_job_requeues_itself_and_ends_with_the_model_of_an_unstopped_run(
    tmp_path: Path, cluster: dict
) -> None:
    common = _prepare(tmp_path)
    learners = ["strategy=sync", "strategy.learners=2", "strategy.timeout_s=60", "train.max_batch=4"]
    reference = _train(tmp_path, common, "reference", *learners, f"strategy.master_port={free_port()}")
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err[-3000:]

    exp, out = tmp_path / "exp", tmp_path / "job.out"
    command = [sys.executable, "-m", "asrkit", "run", "--stage", "4", "--stop-stage", "4", f"exp_dir={exp}"]
    job = _run(
        "sbatch",
        "--parsable",
        f"--output={out}",
        f"--chdir={tmp_path}",
        str(REPO / "recipes" / "lib" / "slurm.sbatch"),
        *command,
        *common,
        *learners,
        env=cluster,
    ).strip()
    first_save = exp / "checkpoints" / "resume" / "rank1.pt"
    end = time.monotonic() + 300
    while not first_save.exists():
        assert time.monotonic() < end, out.read_text()[-3000:] if out.exists() else "no job output"
        time.sleep(0.1)
    _run("scancel", "--signal=TERM", "--batch", job, env=cluster)

    # The job requeues itself. Slurm holds a requeued job for about two minutes (until then
    # slurmd refuses to launch it again: "Job credential revoked"), so the test waits.
    end = time.monotonic() + 120
    while _job(job, cluster).get("Restarts", "0") == "0":
        assert time.monotonic() < end, (_job(job, cluster), out.read_text()[-3000:])
        time.sleep(0.2)
    end = time.monotonic() + 900
    while (state := _job(job, cluster).get("JobState")) not in ("COMPLETED", "FAILED", "CANCELLED"):
        assert time.monotonic() < end, out.read_text()[-3000:]
        time.sleep(0.5)
    log = out.read_text()
    assert state == "COMPLETED", log[-3000:]
    assert "asrkit: stopped by SIGTERM" in log and "requeueing job" in log, log[-3000:]
    assert "(restart 1)" in log and "resuming from" in log, log[-3000:]
    # Slurm logs the signalled job and steps as CANCELLED; the script says that is the stop.
    assert "CANCELLED AT" in log and "CANCELLED *** lines around here are this planned stop" in log, log[
        -3000:
    ]
    assert "Traceback" not in log, log[-3000:]
    ours = torch.load(exp / "model.pt", map_location="cpu", weights_only=False)["model"]
    theirs = torch.load(tmp_path / "reference" / "model.pt", map_location="cpu", weights_only=False)["model"]
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key

"""The simulated node's HPC job mapping directory: written from the scenario's `hpc_jobs`,
used unless --hpc-job-mapping-dir names another."""

import dataclasses
from pathlib import Path

from gpu_enricher.config import Config
from gpu_enricher.sim.cluster import SimulatedCluster
from gpu_enricher.sim.cluster_state import job_files
from gpu_enricher.sim.scenario import builtin_scenario, load_scenario

CONFIG = Config(host=None, port=9400, collectors=Path("c.csv"), collect_interval_ms=1000,
                hostname=None)


def test_the_builtin_node_has_a_slurm_job_on_gpu_0() -> None:
    scenario = builtin_scenario()
    assert job_files(scenario) == {"0": "4242\n"}
    cluster = SimulatedCluster(scenario, "node")
    try:
        assert sorted(p.name for p in cluster.job_root.iterdir()) == ["0"]
        assert (cluster.job_root / "0").read_text() == "4242\n"
        assert cluster.configure(CONFIG).hpc_job_mapping_dir == cluster.job_root
        mine = dataclasses.replace(CONFIG, hpc_job_mapping_dir=Path("/run/jobs"))
        assert cluster.configure(mine).hpc_job_mapping_dir == Path("/run/jobs")
    finally:
        cluster.close()
    assert not cluster.job_root.exists(), "removed with the rest of the directory"


def test_a_scenario_names_jobs_per_gpu(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("gpus:\n  - {}\n  - {hpc_jobs: ['17', '18_3']}\n")
    assert job_files(load_scenario(path)) == {"1": "17\n18_3\n"}

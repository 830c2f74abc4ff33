"""DCGM 1.x's lowercase metric names, which dcgm-exporter still accepts in a counters file.

Data only. dcgm-exporter ships ``etc/1.x-compatibility-metrics.csv``, written with these names
(``dcgm_sm_clock, gauge, …``); it looks a name up among DCGM's current fields first, then among
these legacy names, and exports the series under the name the file gives (the line's first
column) with the value of the field it maps to. The names and the DCGM field ids they stand for
are go-dcgm's legacy field table (NVIDIA/go-dcgm ``pkg/dcgm/legacy_fields.csv``, the one
dcgm-exporter 4.x links). Each maps here to the DCGM field of that id, spelled as dcgm-exporter's
own counters files spell it; the id is in the comment.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["LEGACY_FIELDS"]

LEGACY_FIELDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Clocks
        "dcgm_sm_clock": "DCGM_FI_DEV_SM_CLOCK",  # 100
        "dcgm_memory_clock": "DCGM_FI_DEV_MEM_CLOCK",  # 101
        # Temperature
        "dcgm_memory_temp": "DCGM_FI_DEV_MEMORY_TEMP",  # 140
        "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",  # 150
        # Power
        "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",  # 155
        "dcgm_total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",  # 156
        # PCIe
        "dcgm_pcie_tx_throughput": "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",  # 200
        "dcgm_pcie_rx_throughput": "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",  # 201
        "dcgm_pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",  # 202
        # Utilization
        "dcgm_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",  # 203
        "dcgm_mem_copy_utilization": "DCGM_FI_DEV_MEM_COPY_UTIL",  # 204
        "dcgm_enc_utilization": "DCGM_FI_DEV_ENC_UTIL",  # 206
        "dcgm_dec_utilization": "DCGM_FI_DEV_DEC_UTIL",  # 207
        # Errors and violations
        "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",  # 230
        "dcgm_power_violation": "DCGM_FI_DEV_POWER_VIOLATION",  # 240
        "dcgm_thermal_violation": "DCGM_FI_DEV_THERMAL_VIOLATION",  # 241
        "dcgm_sync_boost_violation": "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",  # 242
        "dcgm_board_limit_violation": "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",  # 243
        "dcgm_low_util_violation": "DCGM_FI_DEV_LOW_UTIL_VIOLATION",  # 244
        "dcgm_reliability_violation": "DCGM_FI_DEV_RELIABILITY_VIOLATION",  # 245
        # Memory usage
        "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",  # 251
        "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",  # 252
        # ECC
        "dcgm_ecc_sbe_volatile_total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",  # 310
        "dcgm_ecc_dbe_volatile_total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",  # 311
        "dcgm_ecc_sbe_aggregate_total": "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",  # 312
        "dcgm_ecc_dbe_aggregate_total": "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",  # 313
        # Retired pages
        "dcgm_retired_pages_sbe": "DCGM_FI_DEV_RETIRED_SBE",  # 390
        "dcgm_retired_pages_dbe": "DCGM_FI_DEV_RETIRED_DBE",  # 391
        "dcgm_retired_pages_pending": "DCGM_FI_DEV_RETIRED_PENDING",  # 392
        # NVLink
        "dcgm_nvlink_flit_crc_error_count_total":
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",  # 409
        "dcgm_nvlink_data_crc_error_count_total":
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",  # 419
        "dcgm_nvlink_replay_error_count_total":
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",  # 429
        "dcgm_nvlink_recovery_error_count_total":
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",  # 439
        "dcgm_nvlink_bandwidth_total": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",  # 449
        # Profiling (DCP)
        "dcgm_fi_prof_gr_engine_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",  # 1001
        "dcgm_fi_prof_sm_active": "DCGM_FI_PROF_SM_ACTIVE",  # 1002
        "dcgm_fi_prof_sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",  # 1003
        "dcgm_fi_prof_pipe_tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",  # 1004
        "dcgm_fi_prof_dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",  # 1005
        "dcgm_fi_prof_pcie_tx_bytes": "DCGM_FI_PROF_PCIE_TX_BYTES",  # 1009
        "dcgm_fi_prof_pcie_rx_bytes": "DCGM_FI_PROF_PCIE_RX_BYTES",  # 1010
    }
)
"""Legacy name → the DCGM field whose value its series carries (41 names)."""

"""One CUDA process for bench/real_gpu_mps.sh: holds MEM_GIB of GPU memory and runs a SIZE x
SIZE matmul loop on GPU 0 for SECONDS, then exits. Under MPS when the caller's environment sets
CUDA_MPS_PIPE_DIRECTORY (a client of that control daemon). Prints `ready PID` once its first
matmul finished, `done PID N` at the end.

    python3 bench/mps_worker.py SECONDS SIZE MEM_GIB
"""

import os
import sys
import time

import torch


def main() -> None:
    seconds, size, mem_gib = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    ballast = torch.empty(int(mem_gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    a = torch.randn(size, size, device="cuda")
    b = torch.randn_like(a)
    (a @ b).sum().item()
    print(f"ready {os.getpid()}", flush=True)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for _ in range(8):
            c = a @ b
        torch.cuda.synchronize()
        n += 8
    del ballast, c
    print(f"done {os.getpid()} {n}", flush=True)


if __name__ == "__main__":
    main()

"""Per GPU, from two scrapes: the energy series' sum and rise against the GPU's energy
counter's rise (mJ → J) in the same scrapes (bench/real_gpu_energy.sh).

    python3 bench/energy_sums.py FIRST.txt SECOND.txt
"""

import re
import sys

SERIES = re.compile(r'^gpu_enricher_(?:pod|unattributed)_energy_joules_total\{gpu="(\d+)"'
                    r'(.*)\} (\S+)$', re.MULTILINE)
COUNTER = re.compile(r'^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{gpu="(\d+)".*\} (\d+)$',
                     re.MULTILINE)


def read(path: str) -> tuple[dict[str, float], dict[str, float], list[str]]:
    with open(path) as f:
        body = f.read()
    sums: dict[str, float] = {}
    lines = []
    for gpu, labels, value in SERIES.findall(body):
        sums[gpu] = sums.get(gpu, 0.0) + float(value)
        lines.append(f"gpu {gpu}{labels} {value}")
    return sums, {g: float(v) for g, v in COUNTER.findall(body)}, lines


def main() -> None:
    (s1, c1, _), (s2, c2, lines) = read(sys.argv[1]), read(sys.argv[2])
    print("\n".join(lines))
    for gpu in sorted(c2):
        series = s2.get(gpu, 0.0) - s1.get(gpu, 0.0)
        counter = (c2[gpu] - c1.get(gpu, c2[gpu])) / 1000
        print(f"gpu {gpu}: series rose {series:.6f} J, counter rose {counter:.6f} J, "
              f"difference {series - counter:+.6f} J; series total {s2.get(gpu, 0.0):.3f} J")


if __name__ == "__main__":
    main()

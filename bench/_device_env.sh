# Sourced by the real-GPU scripts (real_gpu.sh, real_gpu_dropin.sh) from the repository root:
# wheels in .whl/ (carried to a node without a registry: bcrypt, hpack, … that its image lacks)
# installed into /tmp/site, src/ on PYTHONPATH, bytecode compiled first.
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# Bytecode first, as an installed package has it (pip compiles at install): run from a source
# tree where PYTHONDONTWRITEBYTECODE=1 (the device image sets it), every start compiles every
# module and keeps ~14 MiB more (81.7 against 67.0 MiB on an H100, docs/real-gpu.md).
python3 -m compileall -q src bench ${PYTHONPATH//:/ } >/dev/null

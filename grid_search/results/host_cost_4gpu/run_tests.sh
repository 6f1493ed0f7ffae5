#!/bin/bash
# The last call of the session. On 4 x H100: the held-out replayed study of ../passes_4gpu/
# (its run.sh). On another card: the backend's GPU tests of the host cost, fixed after
# run.sh's call. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_tests.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) exec bash grid_search/results/passes_4gpu/run.sh ;;
esac
timeout -s INT -k 20 150 python3 -m pytest -q -o addopts="" -p no:cacheprovider \
    tests/backend/test_gpu.py -k "host_cost or one_gpu_step or distributed_mlp or cuda_graph" >> "$L" 2>&1
echo "### gpu tests rc $?" >> "$L"
tail -5 "$L"

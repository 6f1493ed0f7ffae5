#!/bin/bash
# Call B (4 GPUs), after call A (run.sh): where the predictions of the models we did not write
# miss. Each configuration is imported, written by `distir transform` (stages weighed with
# h200-sxm), run eagerly with every op marked and replayed as a CUDA graph (`distir run
# --profile`, `--cuda-graph --profile`), and explained against the device-time profile
# (`distir explain --replay`, h200-sxm-graph): BERT T4 and D2 x T2 (12-17% slower than
# predicted), ResNet-50 D2 x P2 x K4 and P4 x K2 (10-16% faster), and for each the D4 beside
# it. Then the Hugging Face GPT-2's D2 x T2, refused by grid-search in call A (fixed since),
# replayed and eagerly with its host cost; then convolution microbenchmarks timed by device
# time (`python -m calibration --families conv conv_dgrad conv_wgrad --device-time`, two
# more random samples of 240 shapes, seeds 1 and 2; measurements only).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
R=grid_search/results/zoo_host_4gpu
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
D="python3 -m distir"
s=$SECONDS
timeout 120 python3 $R/export.py bert $S/bert.onnx >> "$L" 2>&1
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py resnet50 $S/resnet50.onnx >> "$L" 2>&1
timeout 120 python3 grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py $S/gpt2_hf.onnx >> "$L" 2>&1
timeout 200 $D import $S/bert.onnx --dim batch=32 --dim seq=512 --train --loss mse --optimizer adam \
    -o $S/bert.dir >> "$L" 2>&1
timeout 200 $D import $S/resnet50.onnx --dim batch=128 --train --loss cross_entropy --optimizer sgd \
    -o $S/resnet50.dir >> "$L" 2>&1
timeout 200 $D import $S/gpt2_hf.onnx --dim batch=16 --dim seq=512 --train --loss cross_entropy \
    --optimizer adam -o $S/gpt2.dir >> "$L" 2>&1
echo "### exports and imports after $((SECONDS - s)) s" >> "$L"
one() {  # model name dp tp pp k
  local s=$SECONDS n=$1_$2
  timeout 120 $D transform $S/$1.dir --dp $3 --tp $4 --pp $5 -k $6 --hardware h200-sxm \
      -o $W/$n.dir >> "$L" 2>&1
  timeout -s INT -k 20 120 $D run $W/$n.dir --profile $W/$n.eager >> "$L" 2>&1
  timeout -s INT -k 20 120 $D run $W/$n.dir --cuda-graph --profile $W/$n.graph >> "$L" 2>&1
  timeout 150 $D explain --program $W/$n.dir --hardware h200-sxm-graph --top 25 \
      --replay $W/$n.graph $W/$n.eager > $W/$n.explain.txt 2>&1
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
  head -40 $W/$n.explain.txt >> "$L"
}
one bert t4 1 4 1 1
one bert d2t2 2 2 1 1
one bert d4 4 1 1 1
one resnet50 d2p2k4 2 1 2 4
one resnet50 p4k2 1 1 4 2
one resnet50 d4 4 1 1 1
s=$SECONDS
timeout 120 $D transform $S/gpt2.dir --dp 2 --tp 2 --hardware h200-sxm -o $W/gpt2_d2t2.dir >> "$L" 2>&1
timeout -s INT -k 20 120 $D run $W/gpt2_d2t2.dir --cuda-graph >> "$L" 2>&1
timeout -s INT -k 20 120 $D run $W/gpt2_d2t2.dir --host-cost >> "$L" 2>&1
echo "### gpt2 d2t2 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && tar czf $OUT/explain.tgz *.explain.txt) 
for seed in 1 2; do
  s=$SECONDS
  timeout -s INT -k 20 150 python3 -m calibration --families conv conv_dgrad conv_wgrad \
      --device-time --no-comm --seed $seed --measure-only --name h200-sxm-graph \
      -o $OUT/conv_seed$seed.json >> "$L" 2>&1
  echo "### conv seed $seed rc $? after $((SECONDS - s)) s" >> "$L"
done
uptime >> "$L"
grep "###\|step latency\|host" "$L" | tail -40

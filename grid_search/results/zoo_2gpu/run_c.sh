#!/bin/bash
# Call C, 2 GPUs (asked for as H100s).
# On H100s: the held-out replayed study of ../passes_2gpu/ (CSVs under $OUT/heldout/), then
#   the zoo models of run_a.sh and the two of export.py, replayed, with h100-sxm-graph.
# On H200s:
#   1. held out, sealed: Hugging Face LlamaForCausalLM 8 x 1024 (dynamo; batch 8 and 16 x 512,
#      cross entropy, Adam) and ViTModel 12 x 768 (torchscript; batch 64 and 32, mse, Adam),
#      float32 training steps replayed, every configuration of <= 2 GPUs, with h200-sxm-graph.
#      Their output goes to $OUT/sealed.tgz only, printed nowhere, to be opened after any
#      change to the cost model that calls A-C lead to;
#   2. `distir explain` of HF GPT-2's one-GPU step at batch 8 x 512 (run_b.sh's, 4.0% too
#      fast) and of ResNet-50's T2 at batch 128 (run_a.sh's, 6.6% too fast), each run eagerly
#      with every op marked and replayed, against h200-sxm-graph.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_c.log
R=grid_search/results/zoo_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
left() { local t=$(( ${DEADLINE:-575} - SECONDS )); echo $(( t > 30 ? t : 30 )); }
export_all() {
  local s=$SECONDS
  [ -s $S/gpt2_hf.onnx ] || timeout 120 python3 grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py $S/gpt2_hf.onnx >> "$L" 2>&1
  [ -s $S/resnet50.onnx ] || PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 grid_search/results/zoo_host_4gpu/export.py resnet50 $S/resnet50.onnx >> "$L" 2>&1
  [ -s $S/llama.onnx ] || timeout 120 python3 $R/export.py llama $S/llama.onnx >> "$L" 2>&1
  [ -s $S/vit.onnx ] || timeout 120 python3 $R/export.py vit $S/vit.onnx >> "$L" 2>&1
  echo "### exports after $((SECONDS - s)) s" >> "$L"
}
GPT="--model $S/gpt2_hf.onnx --dim seq=512 --train --loss cross_entropy --optimizer adam"
RN="--model $S/resnet50.onnx --train --loss cross_entropy --optimizer sgd"
LL="--model $S/llama.onnx --dim seq=512 --train --loss cross_entropy --optimizer adam"
VT="--model $S/vit.onnx --train --loss mse --optimizer adam"
search() {  # log name timeout args...
  local log=$1 name=$2 t=$3; shift 3
  local s=$SECONDS
  timeout -s INT -k 20 "$t" python3 -m distir grid-search --devices 2 --fewer-devices \
      --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 \
      --cuda-graph "$@" -o "$(dirname "$log")/$name.csv" >> "$log" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$log"
}
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;;
  *) HW=h100-sxm
     mkdir -p "$OUT/heldout"
     s=$SECONDS
     OUT=$OUT/heldout DEADLINE=400 bash grid_search/results/passes_2gpu/run.sh > /dev/null 2>&1
     echo "### held-out study rc $? after $((SECONDS - s)) s" >> "$L"
     export_all
     search "$L" hf_gpt2_b8_graph $(( $(left) / 4 )) $GPT --dim batch=8
     search "$L" llama_b8_graph $(( $(left) / 3 )) $LL --dim batch=8
     search "$L" vit_b64_graph $(( $(left) / 2 )) $VT --dim batch=64
     search "$L" resnet50_b128_graph $(left) $RN --dim batch=128
     (cd "$OUT" && rm -f *.png heldout/*.png && tar czf c.tgz *.csv heldout)
     grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|rror\|not measured" | tail -80
     exit 0 ;;
esac
export_all
mkdir -p /tmp/sealed; K=/tmp/sealed/sealed.log
search $K llama_b8_graph 75 $LL --dim batch=8
search $K llama_b16_graph 75 $LL --dim batch=16
search $K vit_b64_graph 70 $VT --dim batch=64
search $K vit_b32_graph 70 $VT --dim batch=32
(cd /tmp/sealed && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s (rc lines: $(grep -c 'rc 0' $K) of 4 ok)" >> "$L"
D="python3 -m distir"
explain() {  # name onnx dp tp pp k import-args...
  local n=$1 m=$2 dp=$3 tp=$4 pp=$5 k=$6; shift 6
  local s=$SECONDS
  [ -s $W/$m.dir ] || timeout 150 $D import $S/$m.onnx "$@" -o $W/$m.dir >> "$L" 2>&1
  timeout 100 $D transform $W/$m.dir --dp $dp --tp $tp --pp $pp -k $k --hardware $HW \
      -o $W/$n.dir >> "$L" 2>&1
  timeout -s INT -k 20 100 $D run $W/$n.dir --profile $W/$n.eager >> "$L" 2>&1
  timeout -s INT -k 20 100 $D run $W/$n.dir --cuda-graph --profile $W/$n.graph >> "$L" 2>&1
  timeout 150 $D explain $W/$n.eager --replay $W/$n.graph --program $W/$n.dir \
      --hardware $HW-graph --top 40 > $OUT/$n.explain.txt 2>&1
  echo "### explain $n rc $? after $((SECONDS - s)) s" >> "$L"
}
explain gpt2_d1_b8 gpt2_hf 1 1 1 1 --dim batch=8 --dim seq=512 --train --loss cross_entropy --optimizer adam
explain resnet50_t2_b128 resnet50 1 2 1 1 --dim batch=128 --train --loss cross_entropy --optimizer sgd
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|rror" | tail -40
head -45 $OUT/gpt2_d1_b8.explain.txt

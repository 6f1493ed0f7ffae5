#!/bin/bash
# Call A, 2 GPUs of either kind (h100-sxm-graph or h200-sxm-graph by the card):
#  1. HF GPT-2 12 x 768 at batch 8 x 512 and HF ViT 12 x 768 at batch 32, as
#     ../zoo_2gpu/run_b.sh and run_c.sh ran them (every configuration of <= 2 GPUs,
#     replayed), after the backend's compiled-in small operands (`lowering.known_inputs`);
#  2. held out, never run before, **sealed** (written to $OUT/sealed.tgz only, printed
#     nowhere, to judge whatever change to the cost model call A leads to): HF T5 encoder
#     12 x 768 (batch 16 x 512, mse, Adam), torchvision's ViT-B/16 structure (batch 64, cross
#     entropy, Adam), nn.TransformerEncoder 12 x 768 (dynamo, batch 16 x 512, mse, Adam),
#     EfficientNet-B0's stages at full width (batch 128, cross entropy, SGD), by export.py;
#  3. `distir explain` of ViT's one-GPU step at batch 32;
#  4. the skeleton (grid_search.skeleton) of every model file searched here and in
#     ../zoo_2gpu/, so that their rows can be simulated again elsewhere on the very graph
#     this machine exported.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
R=grid_search/results/zoo_more_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/zoo; W=/tmp/zoo/x; K=/tmp/sealed; mkdir -p $S $W $K $OUT/skel
s=$SECONDS
ex() { [ -s "$S/$2.onnx" ] || PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 "$1" "${@:3}" $S/$2.onnx >> "$L" 2>&1; }
ex grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py gpt2_hf &
ex grid_search/results/zoo_2gpu/export.py vit vit &
ex grid_search/results/zoo_2gpu/export.py llama llama &
ex grid_search/results/zoo_host_4gpu/export.py bert bert &
ex grid_search/results/zoo_host_4gpu/export.py resnet50 resnet50 &
for m in t5 tvit encoder efficientnet; do ex $R/export.py $m $m & done
wait
for m in gpt2_hf vit llama bert resnet50 t5 tvit encoder efficientnet; do
  python3 -m grid_search.skeleton strip $S/$m.onnx $OUT/skel/$m.skel.onnx >> "$L" 2>&1 &
done
wait
echo "### exports and skeletons after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
search() {  # log dir name timeout args...
  local log=$1 dir=$2 name=$3 t=$4; shift 4
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$dir/$name.csv" >> "$log" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$log"
}
search "$L" $OUT hf_gpt2_b8_graph 120 --model $S/gpt2_hf.onnx --dim batch=8 --dim seq=512 \
    --train --loss cross_entropy --optimizer adam
search "$L" $OUT vit_b32_graph 100 --model $S/vit.onnx --dim batch=32 --train --loss mse \
    --optimizer adam
KL=$K/sealed.log
echo "### project commit $(cat COMMIT), profile $HW-graph" >> $KL
search $KL $K t5_b16_graph 90 --model $S/t5.onnx --dim batch=16 --dim seq=512 --train \
    --loss mse --optimizer adam
search $KL $K tvit_b64_graph 90 --model $S/tvit.onnx --dim batch=64 --train \
    --loss cross_entropy --optimizer adam
search $KL $K encoder_b16_graph 90 --model $S/encoder.onnx --dim batch=16 --dim seq=512 \
    --train --loss mse --optimizer adam
search $KL $K efficientnet_b128_graph 80 --model $S/efficientnet.onnx --dim batch=128 \
    --train --loss cross_entropy --optimizer sgd
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s (rc lines: $(grep -c 'rc 0' $KL) of 4 ok)" >> "$L"
D="python3 -m distir"
s=$SECONDS
timeout 150 $D import $S/vit.onnx --dim batch=32 --train --loss mse --optimizer adam \
    -o $W/vit.dir >> "$L" 2>&1
timeout -s INT -k 20 80 $D run $W/vit.dir --profile $W/vit.eager >> "$L" 2>&1
timeout -s INT -k 20 80 $D run $W/vit.dir --cuda-graph --profile $W/vit.graph >> "$L" 2>&1
timeout 120 $D explain $W/vit.eager --replay $W/vit.graph --program $W/vit.dir \
    --hardware $HW-graph --top 40 > $OUT/vit_d1_b32.explain.txt 2>&1
echo "### explain vit rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
rm -f $OUT/*.png
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|slowed\|rror" | tail -40
head -30 $OUT/vit_d1_b32.explain.txt

#!/bin/bash
# 2 GPUs (2 x H200 here). Call C's DeBERTa searches stopped at import: the device's
# transformers (5.17) writes an `If` per layer in the TorchScript export. **Sealed**
# (written to $OUT/sealed.tgz only, printed nowhere): the same HF DeBERTa-v2 at
# DeBERTa-v3-base's sizes exported by dynamo, at 8 and 16 sequences of 512 tokens (MSE
# against the hidden states, Adam), float32, every configuration of <= 2 GPUs replayed;
# the skeleton of the export. Run from the project root, $OUT set, COMMIT holding the
# commit.
R=grid_search/results/norms_views
source grid_search/results/sealed_lib.sh
sealed_begin run_d 2 20
sealed_export deberta_dynamo $R/export.py 240
python3 -c "import onnx, collections; m = onnx.load('$S/deberta_dynamo.onnx', load_external_data=False); print('### op types', dict(collections.Counter(n.op_type for n in m.graph.node).most_common(8)))" >> "$L" 2>&1
TOK="--dim seq=512 --train --loss mse --optimizer adam"
sealed_search deberta_dynamo_b8_graph 130 --model $S/deberta_dynamo.onnx --dim batch=8 $TOK
sealed_search deberta_dynamo_b16_graph 150 --model $S/deberta_dynamo.onnx --dim batch=16 $TOK
sealed_end
grep "###\|rror" "$L" | tail -20

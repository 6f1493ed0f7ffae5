#!/bin/bash
# 1 GPU. Why the fused Adam updates run slower in measured training steps than in the
# calibration's microbenchmark: adam_values.py (the kernel by the values it reads), then
# BiT-R50x1's 91 updates alone (adam_programs.py: random inputs as the runner draws them;
# the same with 16 GiB of other inputs alive; training-like inputs: step 1, v >= 0), each
# profiled as a replayed CUDA graph, read by adam_kernels.py.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/adam_step
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
s=$SECONDS
timeout 120 python3 $R/adam_values.py > $OUT/adam_values.txt 2>> "$L"
echo "### adam_values rc $? after $((SECONDS - s)) s" >> "$L"
A=/tmp/adamp; mkdir -p $A
(cd /tmp && tar xJf $OLDPWD/grid_search/results/index_adam/call_a/traces.txz bit_1_b64/program.dir)
P=/tmp/bit_1_b64/program.dir
python3 $R/adam_programs.py $P $A --big 16 --inputs >> "$L" 2>&1
echo "### programs rc $? after $((SECONDS - s)) s" >> "$L"
RUN="python3 -m distir run --cuda-graph --steps 5 --warmup 2"
timeout 90 $RUN $A/adam_only.dir --profile $OUT/p_random >> "$L" 2>&1
echo "### adam_only random rc $? after $((SECONDS - s)) s" >> "$L"
timeout 90 $RUN $A/adam_big.dir --profile $OUT/p_big >> "$L" 2>&1
echo "### adam_big random rc $? after $((SECONDS - s)) s" >> "$L"
timeout 120 $RUN $A/adam_only.dir --profile $OUT/p_train --inputs $(ls $A/in_*.npy | sort) >> "$L" 2>&1
echo "### adam_only train-like rc $? after $((SECONDS - s)) s" >> "$L"
(cd $R && python3 adam_kernels.py $P random=$OUT/p_random/rank0.json big=$OUT/p_big/rank0.json \
   train=$OUT/p_train/rank0.json) > $OUT/adam_kernels.txt 2>> "$L"
xz -9 $OUT/p_*/rank0.json
cat $OUT/adam_values.txt $OUT/adam_kernels.txt; grep "###\|rror" "$L" | tail

# Sourced by a device call's run script (bash), from the project root with $OUT set and
# COMMIT holding the commit: the steps every sealed study of the results folders repeats.
#
#   source grid_search/results/sealed_lib.sh
#   sealed_begin run_a 2          # log $OUT/run_a.log, 2 GPUs; sets HW (h200-sxm | h100-sxm)
#   sealed_export swin EXPORT.py  # EXPORT.py swin $S/swin.onnx, then its skeleton
#   sealed_search swin_b64 150 --model $S/swin.onnx --dim batch=64 $IMG
#   sealed_end                    # $OUT/sealed.tgz (the searches, printed nowhere), skel.tgz
#
# A sealed search writes its CSV and log under $K only; nothing of it is printed, so the
# rows stay unseen until the comparison's commit is named in the folder's README. The
# searches run every configuration of at most $GPUS GPUs, replayed (CUDA graphs), with
# the profile $HW-graph.

sealed_begin() {  # log-name gpus [run-top]
  set -u
  export NCCL_NVLS_ENABLE=0
  L=$OUT/$1.log
  GPUS=$2
  TOP=${3:-40}
  S=/tmp/sealed_models; K=/tmp/sealed_rows; mkdir -p $S $K $OUT/skel
  echo "### project commit $(cat COMMIT)" >> "$L"
  nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
    *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
  echo "### profile $HW-graph" >> "$L"
  echo "### project commit $(cat COMMIT), profile $HW-graph" >> $K/sealed.log
  IMG="--train --loss cross_entropy --optimizer adam"
  G="python3 -m distir grid-search --devices $GPUS --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top $TOP --cuda-graph"
}

sealed_export() {  # model export-script [timeout]: $S/model.onnx and its skeleton
  local s=$SECONDS
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout "${3:-200}" python3 "$2" "$1" "$S/$1.onnx" >> "$L" 2>&1
  echo "### export $1 rc $? after $((SECONDS - s)) s" >> "$L"
  python3 -m grid_search.skeleton strip "$S/$1.onnx" "$OUT/skel/$1.skel.onnx" >> "$L" 2>&1
}

sealed_search() {  # name timeout grid-search-args...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$K/$name.csv" >> "$K/sealed.log" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$K/sealed.log"
  echo "### sealed search $name done after $((SECONDS - s)) s" >> "$L"
}

sealed_end() {
  (cd $K && rm -f ./*.png && tar czf "$OUT/sealed.tgz" .)
  echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $K/sealed.log) ok)" >> "$L"
  (cd $OUT && tar czf skel.tgz skel && rm -rf skel)
  uptime >> "$L"
}

# Shared by the bench/rlhf scripts, sourced after ../lib.sh.

# rlhf_machine RANKS: the CPU, its vector flags and the load, for the figures.
rlhf_machine() {
  lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/  */ /g'
  echo "flags: $(grep -o 'avx[0-9a-z_]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg); threads ${OMP_NUM_THREADS:-?}, ranks $1"
}

# rlhf_start DIR [reward flags...]: the example's SFT policy (DIR/sft: strata train on the
# synthetic corpus) and a reward model on 512 pairs sampled from it and ranked by the gold
# rule (DIR/rm.safetensors); prints the reward model's line.
rlhf_start() {
  local dir="$1"
  shift
  "$STRATA" train --layers 2 --dim 64 --heads 2 --max-seq 64 --steps 150 --batch 8 --lr 3e-3 \
    --ckpt-every 150 --sample-tokens 0 --log-every 150 --run-dir "$dir/sft" > /dev/null
  "$STRATA" rlhf reward --init "$dir/sft" --pairs synthetic --num-pairs 512 --steps 200 \
    -o "$dir/rm.safetensors" "$@" | tail -n 1
}

#!/bin/sh
# The same server on two 8-GPU nodes (tp 16 over --nnodes 2). Run on both nodes with NODE_RANK=0 / NODE_RANK=1 and
# MASTER=<node 0 address:port>; each node needs the unpacked cache (README.md).
: "${NODE_RANK:?set NODE_RANK to 0 or 1}"
exec dgprecompile launch -- python -m sglang.launch_server \
  --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 16 --ep 16 \
  --nnodes 2 --node-rank "$NODE_RANK" --dist-init-addr "${MASTER:-10.0.0.1:5000}" \
  --host 0.0.0.0 --port 30000 "$@"
